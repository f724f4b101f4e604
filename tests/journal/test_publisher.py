"""Publisher: stamp, journal, and only then hand to the transport."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from seqrepair.core.errors import InvalidConfigError, InvalidMessageError
from seqrepair.core.messages import Publication
from seqrepair.journal import (
    BacklogFullError,
    EmbeddedRedis,
    Journal,
    JournalTimeoutError,
    PublicationQueuedError,
    Publisher,
)
from seqrepair.journal.errors import SequenceConflictError

pytestmark = pytest.mark.redis


class Recorder:
    """A transport that checks the journal holds each publication it is given."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.sent: list[Publication] = []

    def __call__(self, pub: Publication) -> None:
        assert self.journal.high_water(pub.source) >= pub.source_seq, "sent before journaled"
        self.sent.append(pub)


def test_synchronous_publish_is_journaled_before_sent(journal: Journal) -> None:
    transport = Recorder(journal)
    publisher = Publisher("feed.a", journal, bits=16, transport=transport, clock=lambda: 5.0)
    pub = publisher.publish("/a", {"x": 1})
    assert pub.source_seq == 1
    assert pub.timestamp == 5.0
    assert transport.sent == [pub]
    assert publisher.published_through == 1
    assert journal.read_range("feed.a", 1, 1) == [pub]


def test_batches_wait_for_flush(journal: Journal) -> None:
    transport = Recorder(journal)
    publisher = Publisher("feed.a", journal, transport=transport, batch_size=10, window=20)
    pubs = [publisher.publish("/a", {"i": i}) for i in range(25)]
    # window 20 = two batches in flight: batch 2 was sent, only batch 1's reply was read
    assert len(transport.sent) == 10
    assert publisher.pending == 15
    assert publisher.flush() == 15
    assert transport.sent == pubs
    assert publisher.pending == 0
    assert journal.high_water("feed.a") == 25


def test_restarted_publisher_continues_after_high_water(journal: Journal) -> None:
    first = Publisher("feed.a", journal, batch_size=3, window=3)
    for i in range(7):
        first.publish("/a", {"i": i})  # 6 journaled, 1 lost with the "crash"
    second = Publisher("feed.a", journal)
    assert second.published_through == 6
    assert second.publish("/a", {}).source_seq == 7


def test_bad_input_consumes_no_number(journal: Journal) -> None:
    publisher = Publisher("feed.a", journal)
    with pytest.raises(InvalidMessageError):
        publisher.publish("/a", {"x": object()})
    with pytest.raises(InvalidMessageError):
        publisher.publish("", {})
    with pytest.raises(InvalidMessageError):
        publisher.publish("/a", {"x": "\ud800"})
    assert publisher.publish("/a", {}).source_seq == 1
    for name in ("..", "}feed"):
        with pytest.raises(InvalidMessageError, match="source name"):
            Publisher(name, journal)


def test_bad_config(journal: Journal) -> None:
    with pytest.raises(InvalidConfigError):
        Publisher("feed.a", journal, batch_size=0)
    with pytest.raises(InvalidConfigError):
        Publisher("feed.a", journal, batch_size=10, window=5)


def test_redis_down_keeps_a_bounded_backlog_and_reports_nothing(
    private_server: EmbeddedRedis,
) -> None:
    journal = Journal.from_url(private_server.url, socket_timeout=1.0, socket_connect_timeout=0.5)
    sent: list[Publication] = []
    publisher = Publisher("feed.a", journal, transport=sent.append, batch_size=2, window=4)
    publisher.publish("/a", {"i": 0})
    publisher.publish("/a", {"i": 1})
    publisher.flush()
    assert [p.source_seq for p in sent] == [1, 2]
    private_server.kill()
    unavailable = 0
    queued_seqs: list[int] = []
    for attempt in range(10):
        try:
            publisher.publish("/a", {"i": attempt})
        except BacklogFullError:
            break  # the window is full: refused, no number taken
        except PublicationQueuedError as exc:
            unavailable += 1  # a full batch could not be journaled; it stays queued
            queued_seqs.append(exc.publication.source_seq)
    else:
        pytest.fail("the window never filled")
    assert unavailable >= 1
    assert all(3 <= seq <= 6 for seq in queued_seqs)
    assert publisher.pending == 4
    assert publisher.sequencer.high_water == 6
    assert publisher.published_through == 2
    assert len(sent) == 2
    private_server.start()
    assert publisher.flush() == 4
    assert [p.source_seq for p in sent] == [1, 2, 3, 4, 5, 6]
    assert journal.high_water("feed.a") == 6
    assert publisher.publish("/a", {}).source_seq == 7
    publisher.close()
    journal.close()


def test_pipelined_batches_are_handed_on_in_order(journal: Journal) -> None:
    transport = Recorder(journal)
    publisher = Publisher("feed.a", journal, transport=transport, batch_size=7, window=28)
    pubs = [publisher.publish("/a", {"i": i}) for i in range(200)]
    assert publisher.pending <= 28
    publisher.flush()
    assert transport.sent == pubs
    assert journal.read_range("feed.a", 1, 200) == pubs


class FlakyJournal(Journal):
    """Appends for real, then reports a timeout: the outcome is unknown to the publisher."""

    fail_next = False

    def append_result(self, publications: Sequence[Publication], bits: int, reply: Any) -> int:
        high_water = super().append_result(publications, bits, reply)
        if self.fail_next:
            self.fail_next = False
            raise JournalTimeoutError("timed out (after the server applied it)")
        return high_water


def test_append_of_unknown_outcome_is_resolved_by_reading_high_water(journal: Journal) -> None:
    flaky = FlakyJournal(journal.client)
    sent: list[Publication] = []
    publisher = Publisher("feed.a", flaky, transport=sent.append, batch_size=2, window=2)
    publisher.publish("/a", {})
    flaky.fail_next = True
    with pytest.raises(PublicationQueuedError) as queued:
        publisher.publish("/a", {})
    assert isinstance(queued.value.__cause__, JournalTimeoutError)
    assert queued.value.publication.source_seq == 2
    assert sent == []
    assert publisher.pending == 2
    assert publisher.flush() == 2  # held already: handed on, not appended twice
    assert [p.source_seq for p in sent] == [1, 2]
    publisher.publish("/a", {})
    publisher.publish("/a", {})
    assert [p.source_seq for p in sent] == [1, 2, 3, 4]
    assert journal.read_range("feed.a", 1, 4) == sent


def test_values_are_published_as_the_journal_holds_them_so_an_unknown_outcome_resolves(
    journal: Journal,
) -> None:
    flaky = FlakyJournal(journal.client)
    sent: list[Publication] = []
    publisher = Publisher("feed.a", flaky, transport=sent.append)
    flaky.fail_next = True
    with pytest.raises(PublicationQueuedError):
        publisher.publish("/a", {"pair": (1, 2), "by_id": {7: "x"}})
    assert publisher.flush() == 1  # the journal's copy is recognised as this publication
    assert sent[0].fields == {"pair": [1, 2], "by_id": {"7": "x"}}
    assert journal.read_range("feed.a", 1, 1) == sent  # live and replayed alike


def test_an_unknown_outcome_whose_numbers_retention_trimmed_meanwhile_counts_as_held(
    journal: Journal,
) -> None:
    flaky = FlakyJournal(journal.client)
    sent: list[Publication] = []
    publisher = Publisher("feed.a", flaky, transport=sent.append)
    publisher.publish("/a", {"i": 1})
    flaky.fail_next = True
    with pytest.raises(PublicationQueuedError):
        publisher.publish("/a", {"i": 2})
    journal.trim_through("feed.a", 2, now=100.0)  # retention ran before the next flush
    assert publisher.flush() == 1
    assert [p.source_seq for p in sent] == [1, 2]
    assert publisher.publish("/a", {"i": 3}).source_seq == 3
    assert [p.source_seq for p in sent] == [1, 2, 3]


def test_transport_failure_does_not_unpublish(journal: Journal) -> None:
    def broken(pub: Publication) -> None:
        raise RuntimeError("link down")

    publisher = Publisher("feed.a", journal, transport=broken)
    with pytest.raises(RuntimeError):
        publisher.publish("/a", {})
    assert publisher.published_through == 1
    assert publisher.pending == 0
    assert journal.high_water("feed.a") == 1


def test_a_stale_second_writer_never_reports_the_other_writers_number_as_its_own(
    journal: Journal,
) -> None:
    sent_a: list = []
    a = Publisher("feed.a", journal, transport=sent_a.append)
    b = Publisher("feed.a", journal)  # a restarted instance next to the stale one
    b.publish("/t", {"who": "B"})
    with pytest.raises(SequenceConflictError):
        a.publish("/t", {"who": "A"})  # number 1 is taken
    with pytest.raises(SequenceConflictError) as info:
        a.flush()  # the journal holds B's publication under 1, not A's
    assert (info.value.expected, info.value.got) == (2, 1)
    assert sent_a == []
    assert a.published_through == 0
    assert a.publish("/t", {"who": "A again"}).source_seq == 2  # numbering resumed after 1
    assert [p.fields["who"] for p in sent_a] == ["A again"]
    assert [p.fields["who"] for p in journal.read_range("feed.a", 1, 2)] == ["B", "A again"]


def test_a_transport_failing_during_a_flush_of_several_batches_loses_track_of_none(
    journal: Journal,
) -> None:
    sent: list[Publication] = []
    failures = iter([True])

    def transport(pub: Publication) -> None:
        if next(failures, False):
            raise RuntimeError("link down")
        sent.append(pub)

    publisher = Publisher("feed.a", journal, transport=transport, batch_size=2, window=8)
    for n in range(6):
        publisher.publish("/a", {"n": n})  # three batches in flight, no reply read yet
    with pytest.raises(RuntimeError, match="link down"):
        publisher.flush()
    assert (publisher.published_through, publisher.pending) == (6, 0)  # the journal holds 1..6
    assert sent == []  # what came after the failure in that flush is repaired, not sent live
    later = [publisher.publish("/a", {"n": n}) for n in (6, 7)]
    publisher.flush()
    assert sent == later
    assert publisher.published_through == 8


def test_an_error_reply_from_redis_leaves_the_publication_queued_and_says_so(
    journal: Journal,
) -> None:
    sent: list[Publication] = []
    publisher = Publisher("feed.a", journal, transport=sent.append)
    journal.client.config_set("maxmemory-policy", "noeviction")
    journal.client.config_set("maxmemory", 1)
    try:
        with pytest.raises(PublicationQueuedError, match="queued") as queued:
            publisher.publish("/a", {"order": 42})
    finally:
        journal.client.config_set("maxmemory", 0)
    assert "maxmemory" in str(queued.value.__cause__)
    assert queued.value.publication.source_seq == 1
    assert publisher.flush() == 1  # published once, not to be published again by the caller
    assert [p.fields["order"] for p in journal.read_range("feed.a", 1, 10)] == [42]
    assert sent == journal.read_range("feed.a", 1, 1)


def test_an_integer_timestamp_is_published_as_the_float_the_journal_holds(
    journal: Journal,
) -> None:
    nanoseconds = 1_732_000_000_123_456_789  # time.time_ns(): more digits than a float keeps
    flaky = FlakyJournal(journal.client)
    sent: list[Publication] = []
    publisher = Publisher("feed.a", flaky, transport=sent.append)
    flaky.fail_next = True
    with pytest.raises(PublicationQueuedError):
        publisher.publish("/a", {"x": 1}, timestamp=nanoseconds)
    assert publisher.flush() == 1  # the unknown outcome resolves: the journal holds it as sent
    assert sent == journal.read_range("feed.a", 1, 1)
    assert sent[0].timestamp == float(nanoseconds)
