"""A relay's large catch-up sends a narrow link nothing its subscriber's replay gave it
(issue 27: "a relay still sends stale frames"), over real processes: origin A, relay B at
3, 4 and 5 link bits with forced loss on its links, a durable subscriber S of B. B is killed,
A takes a backlog of three sources, B restarts and catches up while S reattaches: S's replay
from B's journal delivers what B's catch-up had queued on S's link (of the sources the link
had numbered nothing of since the reset), and B's link passes those over instead of sending
them again, live, as stale frames (``given_skipped``).

What must hold whatever the timing: S gets every publication of its selection exactly once,
in order, with no ``Unrecoverable``; its stub drops no stale frame; and when S has
everything, B's link holds nothing more for it. Before the fix B's link sent every one of
those publications again (seen: 11,997 left queued at 3 bits when S had everything, each
window of them costing S a tail probe and a source replay). The sans-I/O parts, which fail on
the old pump deterministically: tests/amqp/test_given_skip.py."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, wait_for
from .test_relay import RelayProcess, expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCES = ("feed.b", "feed.c", "feed.d")


def _link_stats(log: str, name: str) -> dict[str, int]:
    """The counters B logged for link ``name`` as it stopped (its last stop)."""
    lines = [line for line in log.splitlines()
             if "link stats at stop" in line and f"link={name} " in line]
    assert lines, log[-3000:]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)\b", lines[-1])}


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_a_relay_catching_up_sends_a_narrow_link_nothing_its_replay_gave(
    bits: int, redises: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, "--heartbeat", "0.2").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--heartbeat",
                     "0.2", "--link-bits", str(bits), "--drop-rate", "0.05",
                     "--drop-seed", str(bits)).start()
    got: list[Publication] = []
    s = Subscriber(b.url, "/w/#", on_publication=got.append, link_name="s", durable=True,
                   heartbeat_interval=0.2, max_reconnect_delay=0.5).start()
    try:
        assert s.wait_connected(20)
        b.wait_upstream()
        publish(a.url, "feed.a", 50)
        assert wait_for(lambda: len(got) >= 30, 30), (s.stats(), b.log_text()[-3000:])
        b.kill()
        publishers = [threading.Thread(target=publish, args=(a.url, source, 3000))
                      for source in SOURCES]
        for publisher in publishers:
            publisher.start()
        for publisher in publishers:
            publisher.join(120)
        b.start()  # catches up on 9,000 publications while S reattaches
        want = {source: expected(a_redis, source, "/w/#") for source in ("feed.a", *SOURCES)}

        def has_all() -> bool:
            last = {p.source: p.source_seq for p in got}
            return all(last.get(source, 0) >= w[-1][1] for source, w in want.items())

        assert wait_for(has_all, 180), (s.stats(), b.log_text()[-3000:])
    finally:
        s.stop()
        b.stop()
        a.stop()
    for source, w in want.items():
        assert [(p.topic, p.source_seq) for p in got if p.source == source] == w, source
    assert len(got) == sum(len(w) for w in want.values())
    assert not s.unrecoverable
    stats = s.stub.stats
    link = _link_stats(b.log_text(), "s")
    assert stats.stale_dropped == 0, (stats, link)
    assert link["pending"] == 0, (stats, link)  # nothing stale left queued for S
