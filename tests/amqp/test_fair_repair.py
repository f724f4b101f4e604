"""Repair requests do not freeze live delivery (issue 24), on real processes.

A real redis-server and ``seqrepair serve``; a journal of 20,000 publications of one source;
``seqrepair publish`` at a steady 200/s and an honest library :class:`Subscriber` that times
the gaps between its deliveries. Meanwhile hostile raw proton connections each attach a data
link (whose entitlement matches nothing of the journal: every entry a replay reads is scanned
and skipped, the costliest case) and send 32 ``SOURCE-GAP-REQUEST``s "after 0". Before the
fair scheduler, one such request cost the event loop seconds in one go and 32 of them froze the
honest stream for many seconds. Now the honest subscriber's longest gap stays under
:func:`stall_allowed` (a small share of the time the component took to answer the attack,
measured in the same run, or :data:`STALL_BOUND` when that is short), it gets every
publication once in order, and every hostile request is answered (``REPLAY-COMPLETE`` /
``GAP-ERROR``) or rejected with ``amqp:resource-limit-exceeded``.

Run as a script for the figures: ``python tests/amqp/test_fair_repair.py [CONNS] [REQS]``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from proton import Message, ulong
from proton.handlers import MessagingHandler
from proton.reactor import Container

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from amqp.conftest import ROOT, ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis, pytest.mark.slow]

SOURCE = "feed.fair"
JOURNALED = 20_000
RATE = 200
STALL_BOUND = 1.0
"""The honest subscriber's longest gap between deliveries allowed during an attack whose
answers took the component little time (it gets one every 5 ms; before the fix a single
connection's burst stalled it for many seconds)."""
STALL_SHARE = 0.05
"""The honest subscriber's longest gap allowed during the attack as a share of ``repair_s``,
the time from the attack's start to the last hostile answer, measured in the same run: the
replays' scanning is CPU work, so both grow with a slower or busier machine, and a fair
component keeps the stall a small share of it. Measured on the 2-core machine at load 3,
4 connections x 20 links: fair, longest gap 0.16-0.33 s (0.295 s of 25.8 s of answers,
0.156 s of 20.6 s); each replay read in one go (``serve --repair-turn 60 --replay-page
100000``), 6.8 s of 16.7 s and 19.2 s of 18.9 s: failed, as under the absolute 1 s. That
1 s alone left a 3x margin to 0.334 s under load, and shrinks as the machine slows. The
short attacks (1 link; the principal limit: answered in 0.6 s and 1.4 s) keep
:data:`STALL_BOUND` (longest gaps 0.12-0.22 s), which a replay read in one go also passes
(0.24-0.41 s): there the gap tells only a stall of seconds."""


def stall_allowed(repair_s: float) -> float:
    """The longest gap allowed for an attack whose answers took ``repair_s`` seconds."""
    return max(STALL_BOUND, STALL_SHARE * repair_s)


def _publish(url: str, redis_url: str, count: int, rate: float) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-m", "seqrepair.cli", "publish", "--url", url, "--source", SOURCE,
         "--redis-url", redis_url, "--count", str(count), "--rate", str(rate),
         "--batch", "16" if rate else "1000", "--timeout", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


class Hostile(MessagingHandler):
    """Raw proton connections (one container: one principal), each with ``links`` data links
    on ``address`` and ``requests`` SOURCE-GAP-REQUESTs "after 0" about them, round-robin;
    collects each request's outcome and the links whose replay ended."""

    def __init__(self, url: str, connections: int, requests: int, address: str,
                 links: int = 1) -> None:
        super().__init__(prefetch=0, auto_accept=True)
        self.url = url
        self.connections = connections
        self.requests = requests
        self.links = links
        self.address = address
        self.outcomes: list[tuple[str, str | None]] = []  # (link, condition or None: accepted)
        self.answered: dict[str, str] = {}  # link -> REPLAY-COMPLETE or GAP-ERROR
        self.answered_at: list[float] = []  # when each answer came (time.monotonic())
        self.container: Any = None
        self._opened: dict[Any, list[str]] = {}

    def on_start(self, event: Any) -> None:
        self.container = event.container
        for n in range(self.connections):
            conn = event.container.connect(self.url, reconnect=False)
            self._opened[conn] = []
            for k in range(self.links):
                name = f"hostile-{n}-{k}-{uuid.uuid4().hex[:6]}"
                receiver = event.container.create_receiver(conn, self.address, name=name)
                receiver.flow(1000)
                receiver.hostile_name = name

    def on_link_opened(self, event: Any) -> None:
        link = event.link
        if not (link.is_receiver and getattr(link, "hostile_name", None)):
            return
        opened = self._opened[link.connection]
        opened.append(link.hostile_name)
        if len(opened) < self.links:
            return
        sender = event.container.create_sender(link.connection, "$seqrepair")
        sender.to_request = [
            (opened[i % len(opened)], Message(
                properties={"message-type": "SOURCE-GAP-REQUEST", "link": opened[i % len(opened)]},
                body={SOURCE: ulong(0)}, reply_to=f"$link/{opened[i % len(opened)]}",
                id=uuid.uuid4().hex))
            for i in range(self.requests)
        ]

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        queued = getattr(sender, "to_request", None)
        while queued and sender.credit:
            name, message = queued.pop(0)
            sender.send(message).hostile_name = name

    def on_accepted(self, event: Any) -> None:
        self.outcomes.append((event.delivery.hostile_name, None))

    def on_rejected(self, event: Any) -> None:
        cond = event.delivery.remote.condition
        self.outcomes.append((event.delivery.hostile_name, cond.name if cond else "rejected"))

    def on_message(self, event: Any) -> None:
        kind = (event.message.properties or {}).get("message-type")
        if kind in ("REPLAY-COMPLETE", "GAP-ERROR"):
            self.answered[event.receiver.name] = kind
            self.answered_at.append(time.monotonic())
        if event.receiver.credit < 500:
            event.receiver.flow(1000)

    def run_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=Container(self).run, daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        if self.container is not None:
            self.container.stop()


def run_attack(redis_url: str, tmp: Path, connections: int, requests: int,
               *serve_args: str, links: int = 1, attack_for: float = 12.0) -> dict[str, Any]:
    """The scenario; returns the figures (longest gap during the attack, deliveries...)."""
    comp = ComponentProcess(redis_url, tmp, "--heartbeat", "0.2", *serve_args).start()
    try:
        fill = _publish(comp.url, redis_url, JOURNALED, 0)
        out, _ = fill.communicate(timeout=120)
        assert fill.returncode == 0, out
        arrivals: list[tuple[float, Publication]] = []
        lock = threading.Lock()

        def taken(pub: Publication) -> None:
            with lock:
                arrivals.append((time.monotonic(), pub))

        live = int(RATE * (attack_for + 3))
        with Subscriber(comp.url, "/load/#", on_publication=taken, heartbeat_interval=0.2,
                        link_name="honest") as sub:
            assert sub.connected.wait(20)
            time.sleep(0.5)
            publisher = _publish(comp.url, redis_url, live, RATE)
            wait_for(lambda: len(arrivals) >= RATE, 30)
            hostile = Hostile(comp.url, connections, requests, "/elsewhere/#", links)
            attack_start = time.monotonic()
            thread = hostile.run_in_thread()
            try:
                out, _ = publisher.communicate(timeout=attack_for + 60)
                assert publisher.returncode == 0, out
                wait_for(lambda: len(arrivals) >= live, 60)
                attack_end = time.monotonic()
                # every request answered or refused (they may still be replaying)
                wait_for(lambda: len(hostile.outcomes) >= connections * requests, 60)
                sent = connections * requests
                # the latest replay of every link that had one accepted ends (the earlier ones
                # it replaced do not: WIRE.md "One replay per link")
                asked = {name for name, cond in hostile.outcomes if cond is None}
                wait_for(lambda: set(hostile.answered) >= asked, 90)
            finally:
                hostile.close()
                thread.join(10)
        with Journal.from_url(redis_url) as journal:
            high_water = journal.high_water(SOURCE)
        limits = query_capabilities(comp.url, timeout=10).limits
    finally:
        comp.stop()
    counters = comp.stop_counters() if comp.stopped_lines() else {}
    times = [t for t, _ in arrivals]
    during = [(b - a, a - attack_start) for a, b in itertools.pairwise(times)
              if b >= attack_start and a <= attack_end]
    longest = max(during)
    return {
        "max_gap": longest[0],
        "max_gap_at": longest[1],  # seconds after the attack began
        # the time the component took over the attack's answers: the stall's baseline
        "repair_s": max(hostile.answered_at, default=attack_start) - attack_start,
        "p99_gap": sorted(gap for gap, _ in during)[int(len(during) * 0.99)],
        "seqs": [(p.source, p.source_seq) for _, p in arrivals],
        "expected": [(SOURCE, n) for n in range(JOURNALED + 1, high_water + 1)],
        "sent": sent,
        "outcomes": [cond for _, cond in hostile.outcomes],
        "asked": asked,
        "answered": dict(hostile.answered),
        "log": comp.log_text(),
        "limits": limits,
        "counters": counters,
    }


@pytest.mark.parametrize(("connections", "links", "requests"), [(1, 1, 32), (4, 20, 32)])
def test_source_requests_do_not_stall_an_honest_subscriber(
    connections: int, links: int, requests: int, redis_url: str, tmp_path: Path
) -> None:
    got = run_attack(redis_url, tmp_path, connections, requests, links=links, attack_for=8.0)
    assert got["max_gap"] < stall_allowed(got["repair_s"]), (
        got["max_gap"], got["p99_gap"], got["repair_s"], got["log"][-3000:])
    assert got["seqs"] == got["expected"]  # every live publication once, in order
    assert len(got["outcomes"]) == got["sent"]
    refused = [c for c in got["outcomes"] if c is not None]
    assert set(refused) <= {"amqp:resource-limit-exceeded"}, refused
    assert got["limits"]["max-replays-per-connection"] == 16
    assert got["limits"]["max-replays-per-principal"] == 64
    assert got["limits"]["repair-turn"] == 0.01
    counters = got["counters"]
    assert counters["repair_steps"] > 0
    assert counters["repair_turns"] > 0, counters
    assert counters["replays_refused"] == len(refused), counters
    if links > 16:  # past --max-replays-per-connection (16) new replays: refused
        assert refused
    assert got["asked"]
    assert set(got["answered"]) >= got["asked"]
    assert set(got["answered"].values()) == {"REPLAY-COMPLETE"}


def test_replays_past_the_principal_limit_are_refused_and_the_rest_answered(
    redis_url: str, tmp_path: Path
) -> None:
    """Two connections of one principal (one container id), 4 links each: under
    ``--max-replays-per-principal 3`` at most 3 replays run at once, whatever the connection."""
    got = run_attack(redis_url, tmp_path, 2, 8, "--max-replays-per-principal", "3",
                     links=4, attack_for=3.0)
    assert got["max_gap"] < stall_allowed(got["repair_s"]), (
        got["max_gap"], got["p99_gap"], got["repair_s"])
    assert got["seqs"] == got["expected"]
    assert got["limits"]["max-replays-per-principal"] == 3
    refused = [c for c in got["outcomes"] if c is not None]
    assert refused
    assert set(refused) == {"amqp:resource-limit-exceeded"}
    assert got["counters"]["replays_refused"] == len(refused)
    assert got["asked"]
    assert set(got["answered"]) >= got["asked"]


if __name__ == "__main__":
    conns = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    reqs = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    nlinks = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    extra = sys.argv[4:]
    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory() as tmpdir:
        figures = run_attack(redis.url, Path(tmpdir), conns, reqs, *extra, links=nlinks)
        print(f"connections={conns} requests={reqs} links={nlinks}: longest gap "
              f"{figures['max_gap']:.3f} s ({figures['max_gap_at']:.2f} s into the attack), "
              f"p99 {figures['p99_gap']:.3f} s, answers over {figures['repair_s']:.2f} s "
              f"(allowed {stall_allowed(figures['repair_s']):.2f} s), in order and complete: "
              f"{figures['seqs'] == figures['expected']}, outcomes refused: "
              f"{sum(1 for c in figures['outcomes'] if c)}/{figures['sent']}, "
              f"links answered {len(figures['answered'])}/{len(figures['asked'])}")
