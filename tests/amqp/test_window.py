"""Window discipline over real processes (issue 22 §1): at narrow link widths with heavy forced
loss a burst at full speed arrives exactly once, in order, and the component never runs more
than half the link space ahead of what the subscriber acknowledged; the subscriber follows the
component's numbering (width, heartbeat, widest gap range) and a hand-given value that
contradicts it stops it with an error naming both.

Real parts: a private redis-server, ``seqrepair serve`` as a process, the ``seqrepair``
commands or the library clients over loopback. No timed assertions: waits are deadlines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, SendException

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.gateway.gateway import Gateway
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.errors import SettingsMismatchError
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER
from seqrepair.amqp.wire.technical import Ack
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS
from seqrepair.core.events import Event, HeartbeatOverdue
from seqrepair.core.messages import Publication
from seqrepair.core.window import window_size

from .conftest import ComponentProcess, _env, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", *args]


def _burst(comp: ComponentProcess, tmp: Path, count: int, *sub_args: str) -> tuple[
    list[int], dict[str, Any], subprocess.CompletedProcess[str]
]:
    """One ``subscribe`` (following the component) and a journaling ``publish`` of ``count``
    at full speed; the source numbers the subscriber wrote, its statistics, its process."""
    out, stats, ready = tmp / "out.jsonl", tmp / "stats.json", tmp / "ready"
    sub = subprocess.Popen(
        _cli("subscribe", "--url", comp.url, "--address", "/#", "--output", str(out),
             "--stats-file", str(stats), "--ready-file", str(ready), "--count", str(count),
             "--duration", "120", *sub_args),
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert wait_for(lambda: ready.exists() or sub.poll() is not None, 60)
    subprocess.run(
        _cli("publish", "--url", comp.url, "--redis-url", comp.redis_url, "--source", "burst",
             "--count", str(count), "--rate", "0", "--topics", "/w/a,/w/b"),
        env=_env(), check=True, capture_output=True, timeout=120,
    )
    stdout, stderr = sub.communicate(timeout=150)
    done = subprocess.CompletedProcess(sub.args, sub.returncode, stdout, stderr)
    seqs = [json.loads(line)["source_seq"] for line in out.read_text().splitlines()]
    return seqs, json.loads(stats.read_text()), done


@pytest.mark.parametrize(("bits", "count"), [(3, 400), (5, 1000), (8, 3000)])
def test_a_burst_over_a_narrow_lossy_link_arrives_exactly_once_within_the_window(
    component: Callable[..., ComponentProcess], tmp_path: Path, bits: int, count: int
) -> None:
    comp = component("--link-bits", str(bits), "--drop-rate", "0.2", "--drop-seed", "7",
                     "--heartbeat", "0.2")
    seqs, stats, sub = _burst(comp, tmp_path, count)
    assert sub.returncode == 0, sub.stderr[-2000:]
    assert seqs == list(range(1, count + 1))  # every one, once, in order
    assert stats["unrecoverable"] == 0
    counters = comp.stop_counters()
    assert counters["acks"] > 0
    assert counters["acks_ignored"] == 0
    # the component numbered right up to the window and never past it
    assert 1 <= counters["window_peak"] <= window_size(bits)


def test_a_subscriber_given_other_link_bits_stops_naming_both(
    component: Callable[..., ComponentProcess], tmp_path: Path
) -> None:
    comp = component("--link-bits", "8")
    sub = subprocess.run(
        _cli("subscribe", "--url", comp.url, "--address", "/#", "--bits", "16",
             "--duration", "30"),
        env=_env(), capture_output=True, text=True, timeout=60,
    )
    assert sub.returncode == 1
    assert "amqp:precondition-failed" in sub.stderr
    assert "8 bits" in sub.stderr
    assert "given 16" in sub.stderr


def test_a_subscriber_given_another_heartbeat_stops_naming_both(
    component: Callable[..., ComponentProcess]
) -> None:
    comp = component("--heartbeat", "0.5")
    sub = Subscriber(comp.url, "/#", heartbeat_interval=1.0).start()
    assert wait_for(lambda: sub.error is not None, 20)
    sub.stop()
    assert isinstance(sub.error, SettingsMismatchError)
    assert (sub.error.expected, sub.error.got) == (0.5, 1.0)
    assert "every 0.5 s" in sub.error.message
    assert "given 1.0 s" in sub.error.message
    with pytest.raises(SettingsMismatchError):
        sub.wait_connected(1)


def test_the_subscriber_follows_the_components_heartbeat(
    component: Callable[..., ComponentProcess]
) -> None:
    """At ``serve --heartbeat 3.5`` a subscriber left on its own default (1 s, three missed)
    would call a quiet link overdue after 3 s; following the component, it does not."""
    comp = component("--heartbeat", "3.5")
    events: list[Event] = []
    with Subscriber(comp.url, "/#", on_event=events.append).start() as sub:
        assert sub.wait_connected(20)
        assert sub.stub.heartbeat_interval == 3.5
        time.sleep(8)  # two heartbeats of the component, none missed
        assert not [e for e in events if isinstance(e, HeartbeatOverdue)]


def test_gap_requests_stay_within_the_components_max_gap_range(
    component: Callable[..., ComponentProcess], tmp_path: Path
) -> None:
    """Heavy loss makes the stub coalesce neighbouring gaps; against ``--max-gap-range 3`` no
    request may span more (it would be refused and cost a replay)."""
    comp = component("--max-gap-range", "3", "--drop-rate", "0.4", "--drop-seed", "3",
                     "--heartbeat", "0.2")
    seqs, stats, sub = _burst(comp, tmp_path, 2000)
    assert sub.returncode == 0, sub.stderr[-2000:]
    assert seqs == list(range(1, 2001))
    assert stats["requests_sent"] > 0
    log = comp.log_text()
    assert "gap request not answered" not in log
    assert stats["source_requests_sent"] == 0  # every loss repaired by link range


def test_a_subscriber_behind_a_gateway_follows_and_acknowledges(
    component: Callable[..., ComponentProcess]
) -> None:
    comp = component("--link-bits", "5", "--drop-rate", "0.2", "--heartbeat", "0.2")
    gw = Gateway("127.0.0.1:0", comp.url, security=ANONYMOUS_LISTENER,
                 name="edge").start()
    try:
        assert gw.ready.wait(10)
        assert wait_for(lambda: gw.stats["upstream_connections"] >= 1, 20)
        got: list[Publication] = []
        with Subscriber(gw.listening, "/#", on_publication=got.append).start() as sub:
            assert sub.wait_connected(20)
            assert (sub.stub.bits, sub.stub.heartbeat_interval) == (5, 0.2)
            assert sub.numbering.acks is not None
            assert sub.numbering.acks.window == window_size(5)
            subprocess.run(
                _cli("publish", "--url", comp.url, "--redis-url", comp.redis_url,
                     "--source", "gw", "--count", "500", "--rate", "0"),
                env=_env(), check=True, capture_output=True, timeout=120,
            )
            assert wait_for(lambda: len(got) >= 500, 90), len(got)
            assert [p.source_seq for p in got] == list(range(1, 501))
    finally:
        gw.close()
    counters = comp.stop_counters()
    assert counters["acks"] > 0
    assert 1 <= counters["window_peak"] <= window_size(5)


def test_acks_of_another_connection_move_nothing_and_acks_are_not_charged_as_requests(
    component: Callable[..., ComponentProcess]
) -> None:
    """A peer naming someone else's link (or a made-up epoch) opens no window; a flood of
    ACKs is not refused by a request allowance of one per second, and the honest subscriber
    ends exact."""
    # no forced loss: the honest subscriber sends no requests, only ACKs (W = 7: 300
    # publications take 40 and more, far past an allowance of one request per second)
    comp = component("--link-bits", "4", "--heartbeat", "0.2",
                     "--request-rate", "1", "--request-burst", "1")
    got: list[Publication] = []
    with Subscriber(comp.url, "/#", link_name="honest", on_publication=got.append).start() as sub:
        assert sub.wait_connected(20)
        epoch = sub._epoch
        assert epoch is not None
        stranger = BlockingConnection(comp.url, timeout=10)
        try:
            sender = stranger.create_sender(CONTROL_ADDRESS, options=AtMostOnce())
            for through in range(1, 16):
                sender.send(encode(Ack("honest", epoch, through)))
            sender.send(encode(Ack("honest", "made-up", 7)))
        finally:
            stranger.close()
        subprocess.run(
            _cli("publish", "--url", comp.url, "--redis-url", comp.redis_url,
                 "--source", "s", "--count", "300", "--rate", "0"),
            env=_env(), check=True, capture_output=True, timeout=120,
        )
        assert wait_for(lambda: len(got) >= 300, 90), len(got)
        assert [p.source_seq for p in got] == list(range(1, 301))
        acks_sent = sub.numbering.acks.sent if sub.numbering.acks else 0
    counters = comp.stop_counters()
    assert counters["acks_ignored"] >= 16
    assert acks_sent >= 40
    assert counters["acks"] - 16 >= 40  # the honest subscriber's, none refused
    assert counters["rejected"] == 0
    assert 1 <= counters["window_peak"] <= window_size(4)


def test_behind_a_gateway_an_ack_naming_another_clients_link_is_refused(
    component: Callable[..., ComponentProcess]
) -> None:
    """Upstream a gateway's clients share its one connection (and, without forwarding
    principals, its principal): an ``ACK`` a stranger sends the gateway naming another
    client's link would move that link's window and durable position. The gateway refuses
    it (``amqp:not-found``) and forwards nothing; the link's own ``ACK``s pass."""
    comp = component("--link-bits", "5", "--heartbeat", "0.2")
    gw = Gateway("127.0.0.1:0", comp.url, security=ANONYMOUS_LISTENER,
                 name="edge").start()
    try:
        assert gw.ready.wait(10)
        assert wait_for(lambda: gw.stats["upstream_connections"] >= 1, 20)
        with Subscriber(gw.listening, "/#", link_name="honest").start() as sub:
            assert sub.wait_connected(20)
            epoch = sub._epoch
            assert epoch is not None
            stranger = BlockingConnection(gw.listening, timeout=10)
            try:
                sender = stranger.create_sender(CONTROL_ADDRESS)
                with pytest.raises(SendException) as refused:
                    sender.send(encode(Ack("honest", epoch, 3, taken={"s": 1000})))
                assert refused.value.state == Delivery.REJECTED
            finally:
                stranger.close()
            assert gw.stats["foreign_requests"] == 1
    finally:
        gw.close()
    assert comp.stop_counters()["acks_ignored"] == 0  # nothing reached the component
