"""Links through a gateway: attach properties relayed both ways, resumption, the component's
refusals, and the component lost and back (SIGKILL and restart).

Real parts only: a real redis-server, the component as a real process, the gateway and the
clients over proton on loopback. No timed assertions: every wait is a generous deadline.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import LinkDetached

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.gateway.gateway import Gateway
from seqrepair.amqp.gateway.relays import RelayState
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER
from seqrepair.core.events import Event, HeartbeatOverdue, LinkReset
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .test_link_contexts import EPOCH, RESUME, START, Feed, attach, first_frame

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def relayed(gw: Gateway, name: str) -> bool:
    """Whether the link ``name`` is attached through ``gw`` (the component has answered)."""
    relay = gw.relays.get(name)
    return relay is not None and relay.state is RelayState.OPEN


@pytest.fixture
def gateway() -> Iterator[Callable[[str], Gateway]]:
    """Gateways in front of a component, closed at the end of the test."""
    started: list[Gateway] = []

    def make(upstream: str) -> Gateway:
        gw = Gateway("127.0.0.1:0", upstream,
                     security=ANONYMOUS_LISTENER, name="edge").start()
        started.append(gw)
        assert gw.ready.wait(10)
        assert wait_for(lambda: gw.stats["upstream_connections"] >= 1, 20)
        return gw

    yield make
    for gw in started:
        gw.close()


def test_the_attach_reply_crosses_the_gateway_and_the_epoch_resumes_the_context(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway]
) -> None:
    comp = component("--heartbeat", "0.2")
    gw = gateway(comp.url)
    receiver, conn, epoch = attach(gw.listening, "ctx", {})  # the reply names the epoch
    assert first_frame(receiver).link_seq == 1
    conn.close()

    receiver, conn, resumed = attach(gw.listening, "ctx", {RESUME: True, EPOCH: epoch})
    assert resumed == epoch
    assert first_frame(receiver).link_seq > 1  # the numbering goes on
    conn.close()

    receiver, conn, fresh = attach(gw.listening, "ctx", {RESUME: True, EPOCH: "not-this-one"})
    assert fresh != epoch
    assert first_frame(receiver).link_seq == 0
    conn.close()
    assert "link resumed" in comp.log_text()


def test_a_subscriber_behind_the_gateway_resumes_its_link_context_and_ends_exact(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway],
    redis_url: str,
) -> None:
    comp = component("--heartbeat", "0.2")
    gw = gateway(comp.url)
    got: list[int] = []
    events: list[Event] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(gw.listening, "/weather/#", link_name="resumer", heartbeat_interval=0.2,
                       on_publication=lambda p: got.append(p.source_seq),
                       on_event=events.append)
        )
        assert wait_for(lambda: relayed(gw, "resumer"), 30)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.g", journal=Journal.from_url(redis_url))
        )
        feed = Feed(publisher)
        feed.publish(300)
        assert publisher.flush(30)
        assert wait_for(lambda: len(got) >= 300, 30)
        sub.drop_connection()  # it reconnects at once, well within the context retention
        feed.publish(300)  # partly while it is away: repaired from the resumed context
        assert publisher.flush(30)
        assert wait_for(lambda: sub.report.connections >= 2, 30)
        feed.publish(300)
        assert publisher.flush(30)
        done = wait_for(lambda: len(got) >= 900, 60)
        time.sleep(0.5)  # a duplicate would arrive now
    assert done, (sub.stats(), gw.stats)
    assert got == list(range(1, 901))
    report = sub.stats()
    assert report.connections >= 2
    assert report.resets == 0  # the context was resumed: no reset, no link number 0
    assert not [e for e in events if isinstance(e, LinkReset)]
    assert report.unrecoverable == 0
    assert "link resumed" in comp.log_text()


def test_a_subscriber_behind_the_gateway_ends_exact_across_a_component_kill_and_restart(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway],
    redis_url: str,
) -> None:
    comp = component("--heartbeat", "0.2", "--drop-rate", "0.02", "--drop-seed", "5",
                     "--drop-reset-frames")
    gw = gateway(comp.url)
    got: dict[str, list[int]] = {"all": [], "wind": []}
    with contextlib.ExitStack() as running:
        subs = {
            name: running.enter_context(
                Subscriber(gw.listening, address, link_name=f"gw-restart-{name}",
                           heartbeat_interval=0.2,
                           on_publication=lambda p, name=name: got[name].append(p.source_seq))
            )
            for name, address in (("all", "/weather/#"), ("wind", "/weather/wind/*"))
        }
        for sub in subs.values():
            assert wait_for(lambda sub=sub: relayed(gw, sub.link_name), 30)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.k", journal=Journal.from_url(redis_url))
        )
        expected = Feed(publisher).across_a_restart(comp)
        done = wait_for(lambda: all(len(got[k]) >= len(expected[k]) for k in got), 90)
        time.sleep(0.5)  # a duplicate would arrive now
    assert done, ({k: sub.stats() for k, sub in subs.items()}, gw.stats)
    assert got == expected
    assert gw.stats["upstream_connections"] >= 2
    assert gw.stats["upstream_losses"] >= 1
    for sub in subs.values():
        report = sub.stats()
        assert report.connections >= 2  # the gateway closed its connection; it came back
        assert report.resets == 1  # the new epoch came through the gateway in the attach reply
        assert report.unrecoverable == 0


@pytest.mark.parametrize("start", ["not a map", {"feed.a": -1}, {"feed.a": "x"}])
def test_a_malformed_start_after_is_refused_through_the_gateway_which_keeps_serving(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway], start: Any
) -> None:
    comp = component("--heartbeat", "0.2")
    gw = gateway(comp.url)
    before, before_conn, _ = attach(gw.listening, "before", {})
    with pytest.raises(LinkDetached) as refused:
        attach(gw.listening, "bad-start", {RESUME: True, START: start})
    assert "amqp:invalid-field" in str(refused.value)
    assert "seqrepair-start-after" in str(refused.value)
    receiver, conn, _ = attach(gw.listening, "good", {})
    assert first_frame(receiver).link_seq == 1
    first_frame(before)  # a link attached before the refusal is still served
    conn.close()
    before_conn.close()
    assert gw.stats["refused"] == 1


def test_a_subscriber_attaching_before_the_component_is_up_is_held_then_served(
    redis_url: str, tmp_path: Path
) -> None:
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2")  # not started yet
    gw = Gateway("127.0.0.1:0", comp.url,
                 security=ANONYMOUS_LISTENER, name="edge").start()
    got: list[int] = []
    try:
        assert gw.ready.wait(10)
        with contextlib.ExitStack() as running:
            sub = running.enter_context(
                Subscriber(gw.listening, "/weather/#", link_name="early",
                           heartbeat_interval=0.2,
                           on_publication=lambda p: got.append(p.source_seq))
            )
            assert wait_for(lambda: len(gw.relays) == 1, 20)  # its attach waits, unanswered
            assert gw.stats["upstream_connections"] == 0
            comp.start()
            assert wait_for(lambda: relayed(gw, "early"), 60)
            publisher = running.enter_context(
                Publisher(comp.url, "feed.e", journal=Journal.from_url(redis_url))
            )
            Feed(publisher).publish(200)
            assert publisher.flush(30)
            done = wait_for(lambda: len(got) >= 200, 30)
            time.sleep(0.3)
    finally:
        gw.close()
        comp.stop()
    assert done, (sub.stats(), gw.stats)
    assert got == list(range(1, 201))
    assert sub.stats().resets == 0
    assert gw.backoff.attempts == 0  # reset by the successful connection


class _PlainReader(MessagingHandler):
    """A plain proton receiver recording whether each delivery arrived settled."""

    def __init__(self, url: str, address: str, want: int) -> None:
        super().__init__(prefetch=50, auto_accept=False)
        self.url, self.address, self.want = url, address, want
        self.settled: list[bool] = []
        self.attached = threading.Event()

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(20, self)
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_receiver(self.conn, self.address, name="plain")

    def on_link_opened(self, event: Any) -> None:
        self.attached.set()

    def on_message(self, event: Any) -> None:
        self.settled.append(bool(event.delivery.settled))
        event.delivery.settle()
        if len(self.settled) >= self.want:
            self.conn.close()
            self.timer.cancel()

    def on_timer_task(self, event: Any) -> None:
        self.conn.close()


def test_frames_cross_the_gateway_pre_settled_and_it_holds_no_delivery(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway]
) -> None:
    comp = component("--heartbeat", "0.2")
    gw = gateway(comp.url)
    plain = _PlainReader(gw.listening, "/settle/#", want=5)
    plain_thread = threading.Thread(target=Container(plain).run)
    plain_thread.start()
    got: list[Publication] = []
    with Subscriber(gw.listening, "/settle/#", link_name="settling", on_publication=got.append,
                    heartbeat_interval=0.2):
        assert plain.attached.wait(20)
        assert wait_for(lambda: relayed(gw, "settling"), 30)
        with Publisher(comp.url, "feed.s") as publisher:
            publisher.publish_many([("/settle/x", {"n": i}, "update") for i in range(200)])
            assert publisher.flush()
        assert wait_for(lambda: len(got) == 200, 30)
        relay = gw.relays.get("settling")
        assert relay is not None
        # heartbeats keep coming: wait for a moment with nothing in hand on either side
        assert wait_for(lambda: relay.upstream.unsettled == 0 and relay.downstream.unsettled == 0,
                        timeout=10)
    plain_thread.join(30)
    assert [p.fields["n"] for p in got] == list(range(200))
    assert len(plain.settled) >= 5
    assert all(plain.settled)


def test_a_slow_subscriber_behind_the_gateway_is_paused_by_its_credit_and_catches_up(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway],
    redis_url: str,
) -> None:
    # 20 credits of at most 64 publications (1,280) cannot take 2,000: the slow link's
    # queue passes --max-pending and it is paused (at 256 per transfer it never would be)
    comp = component("--heartbeat", "0.2", "--max-pending", "400", "--drop-reset-frames",
                     "--max-batch", "64")
    gw = gateway(comp.url)
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
                Subscriber(gw.listening, "/weather/#", link_name="fast",
                           heartbeat_interval=0.2, credit=200,
                           on_publication=lambda p: fast.append(p.source_seq))
            ),
            running.enter_context(
                Subscriber(gw.listening, "/weather/#", link_name="slow",
                           heartbeat_interval=0.2, credit=20, on_publication=slow_consumer,
                           on_event=lambda e: slow_overdue.extend(
                               [e] if isinstance(e, HeartbeatOverdue) else []))
            ),
        ]
        for name in ("fast", "slow"):
            assert wait_for(lambda name=name: relayed(gw, name), 30)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.p", journal=Journal.from_url(redis_url))
        )
        Feed(publisher).publish(2000)
        assert publisher.flush(60)
        done = wait_for(lambda: len(fast) >= 2000 and len(slow) >= 2000, 90)
        time.sleep(0.5)
    assert done, ([sub.stats() for sub in subs], gw.stats)
    expected = list(range(1, 2001))
    assert fast == expected
    assert slow == expected
    fast_report, slow_report = (sub.stats() for sub in subs)
    assert fast_report.paused == 0
    assert slow_report.paused >= 1  # the component saw the slow link's credit through the gateway
    assert slow_report.resets >= 1  # resumed by a reset it learnt from SUBSCRIPTION ACTIVE
    assert slow_report.unrecoverable == 0
    # the catch-up is the source replay after each resume, nothing else: no link gap. A link
    # request is only ever an overdue probe (a stall of this loaded machine; the application's
    # own hold is no silence, see test_slow_application.py), a duplicate only a probe's answer
    assert slow_report.gaps_detected == 0
    assert slow_report.requests_sent == len(slow_overdue)
    assert slow_report.duplicates <= slow_report.requests_sent
    # the catch-up came back by response annotation, on the link the answers share
    assert gw.stats["routed"] >= 1


def test_a_subscription_queue_behind_the_gateway_delivers_what_it_selects_across_a_restart(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway],
    redis_url: str,
) -> None:
    """``/subscriptions/wx`` (wind only) through the gateway, with the component losing frames
    and killed and restarted half way: the subscriber gets each wind publication once, in
    order, and nothing else."""
    comp = component("--heartbeat", "0.2", "--drop-rate", "0.02", "--drop-seed", "5",
                     "--subscription", "wx=/weather/wind/*;;*")  # anyone may attach
    gw = gateway(comp.url)
    got: list[int] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(gw.listening, "/subscriptions/wx", link_name="wx-edge",
                       heartbeat_interval=0.2, on_publication=lambda p: got.append(p.source_seq))
        )
        assert wait_for(lambda: relayed(gw, "wx-edge"), 30)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.q", journal=Journal.from_url(redis_url))
        )
        expected = Feed(publisher).across_a_restart(comp)["wind"]
        done = wait_for(lambda: len(got) >= len(expected), 60)
        time.sleep(0.5)  # a duplicate or a rain publication would arrive now
    assert done, (sub.stats(), gw.stats, comp.log_text()[-3000:])
    assert got == expected
    report = sub.stats()
    assert report.resets >= 1  # the restart reset the queue's link
    assert report.unrecoverable == 0


def test_answers_for_a_subscriber_that_falls_behind_wait_for_it_on_their_shared_link(
    component: Callable[..., ComponentProcess], gateway: Callable[[str], Gateway],
    redis_url: str,
) -> None:
    """A slow subscriber's catch-up (source replays, many small answers) comes on the link all
    answers share: once 64 wait for it at the gateway, their credit is held until it takes
    them, and it still gets everything once, in order."""
    comp = component("--heartbeat", "0.2", "--max-pending", "200", "--max-batch", "8")
    gw = gateway(comp.url)
    got: list[int] = []

    def slow(publication: Publication) -> None:
        time.sleep(0.0005)
        got.append(publication.source_seq)

    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(gw.listening, "/weather/#", link_name="behind", heartbeat_interval=0.2,
                       credit=2, on_publication=slow)
        )
        assert wait_for(lambda: relayed(gw, "behind"), 30)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.q", journal=Journal.from_url(redis_url))
        )
        Feed(publisher).publish(3000)
        assert publisher.flush(60)
        done = wait_for(lambda: len(got) >= 3000, 120)
        time.sleep(0.3)
    assert done, (sub.stats(), gw.stats)
    assert got == list(range(1, 3001))
    assert sub.stats().unrecoverable == 0
    assert gw.stats["routed"] >= 1
    assert gw.stats["answers_held"] >= 1
