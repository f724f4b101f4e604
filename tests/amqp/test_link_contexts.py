"""Link contexts over AMQP: epochs, resumption, lost reset frames and pausing.

The component names each link context with an epoch in its attach reply (and in SUBSCRIPTION
ACTIVE after a pause). A subscriber resumes only the context it knows; any other attach starts
a new context at link number 0, and the subscriber learns of it from the reply even when the
reset frame itself never arrives (``serve --drop-reset-frames``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from proton import symbol
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS
from seqrepair.core.events import HeartbeatOverdue
from seqrepair.core.messages import Heartbeat, Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

EPOCH = symbol("seqrepair-epoch")
RESUME = symbol("seqrepair-resume")
START = symbol("seqrepair-start-after")


class _Props(LinkOption):
    def __init__(self, props: dict[symbol, Any]) -> None:
        self.props = props

    def apply(self, link: Any) -> None:
        link.properties = self.props


def attach(url: str, name: str, props: dict[symbol, Any],
           identity: dict[str, Any] | None = None) -> tuple[Any, Any, str]:
    """A plain proton receiver on ``/weather/#`` (connected with ``identity``'s keywords,
    :func:`tests.amqp.principals.amqp_identity`); returns it, its connection and its epoch."""
    conn = BlockingConnection(url, timeout=10, **(identity or {}))
    receiver = conn.create_receiver("/weather/#", name=name, credit=10, options=_Props(props))
    epoch = {str(k): v for k, v in dict(receiver.link.remote_properties or {}).items()}
    return receiver, conn, str(epoch["seqrepair-epoch"])


def drain(receiver: Any) -> None:
    """Read until the link ends (LinkDetached) or stays silent (proton's Timeout)."""
    while True:
        receiver.receive(timeout=5)


def first_frame(receiver: Any) -> Publication | Heartbeat:
    (frame,) = Decoder(link_bits=16).decode(receiver.receive(timeout=10))
    assert isinstance(frame, Publication | Heartbeat)
    return frame


def test_attach_reply_names_the_context_and_only_that_epoch_resumes_it(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    receiver, conn, epoch = attach(comp.url, "ctx", {})
    assert first_frame(receiver).link_seq == 1  # a new subscriber's link starts at 1
    conn.close()

    receiver, conn, resumed = attach(comp.url, "ctx", {RESUME: True, EPOCH: epoch})
    assert resumed == epoch
    assert first_frame(receiver).link_seq > 1  # the numbering goes on
    conn.close()

    receiver, conn, fresh = attach(comp.url, "ctx", {RESUME: True, EPOCH: "not-this-one"})
    assert fresh != epoch
    reset = first_frame(receiver)
    assert isinstance(reset, Heartbeat)
    assert reset.link_seq == 0  # a context the subscriber does not know starts at 0
    conn.close()


def publish_rows(first: int, n: int) -> list[tuple[str, dict[str, Any], str, str | None]]:
    topics = ("/weather/wind/LEMD", "/weather/rain/LFPG")
    return [(topics[i % 2], {"n": i, "gust": None}, "update", None)
            for i in range(first, first + n)]


class Feed:
    """A journaling publisher and every row it was given, in order."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.rows: list[tuple[str, dict[str, Any], str, str | None]] = []

    def publish(self, n: int) -> None:
        batch = publish_rows(len(self.rows), n)
        self.rows.extend(batch)
        self.publisher.publish_many(batch)

    def across_a_restart(self, comp: ComponentProcess) -> dict[str, list[int]]:
        """400 publications, the component killed (SIGKILL), 200 journaled while it is down,
        it restarted, 400 more; returns the source numbers that subscribers of ``/weather/#``
        ("all") and ``/weather/wind/*`` ("wind") are entitled to, in order."""
        self.publish(400)
        assert self.publisher.flush(30)
        comp.kill()
        self.publish(200)  # journaled while the component is down
        comp.start()
        self.publish(400)
        assert self.publisher.flush(60)
        return {
            "all": list(range(1, len(self.rows) + 1)),
            "wind": [i + 1 for i, row in enumerate(self.rows)
                     if row[0].startswith("/weather/wind/")],
        }


def test_a_restart_whose_reset_frames_are_all_lost_still_delivers_everything_once(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2", "--drop-rate", "0.02", "--drop-seed", "3",
                     "--drop-reset-frames")
    got: dict[str, list[int]] = {"all": [], "wind": []}
    with contextlib.ExitStack() as running:
        subs = {
            name: running.enter_context(
                Subscriber(comp.url, address, link_name=f"lost-reset-{name}",
                           heartbeat_interval=0.2,
                           on_publication=lambda p, name=name: got[name].append(p.source_seq))
            )
            for name, address in (("all", "/weather/#"), ("wind", "/weather/wind/*"))
        }
        for sub in subs.values():
            assert sub.connected.wait(10)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.r", journal=Journal.from_url(redis_url))
        )
        expected = Feed(publisher).across_a_restart(comp)
        done = wait_for(lambda: all(len(got[k]) >= len(expected[k]) for k in got), 60)
        time.sleep(0.5)  # a duplicate would arrive now
    assert done, ({k: sub.stats() for k, sub in subs.items()}, comp.log_text()[-4000:])
    assert got == expected
    for sub in subs.values():
        report = sub.stats()
        assert report.resets == 1  # announced by the attach reply: no reset frame came
        assert report.unrecoverable == 0


def test_a_slow_subscriber_is_paused_and_catches_up_while_a_fast_one_is_never_paused(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    # 20 credits of at most 64 publications (1,280) cannot take 2,000: the slow link's
    # queue passes --max-pending and it is paused (at 256 per transfer it never would be)
    comp = component("--heartbeat", "0.2", "--max-pending", "400", "--drop-reset-frames",
                     "--max-batch", "64")
    fast: list[int] = []
    slow: list[int] = []
    slow_overdue: list[HeartbeatOverdue] = []

    def slow_consumer(publication: Publication) -> None:
        if len(slow) < 50:
            time.sleep(0.02)  # blocks the subscriber's thread: no credit goes back meanwhile
        slow.append(publication.source_seq)

    with contextlib.ExitStack() as running:
        subs = [
            running.enter_context(
                Subscriber(comp.url, "/weather/#", link_name="fast", heartbeat_interval=0.2,
                           credit=200, on_publication=lambda p: fast.append(p.source_seq))
            ),
            running.enter_context(
                Subscriber(comp.url, "/weather/#", link_name="slow", heartbeat_interval=0.2,
                           credit=20, on_publication=slow_consumer,
                           on_event=lambda e: slow_overdue.extend(
                               [e] if isinstance(e, HeartbeatOverdue) else []))
            ),
        ]
        for sub in subs:
            assert sub.connected.wait(10)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.p", journal=Journal.from_url(redis_url))
        )
        publisher.publish_many(publish_rows(0, 2000))
        assert publisher.flush(60)
        assert wait_for(lambda: len(fast) >= 2000 and len(slow) >= 2000, 90)
        time.sleep(0.5)
    expected = list(range(1, 2001))
    assert fast == expected
    assert slow == expected
    fast_report, slow_report = (sub.stats() for sub in subs)
    assert fast_report.paused == 0
    assert slow_report.paused >= 1
    assert slow_report.resets >= 1  # resumed by a reset it learnt from SUBSCRIPTION ACTIVE
    assert slow_report.unrecoverable == 0
    # the catch-up is the source replay after each resume, nothing else: no link gap. A link
    # request is only ever an overdue probe (a stall of this loaded machine, 0.6 s at
    # --heartbeat 0.2; the application's own hold is no silence, see
    # test_slow_application.py), a duplicate only a probe's answer
    assert slow_report.gaps_detected == 0
    assert slow_report.requests_sent == len(slow_overdue), (slow_report, slow_overdue)
    assert slow_report.duplicates <= slow_report.requests_sent


def test_a_catch_up_longer_than_the_max_gap_range_is_replayed_in_pieces(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    # the defaults' ratio (max-pending 20,000 over max-gap-range 10,000), scaled down: a paused
    # link owes more than one replay may read, so the replay goes on in pieces
    comp = component("--heartbeat", "0.2", "--max-pending", "400", "--max-gap-range", "150",
                     "--drop-reset-frames", "--max-batch", "64")
    slow: list[int] = []

    def slow_consumer(publication: Publication) -> None:
        if len(slow) < 50:
            time.sleep(0.02)
        slow.append(publication.source_seq)

    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(comp.url, "/weather/#", link_name="slow", heartbeat_interval=0.2,
                       credit=20, on_publication=slow_consumer)
        )
        assert sub.connected.wait(10)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.p", journal=Journal.from_url(redis_url))
        )
        publisher.publish_many(publish_rows(0, 2000))
        assert publisher.flush(60)
        assert wait_for(lambda: len(slow) >= 2000, 60), sub.stats()
        time.sleep(0.5)
    assert slow == list(range(1, 2001))
    report = sub.stats()
    assert report.paused >= 1
    assert report.source_continued >= 1
    assert (report.unrecoverable, sub.unrecoverable) == (0, [])


def test_a_subscriber_that_delivered_nothing_before_the_restart_gets_all_since_it_subscribed(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2", "--drop-reset-frames")
    got: list[int] = []
    with contextlib.ExitStack() as running:
        publisher = running.enter_context(
            Publisher(comp.url, "feed.h", journal=Journal.from_url(redis_url))
        )
        feed = Feed(publisher)
        feed.publish(100)  # history from before the subscription: not for this subscriber
        assert publisher.flush(30)
        sub = running.enter_context(
            Subscriber(comp.url, "/weather/#", link_name="late", heartbeat_interval=0.2,
                       on_publication=lambda p: got.append(p.source_seq))
        )
        assert sub.connected.wait(10)
        comp.kill()  # before the subscriber has delivered anything of feed.h
        feed.publish(300)
        comp.start()
        assert publisher.flush(60)
        assert wait_for(lambda: len(got) >= 300, 30)
        time.sleep(0.5)
    assert got == list(range(101, 401))
    assert sub.stats().resets == 1


@pytest.mark.parametrize("start", ["not a map", {"feed.a": -1}, {"feed.a": "x"}])
def test_a_malformed_start_after_is_refused_and_the_component_keeps_serving(
    component: Callable[..., ComponentProcess], start: Any
) -> None:
    comp = component("--heartbeat", "0.2")
    with pytest.raises(LinkDetached) as refused:
        attach(comp.url, "bad-start", {RESUME: True, START: start})
    assert "amqp:invalid-field" in str(refused.value)
    assert "seqrepair-start-after" in str(refused.value)
    receiver, conn, _ = attach(comp.url, "good", {})
    assert first_frame(receiver).link_seq == 1
    conn.close()


@pytest.mark.parametrize("epoch", ["own", "stale"])
def test_a_link_name_attached_on_another_connection_detaches_the_first(
    component: Callable[..., ComponentProcess], epoch: str
) -> None:
    # one principal (anonymous) on both connections: another's attach would be refused
    # (test_authz.py)
    comp = component("--heartbeat", "0.2")
    first, first_conn, own = attach(comp.url, "twice", {})
    second, second_conn, _ = attach(
        comp.url, "twice", {RESUME: True, EPOCH: own if epoch == "own" else "stale"})
    with pytest.raises(LinkDetached, match="amqp:link:stolen"):
        drain(first)
    assert isinstance(first_frame(second), Publication | Heartbeat)  # the second one is served
    second_conn.close()
    first_conn.close()



def frames_of(receiver: Any, until: Callable[[Any], bool]) -> list[Any]:
    """Decoded frames from ``receiver`` up to the first that ``until`` accepts."""
    decoder, got = Decoder(link_bits=16), []
    while not got or not until(got[-1]):
        got.extend(decoder.decode(receiver.receive(timeout=10)))
    return got


@pytest.mark.parametrize("link_through", [0, None])
def test_a_replay_stops_where_the_new_link_context_took_over(
    component: Callable[..., ComponentProcess], redis_url: str, link_through: int | None
) -> None:
    """A subscriber re-attaches into a new context (frame 0) that carries feed.x from 101 on,
    then asks for everything after 40 through that reset frame: the replay stops at 100, where
    the link took over. Without ``link_through`` it runs to the journal's high-water (150),
    and 101..150 would arrive twice."""
    comp = component("--heartbeat", "5")
    with Publisher(comp.url, "feed.x", journal=Journal.from_url(redis_url)) as publisher:
        publisher.publish_many(publish_rows(0, 100))
        assert publisher.flush(30)
        receiver, conn, _ = attach(comp.url, "cut", {RESUME: True, EPOCH: "gone"})
        receiver.flow(1000)
        publisher.publish_many(publish_rows(100, 50))
        assert publisher.flush(30)
        live = frames_of(receiver, lambda f: getattr(f, "source_seq", 0) == 150)
    assert isinstance(live[0], Heartbeat)
    assert live[0].link_seq == 0
    assert [f.source_seq for f in live if isinstance(f, Publication)] == list(range(101, 151))

    request = encode(SourceGapRequest({"feed.x": 40}, link_through=link_through))
    request.id, request.reply_to = "r1", "$link/cut"
    request.properties = {**(request.properties or {}), "link": "cut"}
    conn.create_sender(CONTROL_ADDRESS).send(request)
    answer = frames_of(receiver, lambda f: isinstance(f, ReplayComplete))
    conn.close()
    replayed = [f.source_seq for f in answer if isinstance(f, Publication) and f.retransmit]
    end = 100 if link_through == 0 else 150
    assert replayed == list(range(41, end + 1))
    assert answer[-1].through == {"feed.x": end}


@pytest.mark.parametrize("before_start", [100, 0])
def test_what_a_publisher_journaled_ahead_of_the_component_goes_out_on_the_link_not_twice(
    component: Callable[..., ComponentProcess], redis_url: str, before_start: int
) -> None:
    """The journal holds feed.j through 130; the component has fanned out what it held when
    it started (100, or nothing of a source born since) and nothing more: a publisher journaled
    the rest and has not sent it here yet. A replay after 40 stops where the component's own
    fan-out stands; the component fans out the rest from the journal, and the link carries it
    once."""
    journal = Journal.from_url(redis_url)
    sequencer = SourceSequencer(source="feed.j", bits=16)

    def journal_rows(n: int) -> None:
        journal.append([sequencer.stamp("/weather/wind/LEMD", {"n": i}) for i in range(n)], 16)

    if before_start:
        journal_rows(before_start)  # before the component starts: it counts them as gone out
    comp = component("--heartbeat", "0.2")
    journal_rows(130 - before_start)
    receiver, conn, _ = attach(comp.url, "ahead", {RESUME: True, EPOCH: "gone"})
    receiver.flow(1000)
    request = encode(SourceGapRequest({"feed.j": 40}, link_through=0))
    request.id, request.reply_to = "r1", "$link/ahead"
    request.properties = {**(request.properties or {}), "link": "ahead"}
    conn.create_sender(CONTROL_ADDRESS).send(request)
    got = frames_of(receiver, lambda f: getattr(f, "source_seq", 0) == 130)
    time.sleep(0.5)  # a copy would come now
    with contextlib.suppress(Exception):
        got.extend(Decoder(link_bits=16).decode(receiver.receive(timeout=0.5)))
    conn.close()
    pubs = [f for f in got if isinstance(f, Publication)]
    replayed = [p.source_seq for p in pubs if p.link_seq is None]
    live = [p.source_seq for p in pubs if p.link_seq is not None]
    assert replayed == list(range(41, before_start + 1))
    # the replay's REPLAY-COMPLETE said the subscriber has everything through 40 (or 100):
    # the link never sends live what a replay gave (ResponseRoute.given), so of a source new
    # to the component the link carries 41.. (it used to send 1..40 too, stale at the stub)
    assert live == list(range(max(40, before_start) + 1, 131))
    (complete,) = [f for f in got if isinstance(f, ReplayComplete)]
    assert complete.through == {"feed.j": max(40, before_start)}
