"""A listener whose ``accept()`` fails goes on serving (real processes: a redis-server,
``seqrepair serve`` or ``seqrepair gateway``, honest clients, raw sockets).

Out of descriptors (EMFILE: a low ``ulimit -n``, or a peer holding connects open), ``accept()``
raised out of proton's ``Container.run()`` and ended the process's event loop: every connection
went with it. Now the listener leaves its socket unread for a pause (5 ms doubling to 1 s,
:func:`seqrepair.amqp.wire.reactor.accept_in_batches`) and tries again, while the connections
held are served throughout; once descriptors are free again a new client is served.

Each test lowers the process's soft ``RLIMIT_NOFILE`` (``prlimit``) once its honest clients are
connected, to what it holds plus :data:`ROOM`, below ``--max-connections`` (the admission must
not refuse first), then opens :data:`FLOOD` raw connects: ROOM are accepted and held
(``--open-timeout`` 30 s), the next accept fails with EMFILE.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, wait_for
from .limits import connect_all, gateway, honest_pair, publish, subscriber

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

ROOM = 16
"""Descriptors a process may open past what it holds when its limit is lowered."""
FLOOD = 80
"""Raw connects the kernel completes (the backlog is 1,024): ROOM accepted, then EMFILE."""
DOOR = ("--max-connections", "400", "--open-timeout", "30")


def limit_descriptors(pid: int, room: int) -> None:
    """Lower ``pid``'s soft descriptor limit to what it holds plus ``room``."""
    held = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (held + room, hard))


@contextlib.contextmanager
def flood(listen: str) -> Iterator[list[socket.socket]]:
    """FLOOD connects to ``listen`` held open (none sends anything), closed on exit."""
    host, port = listen.split(":")
    socks = [sock for sock, _ in connect_all(host, int(port), FLOOD)]
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()


def lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip()) \
        if path.exists() else 0


def test_a_component_out_of_descriptors_pauses_its_listener_and_serves_on(
    tmp_path: Path
) -> None:
    """An honest pair connected before the flood gets all 600 publications once, in order, while
    the listener pauses; a fresh client is served after it; the first failure of the episode is
    logged (with its errno) and the stop counters count every failed accept. Before this, the
    component exited at the first EMFILE (``seqrepair serve: [Errno 24] Too many open
    files``)."""
    with EmbeddedRedis(appendfsync="always") as redis:
        comp = ComponentProcess(redis.url, tmp_path, "--heartbeat", "0.2", *DOOR).start()
        assert comp.proc is not None
        try:
            received = tmp_path / "honest.jsonl"
            with honest_pair(comp, redis.url, tmp_path):
                # the publisher connected and publishing (600 at 100/s) before the flood
                assert wait_for(lambda: lines(received) >= 50, 30)
                limit_descriptors(comp.proc.pid, ROOM)
                with flood(comp.url):
                    assert wait_for(lambda: "accepts paused" in comp.log_text()
                                    or comp.proc.poll() is not None, 10)
                    assert comp.proc.poll() is None, comp.log_text()[-3000:]
                    assert "accepts paused" in comp.log_text(), comp.log_text()[-3000:]
                    during = lines(received)
                    time.sleep(1.0)  # the listener paused and retrying, out of descriptors
                    assert comp.proc.poll() is None, comp.log_text()[-3000:]
                    assert lines(received) >= during + 50  # served all along (100/s)
                # descriptors free again: a fresh client is served
                assert query_capabilities(comp.url, timeout=10).link_bits == 16
                assert comp.proc.poll() is None, comp.log_text()[-3000:]
            # honest_pair checked: all 600 publications once, in order
        finally:
            comp.stop()
        log = comp.log_text()
        paused = [line for line in log.splitlines() if "accepts paused" in line]
        assert "EMFILE" in paused[0], paused
        assert len(paused) <= 3, paused  # an episode is logged once, not each failed accept
        assert comp.stop_counters()["accepts_failed"] >= 1


def test_a_gateway_out_of_descriptors_pauses_its_listener_and_serves_on(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    """The gateway's listener the same (its event loop is proton's too): a subscriber through
    it keeps getting every publication once, in order, a new one is served once the flood is
    gone, and the gateway is alive to the end (``gateway`` checks it). Before this, the gateway
    exited at the first EMFILE (``seqrepair gateway: [Errno 24] Too many open files``)."""
    comp = component("--heartbeat", "0.2")
    with (gateway(comp.url, tmp_path, *DOOR) as (listen, proc),
          subscriber(listen, "honest") as got):
        publish(comp, redis_url, 0, 20)
        assert wait_for(lambda: len(got) >= 20, 30)
        limit_descriptors(proc.pid, ROOM)
        log = tmp_path / "gateway.log"
        with flood(listen):
            assert wait_for(lambda: "accepts paused" in log.read_text()
                            or proc.poll() is not None, 10)
            assert proc.poll() is None, log.read_text()[-3000:]
            assert "accepts paused" in log.read_text(), log.read_text()[-3000:]
            publish(comp, redis_url, 20, 20)  # the component's descriptors are its own
            assert wait_for(lambda: len(got) >= 40, 30)
            assert proc.poll() is None, log.read_text()[-3000:]
        with subscriber(listen, "after-flood") as later:
            publish(comp, redis_url, 40, 10)
            assert wait_for(lambda: len(later) >= 10 and len(got) >= 50, 30)
        time.sleep(0.3)  # a duplicate would arrive now
        assert [p.source_seq for p in got] == list(range(1, 51))
    paused = [line for line in log.read_text().splitlines() if "accepts paused" in line]
    assert "EMFILE" in paused[0], paused
    assert len(paused) <= 3, paused
