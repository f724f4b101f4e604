"""AppendPipeline: several batches in flight, still all-or-nothing and gap-free."""

from __future__ import annotations

import pytest

from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.messages import Publication
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import EmbeddedRedis, Journal, JournalUnavailableError
from seqrepair.journal.errors import SequenceConflictError
from seqrepair.journal.pipelined import AppendPipeline

pytestmark = pytest.mark.redis


def stamp(n: int) -> list[Publication]:
    seq = SourceSequencer("feed.a", bits=16)
    return [seq.stamp("/a", {"i": i}) for i in range(n)]


def test_batches_held_in_order(journal: Journal) -> None:
    pubs = stamp(100)
    pipe = AppendPipeline(journal, 16, depth=3)
    held = []
    for offset in range(0, 100, 10):
        held += pipe.submit(pubs[offset : offset + 10])
        assert pipe.inflight <= 2
    held += pipe.drain()
    assert [hw for _, hw in held] == list(range(10, 101, 10))
    assert journal.read_range("feed.a", 1, 100) == pubs
    pipe.close()


def test_a_refused_batch_never_leaves_a_gap(journal: Journal) -> None:
    pubs = stamp(40)
    pipe = AppendPipeline(journal, 16, depth=4)
    assert pipe.submit(pubs[:10]) == []
    assert pipe.submit(pubs[20:30]) == []  # leaves a hole: will be refused, writes nothing
    assert pipe.submit(pubs[30:40]) == []  # continues the refused one: refused as well
    with pytest.raises(SequenceConflictError) as refused:
        pipe.drain()  # batch 1 is held, batch 2 refused
    assert refused.value.expected == 11
    with pytest.raises(SequenceConflictError):
        pipe.drain()
    assert pipe.inflight == 0
    assert journal.high_water("feed.a") == 10
    assert pipe.submit(pubs[10:20]) == []
    assert [hw for _, hw in pipe.drain()] == [20]
    pipe.close()
    assert journal.read_range("feed.a", 1, 40) == pubs[:20]


def test_unreachable_server_returns_the_batches_in_flight(private_server: EmbeddedRedis) -> None:
    journal = Journal.from_url(private_server.url, socket_timeout=1.0)
    pubs = stamp(30)
    pipe = AppendPipeline(journal, 16, depth=3)
    pipe.submit(pubs[:10])
    pipe.drain()
    private_server.kill()

    def push() -> None:
        for offset in (10, 20):
            pipe.submit(pubs[offset : offset + 10])
        pipe.drain()

    with pytest.raises(JournalUnavailableError):
        push()
    lost = pipe.abandon()
    assert [b[0].source_seq for b in lost] in ([11, 21], [11], [21])
    journal.close()


def test_bad_depth(journal: Journal) -> None:
    with pytest.raises(InvalidConfigError):
        AppendPipeline(journal, 16, depth=0)


def test_appends_go_by_sha_and_survive_a_flushed_script_cache(journal: Journal) -> None:
    """The script is loaded once per connection and called by its SHA1; a ``SCRIPT FLUSH``
    under a live connection (``NOSCRIPT``: nothing ran) is a lost connection to the caller,
    and the next append, on a new connection, loads it again."""
    from seqrepair.journal.pipelined import APPEND_SHA

    pubs = stamp(30)
    pipe = AppendPipeline(journal, 16, depth=2)
    pipe.submit(pubs[:10])
    assert [hw for _, hw in pipe.drain()] == [10]
    assert journal.client.script_exists(APPEND_SHA) == [True]
    journal.client.script_flush()
    pipe.submit(pubs[10:20])
    with pytest.raises(JournalUnavailableError, match="cache"):
        pipe.drain()
    assert pipe.abandon() == [pubs[10:20]]  # its outcome is the caller's to resolve
    assert journal.high_water("feed.a") == 10  # NOSCRIPT: nothing of it was written
    held = pipe.submit(pubs[10:20]) + pipe.submit(pubs[20:30]) + pipe.drain()
    assert [hw for _, hw in held] == [20, 30]
    pipe.close()
    assert journal.read_range("feed.a", 1, 30) == pubs


def test_a_journal_publisher_rides_out_a_flushed_script_cache(journal: Journal) -> None:
    from seqrepair.journal.publisher import Publisher

    sent: list[Publication] = []
    publisher = Publisher("feed.b", journal, transport=sent.append)
    first = publisher.publish("/b", {"i": 1})
    journal.client.script_flush()
    second = publisher.publish("/b", {"i": 2})  # NOSCRIPT, then again on a new connection
    publisher.close()
    assert [p.source_seq for p in sent] == [1, 2]
    assert journal.read_range("feed.b", 1, 2) == [first, second]


def test_the_ready_append_frame_is_what_redis_py_would_send(journal: Journal) -> None:
    """The prefix encoded once plus the framed envelope is byte for byte redis-py's packing
    of the same EVALSHA, for a source with non-ASCII characters too."""
    from seqrepair.journal.format import meta_key, stream_key
    from seqrepair.journal.pipelined import APPEND_SHA, append_prefix

    conn = journal.client.connection_pool.get_connection()
    try:
        for source in ("feed.a", "flux.é"):
            envelope = b"\x00\x01 envelope\r\n" * 3
            mine = append_prefix(conn.encoder.encode, source, 16)
            mine += b"$%d\r\n%s\r\n" % (len(envelope), envelope)
            theirs = b"".join(conn.pack_command(
                "EVALSHA", APPEND_SHA, 2, stream_key(source), meta_key(source), source, "16",
                envelope,
            ))  # fmt: skip
            assert mine == theirs
    finally:
        journal.client.connection_pool.release(conn)


def test_appends_of_two_sources_on_one_pipeline(journal: Journal) -> None:
    """Each source gets its own ready prefix: neither's publications land in the other's."""
    a = stamp(5)
    b = [SourceSequencer("feed.b", bits=16).stamp("/b", {"i": 0})]
    pipe = AppendPipeline(journal, 16, depth=2)
    held = pipe.submit(a[:3]) + pipe.submit(b) + pipe.submit(a[3:]) + pipe.drain()
    assert [hw for _, hw in held] == [3, 1, 5]
    assert journal.read_range("feed.a", 1, 5) == a
    assert journal.read_range("feed.b", 1, 1) == b
    pipe.close()


def test_a_client_health_check_never_reads_an_append_reply(redis_server: EmbeddedRedis) -> None:
    """With ``health_check_interval`` set, redis-py would PING before a command once the
    interval passed and read the next reply as its PONG: with appends in flight that is an
    append's reply (a ConnectionError, the batches in flight abandoned). The pipeline sends
    without the check."""
    import time

    journal = Journal.from_url(redis_server.url, health_check_interval=0.01)
    journal.client.flushall()
    pubs = stamp(30)
    pipe = AppendPipeline(journal, 16, depth=3)
    held = pipe.submit(pubs[:10])
    time.sleep(0.05)  # past the interval: redis-py's check would run at the next send
    held += pipe.submit(pubs[10:20])
    time.sleep(0.05)
    held += pipe.submit(pubs[20:30])
    held += pipe.drain()
    assert [hw for _, hw in held] == [10, 20, 30]
    assert journal.read_range("feed.a", 1, 30) == pubs
    pipe.close()
    journal.close()
