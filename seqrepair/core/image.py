"""Item images: the current fields of every item, folded from publications (XEP-0040 §3).

One item per topic. The publish types act on it as follows:

* ``image``: the publication holds *all* the item's fields. They replace the item's fields;
  fields it does not carry are removed. The item stops being partial; no field counts as
  corrected any more.
* ``update``: overwrite the fields carried, keep the rest. A field overwritten by an update
  no longer counts as corrected.
* ``correction``: as update, and the fields carried count as corrected.
* update or correction on an unknown item creates it, marked *partial* (we have not seen
  all its fields) until an image arrives. An update carrying no fields still creates it.
* ``drop``: the item is deleted (dropping an unknown item does nothing).
* ``snapshot``: a subscriber's request for an image; it does not change the cache.

A field value of ``None`` is an explicit null and is kept as a value; an absent key is "not
sent". Publications are applied in the order given: ordering and deduplication are the
subscriber stub's job, not the cache's.

This module is the definition the Spark image rebuild must agree with on every journal.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication, PublishType

_EMPTY_CORRECTED: frozenset[str] = frozenset()


@attrs.frozen(hash=False)
class ItemImage:
    """What the cache knows of one item.

    ``fields``: the item's current fields (read-only). ``partial``: True when the item was
    created by an update or correction and no image has arrived since. ``corrected``: the
    fields whose current value was set by a correction. ``field_seq``: for each field, the
    ``(source, source_seq)`` of the publication that last set it.
    """

    fields: Mapping[str, Any]
    partial: bool
    corrected: frozenset[str]
    field_seq: Mapping[str, tuple[str, int]]


class _Item:
    """The cache's own record of one item.

    Copy on write: ``fields`` and ``field_seq`` are fresh dicts per publication and never
    mutated once stored, so read-only views handed out stay valid snapshots for ever.
    """

    __slots__ = ("corrected", "field_seq", "fields", "partial", "view")

    def __init__(
        self,
        fields: dict[str, Any],
        partial: bool,
        corrected: frozenset[str],
        field_seq: dict[str, tuple[str, int]],
    ) -> None:
        self.fields = fields
        self.partial = partial
        self.corrected = corrected
        self.field_seq = field_seq
        self.view: ItemImage | None = None

    def image(self) -> ItemImage:
        if self.view is None:
            self.view = ItemImage(
                fields=MappingProxyType(self.fields),
                partial=self.partial,
                corrected=self.corrected,
                field_seq=MappingProxyType(self.field_seq),
            )
        return self.view


class ImageCache:
    """The current image of every item, keyed by topic.

    Values handed out (``get``, ``entry``, ``items``) are read-only snapshots: applying a later
    publication never changes a mapping that was already returned.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, _Item] = {}

    def apply(self, pub: Publication) -> None:
        """Fold one publication into the cache according to its publish type.

        Raises :class:`~seqrepair.core.errors.InvalidMessageError` if ``pub`` is not a
        :class:`~seqrepair.core.messages.Publication`; the cache is then unchanged.
        """
        if not isinstance(pub, Publication):
            raise InvalidMessageError(
                "ImageCache.apply takes a Publication",
                expected="Publication",
                got=type(pub).__name__,
            )
        ptype = pub.ptype
        if ptype is PublishType.SNAPSHOT:
            return
        topic = pub.topic
        if ptype is PublishType.DROP:
            self._items.pop(topic, None)
            return
        stamp = (pub.source, pub.source_seq)
        old = None if ptype is PublishType.IMAGE else self._items.get(topic)
        if old is None:
            fields: dict[str, Any] = {}
            field_seq: dict[str, tuple[str, int]] = {}
            partial = ptype is not PublishType.IMAGE
            corrected = _EMPTY_CORRECTED
        else:
            fields = old.fields.copy()
            field_seq = old.field_seq.copy()
            partial = old.partial
            corrected = old.corrected
        # A plain loop: merging from the publication's MappingProxyType with dict.update or
        # {**a, **b} takes CPython's slow generic-mapping path.
        for name, value in pub.fields.items():
            fields[name] = value
            field_seq[name] = stamp
        if ptype is PublishType.CORRECTION:
            corrected = corrected.union(pub.fields)
        elif corrected and not corrected.isdisjoint(pub.fields):
            corrected = corrected.difference(pub.fields)
        self._items[topic] = _Item(fields, partial, corrected, field_seq)

    def restore(self, topic: str, fields: Mapping[str, Any], *, partial: bool,
                corrected: frozenset[str] = _EMPTY_CORRECTED) -> None:
        """Put back an item as a saved copy of the cache held it (``subscribe --images``
        loading its file): its fields, whether it is partial and which fields are
        corrections. Which publication set each field is not saved: ``field_seq`` of a
        restored field is absent until a publication sets it again."""
        if not isinstance(topic, str) or not isinstance(fields, Mapping):
            raise InvalidMessageError("ImageCache.restore takes a topic and a mapping",
                                      expected="str, Mapping", got=type(fields).__name__)
        names = frozenset(corrected)
        self._items[topic] = _Item(dict(fields), bool(partial),
                                   names if names else _EMPTY_CORRECTED, {})

    def get(self, topic: str) -> Mapping[str, Any] | None:
        """The current fields of the item at ``topic`` (read-only), or None if there is none."""
        item = self._items.get(topic) if isinstance(topic, str) else None
        return None if item is None else MappingProxyType(item.fields)

    def entry(self, topic: str) -> ItemImage | None:
        """Everything the cache knows of the item at ``topic``, or None if there is none."""
        item = self._items.get(topic) if isinstance(topic, str) else None
        return None if item is None else item.image()

    def items(self) -> list[tuple[str, Mapping[str, Any]]]:
        """``(topic, fields)`` for every item, in topic order (fields read-only)."""
        items = self._items
        return [(topic, MappingProxyType(items[topic].fields)) for topic in sorted(items)]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """A plain, independent ``{topic: {field: value}}`` copy, for comparisons."""
        return {topic: item.fields.copy() for topic, item in self._items.items()}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and topic in self._items

    def __iter__(self) -> Iterator[str]:
        """The topics of every item, in topic order."""
        return iter(sorted(self._items))

    def __repr__(self) -> str:
        return f"<ImageCache items={len(self._items)}>"
