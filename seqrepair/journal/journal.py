"""The Redis journal: batched append, high-water, range reads, item images and trimming.

See :mod:`seqrepair.journal.format` for the keys and entries. Every redis-py error is mapped to
a :class:`~seqrepair.journal.errors.JournalError` at this boundary. An append either returns
(the journal holds the whole batch) or raises (it holds none of it, or, after a timeout or a
dropped connection, the outcome is unknown until :meth:`Journal.high_water` is read again).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import attrs
import redis
from redis.cluster import RedisCluster

from seqrepair.core.errors import InvalidConfigError, InvalidMessageError
from seqrepair.core.image import ImageCache, ItemImage
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import scripts
from seqrepair.journal.envelope import encode_append
from seqrepair.journal.errors import (
    BitsMismatchError,
    JournalCorruptError,
    JournalError,
    JournalUnavailableError,
    SequenceConflictError,
    TrimmedRangeError,
    map_redis_errors,
)
from seqrepair.journal.format import (
    MAX_JOURNAL_SEQ,
    META_BITS,
    META_BROUGHT_BY,
    META_HIGH_WATER,
    META_TRIMMED_AT,
    META_TRIMMED_THROUGH,
    SOURCES_KEY,
    JournalRow,
    check_seq,
    check_source,
    entry_id,
    meta_key,
    space,
    stream_key,
)
from seqrepair.journal.selection import NOT_SELECTED, NotSelected
from seqrepair.logs import get_logger

log = get_logger(__name__)

_decode_page = json.loads


@attrs.frozen
class SourceInfo:
    """What the journal knows of one source."""

    source: str
    high_water: int
    bits: int | None
    trimmed_through: int
    trimmed_at: float | None
    length: int
    """Numbers held: ``high_water - trimmed_through`` (publications, and numbers a relay's
    not-selected markers cover). Not the stream's entry count: a packed row holds many."""


def _int(value: bytes | str | None) -> int:
    return 0 if value is None else int(value)


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _span(item: Publication | JournalRow | NotSelected) -> tuple[int, int]:
    """The first and last number a journal entry holds."""
    if type(item) is Publication:
        return item.source_seq, item.source_seq
    if type(item) is JournalRow:
        return item.seq, item.seq
    assert isinstance(item, NotSelected)
    return item.first, item.last


def _marker(source: str, seq: int, values: dict[str, Any]) -> NotSelected:
    """The not-selected marker entry ``seq`` of ``source`` (:mod:`.selection`)."""
    try:
        through = int(values["through"])
        selection = str(values.get("selection", ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise JournalCorruptError(f"malformed not-selected entry {seq} in {source!r}",
                                  source=source) from exc
    if through < seq:
        raise JournalCorruptError(f"not-selected entry {seq} of {source!r} ends before it",
                                  source=source, got=through)
    return NotSelected(source, seq, through, selection)



CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""URL schemes naming a Redis Cluster (through any of its nodes), and the node URL scheme."""


def redis_client(url: str, **client_kwargs: Any) -> redis.Redis:
    """A redis-py client for ``url`` (``redis://``, ``rediss://`` or ``unix://``: connects on
    first use), or a cluster client for ``redis+cluster://HOST:PORT`` (or ``rediss+cluster://``:
    any node of a Redis Cluster; it learns the others at once, so an unreachable cluster raises
    :class:`JournalUnavailableError` here). Raises :class:`InvalidConfigError` when ``url`` is
    no Redis URL."""
    scheme, sep, rest = url.partition("://")
    try:
        if sep and scheme in CLUSTER_SCHEMES:
            try:
                with map_redis_errors("connecting to the cluster"):
                    cluster = RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}",
                                                    **client_kwargs)
            except JournalError as exc:  # redis-py: no node reachable is RedisClusterException
                raise JournalUnavailableError(str(exc), operation="connect") from exc
            # the same commands, routed by key to the node owning its slot (the hash tags keep
            # a source's keys together)
            return cast(redis.Redis, cluster)
        return redis.Redis.from_url(url, **client_kwargs)
    except ValueError as exc:
        raise InvalidConfigError(f"not a Redis URL: {url!r} ({exc})", got=url) from exc


def bounded_client(url: str, read_timeout: float, **client_kwargs: Any) -> redis.Redis:
    """:func:`redis_client` whose calls wait at most ``read_timeout`` seconds for an answer
    and 5 for a connection, unless ``client_kwargs`` say otherwise."""
    client_kwargs.setdefault("socket_timeout", read_timeout)
    client_kwargs.setdefault("socket_connect_timeout", 5.0)
    return redis_client(url, **client_kwargs)



def _principal(value: object) -> str:
    """A recorded ``brought_by``, interned: a journal of 100,000 sources of a few principals
    holds a few strings, not one copy per source."""
    return sys.intern(value.decode() if isinstance(value, bytes) else str(value))

class Journal:
    """Publications per source in Redis streams (one client, thread-compatible like redis-py).

    ``client`` must be a ``redis.Redis`` (or a ``RedisCluster``) with
    ``decode_responses=False``. ``page_size`` is how many entries one read round trip fetches.
    """

    def __init__(self, client: redis.Redis, *, page_size: int = 1000) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise InvalidConfigError("page_size must be a positive integer", got=page_size)
        self.client = client
        self.page_size = page_size
        self._append = client.register_script(scripts.APPEND)
        self._read = client.register_script(scripts.READ)
        self._read_rows = client.register_script(scripts.READ_ROWS)
        self._trim = client.register_script(scripts.TRIM)
        self._registered: set[str] = set()
        self._prefetcher: ThreadPoolExecutor | None = None

    @classmethod
    def from_url(cls, url: str, *, page_size: int = 1000, **client_kwargs: Any) -> Journal:
        """A journal on a new client for ``url`` (``redis://host:port/db``)."""
        return cls(bounded_client(url, 10.0, **client_kwargs), page_size=page_size)

    def close(self) -> None:
        """Close the client's connections."""
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=False, cancel_futures=True)
            self._prefetcher = None
        self.client.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ping(self) -> None:
        """Raise JournalUnavailableError unless Redis answers."""
        with map_redis_errors("ping"):
            self.client.ping()

    # --- writing -------------------------------------------------------------------------

    def register_source(self, source: str, bits: int) -> SourceInfo:
        """Record ``source`` (in ``seqrepair:sources``) with its bit width; return its info.

        Raises BitsMismatchError if the source was journaled with another width.
        """
        check_source(source)
        space(bits)  # validates the width
        with map_redis_errors("register", source):
            self.client.sadd(SOURCES_KEY, source)
            self.client.hsetnx(meta_key(source), META_BITS, str(bits))
        info = self.info(source)
        if info.bits is not None and info.bits != bits:
            raise BitsMismatchError(
                f"source {source!r} is journaled with {info.bits} bits, not {bits}",
                source=source,
                operation="register",
                expected=info.bits,
                got=bits,
            )
        self._registered.add(source)
        return info

    def append(
        self, publications: Sequence[Publication], bits: int, *, not_selected: str | None = None,
        before: tuple[int, str] | None = None, brought_by: str | None = None,
    ) -> int:
        """Journal one contiguous batch of one source atomically; return the new high-water.

        The batch must continue the journal (first ``source_seq`` = high-water + 1), else
        :class:`SequenceConflictError` and nothing is written; a repeated append is therefore
        rejected. Bad publications raise InvalidMessageError before anything is sent.

        ``not_selected`` (a relay's journal, :mod:`seqrepair.journal.selection`): the batch's
        numbers need only increase; each range it skips (after the high-water, between two
        of its publications) is journaled as not selected under that selection, in the same
        atomic step. ``before`` (with ``not_selected``): ``(number, selection)``, the skipped
        numbers through ``number`` are journaled under ``selection`` instead (a relay's numbers
        published before it subscribed: :data:`~seqrepair.journal.selection.BEFORE_SUBSCRIPTION`).
        ``brought_by`` (a component's append of a principal's publications): when this is the
        source's first journaling, the principal is recorded as the one that brought it
        (``brought_by`` in its meta hash, in the same atomic step: :meth:`brought_by`).
        """
        source, envelope = self.prepare_append(publications, bits, not_selected=not_selected)
        args: list[str | bytes] = [source, str(bits), envelope, not_selected or ""]
        if before is not None and not_selected:
            args += [str(before[0]), before[1]]
        if brought_by:
            args += [""] * (6 - len(args)) + [brought_by]
        with map_redis_errors("append", source):
            reply = self._append(keys=[stream_key(source), meta_key(source)], args=args)
        return self.append_result(publications, bits, reply)

    def prepare_append(
        self, publications: Sequence[Publication], bits: int, *, not_selected: str | None = None
    ) -> tuple[str, bytes]:
        """Validate a batch, register its source, and encode it: ``(source, envelope)``."""
        if not publications:
            raise InvalidMessageError("an append needs at least one publication", got=0)
        source = publications[0].source
        envelope = self._envelope(publications, bits, source, increasing=bool(not_selected))
        if source not in self._registered:
            self.register_source(source, bits)
        return source, envelope

    @staticmethod
    def append_result(publications: Sequence[Publication], bits: int, reply: Any) -> int:
        """The new high-water from the append script's reply, or the typed error it means."""
        status, value = reply
        source = publications[0].source
        if status == b"ok":
            return int(value)
        if status == b"bits":
            raise BitsMismatchError(
                f"source {source!r} is journaled with {value.decode()} bits, not {bits}",
                source=source,
                operation="append",
                expected=int(value),
                got=bits,
            )
        high_water = int(value)
        raise SequenceConflictError(
            f"append to {source!r} starts at {publications[0].source_seq}, "
            f"the journal expects {high_water + 1}",
            source=source,
            operation="append",
            expected=high_water + 1,
            got=publications[0].source_seq,
        )

    @staticmethod
    def _envelope(
        publications: Sequence[Publication], bits: int, source: str, *, increasing: bool = False
    ) -> bytes:
        return encode_append(publications, bits, source, increasing=increasing)

    # --- reading -------------------------------------------------------------------------

    def sources(self) -> list[str]:
        """Every journaled source, sorted."""
        with map_redis_errors("sources"):
            members: set[bytes] = self.client.smembers(SOURCES_KEY)  # type: ignore[assignment]
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    def brought_by(self, sources: Sequence[str]) -> dict[str, str]:
        """``{source: principal}`` for those of ``sources`` a component recorded the principal
        that first journaled them (``append(brought_by=...)``), in one round trip; a source
        journaled otherwise (by a publisher, a relay, or before it was recorded) is absent."""
        if not sources:
            return {}
        with map_redis_errors("brought_by"), self.client.pipeline(transaction=False) as pipe:
            for source in sources:
                pipe.hget(meta_key(check_source(source)), META_BROUGHT_BY)
            values = pipe.execute()
        return {source: _principal(v)
                for source, v in zip(sources, values, strict=True) if v is not None}

    def bits_and_brought_by(self, sources: Sequence[str]) -> tuple[dict[str, int], dict[str, str]]:
        """:meth:`bit_widths` and :meth:`brought_by` of ``sources`` in one read (one pipeline
        of one ``HMGET`` per source): what a starting component reads of every source."""
        if not sources:
            return {}, {}
        with map_redis_errors("bit_widths"), self.client.pipeline(transaction=False) as pipe:
            for source in sources:
                pipe.hmget(meta_key(check_source(source)), META_BITS, META_BROUGHT_BY)
            replies = pipe.execute()
        widths: dict[str, int] = {}
        brought: dict[str, str] = {}
        for source, (bits, by) in zip(sources, replies, strict=True):
            if bits is not None:
                widths[source] = int(bits)
            if by is not None:
                brought[source] = _principal(by)
        return widths, brought

    def high_water(self, source: str) -> int:
        """The last absolute number the journal holds for ``source`` (0 when none)."""
        check_source(source)
        with map_redis_errors("high_water", source):
            return _int(self.client.hget(meta_key(source), META_HIGH_WATER))

    def high_waters(self, sources: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``{source: (high_water, trimmed_through)}`` in one round trip."""
        with map_redis_errors("high_waters"), self.client.pipeline(transaction=False) as pipe:
            for source in sources:
                pipe.hmget(meta_key(check_source(source)), META_HIGH_WATER, META_TRIMMED_THROUGH)
            replies = pipe.execute()
        return {
            source: (_int(hw), _int(trimmed))
            for source, (hw, trimmed) in zip(sources, replies, strict=True)
        }

    def bit_widths(self, sources: Sequence[str]) -> dict[str, int]:
        """``{source: bits}`` of the sources journaled with a bit width, in one round trip."""
        with map_redis_errors("bit_widths"), self.client.pipeline(transaction=False) as pipe:
            for source in sources:
                pipe.hget(meta_key(check_source(source)), META_BITS)
            replies = pipe.execute()
        return {
            source: int(bits)
            for source, bits in zip(sources, replies, strict=True)
            if bits is not None
        }

    def info(self, source: str) -> SourceInfo:
        """High-water, bit width, trim record and numbers held of ``source``."""
        check_source(source)
        with map_redis_errors("info", source):
            hw, bits, trimmed, trimmed_at = self.client.hmget(
                meta_key(source), META_HIGH_WATER, META_BITS, META_TRIMMED_THROUGH, META_TRIMMED_AT
            )
        return SourceInfo(
            source=source,
            high_water=_int(hw),
            bits=None if bits is None else int(bits),
            trimmed_through=_int(trimmed),
            trimmed_at=None if trimmed_at is None else float(trimmed_at),
            length=_int(hw) - _int(trimmed),
        )

    def _page(
        self, source: str, start: str, end: str, count: int, *, reverse: bool = False,
        positional: bool = False,
    ) -> tuple[int, int, list[Any]]:
        with map_redis_errors("read", source):
            keys = [stream_key(source), meta_key(source)]
            if positional:  # scripts.READ_ROWS: see _row
                hw, trimmed, text = self._read_rows(keys=keys, args=[start, end, count])
            else:
                hw, trimmed, text = self._read(
                    keys=keys, args=[start, end, count, "rev" if reverse else "fwd"])
        try:
            rows = _decode_page(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise JournalCorruptError(
                f"journal page of {source!r} is not JSON: {exc}", source=source
            ) from exc
        return int(hw), int(trimmed), rows

    @staticmethod
    def _decode_rows(source: str, rows: list[Any]) -> list[Publication]:
        return [pub for row in rows
                if isinstance(pub := Journal._decode_row(source, row), Publication)]

    @staticmethod
    def _decode_row(source: str, row: Any) -> Publication | NotSelected:
        item = Journal._row(source, row)
        if type(item) is JournalRow:
            return item.publication(source)
        return item  # type: ignore[return-value]  # a NotSelected marker

    @staticmethod
    def _row(source: str, row: Any) -> JournalRow | NotSelected:
        """A page row as a :class:`JournalRow` (its entry fields not decoded yet) or the
        not-selected marker it is. A row of scripts.READ_ROWS in the usual layout is
        ``[id, *parts]``; any other is ``[id, [name, value, ...]]``, as scripts.READ gives."""
        if len(row) == 9:  # READ_ROWS's layout (a list of 2 otherwise)
            ident = row[0]
            try:
                seq = int(ident[:-2]) if ident.endswith("-0") else -1
            except (AttributeError, TypeError, ValueError):
                seq = -1
            if seq < 1:
                raise JournalCorruptError(f"entry ID {ident!r} is not <seq>-0", source=source)
            return JournalRow(seq, row)
        try:
            ident, flat = row
            seq = int(ident[:-2]) if ident.endswith("-0") else -1
            if type(flat) is not list or len(flat) % 2:
                raise TypeError("entry fields are not name/value pairs")
            pairs = iter(flat)
            values = dict(zip(pairs, pairs, strict=False))  # even: checked above
        except (TypeError, ValueError) as exc:
            raise JournalCorruptError(f"malformed entry in {source!r}", source=source) from exc
        if seq < 1:
            raise JournalCorruptError(f"entry ID {ident!r} is not <seq>-0", source=source)
        if values.get("ptype") == NOT_SELECTED:
            return _marker(source, seq, values)
        return JournalRow.of(seq, values)

    def _read_ahead(
        self, source: str, last_row: Any, end: str, count: int, last: int
    ) -> tuple[int, Future[tuple[int, int, list[Any]]]] | None:
        """Start reading the page after ``last_row`` (a full page's last) in a thread: the
        position it starts at and its future; None when that position is not plain to see
        (a not-selected marker ends the page, a malformed row: the reader finds out)."""
        try:
            ident = last_row[0]
            after = int(ident[:-2]) + 1 if ident.endswith("-0") else 0
            marker = len(last_row) == 2 and NOT_SELECTED in last_row[1]
        except (AttributeError, IndexError, TypeError, ValueError):
            return None
        if not 1 < after <= last or marker:
            return None
        if self._prefetcher is None:
            self._prefetcher = ThreadPoolExecutor(max_workers=2,
                                                  thread_name_prefix="journal-read-ahead")
        return after, self._prefetcher.submit(self._page, source, entry_id(after), end, count,
                                              positional=True)

    def _marker_at(self, source: str, position: int) -> NotSelected | None:
        """The not-selected marker whose range holds ``position`` (it begins before it), if
        any: a read starting inside one begins after it."""
        with map_redis_errors("read", source):
            rows: list[Any] = self.client.xrevrange(  # type: ignore[assignment]
                stream_key(source), entry_id(position), "-", count=1)
        for ident, values in rows or ():
            text = {_str(k): _str(v) for k, v in (values or {}).items()}
            if text.get("ptype") != NOT_SELECTED:
                return None
            marker = _marker(source, int(_str(ident)[:-2]), text)
            return marker if marker.first <= position <= marker.last else None
        return None

    def probe(self, source: str, seq: int) -> tuple[int, int, Publication | NotSelected | None]:
        """``(high_water, trimmed_through, entry)`` of ``source`` in one round trip: its
        marks and its entry numbered ``seq``, decoded (None: not held)."""
        check_source(source)
        check_seq(seq, "seq", low=1)
        hw, trimmed, page = self._page(source, entry_id(seq), entry_id(seq), 1)
        return hw, trimmed, self._decode_row(source, page[0]) if page else None

    def iter_range(
        self, source: str, first: int, last: int | None = None, *, page_size: int | None = None
    ) -> Iterator[Publication]:
        """``source``'s publications numbered ``first``..``last`` (inclusive), in order;
        numbers a relay's journal holds as not selected are passed over
        (:meth:`iter_entries` yields their markers too).

        ``last`` None reads through the high-water seen by the first page. Raises
        :class:`TrimmedRangeError` when ``first`` (or, on a later page, the next number) lies
        in a range retention has trimmed; a trim racing the read is detected, never skipped.
        """
        for item in self.iter_entries(source, first, last, page_size=page_size):
            if type(item) is Publication:
                yield item

    def iter_entries(
        self, source: str, first: int, last: int | None = None, *, page_size: int | None = None
    ) -> Iterator[Publication | NotSelected]:
        """:meth:`iter_range` with the not-selected markers of a relay's journal
        (:class:`~seqrepair.journal.selection.NotSelected`, a marker reaching back before
        ``first`` included) in their place."""
        return cast(Iterator[Publication | NotSelected],
                    self._iter(source, first, last, page_size, self._decode_row))

    def iter_rows(
        self, source: str, first: int, last: int | None = None, *, page_size: int | None = None
    ) -> Iterator[JournalRow | NotSelected]:
        """:meth:`iter_entries` with each publication's entry left undecoded, a
        :class:`~seqrepair.journal.format.JournalRow` (the numbering, trim and marker checks
        are the same): a reader that relays entries as they are (a source replay) decodes
        only what it must, and :meth:`JournalRow.publication` decodes and validates one in
        full. The next page is read (in a thread) while this one is taken: the reader does
        not wait for Redis at each page boundary, and holds up to two pages."""
        return cast(Iterator[JournalRow | NotSelected],
                    self._iter(source, first, last, page_size, self._row, rows=True))

    def _iter(
        self, source: str, first: int, last: int | None, page_size: int | None,
        read_row: Callable[[str, Any], Publication | JournalRow | NotSelected],
        *, rows: bool = False,
    ) -> Iterator[Publication | JournalRow | NotSelected]:
        """The entries ``first``..``last``; ``rows``: pages read by scripts.READ_ROWS, the
        next one while this one is taken (:meth:`iter_rows`)."""
        check_source(source)
        check_seq(first, "first", low=1)
        if last is not None:
            check_seq(last, "last", low=0)
        count = page_size or self.page_size
        position = first
        ahead: tuple[int, Future[tuple[int, int, list[Any]]]] | None = None
        while last is None or position <= last:
            end = entry_id(last) if last is not None else "+"
            if ahead is not None and ahead[0] == position:
                hw, trimmed, page = ahead[1].result()  # read while the last page was taken
            else:
                hw, trimmed, page = self._page(source, entry_id(position), end, count,
                                               positional=rows)
            ahead = None
            if position <= trimmed:
                raise TrimmedRangeError(
                    f"{source!r} is trimmed through {trimmed}; {position} was requested",
                    source=source,
                    trimmed_through=trimmed,
                    requested=position,
                )
            if last is None:
                last = hw
                if position > last:
                    return
            page_rows = len(page)
            if position <= hw and (not page or not page[0][0].startswith(f"{position}-")):
                marker = self._marker_at(source, position)  # a read starting inside one
                if marker is not None:
                    yield marker
                    position = marker.last + 1
                    continue
            if rows and page_rows == count and last is not None:
                ahead = self._read_ahead(source, page[-1], end, count, last)
            # Decoded one by one, each row dropped once decoded: a reader that pauses between
            # publications (a source replay waiting for credit) holds one page (two with
            # ``rows``: this one and the next, being read).
            page.reverse()
            while page:
                pub = read_row(source, page.pop())
                begins, ends = _span(pub)
                if begins != position:
                    raise JournalCorruptError(
                        f"{source!r} lacks entry {position} below its high-water",
                        source=source,
                        expected=position,
                        got=begins,
                    )
                if position > last:
                    return
                yield pub
                del pub
                position = ends + 1
            if page_rows < count:
                if position <= min(last, hw):
                    raise JournalCorruptError(
                        f"{source!r} lacks entries {position}..{min(last, hw)}",
                        source=source,
                        expected=position,
                    )
                return

    def read_range(
        self, source: str, first: int, last: int, *, limit: int | None = None
    ) -> list[Publication]:
        """At most ``limit`` publications numbered ``first``..``last`` (see :meth:`iter_range`)."""
        out: list[Publication] = []
        if limit is not None and limit < 1:
            return out
        page = self.page_size if limit is None else min(self.page_size, limit)
        for pub in self.iter_range(source, first, last, page_size=page):
            out.append(pub)
            if limit is not None and len(out) >= limit:
                break
        return out

    def read_after(self, source: str, after: int, limit: int = 1000) -> list[Publication]:
        """Up to ``limit`` publications numbered after ``after``, oldest first."""
        check_seq(after, "after")
        if after >= MAX_JOURNAL_SEQ:
            return []
        return self.read_range(source, after + 1, MAX_JOURNAL_SEQ, limit=limit)

    def latest_image(self, source: str, topic: str) -> ItemImage | None:
        """The current image of ``topic`` from ``source``'s journal, folded by ImageCache rules.

        Scans back to the item's last image (or drop), then folds forward. None when the item
        does not exist (never published, or dropped last). Raises TrimmedRangeError when the
        scan reaches trimmed numbers without finding an image: the result would be incomplete,
        and an item found nowhere may have been imaged in the trimmed numbers, so "no such
        item" cannot be said either.
        """
        check_source(source)
        if not isinstance(topic, str) or not topic:
            raise InvalidMessageError("a topic must be a non-empty string", got=topic)
        chain: list[Publication] = []
        end = "+"
        trimmed = 0
        while True:
            _, trimmed, rows = self._page(source, "-", end, self.page_size, reverse=True)
            pubs = self._decode_rows(source, rows)
            for pub in pubs:
                if pub.topic != topic or pub.ptype is PublishType.SNAPSHOT:
                    continue
                chain.append(pub)
                if pub.ptype in (PublishType.IMAGE, PublishType.DROP):
                    return self._fold(topic, chain)
            if len(rows) < self.page_size:
                break
            end = f"({rows[-1][0]}"  # the oldest entry read (a marker too)
        if trimmed:
            raise TrimmedRangeError(
                f"the last image of {topic!r} in {source!r}, if any, was trimmed "
                f"(through {trimmed})",
                source=source,
                trimmed_through=trimmed,
                requested=chain[-1].source_seq - 1 if chain else trimmed,
            )
        return self._fold(topic, chain)

    def page_back(self, source: str, through: int, count: int) -> tuple[int, list[Publication]]:
        """At most ``count`` of ``source``'s publications numbered ``through`` and below,
        newest first, with the number retention has trimmed through (what the journal no
        longer holds below them). One round trip: the bounded step of a backward scan
        (:mod:`seqrepair.journal.imagefold`)."""
        check_source(source)
        check_seq(through, "through", low=1)
        pubs: list[Publication] = []
        end = entry_id(through)
        while True:  # a relay's not-selected markers take no place: fewer is the start
            _, trimmed, rows = self._page(source, "-", end, count, reverse=True)
            pubs.extend(self._decode_rows(source, rows))
            if len(rows) < count or len(pubs) >= count:
                return trimmed, pubs[:count]
            end = f"({rows[-1][0]}"

    @staticmethod
    def _fold(topic: str, newest_first: list[Publication]) -> ItemImage | None:
        cache = ImageCache()
        for pub in reversed(newest_first):
            cache.apply(pub)
        return cache.entry(topic)

    # --- retention -----------------------------------------------------------------------

    def trim_through(self, source: str, through: int, *, now: float) -> tuple[int, int]:
        """Remove ``source``'s entries numbered <= ``through`` (capped at the high-water).

        Returns ``(trimmed_through, removed)``, ``removed`` the numbers this call trimmed (a
        packed row holding ``through`` stays whole, its numbers up to ``through`` no longer
        read). Later reads below it raise TrimmedRangeError.
        """
        check_source(source)
        check_seq(through, "through")
        with map_redis_errors("trim", source):
            done, removed = self._trim(
                keys=[stream_key(source), meta_key(source)], args=[through, repr(float(now))]
            )
        log.info("journal.trimmed", source=source, through=int(done), removed=int(removed))
        return int(done), int(removed)


__all__ = ["Journal", "JournalError", "SourceInfo"]
