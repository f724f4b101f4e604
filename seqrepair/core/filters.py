"""Subscription filters: the CloudEvents Subscriptions API's ``basic`` dialect on publications.

A filter compares one attribute of a publication with a string, case-sensitively and with
whitespace kept: ``exact`` (equal), ``prefix`` (the attribute starts with the value) or
``suffix`` (ends with it). A subscription's filters are AND-combined: a publication passes when
every one of them matches.

A publication read as a CloudEvent has these attributes:

============  ==================================================  =====================
attribute     value                                               example
============  ==================================================  =====================
``source``    the publication's source                            ``feed.a``
``type``      its publish type                                    ``update``
``subject``   its topic                                           ``/weather/wind/LEMD``
``topic``     its topic (extension attribute, same as subject)    ``/weather/wind/LEMD``
``permtoken`` its permission token (extension attribute); absent  ``6747``
              when it carries none, and no filter matches an
              absent attribute
============  ==================================================  =====================

Only these are accepted, so a misspelt attribute is an error when the subscription is made
rather than a filter that silently never matches. Filters narrow what a subscriber's topic
patterns and permission tokens let through (:class:`~seqrepair.core.permissions.Entitlement`);
live delivery and repair apply them alike.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from seqrepair.core.errors import InvalidSubscriptionError
from seqrepair.core.messages import Publication

E = TypeVar("E", bound=enum.Enum)

BASIC_DIALECT = "basic"
MAX_FILTERS = 32
"""Most filters one subscription may carry."""
MAX_VALUE_LENGTH = 1024
"""Longest value a filter may compare with."""

ATTRIBUTES: Mapping[str, Callable[[Publication], str | None]] = {
    "source": lambda pub: pub.source,
    "type": lambda pub: pub.ptype.value,
    "subject": lambda pub: pub.topic,
    "topic": lambda pub: pub.topic,
    "permtoken": lambda pub: pub.permtoken,
}
"""The attributes a filter may name, each read from a publication (None: absent)."""
TOPIC_ATTRIBUTES = frozenset({"subject", "topic"})
"""The attributes that are the publication's topic."""


class MatchType(enum.Enum):
    """How a basic filter compares the attribute with its value."""

    EXACT = "exact"
    PREFIX = "prefix"
    SUFFIX = "suffix"


def enum_member(kind: type[E], value: object, what: str) -> E:
    """``value`` as a member of ``kind`` (a member or its value); InvalidSubscriptionError
    naming ``what`` and the values allowed otherwise."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        allowed = [member.value for member in kind]
        raise InvalidSubscriptionError(
            f"{what} must be one of {', '.join(map(str, allowed))}, got {value!r}",
            expected=allowed, got=value,
        ) from None


def _match_type(value: object) -> MatchType:
    return enum_member(MatchType, value, "a basic filter's type")


def _check_property(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or value not in ATTRIBUTES:  # a list is not hashable
        raise InvalidSubscriptionError(
            f"a filter's property must be one of {', '.join(ATTRIBUTES)}, got {value!r}",
            expected=sorted(ATTRIBUTES), got=value,
        )


def _check_value(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or len(value) > MAX_VALUE_LENGTH:
        raise InvalidSubscriptionError(
            f"a filter's value must be a string of at most {MAX_VALUE_LENGTH} characters",
            expected="str", got=value if not isinstance(value, str) else value[:80],
        )


@attrs.frozen
class BasicFilter:
    """``BasicFilter("prefix", "subject", "/weather/wind/")``: one filter of the basic dialect."""

    type: MatchType = attrs.field(converter=_match_type)
    property: str = attrs.field(validator=_check_property)
    value: str = attrs.field(validator=_check_value)

    def matches(self, publication: Publication) -> bool:
        """Whether ``publication``'s attribute passes this filter (never, when it is absent)."""
        found = ATTRIBUTES[self.property](publication)
        if found is None:
            return False
        # compare() inlined: this runs per publication and filtered link on the fan-out path
        if self.type is MatchType.EXACT:
            return found == self.value
        if self.type is MatchType.PREFIX:
            return found.startswith(self.value)
        return found.endswith(self.value)

    def compare(self, found: str) -> bool:
        """Whether an attribute's value ``found`` passes this filter."""
        if self.type is MatchType.EXACT:
            return found == self.value
        if self.type is MatchType.PREFIX:
            return found.startswith(self.value)
        return found.endswith(self.value)

    def to_json(self) -> dict[str, str]:
        """The filter expression as the Subscriptions API writes it."""
        return {"dialect": BASIC_DIALECT, "type": self.type.value, "property": self.property,
                "value": self.value}

    @classmethod
    def from_json(cls, expression: object) -> BasicFilter:
        """Read one filter expression; anything but a complete ``basic`` one is refused."""
        if not isinstance(expression, Mapping):
            raise InvalidSubscriptionError(
                "a filter must be an object", expected="object", got=expression
            )
        dialect = expression.get("dialect")
        if dialect is None:
            raise InvalidSubscriptionError(
                "a filter must name its dialect", expected=BASIC_DIALECT, got=None
            )
        if dialect != BASIC_DIALECT:
            raise InvalidSubscriptionError(
                f"unsupported filter dialect {dialect!r}", expected=BASIC_DIALECT, got=dialect
            )
        keys = {"dialect", "type", "property", "value"}
        unknown = sorted(str(k) for k in expression if k not in keys)
        missing = sorted(k for k in keys if k not in expression)
        if unknown or missing:
            raise InvalidSubscriptionError(
                "a basic filter has exactly dialect, type, property and value"
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                + (f"; missing: {', '.join(missing)}" if missing else ""),
                expected=sorted(keys), got=sorted(str(k) for k in expression),
            )
        return cls(expression["type"], expression["property"], expression["value"])


def parse_filters(value: object) -> tuple[BasicFilter, ...]:
    """A subscription's ``filters``: a list of filter expressions (at most :data:`MAX_FILTERS`);
    None is no filter."""
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise InvalidSubscriptionError(
            "filters must be a list of filter expressions", expected="list", got=value
        )
    if len(value) > MAX_FILTERS:
        raise InvalidSubscriptionError(
            f"at most {MAX_FILTERS} filters", expected=MAX_FILTERS, got=len(value)
        )
    return tuple(
        item if isinstance(item, BasicFilter) else BasicFilter.from_json(item) for item in value
    )


def passes(filters: Sequence[BasicFilter], publication: Publication) -> bool:
    """Whether ``publication`` passes every filter (AND); True when there is none."""
    return all(f.matches(publication) for f in filters)
