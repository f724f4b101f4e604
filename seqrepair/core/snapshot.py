"""Image requests (XEP-0040 §3 ``snapshot``): a subscriber asks for the current image of items.

A subscriber that lost publications it cannot get back (an :class:`~.events.Unrecoverable`)
asks for the current image of the items concerned instead: named topics, topic patterns, or
both, optionally only of some sources (:class:`ImageRequest`, ``SNAPSHOT`` on the wire). The
component answers from its journal, filtered by the asking link's entitlement: per source and
item, one :class:`ImageFrame` holding the fold of that source's publications of the item
through a number ``as_of`` (the item's latest image folded with later updates and corrections;
a drop makes it a ``drop``), then one :class:`ImageComplete`.

``as_of`` is the source number the image is current as of: it holds every publication of the
item numbered at or below it, none above. The stub delivers the image and from then on takes
a publication of that (source, item) numbered at or below ``as_of`` as covered by it (consumed
for its source's order, never delivered again); everything above is delivered as ever. Other
items of the source are untouched: their publications keep flowing in the source's order.

A request the component rejects for good (or for now, until the stub's retries run out), or
that gets no answer, is given up and told: :class:`ImageRefused`, naming why.

The image of an item whose latest image retention has trimmed cannot be whole: it is sent as
an ``update`` of the fields the journal still holds (the item's other fields are unknown) and
named in :attr:`ImageComplete.partial`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication, PublishType, _source_numbers
from seqrepair.core.topics import TopicPattern, validate_topic

MAX_IMAGE_TOPICS = 256
"""The most topics one image request may name."""
MAX_IMAGE_PATTERNS = 16
"""The most topic patterns one image request may name."""
MAX_IMAGE_SOURCES = 1000
"""The most sources one image request may name (the same bound as a source request's)."""

IMAGE_PTYPES = (PublishType.IMAGE, PublishType.UPDATE, PublishType.DROP)
"""What an image answer's publications may be: a whole image, a partial one (``update``: the
journal lacks the item's base) or a ``drop`` (the item no longer exists)."""


def _strings(value: object, name: str, most: int) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidMessageError(f"{name} must be a list of strings", expected="list", got=value)
    if len(value) > most:
        raise InvalidMessageError(f"at most {most} {name} per image request", expected=most,
                                  got=len(value))
    for item in value:
        if not isinstance(item, str) or not item:
            raise InvalidMessageError(f"{name} must be non-empty strings",
                                      expected="non-empty str", got=item)
    return tuple(dict.fromkeys(value))


def _topics(value: object) -> tuple[str, ...]:
    topics = _strings(value, "topics", MAX_IMAGE_TOPICS)
    for topic in topics:
        validate_topic(topic)
    return topics


def _patterns(value: object) -> tuple[str, ...]:
    patterns = _strings(value, "patterns", MAX_IMAGE_PATTERNS)
    for pattern in patterns:
        TopicPattern(pattern)
    return patterns


def _sources(value: object) -> tuple[str, ...]:
    return _strings(value, "sources", MAX_IMAGE_SOURCES)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _request_id(_instance: object, _attribute: object, value: Any) -> None:
    if value is not None and (type(value) is not int or not 0 <= value < 1 << 64):
        raise InvalidMessageError("request_id must be an integer 0..2^64-1",
                                  expected="ulong", got=value)


@attrs.frozen
class ImageRequest:
    """Ask for the current image of ``topics`` and of every item matching ``patterns``
    (at least one of either), of ``sources`` only when it names some (empty: every source).

    What is answered is further limited to what the asking link may see (its subscription and
    entitlement): asking for more is not an error, it is answered with less.
    ``request_id`` is echoed on every answer; a subscriber keeps only answers to its requests.
    """

    topics: tuple[str, ...] = attrs.field(default=(), converter=_topics)
    patterns: tuple[str, ...] = attrs.field(default=(), converter=_patterns)
    sources: tuple[str, ...] = attrs.field(default=(), converter=_sources)
    request_id: int | None = attrs.field(default=None, kw_only=True, validator=_request_id)

    def __attrs_post_init__(self) -> None:
        if not self.topics and not self.patterns:
            raise InvalidMessageError("an image request names topics or topic patterns",
                                      expected="topics or patterns", got="neither")

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one of the items asked for."""
        return topic in self.topics or any(
            TopicPattern(pattern).matches(topic) for pattern in self.patterns
        )


def _image_publication(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, Publication) or value.ptype not in IMAGE_PTYPES:
        raise InvalidMessageError(
            "an image answer is a Publication of type image, update (partial) or drop",
            expected=[t.value for t in IMAGE_PTYPES],
            got=value.ptype.value if isinstance(value, Publication) else type(value).__name__,
        )


@attrs.frozen
class ImageFrame:
    """One item's image in answer to the :class:`ImageRequest` ``request_id``.

    ``publication.source_seq`` is ``as_of``: the image holds the item's publications of
    ``publication.source`` numbered at or below it (it is not the number of a journaled
    publication). ``ptype``: ``image``, ``update`` when partial, ``drop`` when the item is gone.
    """

    publication: Publication = attrs.field(validator=_image_publication)
    request_id: int | None = attrs.field(default=None, validator=_request_id)

    @property
    def as_of(self) -> int:
        """The source number the image is current as of."""
        return self.publication.source_seq


@attrs.frozen(hash=False)
class ImageComplete:
    """Ends the answer to the :class:`ImageRequest` ``request_id``.

    ``as_of``: per source an image came from, the number its images are current as of.
    ``partial``: topics whose image the journal could not make whole (their base trimmed).
    Items asked for that the answer names nothing of do not exist for the asking link (never
    published, published before retention's reach without an image since, or not visible).
    """

    as_of: Mapping[str, int] = attrs.field(converter=_source_numbers)
    request_id: int | None = attrs.field(default=None, validator=_request_id)
    partial: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)

    def __hash__(self) -> int:
        return hash((frozenset(self.as_of.items()), self.request_id, self.partial))


# --- events the stub returns (see seqrepair.core.events) --------------------------------------


@attrs.frozen
class RequestImage:
    """Send this image request to the component (``SNAPSHOT``)."""

    request: ImageRequest


@attrs.frozen
class ImageDelivered:
    """Hand the image ``publication`` (current as of its ``source_seq``) to the application:
    it replaces what the application holds of the item (``update`` when partial, ``drop``:
    the item is gone). It is no publication of the source's stream: it moves no position."""

    publication: Publication
    request_id: int | None = None


@attrs.frozen
class ImageResynced:
    """The image request ``request`` is answered: ``as_of`` per source, ``topics`` the items
    the answer held (a drop included; one another request's answer delivered as current
    already, not delivered twice, included too), ``partial`` those it could not make whole.
    Items the request matched that the application holds and ``topics`` lacks no longer exist
    for it, save one an :class:`ImageOutdated` named meanwhile (asked again on its own)."""

    request: ImageRequest
    as_of: Mapping[str, int]
    topics: frozenset[str]
    partial: tuple[str, ...] = ()


@attrs.frozen
class ImageRefused:
    """The image request ``request`` is given up: no answer will come, and the items it asked
    for stay as the application holds them (what an :class:`~.events.Unrecoverable` it was to
    make good still lacks). ``reason``: the AMQP condition the component rejected it with (for
    good, or for now and again until the retries ran out), or ``"no answer after N tries"``,
    or ``"replaced: more than N image requests pending"`` (a newer request forgot it)."""

    request: ImageRequest
    reason: str


@attrs.frozen
class ImageOutdated:
    """An image came current as of a number below one its source has delivered: publications
    of the item in between may already have been delivered, so it was not. Ask for it again
    (an answer that travels another way than the data link can be overtaken by it)."""

    publication: Publication
    delivered: int


def image_publication(
    topic: str, source: str, as_of: int, ptype: PublishType, fields: Mapping[str, Any],
    timestamp: float | None = None,
) -> Publication:
    """The publication an :class:`ImageFrame` carries."""
    return Publication(topic=topic, source=source, source_seq=as_of, ptype=ptype,
                       fields=fields, timestamp=timestamp, retransmit=True)
