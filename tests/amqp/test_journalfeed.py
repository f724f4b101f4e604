"""The journal's append announcements: the component's journal check without a round trip,
never vouching for more than the journal holds (a private redis-server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from seqrepair.amqp.component import journalfeed
from seqrepair.amqp.component.journalfeed import RETRY, JournaledFeed, journal_feed
from seqrepair.amqp.component.journalfeed import _hand_reader as hand_reader
from seqrepair.amqp.component.journalport import RedisJournalPort
from seqrepair.core.messages import Publication
from seqrepair.journal import EmbeddedRedis, Journal
from seqrepair.journal.scripts import JOURNALED_CHANNEL


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    data: Path = tmp_path_factory.mktemp("feed-redis")
    with EmbeddedRedis(data_dir=data, appendfsync="no") as srv:
        yield srv


@pytest.fixture
def journal(server: EmbeddedRedis) -> Iterator[Journal]:
    client = redis.Redis.from_url(server.url)
    client.flushall()
    with Journal(client) as j:
        yield j


@pytest.fixture(autouse=True, params=["by hand", "redis-py"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with the announcements read by hand (a plain socket) and by redis-py's
    ``get_message`` (TLS, or a connection not as expected)."""
    if request.param == "redis-py":
        monkeypatch.setattr(journalfeed, "_hand_reader", lambda pubsub: None)
    return str(request.param)


class Counting:
    """The journal, counting the high-water reads the port makes (the round trip the feed
    saves) and the appends."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.reads = 0
        self.appends = 0

    def high_water(self, source: str) -> int:
        self.reads += 1
        return self.journal.high_water(source)

    def append(self, *args: Any, **kwargs: Any) -> int:
        self.appends += 1
        return self.journal.append(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.journal, name)


def pubs(first: int, last: int, source: str = "s") -> list[Publication]:
    return [Publication("/t", source, i, "update", {"i": i}) for i in range(first, last + 1)]


def journaled_first(journal: Journal, batch: list[Publication]) -> None:
    """A publisher's append, then a round trip: Redis has since passed through its event loop,
    which writes the announcement to the subscription's socket (in the component, the
    publisher's transfer to it is that time)."""
    journal.append(batch, 32)
    journal.client.ping()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_behind_a_journaling_publisher_the_announcements_stand_for_the_high_water_reads(
    journal: Journal,
) -> None:
    counting = Counting(journal)
    feed = journal_feed(journal)
    assert feed is not None
    port = RedisJournalPort(counting, feed=feed)
    journal.append(pubs(1, 4), 32)  # the publisher journals first
    port.append(pubs(1, 4))  # held: the high-water read first
    journaled_first(journal, pubs(5, 8))
    port.append(pubs(5, 8))  # refused as held: the port learns "s" journals first
    assert port.held("s") == 8
    assert counting.appends == 1
    reads = counting.reads
    for first in range(9, 50, 5):
        journaled_first(journal, pubs(first, first + 4))
        port.append(pubs(first, first + 4))
        assert port.held("s") == first + 4
    assert counting.reads == reads  # no high-water read: every run was announced
    assert counting.appends == 1  # nothing journaled twice
    assert journal.high_water("s") == 53
    assert [p.source_seq for p in journal.read_range("s", 1, 53)] == list(range(1, 54))
    assert feed.heard >= 9
    feed.close()


def test_an_announcement_short_of_the_run_is_not_taken_for_it(journal: Journal) -> None:
    """The publisher journaled 1..8; the component gets 1..12 (9..12 never journaled by it):
    the port reads the high-water and appends 9..12 itself, so nothing goes out that no
    journal holds."""
    counting = Counting(journal)
    feed = JournaledFeed(journal.client.pubsub)
    port = RedisJournalPort(counting, feed=feed)
    journal.append(pubs(1, 4), 32)
    port.append(pubs(1, 4))
    journaled_first(journal, pubs(5, 6))
    port.append(pubs(5, 6))  # learns that "s" journals first
    journaled_first(journal, pubs(7, 8))
    reads = counting.reads
    port.append(pubs(7, 12))
    assert counting.reads == reads + 1  # announced 8, short of 12: read
    assert port.held("s") == 12
    assert [p.source_seq for p in journal.read_range("s", 1, 12)] == list(range(1, 13))
    feed.close()


def test_a_forged_or_malformed_announcement_and_other_sources_are_passed_over(
    journal: Journal,
) -> None:
    counting = Counting(journal)
    feed = JournaledFeed(journal.client.pubsub)
    port = RedisJournalPort(counting, feed=feed)
    journal.append(pubs(1, 2), 32)
    port.append(pubs(1, 2))
    journaled_first(journal, pubs(3, 3))
    port.append(pubs(3, 3))  # "s" is known to journal first from here
    journal.client.publish(JOURNALED_CHANNEL, "many s")
    journal.client.publish(JOURNALED_CHANNEL, "")
    journal.client.publish(JOURNALED_CHANNEL, "999 other")  # a source the port never asked of
    journal.client.ping()
    assert feed.through("s", {"s"}) == 3  # the forged ones changed nothing
    assert "other" not in feed._through  # nothing kept for sources not asked about
    journaled_first(journal, pubs(4, 4))
    port.append(pubs(4, 4))
    assert port.held("s") == 4
    feed.close()


def test_a_lost_subscription_vouches_for_nothing_until_subscribed_again(journal: Journal) -> None:
    clock = Clock()
    counting = Counting(journal)
    feed = JournaledFeed(journal.client.pubsub, clock=clock)
    port = RedisJournalPort(counting, feed=feed)
    journal.append(pubs(1, 2), 32)
    port.append(pubs(1, 2))
    journaled_first(journal, pubs(3, 4))
    port.append(pubs(3, 4))  # "s" journals first
    assert feed.through("s", {"s"}) == 4
    journal.client.client_kill_filter(_type="pubsub")  # the subscription's connection is lost
    journal.append(pubs(5, 6), 32)
    assert feed.through("s", {"s"}) is None  # the failure is seen: everything heard dropped
    reads = counting.reads
    port.append(pubs(5, 6))
    assert counting.reads == reads + 1
    assert port.held("s") == 6
    assert feed.through("s", {"s"}) is None  # not tried again before RETRY
    clock.now += RETRY
    assert feed.through("s", {"s"}) is None  # subscribed again: nothing heard since
    journaled_first(journal, pubs(7, 8))
    reads = counting.reads
    port.append(pubs(7, 8))
    assert counting.reads == reads  # announced on the new subscription
    assert port.held("s") == 8
    feed.close()


def test_no_feed_for_a_journal_without_a_redis_client() -> None:
    assert journal_feed(object()) is None


def test_the_timer_takes_what_piles_up_without_subscribing_again(journal: Journal) -> None:
    clock = Clock()
    feed = JournaledFeed(journal.client.pubsub, clock=clock)
    port = RedisJournalPort(journal, feed=feed)
    journal.append(pubs(1, 2), 32)
    port.append(pubs(1, 2))
    journaled_first(journal, pubs(3, 4))
    port.append(pubs(3, 4))  # "s" journals first
    for first in range(5, 105, 2):
        journaled_first(journal, pubs(first, first + 1))
    port.listen()  # on the component's timer
    assert feed._through == {"s": 104}
    journal.client.client_kill_filter(_type="pubsub")
    port.listen()  # the failure is seen; nothing vouched for
    assert feed._through == {}
    clock.now += 10 * RETRY
    port.listen()  # the timer never subscribes again (a hanging Redis would hold the loop)
    assert feed._pubsub is None
    assert feed.through("s", {"s"}) is None  # the port's check does, past the retry delay
    assert feed._pubsub is not None


def test_a_plain_subscription_is_read_by_hand_and_a_burst_is_taken_whole(
    journal: Journal, reading: str
) -> None:
    """Thousands of announcements waiting (more than one socket read) are all taken, in
    order, the last one standing; on a plain socket by hand."""
    feed = JournaledFeed(journal.client.pubsub)
    assert (feed._reader is not None) == (reading == "by hand")
    assert feed.through("s", {"s"}) is None  # confirmation not read yet, or nothing heard
    pipe = journal.client.pipeline(transaction=False)
    for n in range(1, 5001):
        pipe.publish(JOURNALED_CHANNEL, f"{n} s")
        pipe.publish(JOURNALED_CHANNEL, f"{n} other")
    pipe.execute()
    journal.client.ping()
    assert feed.through("s", {"s"}) == 5000
    assert feed.heard == 5000
    assert "other" not in feed._through
    feed.close()


def test_a_tls_subscription_or_one_with_bytes_held_by_redis_py_stays_with_redis_py() -> None:
    """Over TLS (a non-blocking recv of an SSL socket is another matter) and when redis-py's
    buffer holds bytes it read, the feed keeps redis-py's get_message."""
    import socket
    import ssl
    from types import SimpleNamespace

    def pubsub_over(sock: socket.socket, unread: int) -> Any:
        buffer = SimpleNamespace(unread_bytes=lambda: unread)
        return SimpleNamespace(connection=SimpleNamespace(_sock=sock,
                                                          _parser=SimpleNamespace(_buffer=buffer)))

    plain = socket.socket()
    tls = ssl.create_default_context().wrap_socket(socket.socket(), do_handshake_on_connect=False,
                                                   server_hostname="localhost")
    with plain, tls:
        assert hand_reader(pubsub_over(tls, 0)) is None
        assert hand_reader(pubsub_over(plain, 5)) is None
        assert hand_reader(SimpleNamespace()) is None
        assert hand_reader(pubsub_over(plain, 0)) is not None
        assert plain.gettimeout() == 0.0  # non-blocking: never waits in the event loop
