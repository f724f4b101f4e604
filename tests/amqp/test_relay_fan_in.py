"""A relay's paths over real processes (``seqrepair serve``, ``seqrepair relay``,
redis-server): fan-in counts hops, not identities; a loop's cut-off ends by itself once the
loop is broken; the paths waiting for a switch are bounded; a refusal names only patterns the
subscriber may see (WIRE.md "Hops, paths and loops", "Relays")."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from proton import ulong
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.relay.paths import BAR_MOST
from seqrepair.amqp.relay.relay import MAX_WAITING_IDENTITIES
from seqrepair.amqp.wire.hops import MAX_CARRIED, RelayLoopError
from seqrepair.amqp.wire.vocabulary import PROP_PATH, PROP_PATH_HOPS
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, wait_for
from .test_authz import _Properties
from .test_relay import RelayProcess, expected, publish

HEARTBEAT = ("--heartbeat", "0.2")


@pytest.mark.amqp
@pytest.mark.redis
def test_a_relay_aggregating_ten_paths_of_one_hop_is_within_max_hops_8(
    redises: list[str], tmp_path: Path
) -> None:
    """Ten links, each behind its own gateway (a path of one identity), subscribe to a relay:
    its upstream attach carries eleven identities but crosses two hops, within the origin's
    default ``--max-hops`` 8 (before, the eleven identities were counted as hops and the
    attach refused). Loop detection is intact: a link naming the origin is still refused."""
    a = ComponentProcess(redises[0], tmp_path, "--hop-id", "origin", *HEARTBEAT).start()
    relay = RelayProcess(redises[1], tmp_path, a.url, "R", "--subscribe", "/w/#",
                         "--hop-id", "hop-r", *HEARTBEAT).start()
    conns = []
    got: list[Publication] = []
    sub = Subscriber(relay.url, "/w/a/*", on_publication=got.append, link_name="plain",
                     heartbeat_interval=0.2)
    try:
        relay.wait_upstream()
        for i in range(10):
            conn = BlockingConnection(relay.url, timeout=10)
            conns.append(conn)
            conn.create_receiver("/w/#", name=f"behind-gw-{i}", credit=1000,
                                 options=_Properties({PROP_PATH: [f"gw-{i}"]}))
        assert wait_for(lambda: "gw-9" in relay.log_text().split("attaching upstream")[-1], 20)
        time.sleep(1.0)  # an upstream refusal would have come by now
        sub.start()
        assert sub.wait_connected(20)
        publish(a.url, "feed.a", 100)
        want = expected(redises[0], "feed.a", "/w/a/*")
        assert wait_for(lambda: len(got) >= len(want), 30), (len(got), relay.log_text()[-3000:])
        looping = BlockingConnection(relay.url, timeout=10)
        conns.append(looping)
        looping.create_receiver("/w/#", name="loop", credit=10,
                                options=_Properties({PROP_PATH: ["origin"]}))
        assert wait_for(lambda: "relay loop: origin is twice" in relay.log_text(), 20), (
            relay.log_text()[-3000:])
        time.sleep(0.5)
    finally:
        sub.stop()
        for conn in conns:
            conn.close()
        relay.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in got] == want
    log = relay.log_text()
    eleven = [line for line in log.splitlines() if "attaching upstream" in line
              and all(f"gw-{i}" in line for i in range(10))]
    assert eleven, log[-3000:]
    refused = [line for line in log.splitlines() if "relay upstream refused" in line]
    assert refused
    assert all("'loop'" in line or "loop]" in line for line in refused), refused
    assert "hop-limit-exceeded" not in log


@pytest.mark.amqp
@pytest.mark.redis
def test_a_cut_off_relay_comes_back_by_itself_once_the_loop_is_broken(
    redises: list[str], tmp_path: Path
) -> None:
    """R0 and R1 subscribe to each other: both are cut off and a subscriber of R0 is told of
    the loop. The operator then re-points R1 at an origin (R1 restarts on its port): without
    restarting R0, within seconds R0 is no longer cut off, attaches upstream again, and a new
    subscriber of R0 gets the origin's publications exactly (before, R0 refused every attach
    until it was restarted)."""
    r0 = RelayProcess(redises[0], tmp_path, "", "R0", "--subscribe", "/w/#", "--hop-id",
                      "loop-0", *HEARTBEAT)
    r1 = RelayProcess(redises[1], tmp_path, "", "R1", "--subscribe", "/w/#", "--hop-id",
                      "loop-1", *HEARTBEAT)
    r0.upstream, r1.upstream = r1.url, r0.url
    r0.start()
    r1.start()
    caught = Subscriber(r0.url, "/w/a/*", link_name="caught", heartbeat_interval=0.2,
                        max_reconnect_delay=0.5).start()
    got: list[Publication] = []
    later = Subscriber(r0.url, "/w/a/*", link_name="later", on_publication=got.append,
                       heartbeat_interval=0.2, max_reconnect_delay=0.5)
    a = ComponentProcess(redises[2], tmp_path, "--hop-id", "origin", *HEARTBEAT)
    try:
        assert wait_for(lambda: caught.error is not None, 60), r0.log_text()[-3000:]
        assert isinstance(caught.error, RelayLoopError), caught.error
        assert wait_for(lambda: "cut off" in r0.log_text() and "cut off" in r1.log_text(), 60)
        r1.stop()
        a.start()
        r1.upstream = a.url
        r1.start()  # re-pointed at the origin, on the same port
        broken = time.monotonic()
        assert wait_for(lambda: "no longer cut off" in r0.log_text(), BAR_MOST + 10), (
            r0.log_text()[-3000:])
        later.start()
        assert later.wait_connected(30), (later.error, r0.log_text()[-3000:])
        came_back = time.monotonic() - broken
        r0.wait_upstream()
        publish(a.url, "feed.a", 100)
        want = expected(redises[2], "feed.a", "/w/a/*")
        assert wait_for(lambda: len(got) >= len(want), 60), (len(got), r0.log_text()[-3000:])
        time.sleep(0.3)
    finally:
        caught.stop()
        later.stop()
        for proc in (r0, r1, a):
            proc.stop()
    assert later.error is None, later.error
    assert [(p.topic, p.source_seq) for p in got] == want
    assert came_back < BAR_MOST + 20, came_back
    assert "relay upstream refused" not in r0.log_text().split("no longer cut off")[1]


class _ManyAttaches(MessagingHandler):  # type: ignore[misc]
    """Attaches ``count`` receiving links at once on one connection (one write, so the relay
    takes them all before its next tick), each on its own pattern with a path of
    :data:`MAX_CARRIED` identities claiming one hop; records each link's refusal."""

    def __init__(self, url: str, count: int) -> None:
        super().__init__(auto_accept=False)
        self.url, self.count = url, count
        self.conditions: dict[str, Any] = {}
        self.done = threading.Event()

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        for i in range(self.count):
            path = [f"w{i}-gw-{j}" for j in range(MAX_CARRIED)]
            event.container.create_receiver(
                conn, f"/v{i}/#", name=f"waits-{i}",
                options=_Properties({PROP_PATH: path, PROP_PATH_HOPS: ulong(1)}))

    def on_link_error(self, event: Any) -> None:
        self.on_link_closing(event)

    def on_link_closing(self, event: Any) -> None:
        cond = event.link.remote_condition
        self.conditions[event.link.name] = (cond.name, cond.description) if cond else None
        if len(self.conditions) == self.count:
            event.connection.close()
            self.done.set()


@pytest.mark.amqp
@pytest.mark.redis
def test_the_paths_waiting_for_a_switch_are_bounded_with_a_clear_refusal(
    redises: list[str], tmp_path: Path
) -> None:
    """Eight subscribers an aggregating relay must widen for attach at once, each with a path
    of 128 identities: the first four wait (``amqp:precondition-failed``, attach again
    shortly); past :data:`MAX_WAITING_IDENTITIES` identities the rest are refused
    ``amqp:resource-limit-exceeded`` saying the bound (before, every path was held, the
    union growing without bound)."""
    a = ComponentProcess(redises[0], tmp_path, *HEARTBEAT).start()
    relay = RelayProcess(redises[1], tmp_path, a.url, "R", "--aggregate", *HEARTBEAT).start()
    handler = _ManyAttaches(relay.url, 8)
    container = Container(handler)
    runner = threading.Thread(target=container.run, daemon=True)
    runner.start()
    try:
        assert handler.done.wait(30), (handler.conditions, relay.log_text()[-3000:])
        assert wait_for(lambda: "attaching upstream" in relay.log_text(), 20)
        time.sleep(0.5)
    finally:
        container.stop()
        runner.join(10)
        relay.stop()
        a.stop()
    conditions = [handler.conditions[f"waits-{i}"] for i in range(8)]
    held = MAX_WAITING_IDENTITIES // MAX_CARRIED
    assert [c[0] for c in conditions[:held]] == ["amqp:precondition-failed"] * held, conditions
    assert [c[0] for c in conditions[held:]] == ["amqp:resource-limit-exceeded"] * (8 - held), (
        conditions)
    assert all(f"({MAX_WAITING_IDENTITIES} at most)" in c[1] for c in conditions[held:])
    log = relay.log_text()
    assert "Traceback" not in log, log[-3000:]
    # the switch carried the four that waited: their 512 identities, cut to what a path holds
    attached = [line for line in log.splitlines() if "attaching upstream" in line]
    assert attached
    assert "w3-gw-127" in attached[-1], attached


POLICY = """
[[allow]]
actors = ["anonymous"]
operations = ["subscribe"]
topics = ["/w/#", "/v/#"]
"""


@pytest.mark.amqp
@pytest.mark.redis
def test_a_relay_refusal_names_only_the_patterns_the_subscriber_may_see(
    redises: list[str], tmp_path: Path
) -> None:
    """A relay carrying ``/w/#`` and ``/secret/#`` refuses a subscriber on ``/v/a`` (which
    its policy lets it subscribe to): the refusal names ``/w/#``, which it may see, and never
    ``/secret/#`` (before, it named every ``--subscribe`` pattern)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    a = ComponentProcess(redises[0], tmp_path, *HEARTBEAT).start()
    relay = RelayProcess(redises[1], tmp_path, a.url, "R", "--subscribe", "/w/#",
                         "/secret/#", "--policy", str(policy), *HEARTBEAT).start()
    sub = Subscriber(relay.url, "/v/a", link_name="outside")
    try:
        sub.start()
        assert wait_for(lambda: sub.error is not None, 30), relay.log_text()[-3000:]
    finally:
        sub.stop()
        relay.stop()
        a.stop()
    text = str(sub.error)
    assert "amqp:not-found" in text, text
    assert "/w/#" in text, text
    assert "/secret" not in text, text
