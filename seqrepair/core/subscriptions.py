"""Subscription management: the subscription object and the registry of a component.

A subscription is a named queue, ``/subscriptions/<id>``, that a subscriber attaches a receiving
link to (pull-style delivery in the CloudEvents Subscriptions API's terms). It delivers the
publications whose topic matches ``topic`` and that pass its ``filters`` (the ``basic`` dialect,
:mod:`seqrepair.core.filters`), within the permission tokens of whoever attaches, narrowed by
the subscription's ``permtokens`` when it names some. A subscription is ``ACTIVE`` or ``PAUSED``
(the SWIM subscription lifecycle): a paused one sends nothing but heartbeats; on resume its links
start again at link number 0 and each subscriber repairs what it missed by source from the
journal, so a pause loses nothing that retention still holds.

Subscriptions configured by the operator (``seqrepair serve --subscription``) are in the registry
too, ``configured``: their ``permtokens`` are the grant itself, whoever attaches, and the API
may read them but not change them.

The JSON form (what the REST API takes and returns)::

    {"id": "wind-lemd", "topic": "/weather/wind/*", "protocol": "AMQP",
     "protocolsettings": {}, "sink": "/subscriptions/wind-lemd",
     "queue": "/subscriptions/wind-lemd",
     "filters": [{"dialect": "basic", "type": "suffix", "property": "subject",
                  "value": "/LEMD"}],
     "config": {}, "subscription_status": "ACTIVE", "qos": "EXACTLY_ONCE",
     "durable": true, "permtokens": null, "configured": false, "owner": "alice"}

A proposal needs only ``topic``; every other member may be left out (the defaults above) and a
read-only one (``sink``, ``queue``, ``configured``, ``owner``, ``id`` on update) is accepted
when it agrees, so what a GET returned can be PUT back. A member the model does not know, a
protocol other than AMQP, a ``config`` key, a qos other than exactly-once or a non-durable
subscription is refused with :class:`~seqrepair.core.errors.InvalidSubscriptionError`.

This module performs no I/O: :class:`SubscriptionRegistry` validates and keeps the state, and
:func:`link_action` tells an adapter what a change means for the links attached to it.
"""

from __future__ import annotations

import copy
import enum
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from seqrepair.core.errors import (
    InvalidConfigError,
    InvalidSubscriptionError,
    InvalidTopicPatternError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
)
from seqrepair.core.filters import TOPIC_ATTRIBUTES, BasicFilter, enum_member, parse_filters
from seqrepair.core.topics import TopicPattern, topic_pattern

QUEUE_PREFIX = "/subscriptions/"
PROTOCOL = "AMQP"
QOS = "EXACTLY_ONCE"
MAX_SUBSCRIPTIONS = 10_000
"""Most subscriptions a registry holds (bounded memory)."""
MAX_PROTOCOL_SETTINGS = 4096
"""Longest ``protocolsettings`` kept, in characters of its ``repr``."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,127}")
"""An id is safe in a URL path and in an AMQP address without escaping."""

_MEMBERS = frozenset({
    "id", "topic", "protocol", "protocolsettings", "sink", "queue", "filters", "config",
    "subscription_status", "qos", "durable", "permtokens", "configured", "owner",
})


class SubscriptionStatus(enum.Enum):
    """The SWIM subscription states a subscription can be in (DELETED is its removal)."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"


def _invalid(message: str, *, expected: Any = None, got: Any = None) -> InvalidSubscriptionError:
    return InvalidSubscriptionError(message, expected=expected, got=got)


def check_id(value: object) -> str:
    """``value`` if it is a valid subscription id; raise InvalidSubscriptionError otherwise."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise _invalid(
            "a subscription id is 1 to 128 letters, digits, '.', '_', '~' or '-', starting "
            "with a letter or digit", expected=_ID.pattern,
            got=value if not isinstance(value, str) else value[:140],
        )
    return value


def _id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_id(value)


def _topic(value: object) -> TopicPattern:
    try:
        return topic_pattern(value)
    except InvalidTopicPatternError as exc:
        raise _invalid(f"topic: {exc.message}", expected="a topic pattern", got=value) from None


def _status(value: object) -> SubscriptionStatus:
    return enum_member(SubscriptionStatus, value, "subscription_status")


def _permtokens(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise _invalid("permtokens must be a list of strings", expected="list", got=value)
    items = list(value)
    if not all(isinstance(t, str) and t for t in items):
        raise _invalid("a permission token is a non-empty string", expected="str", got=items)
    return frozenset(items)


def _settings(value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _invalid("protocolsettings must be an object", expected="object", got=value)
    if len(repr(value)) > MAX_PROTOCOL_SETTINGS:
        raise _invalid(f"protocolsettings is longer than {MAX_PROTOCOL_SETTINGS} characters",
                       expected=MAX_PROTOCOL_SETTINGS, got=len(repr(value)))
    return MappingProxyType(copy.deepcopy(dict(value)))  # nothing shared with the caller


@attrs.frozen
class Subscription:
    """One subscription: ``Subscription("wind", "/weather/wind/*")``. Immutable; validated."""

    id: str = attrs.field(validator=_id)
    topic: TopicPattern = attrs.field(converter=_topic)
    filters: tuple[BasicFilter, ...] = attrs.field(default=(), converter=parse_filters)
    status: SubscriptionStatus = attrs.field(
        default=SubscriptionStatus.ACTIVE, converter=_status
    )
    permtokens: frozenset[str] | None = attrs.field(default=None, converter=_permtokens)
    protocolsettings: Mapping[str, Any] = attrs.field(
        # compared (what to_json shows, equality sees), but not hashed: its values may be lists
        factory=lambda: MappingProxyType({}), converter=_settings, hash=False
    )
    configured: bool = False
    owner: str | None = None
    """The principal that created it (the API sets it; a proposal cannot choose it). None:
    the operator's (configured), or stored before subscriptions had owners."""
    attachers: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """A configured one's: the principals its configuration lets attach (``*`` = any
    characters; ``serve --subscription NAME=PATTERN;TOKENS;PRINCIPALS``), besides those the
    policy's ``attach-queue`` names. Not shown by the API (the operator's business)."""

    @property
    def queue(self) -> str:
        """The address a subscriber attaches to: ``/subscriptions/<id>``."""
        return QUEUE_PREFIX + self.id

    @property
    def paused(self) -> bool:
        """Whether the subscription is PAUSED."""
        return self.status is SubscriptionStatus.PAUSED

    def may_select(self, topic: str) -> bool:
        """Whether publications of ``topic`` (a valid topic) may reach this subscription: its
        topic pattern matches and its filters on the topic (``subject``, ``topic``) pass it.
        Its other filters, and a subscriber's permission tokens, decide per publication."""
        return self.topic.matches(topic) and all(
            f.compare(topic) for f in self.filters if f.property in TOPIC_ATTRIBUTES)

    def to_json(self) -> dict[str, Any]:
        """The subscription in its JSON form (see the module docstring)."""
        return {
            "id": self.id,
            "topic": str(self.topic),
            "protocol": PROTOCOL,
            "protocolsettings": copy.deepcopy(dict(self.protocolsettings)),
            "sink": self.queue,
            "queue": self.queue,
            "filters": [f.to_json() for f in self.filters],
            "config": {},
            "subscription_status": self.status.value,
            "qos": QOS,
            "durable": True,
            "permtokens": None if self.permtokens is None else sorted(self.permtokens),
            "configured": self.configured,
            "owner": self.owner,
        }

    @classmethod
    def from_json(cls, proposal: object, *, id: str | None = None) -> Subscription:
        """Read a proposed subscription; ``id`` is the one it gets when the proposal names
        none (the proposal's own must agree with it when both are given)."""
        if not isinstance(proposal, Mapping):
            raise _invalid("a subscription is a JSON object", expected="object", got=proposal)
        unknown = sorted(str(k) for k in proposal if k not in _MEMBERS)
        if unknown:
            raise _invalid(f"unknown subscription members: {', '.join(unknown)}",
                           expected=sorted(_MEMBERS), got=unknown)
        named = proposal.get("id")
        if named is not None and id is not None and named != id:
            raise _invalid(f"the proposal's id {named!r} is not {id!r}", expected=id, got=named)
        sub_id = check_id(named if named is not None else id)
        if "topic" not in proposal:
            raise _invalid("a subscription needs a topic", expected="a topic pattern", got=None)
        _agree(proposal, "protocol", PROTOCOL, "only AMQP (pull) delivery is offered")
        _agree(proposal, "qos", QOS, "delivery is always exactly once, in order")
        _agree(proposal, "durable", True, "subscriptions are always durable")
        _agree(proposal, "configured", False, "only the operator configures subscriptions")
        for member in ("sink", "queue"):
            _agree(proposal, member, QUEUE_PREFIX + sub_id,
                   "a subscriber attaches a receiving link to the queue (no push delivery)")
        config = proposal.get("config")
        if config is not None and (not isinstance(config, Mapping) or config):
            raise _invalid("no config keys are defined", expected={}, got=config)
        settings = proposal.get("protocolsettings")
        owner = proposal.get("owner")
        if owner is not None and not isinstance(owner, str):
            raise _invalid("owner is a principal's name", expected="string", got=owner)
        return cls(
            id=sub_id,
            topic=proposal["topic"],
            filters=proposal.get("filters"),
            status=proposal.get("subscription_status", SubscriptionStatus.ACTIVE),
            permtokens=proposal.get("permtokens"),
            protocolsettings={} if settings is None else settings,
            owner=owner,
        )


def _agree(proposal: Mapping[str, Any], member: str, value: object, why: str) -> None:
    if member in proposal and (proposal[member] != value or type(proposal[member]) is not
                               type(value)):
        raise _invalid(f"{member} must be {value!r}: {why}", expected=value,
                       got=proposal[member])


class LinkAction(enum.Enum):
    """What a change of a subscription means for the links attached to its queue."""

    NONE = "none"
    PAUSE = "pause"
    """Stop sending (heartbeats go on); tell each subscriber."""
    RESUME = "resume"
    """Send again, from link number 0: each subscriber repairs the pause by source."""
    REATTACH = "reattach"
    """What the links may see changed: detach them (a subscriber re-attaches and gets a new
    link context, numbered from 0, under the new entitlement)."""
    CLOSE = "close"
    """The subscription is gone: close its links for good."""


def link_action(previous: Subscription | None, current: Subscription | None) -> LinkAction:
    """What the links of a subscription must do when it changes from ``previous`` to
    ``current`` (None: absent before, or deleted)."""
    if current is None:
        return LinkAction.NONE if previous is None else LinkAction.CLOSE
    if previous is None:
        return LinkAction.NONE
    # every filter must pass, so neither their order nor a repeated one changes the selection
    if (previous.topic, frozenset(previous.filters), previous.permtokens) != (
        current.topic, frozenset(current.filters), current.permtokens
    ):
        return LinkAction.REATTACH
    if previous.status is current.status:
        return LinkAction.NONE
    return LinkAction.PAUSE if current.paused else LinkAction.RESUME


@attrs.define
class SubscriptionRegistry:
    """The subscriptions of one component, by id (no I/O: an adapter persists them).

    Every method raises a :class:`~seqrepair.core.errors.SeqRepairError` subclass on bad input
    and then leaves the registry as it was.
    """

    max_subscriptions: int = MAX_SUBSCRIPTIONS
    _subs: dict[str, Subscription] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.max_subscriptions, bool) or not isinstance(
            self.max_subscriptions, int
        ) or self.max_subscriptions < 1:
            raise InvalidConfigError("max_subscriptions must be an integer >= 1",
                                     expected=">= 1", got=self.max_subscriptions)

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._subs

    def load(self, subscriptions: Iterable[Subscription]) -> None:
        """Put subscriptions in as they are (at start: configured ones, then stored ones); a
        configured one keeps its id against a stored one of the same id."""
        subs = list(subscriptions)
        for sub in subs:  # all checked before any goes in: a refused load changes nothing
            if not isinstance(sub, Subscription):
                raise InvalidSubscriptionError("load takes Subscription objects",
                                               expected="Subscription", got=sub)
        for sub in subs:
            held = self._subs.get(sub.id)
            if held is not None and held.configured and not sub.configured:
                continue
            self._subs[sub.id] = sub

    def create(self, proposal: object, *, new_id: str, owner: str | None = None) -> Subscription:
        """Create a subscription from a proposal; it gets ``new_id`` unless it names its own,
        and ``owner`` (a proposal naming another owner is refused).

        Raises InvalidSubscriptionError, or SubscriptionConflictError when the id is taken or
        the registry is full."""
        sub = Subscription.from_json(proposal, id=None if _names_id(proposal) else new_id)
        _same_owner(proposal, owner)
        sub = attrs.evolve(sub, owner=owner)
        if sub.id in self._subs:
            raise SubscriptionConflictError(f"subscription {sub.id!r} exists", got=sub.id)
        if len(self._subs) >= self.max_subscriptions:
            raise SubscriptionConflictError(
                f"no more than {self.max_subscriptions} subscriptions",
                expected=self.max_subscriptions, got=len(self._subs) + 1,
            )
        self._subs[sub.id] = sub
        return sub

    def get(self, sub_id: str) -> Subscription:
        """The subscription ``sub_id``; SubscriptionNotFoundError when there is none."""
        sub = self._subs.get(sub_id)
        if sub is None:
            raise SubscriptionNotFoundError(f"no subscription {sub_id!r}", got=sub_id)
        return sub

    def find(self, sub_id: str) -> Subscription | None:
        """The subscription ``sub_id``, or None."""
        return self._subs.get(sub_id)

    def query(self) -> list[Subscription]:
        """Every subscription, by id."""
        return [self._subs[k] for k in sorted(self._subs)]

    def update(self, sub_id: str, proposal: object) -> tuple[Subscription, Subscription]:
        """Replace subscription ``sub_id`` by the proposal (members left out take their
        defaults); return ``(previous, current)``. A configured subscription cannot be
        changed (SubscriptionConflictError)."""
        previous = self._changeable(sub_id)
        _same_owner(proposal, previous.owner)
        current = attrs.evolve(Subscription.from_json(proposal, id=sub_id), owner=previous.owner)
        self._subs[sub_id] = current
        return previous, current

    def delete(self, sub_id: str) -> Subscription:
        """Remove subscription ``sub_id`` and return it."""
        self._changeable(sub_id)
        return self._subs.pop(sub_id)

    def restore(self, sub_id: str, previous: Subscription | None) -> None:
        """Undo a change whose persistence failed: ``sub_id`` is ``previous`` again."""
        if previous is None:
            self._subs.pop(sub_id, None)
        else:
            self._subs[sub_id] = previous

    def _changeable(self, sub_id: str) -> Subscription:
        sub = self.get(sub_id)
        if sub.configured:
            raise SubscriptionConflictError(
                f"subscription {sub_id!r} is configured by the operator (serve --subscription)",
                got=sub_id,
            )
        return sub


def _same_owner(proposal: object, owner: str | None) -> None:
    """A proposal may repeat its owner (what a GET returned can be PUT back), not change it."""
    if isinstance(proposal, Mapping) and proposal.get("owner") not in (None, owner):
        raise _invalid("owner is the principal that created the subscription",
                       expected=owner, got=proposal.get("owner"))


def _names_id(proposal: object) -> bool:
    return isinstance(proposal, Mapping) and proposal.get("id") is not None
