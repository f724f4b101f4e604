"""Frames that travel between publishers, the pubsub component and subscribers (XEP-0040).

All are immutable and validated on construction: bad input raises an
:class:`~seqrepair.core.errors.InvalidMessageError` (or a subclass) and builds nothing.

Numbers: ``link_seq`` and the link numbers of a :class:`GapRequest` are *wire* values of the
link's sequence space (they wrap; 0 means reset). ``source_seq`` is the *absolute* source
number, which never wraps inside a process; codecs carry it on the wire in the source's bit
width (see :class:`~seqrepair.core.sequence.SequenceSpace`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from math import inf, isfinite
from types import MappingProxyType
from typing import Any, Literal

import attrs

from seqrepair.core.errors import (
    InvalidMessageError,
    InvalidTopicPatternError,
    UnknownPublishTypeError,
)
from seqrepair.core.topics import TopicPattern, validate_topic

_MAX_WIRE = (1 << 64) - 1


class PublishType(enum.Enum):
    """XEP-0040 §3.1 publish types. ``"add"`` is read as :attr:`IMAGE`."""

    UPDATE = "update"
    CORRECTION = "correction"
    IMAGE = "image"
    DROP = "drop"
    SNAPSHOT = "snapshot"

    @classmethod
    def parse(cls, value: PublishType | str) -> PublishType:
        """Read a publish type from its name; ``add`` means image. Unknown names raise."""
        if isinstance(value, PublishType):
            return value
        return cls(value)

    @classmethod
    def _missing_(cls, value: object) -> PublishType:
        # PublishType("add"), PublishType(" Update "): what parse() promises, for the enum call
        if isinstance(value, str):
            name = value.strip().lower()
            if name == "add":
                return cls.IMAGE
            for member in cls:
                if member.value == name:
                    return member
        raise UnknownPublishTypeError(
            f"unknown publish type {value!r}",
            expected=[t.value for t in cls] + ["add"],
            got=value,
        )


def _publish_type(value: PublishType | str) -> PublishType:
    # every publication made passes here: an exact name is a lookup (the enum's call is not)
    if type(value) is str:
        found = _PUBLISH_TYPES.get(value)
        if found is not None:
            return found
    return PublishType.parse(value)


_PUBLISH_TYPES = {member.value: member for member in PublishType}


def _nonempty_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidMessageError(
            f"{type(instance).__name__}.{attribute.name} must be a non-empty string",
            expected="non-empty str",
            got=value,
        )


_KNOWN_TOPICS: set[str] = set()
"""Topics that passed :func:`_topic`: a publisher repeats its topics, so most checks are a
lookup. Emptied when full, so a stream of distinct topics costs memory only up to the bound."""
_KNOWN_TOPICS_MAX = 1 << 16


def _topic(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A concrete topic of the topic-tree grammar (:mod:`seqrepair.core.topics`), which every
    subscription pattern can then match: ``/weather/wind/LEMD``."""
    if type(value) is str and value in _KNOWN_TOPICS:
        return
    try:
        validate_topic(value)
    except InvalidTopicPatternError as exc:
        where = f"{type(instance).__name__}.{attribute.name}"
        try:
            TopicPattern(value)  # type: ignore[arg-type]  # anything: it raises for a non-str
        except InvalidTopicPatternError:
            message = f"{where}: {exc.message}"
        else:
            message = (f"{where} names one item; {value!r} is a topic pattern (the wildcards "
                       "* and # are for subscriptions)")
        raise InvalidMessageError(message, expected=exc.expected, got=value) from None
    if len(_KNOWN_TOPICS) >= _KNOWN_TOPICS_MAX:
        _KNOWN_TOPICS.clear()
    _KNOWN_TOPICS.add(value)  # type: ignore[arg-type]  # validate_topic passed: a str


def _int_in(low: int, high: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidMessageError(
                f"{type(instance).__name__}.{attribute.name} must be an integer in "
                f"{low}..{high}, got {value!r}",
                expected=(low, high),
                got=value,
            )

    return check


def _instance_of(*types: type) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) and bool not in types:
            value_ok = False
        else:
            value_ok = isinstance(value, types)
        if not value_ok:
            names = " | ".join(t.__name__ for t in types)
            raise InvalidMessageError(
                f"{type(instance).__name__}.{attribute.name} must be {names}",
                expected=names,
                got=value,
            )

    return check


def _optional(check: Any) -> Any:
    def optional(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            check(instance, attribute, value)

    return optional


def _freeze_fields(value: object) -> Mapping[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):  # a dict, mostly: no ABC test
        raise InvalidMessageError(
            "Publication.fields must be a mapping of field name to value",
            expected="Mapping[str, Any]",
            got=type(value).__name__,
        )
    for key in value:
        if not isinstance(key, str) or not key:
            raise InvalidMessageError(
                "field names must be non-empty strings", expected="str", got=key
            )
    return MappingProxyType(dict(value))


def _finite(value: int | float) -> bool:
    try:
        return isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


def _float_time(value: object) -> object:
    """An integer time as the float it is journaled and sent as (validated after)."""
    return float(value) if type(value) is int and _finite(value) else value


def _timestamp(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # NaN and infinities are no time: every order and every age cut would go wrong on them;
    # an integer is taken when a float holds its size (it is kept as that float)
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        raise InvalidMessageError(
            f"{type(instance).__name__}.{attribute.name} must be a finite number of seconds",
            expected="finite float",
            got=value,
        )


def _source_numbers(value: object) -> Mapping[str, int]:
    if not isinstance(value, Mapping):
        raise InvalidMessageError(
            "expected a mapping of source name to sequence number",
            expected="Mapping[str, int]",
            got=type(value).__name__,
        )
    for source, seq in value.items():
        if not isinstance(source, str) or not source:
            raise InvalidMessageError("source names must be non-empty strings", got=source)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise InvalidMessageError(
                f"sequence for source {source!r} must be an integer >= 0",
                expected=">= 0",
                got=seq,
            )
    return MappingProxyType(dict(value))


_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})


@attrs.frozen(init=False)
class Publication:
    """One publish element: an item's topic, the source that published it and its fields.

    In ``fields`` a value of ``None`` is an explicit null; an absent key is "not sent".
    ``ptype`` defaults to update (XEP-0040 §3.1). Publications compare by value and hash by
    everything but ``fields`` (equal publications still hash equal).
    """

    topic: str = attrs.field(validator=_topic)
    source: str = attrs.field(validator=_nonempty_str)
    source_seq: int = attrs.field(validator=_int_in(1, _MAX_WIRE))
    ptype: PublishType = attrs.field(default=PublishType.UPDATE, converter=_publish_type)
    fields: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze_fields, hash=False)
    link_seq: int | None = attrs.field(default=None, validator=_optional(_int_in(0, _MAX_WIRE)))
    permtoken: str | None = attrs.field(default=None, validator=_optional(_nonempty_str))
    timestamp: float | None = attrs.field(default=None, validator=_optional(_timestamp))
    retransmit: bool = attrs.field(default=False, validator=_instance_of(bool))

    def __init__(
        self,
        topic: str,
        source: str,
        source_seq: int,
        ptype: PublishType | str = PublishType.UPDATE,
        fields: Mapping[str, Any] = _NO_FIELDS,
        link_seq: int | None = None,
        permtoken: str | None = None,
        timestamp: float | None = None,
        retransmit: bool = False,
    ) -> None:
        # Written out, not generated by attrs: every frame builds a publication, and attrs'
        # frozen __init__ pays a call per attribute and per validator. The checks are the
        # converters and validators declared above, in attrs' order (converters, then
        # validators by field); each is called only when a cheap test of the common case fails.
        if type(ptype) is not PublishType:
            ptype = _publish_type(ptype)
        frozen = _freeze_fields(fields)
        if type(topic) is not str or topic not in _KNOWN_TOPICS:
            _topic(self, _ATTRS.topic, topic)
        if type(source) is not str or not source:
            _nonempty_str(self, _ATTRS.source, source)
        if type(source_seq) is not int or not 1 <= source_seq <= _MAX_WIRE:
            _SOURCE_SEQ(self, _ATTRS.source_seq, source_seq)
        if link_seq is not None and (type(link_seq) is not int or not 0 <= link_seq <= _MAX_WIRE):
            _LINK_SEQ(self, _ATTRS.link_seq, link_seq)
        if permtoken is not None and (type(permtoken) is not str or not permtoken):
            _nonempty_str(self, _ATTRS.permtoken, permtoken)
        if timestamp is not None and (type(timestamp) is not float or not -inf < timestamp < inf):
            _timestamp(self, _ATTRS.timestamp, timestamp)
            timestamp = float(timestamp)  # as journaled and sent: live equals replayed
        if retransmit is not False and retransmit is not True:
            _RETRANSMIT(self, _ATTRS.retransmit, retransmit)
        _fill(self, topic, source, source_seq, ptype, frozen, link_seq, permtoken, timestamp,
              retransmit)

    def with_link(self, link_seq: int | None, *, retransmit: bool | None = None) -> Publication:
        """This publication with another link number (and retransmit flag).

        Cheaper than ``attrs.evolve``: only the changed values are validated, the rest were
        validated when this publication was built. Fan-out stamps every frame this way.
        """
        if link_seq is not None:
            _LINK_SEQ(self, _ATTRS.link_seq, link_seq)
        flag = self.retransmit if retransmit is None else retransmit
        if flag is not self.retransmit:
            _RETRANSMIT(self, _ATTRS.retransmit, flag)
        new: Publication = object.__new__(Publication)
        _fill(new, self.topic, self.source, self.source_seq, self.ptype, self.fields, link_seq,
              self.permtoken, self.timestamp, flag)
        return new


def decoded_publication(
    topic: str, source: str, source_seq: int, ptype: PublishType, fields: dict[str, Any],
    link_seq: int | None, permtoken: str | None, timestamp: float | None, retransmit: bool,
) -> Publication:
    """:class:`Publication` of values a decoder read as their types (``topic`` a str,
    ``source`` a non-empty str, the numbers ints, a :class:`PublishType`, ``fields`` a dict it
    made and hands over: kept, not copied, ``permtoken`` a non-empty str or None,
    ``timestamp`` a float or None, ``retransmit`` a bool). Only what the types do not say is
    checked here (the topic, the field names, the number ranges, a finite time); anything
    else goes through ``Publication()``, which raises as ever."""
    if (
        topic in _KNOWN_TOPICS
        and 1 <= source_seq <= _MAX_WIRE
        and (link_seq is None or 0 <= link_seq <= _MAX_WIRE)
        and (timestamp is None or -inf < timestamp < inf)
    ):
        for key in fields:
            if type(key) is not str or not key:
                break
        else:
            new: Publication = object.__new__(Publication)
            _fill(new, topic, source, source_seq, ptype, MappingProxyType(fields), link_seq,
                  permtoken, timestamp, retransmit)
            return new
    return Publication(topic, source, source_seq, ptype, fields, link_seq, permtoken, timestamp,
                       retransmit)


def relinked(publication: Publication, link_seq: int) -> Publication:
    """``publication`` with link number ``link_seq``, its retransmit flag kept: what
    :meth:`Publication.with_link` gives, unchecked. Only for a caller whose ``link_seq`` is a
    wire number by construction (a link's sequencer, :meth:`LinkSequencer.stamp_many`)."""
    new: Publication = object.__new__(Publication)
    _fill(new, publication.topic, publication.source, publication.source_seq,
          publication.ptype, publication.fields, link_seq, publication.permtoken,
          publication.timestamp, publication.retransmit)
    return new


def relinked_run(
    publications: list[Publication], first: int, top: int
) -> tuple[list[Publication], int]:
    """:func:`relinked` of each of ``publications`` with the numbers ``first``, ``first`` + 1,
    ... (after ``top`` comes 1), and the number after the last: what a link's sequencer
    stamps a run with, the slots set in line (two calls less per publication: fan-out
    stamps every one of them)."""
    new_object = object.__new__
    cls = Publication
    set_topic, set_source, set_source_seq, set_ptype = (
        _set_topic, _set_source, _set_source_seq, _set_ptype)
    set_fields, set_link_seq, set_permtoken, set_timestamp, set_retransmit = (
        _set_fields, _set_link_seq, _set_permtoken, _set_timestamp, _set_retransmit)
    out: list[Publication] = []
    append = out.append
    wire = first
    for pub in publications:
        new = new_object(cls)
        set_topic(new, pub.topic)
        set_source(new, pub.source)
        set_source_seq(new, pub.source_seq)
        set_ptype(new, pub.ptype)
        set_fields(new, pub.fields)
        set_link_seq(new, wire)
        set_permtoken(new, pub.permtoken)
        set_timestamp(new, pub.timestamp)
        set_retransmit(new, pub.retransmit)
        append(new)
        wire = 1 if wire == top else wire + 1
    return out, wire


def unlink_own(publications: list[Publication]) -> None:
    """Make ``publications`` bare in place: no link number, not retransmissions (what
    :meth:`Publication.with_link` ``(None, retransmit=False)`` gives, without a copy each).

    Only for publications their caller made itself (a decoder's fresh output) that nothing
    else holds yet: a publication is immutable to everyone who can see it, so this is the
    end of its making, not a change. A relay's upstream subscriber does this once its stub
    delivered a transfer's run (a copy each was a tenth of the relay's event loop)."""
    for pub in publications:
        if pub.link_seq is not None:
            _set_link_seq(pub, None)
        if pub.retransmit:
            _set_retransmit(pub, False)


_ATTRS = attrs.fields(Publication)
_SOURCE_SEQ = _int_in(1, _MAX_WIRE)
_LINK_SEQ = _optional(_int_in(0, _MAX_WIRE))
_RETRANSMIT = _instance_of(bool)
# the slots' own setters: what a frozen class's object.__setattr__ ends in, minus the lookup
(_set_topic, _set_source, _set_source_seq, _set_ptype, _set_fields, _set_link_seq, _set_permtoken,
 _set_timestamp, _set_retransmit) = (Publication.__dict__[a.name].__set__ for a in _ATTRS)


def _fill(
    new: Publication, topic: str, source: str, source_seq: int, ptype: PublishType,
    fields: Mapping[str, Any], link_seq: int | None, permtoken: str | None,
    timestamp: float | None, retransmit: bool,
) -> None:
    _set_topic(new, topic)
    _set_source(new, source)
    _set_source_seq(new, source_seq)
    _set_ptype(new, ptype)
    _set_fields(new, fields)
    _set_link_seq(new, link_seq)
    _set_permtoken(new, permtoken)
    _set_timestamp(new, timestamp)
    _set_retransmit(new, retransmit)


@attrs.frozen
class Heartbeat:
    """A link-level heartbeat: it takes a link number but carries no source number.

    ``retransmit``: sent again in answer to a gap request (its ``timestamp`` is then the
    original one, so it says nothing of the link's liveness now).
    """

    link_seq: int = attrs.field(validator=_int_in(0, _MAX_WIRE))
    timestamp: float | None = attrs.field(
        default=None, converter=_float_time, validator=_optional(_timestamp)
    )
    retransmit: bool = attrs.field(default=False, validator=_instance_of(bool))


@attrs.frozen
class GapRequest:
    """Resend the link numbers ``link_from``..``link_to`` inclusive (may cross the wrap)."""

    link_from: int = attrs.field(validator=_int_in(1, _MAX_WIRE))
    link_to: int = attrs.field(validator=_int_in(1, _MAX_WIRE))


@attrs.frozen(hash=False)
class SourceGapRequest:
    """Replay everything after the last valid ``source_seq`` received, per source.

    ``request_id`` tells apart requests that ask the same (a stub asks again after a link reset
    with the same ``after`` as a request still in flight): the component echoes it in its
    answer, so a stub can drop an answer made for an earlier request. It takes no part in
    equality: two requests are equal when they ask for the same replay.

    ``link_through`` (optional, a wire link number, 0 for the reset frame) is the highest
    number of its link the subscriber had seen when it first asked: what the link numbered
    after it, the link brings (or repairs by range), so a replay may stop short of each
    source's first publication numbered after it (see
    :meth:`~seqrepair.core.context.LinkContext.cover`). Without it the replay runs to the
    journal's high-water. Like ``request_id`` it takes no part in equality.
    """

    after: Mapping[str, int] = attrs.field(converter=_source_numbers)
    request_id: int | None = attrs.field(
        default=None, kw_only=True, eq=False, validator=_optional(_int_in(0, _MAX_WIRE))
    )
    link_through: int | None = attrs.field(
        default=None, kw_only=True, eq=False, validator=_optional(_int_in(0, _MAX_WIRE))
    )

    def __hash__(self) -> int:
        return hash(frozenset(self.after.items()))

    def same_as(self, other: SourceGapRequest) -> bool:
        """Is ``other`` this request: it asks the same, and neither names a different id?"""
        return self == other and (
            self.request_id is None
            or other.request_id is None
            or self.request_id == other.request_id
        )


def _source_topics(value: object) -> Mapping[str, tuple[str, ...]]:
    """Per source, a tuple of topics (GapError.items)."""
    if not isinstance(value, Mapping):
        raise InvalidMessageError("items must map sources to topics", expected="mapping",
                                  got=value)
    out: dict[str, tuple[str, ...]] = {}
    for source, topics in value.items():
        if not isinstance(source, str) or not source or isinstance(topics, str) or not all(
            isinstance(t, str) and t for t in topics
        ):
            raise InvalidMessageError("items must map sources to lists of topics",
                                      expected="source -> [topic]", got=value)
        out[source] = tuple(topics)
    return MappingProxyType(out)


GapErrorReason = Literal["context-lost", "refused", "trimmed"]
GAP_ERROR_REASONS: tuple[GapErrorReason, ...] = ("context-lost", "refused", "trimmed")


def _reason(_instance: object, _attribute: object, value: object) -> None:
    if value not in GAP_ERROR_REASONS:
        raise InvalidMessageError(
            f"unknown gap error reason {value!r}", expected=GAP_ERROR_REASONS, got=value
        )


@attrs.frozen
class GapError:
    """The component cannot (or will not) answer ``request``.

    ``trimmed_through`` (reason "trimmed", source requests): per source, the last number
    retention removed. What follows it is still journaled; a subscriber reports the loss and
    asks again from there rather than giving up on the rest.

    ``items``: per source, the topics of what is lost, when the component can say (an entry
    its journal holds but cannot deliver); a source it does not name lost items nobody knows
    (a range retention removed). A subscriber resyncs those items' images.
    """

    reason: GapErrorReason = attrs.field(validator=_reason)
    request: GapRequest | SourceGapRequest | None = attrs.field(
        default=None,
        validator=_optional(_instance_of(GapRequest, SourceGapRequest)),
    )
    detail: str = attrs.field(default="", validator=_instance_of(str))
    trimmed_through: Mapping[str, int] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_source_numbers), hash=False
    )
    items: Mapping[str, tuple[str, ...]] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_source_topics), hash=False,
        kw_only=True,
    )


@attrs.frozen(hash=False)
class ReplayComplete:
    """Ends the answer to a :class:`SourceGapRequest`: the high-water replayed per source.

    ``more``: the component stopped at its per-request limit. Everything at or below
    ``through`` has been answered; the subscriber asks again after those points for the rest.
    """

    through: Mapping[str, int] = attrs.field(converter=_source_numbers)
    request: SourceGapRequest | None = attrs.field(
        default=None, validator=_optional(_instance_of(SourceGapRequest))
    )
    """The request answered, when the transport can say (a stale answer is then ignored)."""
    more: bool = attrs.field(default=False, validator=_instance_of(bool), kw_only=True)

    def __hash__(self) -> int:
        return hash((frozenset(self.through.items()), self.request, self.more))


@attrs.frozen(hash=False)
class ReplayStarted:
    """The component took ``request`` and its replay is under way: sent at once, before the
    replayed publications (Aeron's and JetStream's replay sessions say so too).

    ``through``: per source, the last number the replay will read (its ``ReplayComplete``
    may stop earlier, where the link itself carries on). ``continued``: ``request`` repeated
    a request whose replay was still in progress; that replay goes on where it is, nothing is
    sent twice, and what follows (frames, ``ReplayComplete``) answers the first attempt, whose
    ``after`` ``request`` names. A stub that hears nothing of a replay after a real silence
    asks again with the same ``request_id``: it is continued if still running, started again
    from the stub's remainder if not. ``more``: the per-request limit stops the replay at
    ``through`` (its ``ReplayComplete`` will say ``more`` unless the link carries the rest):
    the stub may ask at once for what follows, and the component answers that request when
    this replay ends (pipelined, as a JetStream consumer's pull requests).
    """

    request: SourceGapRequest = attrs.field(validator=_instance_of(SourceGapRequest))
    through: Mapping[str, int] = attrs.field(factory=dict, converter=_source_numbers)
    continued: bool = attrs.field(default=False, validator=_instance_of(bool), kw_only=True)
    more: bool = attrs.field(default=False, validator=_instance_of(bool), kw_only=True)

    def __hash__(self) -> int:
        return hash((self.request, frozenset(self.through.items()), self.continued, self.more))


def same_attempt(answered: SourceGapRequest, request: SourceGapRequest) -> bool:
    """Does an answer to ``answered`` answer ``request``? The same request, or an earlier
    attempt of it: both carry the same ``request_id`` (a stub's retries keep the id and
    move ``after`` up to what it has received, and a component continues the attempt whose
    replay is still running, echoing that attempt's ``after``)."""
    if answered.request_id is not None and request.request_id is not None:
        return answered.request_id == request.request_id
    return answered.same_as(request)


Frame = Publication | Heartbeat | GapError | ReplayComplete | ReplayStarted
"""What a subscriber stub receives."""
