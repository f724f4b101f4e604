"""A request the component rejects is rejected to the client behind a gateway too, with the
component's condition (WIRE.md "Requests through a gateway"), over real processes: ``seqrepair
serve``, a private redis-server and ``seqrepair gateway`` in front of it.

The gateway used to accept each client request as it forwarded it and to send it upstream
pre-settled: the component's rejection never came back, and the fix that makes a subscriber
hear a rejected request (test_rejected_resume_real) did not hold behind a gateway: a continued
``resume_point()`` rejected for the replay room rested with no timer and what the link passed
over reached nobody. Now the gateway forwards a request unsettled and settles the client's
delivery with the component's outcome."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.events import RequestSourceGap
from seqrepair.core.stub import SubscriberStub

from .conftest import ComponentProcess
from .test_gateway_publish import gateway_process
from .test_given_carry_real import Scripted
from .test_given_resume_overtaken_real import _check, _first_resume
from .test_given_resume_real import BITS, _publish
from .test_rejected_resume_real import LIMIT, Hog, Rejecting

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_a_resume_rejected_behind_a_gateway_is_rejected_to_the_client_and_asked_again(
    redis_url: str, tmp_path: Path,
) -> None:
    """test_rejected_resume_real's scenario with the subscriber behind a gateway (the hog,
    the same anonymous principal, at the component): the rejection of the continued resume
    reaches the client with the component's condition, the stub asks again, and feed.c
    1..20, which the kept link passed over, reach the application once, in order. Before,
    the gateway accepted the request: ``rejected`` stayed empty and feed.c never came."""
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                            str(BITS), "--max-replays-per-principal", "1").start()
    run = Rejecting(SubscriberStub(bits=BITS, heartbeat_interval=0.2))
    opened: list[Scripted] = []
    hog: Hog | None = None
    want = [("feed.b", n) for n in range(1, 9)] + [("feed.c", n) for n in range(1, 21)]
    try:
        with gateway_process(comp.url, tmp_path) as listen:
            url = f"amqp://{listen}"
            try:
                _first_resume(url, run, opened, read_answer=False)
                hog = Hog(comp.url)
                assert run.sub is not None
                run.sub = Scripted(url, BITS, epoch=run.sub.epoch)
                opened.append(run.sub)
                run.perform([RequestSourceGap(run.stub.resume_point())])
                assert run.rejected == [LIMIT]  # before: [] (accepted by the gateway)
                _publish(comp.url, "feed.b", 3, after=5)  # the kept link goes on
                run.run(lambda: False, 0.6)
                hog.close()  # its replay ends with its connection: the room frees
                hog = None
                run.run(lambda: sorted(run.got) == sorted(want), 10)
            finally:
                if hog is not None:
                    hog.close()
                for sub in opened:
                    sub.conn.close()
    finally:
        comp.stop()
    _check(run, want)
    assert len(run.asked) >= 2, run.asked  # asked again after the rejection


def test_the_library_subscriber_behind_a_gateway_hears_its_rejected_requests(
    redis_url: str, tmp_path: Path,
) -> None:
    """The library :class:`Subscriber` behind a gateway, under forced loss and a request rate
    of 2/s at the component: its rejected range requests come back rejected through the
    gateway (before: ``rejected`` 0), and the application has the stream once."""
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits", "4",
                            "--drop-rate", "0.3", "--drop-seed", "2", "--request-rate", "2",
                            "--request-burst", "2").start()
    got: list[tuple[str, int]] = []
    count = 60
    try:
        with gateway_process(comp.url, tmp_path) as listen, Subscriber(
                f"amqp://{listen}", "/w/#", on_publication=lambda p: got.append(
                    (p.source, p.source_seq)), heartbeat_interval=0.2,
                link_name="lib") as sub:
            assert sub.connected.wait(10)
            _publish(comp.url, "feed.a", count)
            deadline = time.monotonic() + 20
            while len(got) < count and not sub.unrecoverable and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.3)  # a duplicate would come now
            report = sub.stats()
            lost = list(sub.unrecoverable)
    finally:
        comp.stop()
    assert got == [("feed.a", n) for n in range(1, count + 1)], (got, lost, report)
    assert lost == []
    assert report.rejected >= 1, report  # before: 0, the gateway accepted every request
