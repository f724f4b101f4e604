"""A subscriber that re-attaches with ``stub.resume_point()`` (DESIGN.md) takes what its link
passed over as given, in source order, whatever overtakes the replay that carries it (review of
the late replay of a continued resume), over real processes: ``seqrepair serve`` at 3 link
bits, a private redis-server, and a real ``SubscriberStub`` behind a raw proton client
(:class:`~.test_given_resume_real.Stubbed`).

Both start as test_given_resume_real does: feed.b 1..2 taken, the connection closed, feed.b 3..5
and feed.c 1..20 queued, the link resumed and ``resume_point()`` sent. The component numbers
feed.b 3..5 (the window's room), which continue the kept context, and its answer replays
feed.c 1..20, which the link then passes over as given.

* overtaken: that answer goes with the connection (the stub never reads it) and feed.c 21 is
  published while the link is detached. The link resumes again and the stub sends
  ``resume_point()``: feed.c 21, numbered on the link's first credit, reaches it before the
  answer that carries feed.c 1..20 (the carry of what the link passed over). Delivered at once,
  it made the stub drop feed.c 1..20 as duplicates: lost, no ``Unrecoverable`` (fails before
  the fix, in the test's process and over ``serve``).
* cut (passes before the fix too: it pins what the review found sound): ``--max-gap-range 6``
  cuts that answer at feed.c 6 (``more``). The link passes over only what an ended answer gave
  (its ``through``), so feed.c 7..20 still go out live: nothing is left to nobody, whether or
  not the stub asks on after the cut answer."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from seqrepair.core.messages import Publication
from seqrepair.core.stub import SubscriberStub

from .conftest import ComponentProcess
from .inthread import HereComponent
from .test_given_carry_real import Scripted
from .test_given_resume_real import BITS, Stubbed, _publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def _first_resume(url: str, run: Stubbed, opened: list[Scripted],
                  *, read_answer: bool) -> None:
    """feed.b 1..2 taken; resumed with feed.b 3..5 and feed.c 1..20 queued; the answer to the
    resume read by the stub only when ``read_answer``."""
    run.sub = Scripted(url, BITS)
    opened.append(run.sub)
    _publish(url, "feed.b", 2)
    run.run(lambda: len(run.got) >= 2, 10)
    assert run.got == [("feed.b", 1), ("feed.b", 2)]
    time.sleep(0.3)  # its ACK is taken
    run.sub.conn.close()
    _publish(url, "feed.b", 3, after=2)
    _publish(url, "feed.c", 20)
    run.sub = Scripted(url, BITS, epoch=run.sub.epoch)
    opened.append(run.sub)
    run.sub.ask(run.stub.resume_point())
    if read_answer:
        return
    sub = run.sub
    keep = sub.frames

    def link_frames_only(timeout: float) -> list[object]:
        return [f for f in keep(timeout)
                if not (isinstance(f, Publication) and f.link_seq is None)
                and type(f).__name__ not in ("ReplayComplete", "ReplayStarted")]

    sub.frames = link_frames_only  # type: ignore[method-assign]
    run.run(lambda: len(run.got) >= 5, 10)
    assert run.got == [("feed.b", n) for n in range(1, 6)]
    # the link passes feed.c over (the answer's end went out); its heartbeats are taken
    run.run(lambda: False, 0.8)
    sub.conn.close()  # the answer goes with the connection


def _check(run: Stubbed, want: list[tuple[str, int]]) -> None:
    for source in ("feed.b", "feed.c"):
        mine = [got for got in run.got if got[0] == source]
        assert mine == [w for w in want if w[0] == source], (source, mine, run.stub.stats)
    assert len(run.got) == len(want)  # each once
    assert not run.lost, run.lost


@pytest.mark.parametrize("where", ["in-process", "serve"])
def test_a_frame_after_what_the_link_passed_over_does_not_overtake_its_carry(
    where: str, redis_url: str, tmp_path: Path, here: Callable[..., HereComponent],
) -> None:
    """In the test's process (the component's code in a thread, its link's counters read) and
    over a ``seqrepair serve`` process; each fails before the fix: feed.c 1..20 dropped as
    duplicates of 21."""
    comp: Any
    if where == "serve":
        comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                                str(BITS)).start()
        url = comp.url
    else:
        comp = here(link_bits=BITS)
        url = comp.here_url
    run = Stubbed(SubscriberStub(bits=BITS, heartbeat_interval=0.2))
    opened: list[Scripted] = []
    want = [("feed.b", n) for n in range(1, 6)] + [("feed.c", n) for n in range(1, 22)]
    try:
        _first_resume(url, run, opened, read_answer=False)
        if where == "in-process":  # the premise: the link passed feed.c 1..20 over
            assert comp.call(lambda: comp.links["s"].stats["given_skipped"]) == 20
        _publish(url, "feed.c", 1, after=20)  # queued on the detached link
        assert run.sub is not None
        run.sub = Scripted(url, BITS, epoch=run.sub.epoch)
        opened.append(run.sub)
        run.sub.ask(run.stub.resume_point())
        run.run(lambda: sorted(run.got) == sorted(want), 6)
    finally:
        for sub in opened:
            sub.conn.close()
        if where == "serve":
            comp.stop()
    _check(run, want)


def test_the_late_replay_of_a_continued_resume_cut_by_the_limit_is_asked_on(
    redis_url: str, tmp_path: Path,
) -> None:
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                            str(BITS), "--max-gap-range", "6").start()
    run = Stubbed(SubscriberStub(bits=BITS, heartbeat_interval=0.2))
    opened: list[Scripted] = []
    want = [("feed.b", n) for n in range(1, 6)] + [("feed.c", n) for n in range(1, 21)]
    try:
        _first_resume(comp.url, run, opened, read_answer=True)
        run.run(lambda: sorted(run.got) == sorted(want), 6)
    finally:
        for sub in opened:
            sub.conn.close()
        comp.stop()
    _check(run, want)
