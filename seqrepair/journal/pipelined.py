"""Appends with several batches in flight on one connection (client encodes while Redis writes).

``AppendPipeline(journal, bits, depth=4)``: :meth:`~AppendPipeline.submit` sends a batch
without waiting and returns the batches whose replies have been read (oldest first, once
``depth`` are in flight); :meth:`~AppendPipeline.drain` waits for the rest. Each batch is still
one atomic script call that writes only if it starts at the high-water + 1, so the journal
never has a gap: when a batch is refused, the later ones in flight that continue it are refused
too, without writing. A refusal is raised when its reply is read (the batch is then dropped
from the pipeline; the caller still holds it).

On any error the connection is discarded and the batches still in flight are returned by
:meth:`~AppendPipeline.abandon` so the caller can resolve them (re-read the high-water).

The script goes by its SHA1 (``EVALSHA``), loaded once per connection (``SCRIPT LOAD``):
sending its ~3.7 KB text with every append (``EVAL``) cost the client the bytes and Redis a
SHA1 of them per call, which at one publication per append was most of the call. A script
cache emptied under a live connection (``SCRIPT FLUSH``) answers ``NOSCRIPT`` without running
anything: that is raised as :class:`JournalUnavailableError` with the connection discarded, so
the caller re-reads the high-water and appends again on a new connection, which loads it.

The ``EVALSHA`` is written as one ready RESP frame: every part but the envelope is the same for
a source and bit width, so it is encoded once per connection (:func:`append_prefix`) and each
append only frames its envelope. redis-py's generic packer (an encode and length per argument)
was a quarter of the publishing thread's CPU at one publication per append. Its replies are
read by hand too (:class:`~seqrepair.journal.resp.ReplyReader`: what redis-py's parser returns
and raises for the same bytes, without its line-by-line socket buffer).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.messages import Publication
from seqrepair.journal import scripts
from seqrepair.journal.errors import (
    JournalError,
    JournalResponseError,
    JournalUnavailableError,
    map_redis_errors,
)
from seqrepair.journal.format import meta_key, stream_key
from seqrepair.journal.resp import ReplyReader

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

Batch = Sequence[Publication]

APPEND_SHA = hashlib.sha1(scripts.APPEND.encode()).hexdigest()
"""What Redis names the append script by in its script cache."""


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def append_prefix(encode: Any, source: str, bits: int) -> bytes:
    """The RESP frame of ``EVALSHA <append> 2 <stream> <meta> <source> <bits>`` that is the same
    for every append of ``source``, up to (not including) the envelope, the command's last
    argument; ``encode`` is the connection's encoder (``str`` -> ``bytes``, as redis-py sends)."""
    parts = ("EVALSHA", APPEND_SHA, "2", stream_key(source), meta_key(source), source, str(bits))
    return b"*%d\r\n" % (len(parts) + 1) + b"".join(_bulk(encode(part)) for part in parts)


class AppendPipeline:
    """Up to ``depth`` append batches in flight on one dedicated connection."""

    def __init__(self, journal: Journal, bits: int, *, depth: int = 4) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise InvalidConfigError("depth must be a positive integer", got=depth)
        self.journal = journal
        self.bits = bits
        self.depth = depth
        self._conn: Any = None
        self._reader: ReplyReader | None = None  # reads every reply on _conn once made
        self._pool: Any = None
        self._inflight: deque[Batch] = deque()
        self._prefixes: dict[str, bytes] = {}  # per source, for this connection's encoder

    @property
    def inflight(self) -> int:
        """Batches sent whose replies have not been read."""
        return len(self._inflight)

    def _connection(self, source: str) -> Any:
        if self._conn is None:
            with map_redis_errors("append", source):
                client: Any = self.journal.client  # redis.Redis or RedisCluster
                pool = getattr(client, "connection_pool", None)
                if pool is None:  # Redis Cluster: the node owning the source's hash slot
                    node = client.get_node_from_key(stream_key(source))
                    pool = client.get_redis_connection(node).connection_pool
                conn = pool.get_connection()
                try:
                    conn.send_command("SCRIPT", "LOAD", scripts.APPEND)
                    conn.read_response()
                except BaseException:
                    conn.disconnect()
                    pool.release(conn)
                    raise
                self._conn = conn
                sock = getattr(conn, "_sock", None)  # redis-py's; else its own reads
                self._reader = ReplyReader(sock) if sock is not None else None
                self._pool = pool
                self._prefixes.clear()
        return self._conn

    def submit(self, batch: Batch) -> list[tuple[Batch, int]]:
        """Send ``batch``; return ``(batch, high_water)`` for every batch now known held."""
        source, envelope = self.journal.prepare_append(batch, self.bits)
        conn = self._connection(source)
        self._inflight.append(batch)  # from here its outcome is unknown until a reply is read
        try:
            with map_redis_errors("append", source):
                prefix = self._prefixes.get(source)
                if prefix is None:
                    prefix = append_prefix(conn.encoder.encode, source, self.bits)
                    self._prefixes[source] = prefix
                conn.send_packed_command(  # a list: it writes each item of what it is given
                    [b"%s$%d\r\n%s\r\n" % (prefix, len(envelope), envelope)],
                    # no PING of its own (a client's health_check_interval): its PONG would
                    # be read as it comes, behind the replies of the appends in flight
                    check_health=False,
                )
        except JournalError:
            self._discard()
            raise
        held = []
        while len(self._inflight) >= self.depth:
            held.append(self._read_one())
        return held

    def drain(self) -> list[tuple[Batch, int]]:
        """Wait for every batch in flight; return them with their high-waters."""
        held = []
        while self._inflight:
            held.append(self._read_one())
        return held

    def _read_one(self) -> tuple[Batch, int]:
        from redis.exceptions import NoScriptError  # here: see map_redis_errors

        batch = self._inflight.popleft()
        try:
            if self._conn is None:
                raise JournalUnavailableError("the append connection was lost", operation="append")
            with map_redis_errors("append", batch[0].source):
                try:
                    reader = self._reader
                    reply = self._conn.read_response() if reader is None else reader.read()
                except NoScriptError as exc:  # flushed under us: nothing ran, load it again
                    raise JournalUnavailableError(
                        f"the append script left Redis's cache ({exc}); appending again on a "
                        f"new connection", source=batch[0].source, operation="append",
                    ) from exc
        except JournalResponseError:
            raise  # answered with an error: nothing of this batch was written
        except JournalError:
            self._inflight.appendleft(batch)
            self._discard()
            raise
        return batch, self.journal.append_result(batch, self.bits, reply)

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        self._reader = None
        if conn is not None:
            conn.disconnect()
            self._pool.release(conn)

    def abandon(self) -> list[Batch]:
        """Drop the connection; return the batches in flight (their outcome is unknown)."""
        lost = list(self._inflight)
        self._inflight.clear()
        self._discard()
        return lost

    def close(self) -> None:
        """Wait for what is in flight and give the connection back."""
        try:
            self.drain()
        finally:
            self.abandon()
