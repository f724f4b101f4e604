"""A journaling publisher tells exactly what a Redis outage left unpublished, and what one
journaled but never sent is published all the same.

Real parts: a real redis-server is stopped under a :class:`Publisher` that journals its own
publications, then started again on the same port and data. A publish that stamped a
publication but could not journal it raises :class:`PublicationQueuedError` naming it (so the
application does not publish it again), ``flush`` says False while anything stamped is not yet
journaled, and once Redis is back ``flush`` journals and sends it: every publication is
journaled once and reaches a subscriber once, in order. A publisher that dies between
journaling and sending leaves publications only the journal holds: when its link ends the
component fans them out, though the source never publishes again. One without a journal that
restarts from 1 is refused and told where its source stands, rather than have its publications
taken as resends and lost.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.errors import PublishRejectedError
from seqrepair.core.messages import Publication
from seqrepair.journal.errors import PublicationQueuedError
from seqrepair.journal.journal import Journal
from seqrepair.journal.publisher import Publisher as JournalPublisher
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, _env, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPIC = "/weather/wind/LEMD"


@attrs.frozen
class Watched:
    server: EmbeddedRedis
    url: str  # the component's
    subscriber: Subscriber
    got: list[Publication]

    def numbers(self) -> list[int]:
        return [p.source_seq for p in self.got]


@contextlib.contextmanager
def watched(tmp_path: Path) -> Iterator[Watched]:
    """A real redis-server, a component on it and a subscriber to everything; all stopped
    after."""
    server = EmbeddedRedis(data_dir=tmp_path / "redis", appendfsync="always").start()
    comp = ComponentProcess(server.url, tmp_path, "--heartbeat", "0.2").start()
    got: list[Publication] = []
    try:
        with Subscriber(comp.url, "/weather/#", link_name="watch", heartbeat_interval=0.2,
                        on_publication=got.append) as sub:
            assert sub.wait_connected(20)
            yield Watched(server, comp.url, sub, got)
    finally:
        comp.stop()
        server.stop()


def test_what_an_outage_leaves_stamped_is_named_then_published_once_when_redis_is_back(
    tmp_path: Path,
) -> None:
    with watched(tmp_path) as w:
        with Publisher(w.url, "feed.j", journal=Journal.from_url(w.server.url)) as publisher:
            publisher.publish(TOPIC, {"n": 1})
            assert publisher.flush(20)
            w.server.stop()
            with pytest.raises(PublicationQueuedError) as one:
                publisher.publish(TOPIC, {"n": 2})
            assert [p.fields["n"] for p in one.value.stamped] == [2]
            with pytest.raises(PublicationQueuedError) as many:
                publisher.publish_many([(TOPIC, {"n": n}, "update") for n in (3, 4, 5)])
            assert [p.source_seq for p in many.value.stamped] == [3, 4, 5]
            assert publisher.flush(1) is False  # stamped, not journaled: not published
            w.server.start()
            assert publisher.flush(30)
            assert wait_for(lambda: len(w.got) >= 5, 30)
        journal = Journal.from_url(w.server.url)
        assert [p.fields["n"] for p in journal.read_range("feed.j", 1, 5)] == [1, 2, 3, 4, 5]
        assert journal.high_water("feed.j") == 5
        assert [p.fields["n"] for p in w.got] == [1, 2, 3, 4, 5]


def test_what_a_publisher_journaled_and_never_sent_reaches_subscribers_when_it_goes(
    tmp_path: Path,
) -> None:
    with watched(tmp_path) as w:
        journal = Journal.from_url(w.server.url)
        with Publisher(w.url, "feed.d", journal=journal) as publisher:
            publisher.publish_many([(TOPIC, {"n": n}, "update") for n in range(100)])
            assert publisher.flush(30)
            assert wait_for(lambda: len(w.got) >= 100, 30)
            # its last act: 101..105 journaled, and it is gone before sending them
            with JournalPublisher("feed.d", Journal.from_url(w.server.url)) as last:
                for n in range(100, 105):
                    last.publish(TOPIC, {"n": n})
        assert wait_for(lambda: len(w.got) >= 105, 30)  # the source stays silent
        assert w.numbers() == list(range(1, 106))
        assert w.subscriber.stats().unrecoverable == 0


def test_a_publisher_without_a_journal_restarted_after_the_high_water_goes_on(
    tmp_path: Path,
) -> None:
    # without a journal of its own it must be told where its source stands when it restarts
    with watched(tmp_path) as w:
        for start_after in (0, 50):
            with Publisher(w.url, "feed.n", start_after=start_after) as publisher:
                publisher.publish_many([(TOPIC, {"n": n}, "update") for n in range(50)])
                assert publisher.flush(30)
        assert wait_for(lambda: len(w.got) >= 100, 30)
        assert w.numbers() == list(range(1, 101))
        assert Journal.from_url(w.server.url).high_water("feed.n") == 100


def test_a_publisher_without_a_journal_restarted_from_one_is_stopped_and_told_where_to_go_on(
    tmp_path: Path,
) -> None:
    with watched(tmp_path) as w:
        with Publisher(w.url, "feed.r") as first:
            first.publish_many([(TOPIC, {"n": n}, "update") for n in range(50)])
            assert first.flush(30)
        with Publisher(w.url, "feed.r") as forgetful:  # forgot where its source stands
            forgetful.publish_many([(TOPIC, {"n": n}, "update") for n in range(50, 60)])
            assert forgetful.flush(30) is False  # refused: not lost as duplicates
        error = forgetful.error
        assert isinstance(error, PublishRejectedError)
        assert (error.condition, error.expected, error.got) == ("amqp:precondition-failed", 51, 1)
        assert (error.first, error.last, forgetful.rejected) == (1, 10, 10)
        assert forgetful.rejection is error
        with Publisher(w.url, "feed.r", start_after=error.expected - 1) as resumed:
            resumed.publish_many([(TOPIC, {"n": n}, "update") for n in range(50, 60)])
            assert resumed.flush(30)
        assert wait_for(lambda: len(w.got) >= 60, 30)
        assert [p.fields["n"] for p in w.got] == list(range(60))
        assert w.numbers() == list(range(1, 61))


def test_seqrepair_publish_restarted_without_a_journal_says_how_to_go_on(tmp_path: Path) -> None:
    def publish(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "seqrepair.cli", "publish", "--url", w.url, "--source",
             "feed.cli", "--topics", TOPIC, "--count", "5", *extra],
            env=_env(), capture_output=True, text=True, timeout=120, check=False,
        )

    with watched(tmp_path) as w:
        assert publish().returncode == 0
        again = publish()
        resumed = publish("--start-after", "5")
        assert wait_for(lambda: len(w.got) >= 10, 30)
        assert w.numbers() == list(range(1, 11))

    assert again.returncode == 1, again.stderr
    assert "amqp:precondition-failed" not in again.stdout
    assert "--start-after 5" in again.stderr, again.stderr
    assert json.loads(again.stdout)["rejected"] == 5
    assert resumed.returncode == 0, resumed.stderr
