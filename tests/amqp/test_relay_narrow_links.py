"""A relay over narrow links (issue 27 audit): origin A with ``--link-bits 3``, relay B with
``--link-bits 4``, loss on both hops, B killed (``kill -9``) mid-stream and restarted with a
wider ``--subscribe`` (``/w/a/*`` then ``/w/#``). A durable subscriber of ``/w/a/*`` gets
exactly its selection, once, in order; one of ``/w/#`` from number 0 gets all of it (what B
did not select before its restart fetched from A), with no ``Unrecoverable``; an image of
``/w/#`` comes (from A). Was: B's fetch links did not acknowledge, so A refused them (no window
on a 3-bit link) and every number B lacked was told lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.positions import create_position, link_durable

from .conftest import ComponentProcess, wait_for
from .test_relay import RelayProcess, expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def _state(name: str, sub: Subscriber, got: list[Publication]) -> str:
    """What a subscriber holds, for a failure message: its counters and its stub's position,
    gaps, buffer and source repair (read from another thread: a diagnostic, not a check)."""
    stub = sub.stub
    fields = ("_expected", "_expected_wire", "_highest", "_source", "_covered_through",
              "_given_up", "_last_delivered", "_overdue_at", "_last_frame_at", "_held",
              "_reset_announced", "_resumed_at", "_probe")
    inner = {f: repr(getattr(stub, f, None))[:300] for f in fields}
    gaps = getattr(getattr(stub, "_gaps", None), "_gaps", None)
    return (f"{name}: {len(got)} taken, last {got[-1].source_seq if got else None}, "
            f"unrecoverable {sub.unrecoverable!r}, stats {sub.stats()!r}, "
            f"buffered {sorted(getattr(stub, '_buffer', {}))}, gaps {gaps!r}, stub {inner}")


def _stalled(what: str, subs: list[tuple[str, Subscriber, list[Publication]]],
             procs: list[ComponentProcess]) -> str:
    """A stall's failure message: the subscribers' state, then the processes stopped (each
    logs its links' counters and windows as it stops) and the tails of their logs."""
    states = [_state(name, sub, got) for name, sub, got in subs]
    for proc in procs:
        proc.stop()
    return "\n".join([what, *states, _logs(*procs)])


def _logs(*procs: ComponentProcess) -> str:
    """The tails of every log the processes wrote (each start of a restarted one)."""
    out = []
    for proc in procs:
        for log in sorted(proc.tmp.glob("*.log")):
            out.append(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
        break  # one tmp dir holds them all
    return "\n".join(out)


def test_a_relay_over_3_and_4_bit_links_restarted_wider_serves_everything(
    redises: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, "--heartbeat", "0.2", "--link-bits", "3",
                         "--drop-rate", "0.05", "--drop-seed", "5").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/a/*", "--heartbeat",
                     "0.2", "--link-bits", "4", "--drop-rate", "0.05", "--drop-seed", "6").start()
    narrow: list[Publication] = []
    wide: list[Publication] = []
    images: list[Publication] = []
    n = Subscriber(b.url, "/w/a/*", on_publication=narrow.append, link_name="narrow",
                   durable=True, heartbeat_interval=0.2, max_reconnect_delay=0.5).start()
    w = None
    try:
        assert n.wait_connected(20)
        b.wait_upstream()
        t = threading.Thread(target=publish, args=(a.url, "feed.a", 300, 0.05))
        t.start()
        time.sleep(0.8)
        b.kill()
        b.args = tuple(x if x != "/w/a/*" else "/w/#" for x in b.args)
        b.start()
        t.join(60)
        client = redis.Redis.from_url(b_redis)
        assert create_position(client, link_durable("wide"), {"feed.a": 0})
        client.close()
        w = Subscriber(b.url, "/w/#", on_publication=wide.append, on_image=images.append,
                       link_name="wide",
                       durable=True, heartbeat_interval=0.2, max_reconnect_delay=0.5).start()
        publish(a.url, "feed.a", 200, after=300)
        want_w = expected(a_redis, "feed.a", "/w/#")
        want_n = expected(a_redis, "feed.a", "/w/a/*")
        assert wait_for(lambda: bool(wide) and wide[-1].source_seq >= want_w[-1][1]
                        and bool(narrow) and narrow[-1].source_seq >= want_n[-1][1], 60), (
            _stalled(f"want {len(want_w)} wide, {len(want_n)} narrow", [
                ("wide", w, wide), ("narrow", n, narrow)], [a, b]))
        time.sleep(1)
        w.request_image(patterns=["/w/#"])  # no source named: answered by A, through B
        assert wait_for(lambda: bool(w.resyncs), 60), b.log_text()[-3000:]
    finally:
        n.stop()
        if w is not None:
            w.stop()
        b.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in narrow] == want_n
    assert [(p.topic, p.source_seq) for p in wide] == want_w
    assert not n.unrecoverable
    assert not w.unrecoverable
    [resync] = w.resyncs
    assert resync.topics == {"/w/a/1", "/w/b/2", "/w/a/4"}
    assert resync.as_of == {"feed.a": 500}
    assert {p.topic for p in images} == resync.topics
