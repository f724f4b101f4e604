"""A subscriber that re-attaches as DESIGN.md says (``stub.resume_point()`` first) loses nothing
the link passes over as given (issue 27, second review of the carry), over real processes:
``seqrepair serve`` at 3 link bits, a private redis-server, and a subscriber over loopback whose
numbering, ordering and repair are a real ``SubscriberStub`` (a raw proton client performs its
events and acknowledges what it consumed, as the library ``Subscriber`` does).

The subscriber takes feed.b 1..2 and acknowledges them; its connection closes, and meanwhile
feed.b 3..5 and feed.c 1..20 wait in its link's queue. It resumes the link and sends
``resume_point()``. The component had kept the context: at once it numbers feed.b 3..5 (the
window's room), which continue the old context, so the stub's request is done. Its answer
replays feed.c 1..20 (the link numbered nothing of feed.c since the request's
``link_through``), and once that ``REPLAY-COMPLETE`` went out the link passed feed.c over as
given: only that answer brings feed.c, and the stub must take it though its request is done.
Before, it dropped it as stray: feed.c 1..20 reached nobody and no ``Unrecoverable`` said so
(``given_skipped`` 20, ``stray_dropped`` 21)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from seqrepair.amqp.client.acks import consumed_through
from seqrepair.amqp.client.publisher import Publisher
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.technical import Ack
from seqrepair.core.events import (
    Delivered,
    DeliveredRun,
    RequestGap,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.stub import SubscriberStub

from .conftest import ComponentProcess
from .test_given_carry_real import NAME, Scripted

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

BITS = 3


class Stubbed:
    """A :class:`Scripted` link whose frames go to a real stub, its events performed."""

    def __init__(self, stub: SubscriberStub) -> None:
        self.stub = stub
        self.got: list[tuple[str, int]] = []
        self.lost: list[Unrecoverable] = []
        self.sub: Scripted | None = None

    def perform(self, events: list[Any]) -> None:
        assert self.sub is not None
        for event in events:
            if isinstance(event, Delivered):
                self.got.append((event.publication.source, event.publication.source_seq))
            elif isinstance(event, DeliveredRun):
                self.got.extend((p.source, p.source_seq) for p in event.publications)
            elif isinstance(event, RequestGap | RequestSourceGap):
                self.sub.ask(event.request)
            elif isinstance(event, Unrecoverable):
                self.lost.append(event)

    def run(self, until: Any, seconds: float) -> None:
        """Feed the stub what comes and acknowledge what it consumed until ``until()``."""
        assert self.sub is not None
        deadline = time.monotonic() + seconds
        acked = None
        while not until() and time.monotonic() < deadline:
            for frame in self.sub.frames(0.05):
                self.perform(self.stub.receive(frame, time.monotonic()))
            self.perform(self.stub.poll(time.monotonic()))
            through = consumed_through(self.stub)
            if through is not None and through != acked:
                message = encode(Ack(NAME, self.sub.epoch, through))
                self.sub.control.send(message, timeout=10)
                acked = through


def _publish(url: str, source: str, count: int, after: int = 0) -> None:
    publisher = Publisher(url, source, start_after=after).start()
    publisher.publish_many([("/w/a", {"n": i}, "update", None) for i in range(count)])
    assert publisher.flush(20)
    publisher.close()


def test_a_resume_point_answered_as_stray_leaves_nothing_passed_over_to_nobody(
    redis_url: str, tmp_path: Path,
) -> None:
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                            str(BITS)).start()
    run = Stubbed(SubscriberStub(bits=BITS, heartbeat_interval=0.2))
    opened: list[Scripted] = []
    want = [("feed.b", n) for n in range(1, 6)] + [("feed.c", n) for n in range(1, 21)]
    try:
        run.sub = Scripted(comp.url, BITS)
        opened.append(run.sub)
        _publish(comp.url, "feed.b", 2)
        run.run(lambda: len(run.got) >= 2, 10)
        assert run.got == want[:2]
        time.sleep(0.3)  # its ACK is taken
        run.sub.conn.close()
        _publish(comp.url, "feed.b", 3, after=2)
        _publish(comp.url, "feed.c", 20)
        run.sub = Scripted(comp.url, BITS, epoch=run.sub.epoch)
        opened.append(run.sub)
        run.sub.ask(run.stub.resume_point())  # DESIGN.md: what a re-attaching subscriber sends
        run.run(lambda: sorted(run.got) == sorted(want), 6)
    finally:
        for sub in opened:
            sub.conn.close()
        comp.stop()
    for source in ("feed.b", "feed.c"):
        mine = [got for got in run.got if got[0] == source]
        assert mine == [w for w in want if w[0] == source], (source, mine, run.stub.stats)
    assert len(run.got) == len(want)  # each once
    assert not run.lost, run.lost
