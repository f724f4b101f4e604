"""What retention trimmed, in brief: per source, the items (topic and permission token) each
trimmed span held, so a later ``GAP-ERROR`` ``trimmed`` can name the items a subscriber lost
(``items``) and its resync asks for just those images (WIRE.md "Image requests").

Kept beside the journal's trim record, in a Redis list per source
(``seqrepair:{<source>}:trimmed-items``, one JSON entry per span: ``first``, ``last``,
``items`` a list of ``[topic, token or null]`` or ``null`` when unknown). Bounded:
- a span over more than :data:`MAX_SCAN` numbers is not read (its items unknown: a first trim
  of a large journal would read it all once more);
- a span naming more than :data:`MAX_ITEMS` items keeps none (unknown);
- a span adjacent to the newest one is merged into it while their items together stay within
  :data:`MAX_ITEMS` (a feed of a few items trimmed every few seconds stays one entry);
- at most :data:`MAX_SPANS` spans per source are kept, the oldest dropped (numbers before the
  oldest kept span: unknown).

Anything unknown, anywhere in a range asked about, makes :func:`trimmed_items` answer None
(never a partial list: a resync would then miss items). Written by the retention pass before
it trims (a crash between the two leaves a summary for numbers still held: never read, since
only numbers at or below the trim record are asked about). Only this module reads or writes
the list; a single retention pass per journal writes it (read, change, write: not atomic
against a second retainer of the same source, which would at worst drop a span: unknown).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from seqrepair.journal.format import KEY_PREFIX

if TYPE_CHECKING:
    from seqrepair.core.permissions import Entitlement
    from seqrepair.journal.journal import Journal

MAX_SCAN = 100_000
"""Numbers of one trimmed span read for its items at most (past it: unknown)."""

MAX_ITEMS = 256
"""Items (topic, permission token) one span names at most (past it: unknown)."""

MAX_SPANS = 64
"""Spans kept per source (the oldest dropped: unknown)."""

Item = tuple[str, str | None]
"""An item a trimmed span held: its topic and permission token."""


def summary_key(source: str) -> str:
    """The Redis list holding ``source``'s trimmed spans (beside its journal keys)."""
    return f"{KEY_PREFIX}:{{{source}}}:trimmed-items"


def _items_of(journal: Journal, source: str, first: int, last: int) -> set[Item] | None:
    if last - first + 1 > MAX_SCAN:
        return None
    items: set[Item] = set()
    for pub in journal.iter_range(source, first, last):
        items.add((pub.topic, pub.permtoken))
        if len(items) > MAX_ITEMS:
            return None
    return items


def _entry(first: int, last: int, items: set[Item] | None) -> str:
    return json.dumps({"first": first, "last": last,
                       "items": None if items is None else sorted(
                           [list(item) for item in items], key=lambda i: (i[0], i[1] or ""))})


def _span(raw: Any) -> tuple[int, int, set[Item] | None] | None:
    try:
        entry = json.loads(raw)
        items = entry["items"]
        return int(entry["first"]), int(entry["last"]), None if items is None else {
            (str(topic), None if token is None else str(token)) for topic, token in items}
    except (ValueError, TypeError, KeyError):
        return None  # not ours or damaged: taken as unknown by the caller


def record_trim(journal: Journal, source: str, first: int, last: int) -> None:
    """Note the items of ``source``'s numbers ``first``..``last``, about to be trimmed."""
    if last < first:
        return
    items = _items_of(journal, source, first, last)
    client = journal.client
    key = summary_key(source)
    newest = client.lindex(key, -1)
    span = _span(newest) if newest is not None else None
    if (span is not None and span[1] + 1 == first and span[2] is not None
            and items is not None and len(span[2] | items) <= MAX_ITEMS):
        client.lset(key, -1, _entry(span[0], last, span[2] | items))
        return
    pipe = client.pipeline(transaction=True)
    pipe.rpush(key, _entry(first, last, items))
    pipe.ltrim(key, -MAX_SPANS, -1)
    pipe.execute()


def trimmed_items(journal: Journal, source: str, first: int, last: int
                  ) -> set[Item] | None:
    """The items ``source``'s trimmed numbers ``first``..``last`` held, or None when any
    part of that range is unknown."""
    if last < first:
        return set()
    spans = [_span(raw) for raw in journal.client.lrange(summary_key(source), 0, -1)]
    if any(span is None for span in spans):
        return None
    covered = first - 1
    found: set[Item] = set()
    for start, end, items in sorted(s for s in spans if s is not None):
        if end <= covered:
            continue
        if start > covered + 1:
            break  # a hole: numbers nobody summarized
        if items is None:
            return None
        found |= items
        covered = end
        if covered >= last:
            return found
    return None


def visible_topics(items: Iterable[Item], allows: Callable[[str, str | None], bool]
                   ) -> tuple[str, ...]:
    """The topics among ``items`` a subscriber may see (``allows(topic, token)``), sorted."""
    return tuple(sorted({topic for topic, token in items if allows(topic, token)}))


def entitled_items(journal: Journal, entitlement: Entitlement, source: str, first: int,
                   last: int) -> tuple[str, ...] | None:
    """The topics a link with ``entitlement`` may see among what ``source``'s trimmed numbers
    ``first``..``last`` held, or None when the summary does not know them all."""
    held = trimmed_items(journal, source, first, last)
    if held is None:
        return None
    return visible_topics(held, lambda topic, token: (
        entitlement.allows_token(token) and entitlement.allows_topic(topic)))


def passed_on(items: Iterable[str] | None, entitlement: Entitlement) -> tuple[str, ...] | None:
    """The topics among ``items`` (an upstream's answer named them for a link's entitlement)
    that the link with ``entitlement`` may see, or None when ``items`` is None (unknown)."""
    if items is None:
        return None
    return tuple(sorted({topic for topic in items if entitlement.allows_topic(topic)}))
