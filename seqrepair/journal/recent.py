"""Recently journaled publications kept in their encoded form, for source replays.

A subscriber catching up asks for what it missed, mostly what was published just before: the
component fanned those publications out moments ago, each already encoded as the batch entry
it sends (:func:`seqrepair.amqp.wire.framing.encode_entry`, or the entry its publisher sent).
:class:`RecentEntries` keeps those entries, per source, in runs of consecutive numbers, bounded
in bytes (the oldest go first); a source replay (:mod:`.gapfill`) sends from them instead of
reading the journal's pages and transcoding each entry (JetStream keeps its recent message
blocks cached; Aeron replays recent history from its term buffers).

What it answers is what the journal path answers:
- it holds only what the component fanned out, which is journaled (the journal before the
  fan-out) and deliverable (checked before journaling), and a run holds consecutive numbers
  only: a number that does not follow the run's last starts a new run, so a run never spans
  numbers the component did not see (another writer's, a relay's not-selected markers);
- the link's entitlement is asked per entry as on the journal path (:func:`remembered`, from
  the first publication of each topic and permission token, per source and publish type too
  with filters);
- before each block (a replay page) the journal's high-water and trim are read (one round
  trip): numbers retention trimmed are answered ``trimmed`` exactly as a page read would find
  them, and a journal that no longer holds the block (emptied under the component) sends the
  replay back to the journal path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from seqrepair.core.messages import Publication
from seqrepair.journal.errors import JournalCorruptError, TrimmedRangeError
from seqrepair.journal.remembered import remembered
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.gapfill import Replay, ReplayFrame
    from seqrepair.journal.segments import Segment

log = get_logger(__name__)

ENTRY_OVERHEAD = 80
"""Bytes counted per entry besides its encoding: the bytes object's header and the run's
list slots (the key it refers to is shared by the entries of its topic)."""
MAX_KEYS = 1024
"""Distinct (topic, permission token, publish type) per source a run remembers a publication
of (to ask the entitlement); a publication of another key starts a new run past it."""


@attrs.define(eq=False)
class _Run:
    """Consecutive numbers ``first``.. of one source: entries and their keys, oldest first."""

    first: int
    entries: list[bytes | None] = attrs.field(factory=list)
    keys: list[tuple[Any, ...]] = attrs.field(factory=list)
    head: int = 0
    """Index of the oldest entry still held (those before it were evicted)."""

    @property
    def last(self) -> int:
        return self.first + len(self.entries) - 1

    @property
    def oldest(self) -> int:
        return self.first + self.head


class RecentEntries:
    """Encoded batch entries of recently fanned-out publications, at most ``max_bytes``
    (estimated: each entry's length plus :data:`ENTRY_OVERHEAD`) for every source together;
    0 keeps nothing. ``same(entry, publication)``: whether an entry carries that journaled
    publication (the transport's reading of its own entries), to check blocks against the
    journal."""

    def __init__(self, max_bytes: int, same: Callable[[bytes, Publication], bool],
                 stats: dict[str, int] | None = None) -> None:
        self.max_bytes = max_bytes
        self.same = same
        self.bytes = 0
        self._runs: dict[str, _Run] = {}
        self._samples: dict[str, dict[tuple[Any, ...], tuple[tuple[Any, ...], Publication]]] = {}
        """Per source and key, the key (shared by the entries) and one publication of it (what
        the entitlement is asked about)."""
        self._order: deque[_Run] = deque()
        self._sizes: deque[int] = deque()
        """The run and the bytes counted of each entry, oldest first: what eviction takes
        (two deques, not a deque of pairs: a pair per entry held is an object the garbage
        collector walks on every full pass, and the cache holds hundreds of thousands)."""
        self.stats = {"served": 0, "evicted": 0, "runs_started": 0, "mismatched": 0}
        """Entries sent from here, evicted, runs begun, and blocks the journal did not match
        (kept in ``stats`` when given, a component's counters, prefixed ``replay_cache_``)."""
        self._shared = stats
        if stats is not None:
            for key in self.stats:
                stats.setdefault(f"replay_cache_{key}", 0)

    def add(self, pub: Publication, entry: bytes | None) -> None:
        """Keep ``pub``'s batch entry ``entry`` (journaled and fanned out); None (an entry only
        proton's codec can write) ends the source's run, so a replay reads on from the journal."""
        if self.max_bytes <= 0:
            return
        source, seq = pub.source, pub.source_seq
        run = self._runs.get(source)
        if run is not None and seq <= run.last:
            return  # fanned out again (a resend): the run holds it already
        samples = self._samples.get(source)
        if samples is None:
            samples = self._samples[source] = {}
        key = (pub.topic, pub.permtoken, pub.ptype._value_)  # see add_many
        known = samples.get(key)
        if known is None and len(samples) >= MAX_KEYS:
            # the run's entries refer to the samples: both go, a new run starts with this one
            self._end_run(source)
            samples.clear()
            run = None
        if entry is None:
            self._end_run(source)
            return
        if run is None or seq != run.last + 1:
            self._end_run(source)
            run = self._runs[source] = _Run(seq)
            self.stats["runs_started"] += 1
        if known is None:
            known = samples[key] = (key, pub)
        if type(entry) is not bytes:  # a slice of a publisher's message (a bytearray)
            entry = bytes(entry)
        run.entries.append(entry)
        run.keys.append(known[0])
        size = len(entry) + ENTRY_OVERHEAD
        self._order.append(run)
        self._sizes.append(size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self._evict()

    def add_many(self, pubs: Sequence[Publication], entries: Sequence[bytes | None]) -> None:
        """:meth:`add` for each publication and its entry (a component fans out every
        publication through here: the usual one, the next number of its source's run under a
        key seen before, is kept in line, exactly as :meth:`add` keeps it; a test holds
        them the same)."""
        if self.max_bytes <= 0:
            return
        runs, all_samples, order, sizes = self._runs, self._samples, self._order, self._sizes
        for pub, entry in zip(pubs, entries, strict=True):
            run = runs.get(pub.source)
            if run is not None and entry is not None and (
                    pub.source_seq == run.first + len(run.entries)):
                samples = all_samples.get(pub.source)
                known = None if samples is None else samples.get(
                    # the type's value: an enum member hashes in Python, its str in C
                    (pub.topic, pub.permtoken, pub.ptype._value_))
                if known is not None:
                    if type(entry) is not bytes:  # a slice of a received message's bytearray
                        entry = bytes(entry)
                    run.entries.append(entry)
                    run.keys.append(known[0])
                    size = len(entry) + ENTRY_OVERHEAD
                    order.append(run)
                    sizes.append(size)
                    self.bytes += size
                    while self.bytes > self.max_bytes:
                        self._evict()
                    continue
            self.add(pub, entry)

    def _end_run(self, source: str) -> None:
        run = self._runs.pop(source, None)
        if run is not None:  # its bytes stay counted until eviction reaches them
            run.entries.clear()
            run.keys.clear()
            run.head = 0

    def _evict(self) -> None:
        run = self._order.popleft()
        self.bytes -= self._sizes.popleft()
        self.stats["evicted"] += 1
        if run.head < len(run.entries):
            run.entries[run.head] = None
            run.head += 1
            if run.head > 4096 and run.head * 2 > len(run.entries):  # compact the front
                del run.entries[: run.head]
                del run.keys[: run.head]
                run.first += run.head
                run.head = 0

    def block(self, source: str, first: int, last: int
              ) -> tuple[list[bytes], list[tuple[Any, ...]]] | None:
        """The entries ``first``.. (at most through ``last``) held for ``source``, with their
        keys, or None when ``first`` is not held."""
        run = self._runs.get(source)
        if run is None or not run.oldest <= first <= run.last:
            return None
        start = first - run.first
        end = min(last, run.last) - run.first + 1
        return run.entries[start:end], run.keys[start:end]  # type: ignore[return-value]

    def publish_stats(self) -> None:
        """Copy the counters into the shared ``stats`` (per block, not per entry)."""
        shared = self._shared
        if shared is not None:
            for key, value in self.stats.items():
                shared[f"replay_cache_{key}"] = value

    def sample(self, source: str, key: tuple[Any, ...]) -> Publication:
        """The publication of ``source`` remembered for ``key`` (of an entry :meth:`block`
        gave, so it is held)."""
        return self._samples[source][key][1]

    def oldest(self, source: str) -> int | None:
        """The first number of ``source`` held (None: none)."""
        run = self._runs.get(source)
        return None if run is None or run.head >= len(run.entries) else run.oldest


def replay_recent(replay: Replay, seg: Segment, start: int, scan_slice: int | None
                  ) -> Generator[ReplayFrame | None, None, int | None]:
    """Send ``seg`` from ``start`` out of ``replay.recent`` for as long as it holds the
    numbers; returns the number to read the journal on from, None when the segment is done
    (read to its end, or the link carries the rest), or -1 once a closing frame was yielded
    (numbers trimmed meanwhile)."""
    recent = replay.recent
    assert recent is not None
    source = seg.source
    allows = remembered(replay.link.entitlement)
    answers: dict[tuple[Any, ...], bool] = {}
    sample = recent.sample
    page = replay.page_size
    cover = replay.cover
    numbered = None if cover is None else cover.context
    seen, limit = -1, None  # the link's numbering when its limit was last read, and it
    while start <= seg.last:
        got = recent.block(source, start, min(seg.last, start + page - 1))
        if got is None:
            return start
        entries, keys = got
        end = start + len(entries) - 1
        probe = replay.journal.probe
        try:  # what the journal holds of the block's ends: its marks and those two entries
            high_water, trimmed, first = probe(source, start)
            last = probe(source, end)[2] if trimmed < start < end else first
        except JournalCorruptError:  # the journal path says so, as it would have
            return start
        if start <= trimmed and replay.fetcher is not None:
            return start  # a relay's: the journal path asks its upstream for what was trimmed
        if start <= trimmed:  # answered as the journal path's page read would
            yield replay.trimmed_meanwhile(source, TrimmedRangeError(
                f"{source!r} is trimmed through {trimmed}; {start} was requested",
                source=source, trimmed_through=trimmed, requested=start))
            return -1
        if (high_water < end or type(first) is not Publication or type(last) is not Publication
                or not recent.same(entries[0], first) or not recent.same(entries[-1], last)):
            # the journal holds something else there (emptied and written again under the
            # component, say): what it holds, from the journal path
            recent.stats["mismatched"] += 1
            recent.publish_stats()
            return start
        for offset, entry in enumerate(entries):
            seq = start + offset
            if numbered is not None:  # does the link carry the source from here?
                if numbered.recorded != seen:
                    seen, limit = numbered.recorded, replay.link_limit(source)
                if limit is not None and seq > limit and replay.cut(seg, seq):
                    recent.publish_stats()
                    return None
            replay.scanned += 1
            key = keys[offset]
            allowed = answers.get(key)
            if allowed is None:
                allowed = answers[key] = allows(sample(source, key))
            if allowed:
                replay.sent += 1
                recent.stats["served"] += 1
                yield entry
            else:
                replay.filtered += 1
            if scan_slice is not None and replay.scanned % scan_slice == 0:
                yield None
        start += len(entries)
        recent.publish_stats()
    return None
