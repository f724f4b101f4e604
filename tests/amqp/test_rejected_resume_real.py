"""A resume whose request delivery the component rejects still brings what the link passed over
(review of the subscriber's side of a rejected request), over real processes: ``seqrepair
serve`` at 3 link bits with ``--max-replays-per-principal 1``, a private redis-server, and a
real ``SubscriberStub`` behind a raw proton client (:class:`~.test_given_resume_real.Stubbed`)
that passes a rejected request to ``stub.request_rejected``, as the library ``Subscriber``
does.

It starts as test_given_resume_overtaken_real does: the answer to a first resume replays
feed.c 1..20, the link passes them over as given, and that answer goes with the connection.
The link resumes again (the component kept the context) while another connection of the same
principal holds the only replay room (a replay to a link with no credit), so the component
rejects the delivery of ``resume_point()``'s request ``amqp:resource-limit-exceeded``; the kept
link goes on (feed.b 6..8). Before, the rejection was only logged: the request rested (the
link continued it) with no timer, feed.c 1..20 reached nobody and no ``Unrecoverable`` said so.
Now the stub asks again with backoff; once the other replay is gone its retry is answered and
the application has every publication once, in order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message, ulong
from proton.utils import BlockingConnection

from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS, LINK_PREFIX, PROP_LINK
from seqrepair.core.events import RequestGap, RequestSourceGap
from seqrepair.core.messages import GapRequest, SourceGapRequest
from seqrepair.core.stub import SubscriberStub

from .conftest import ComponentProcess
from .test_given_carry_real import NAME, Scripted
from .test_given_resume_overtaken_real import _check, _first_resume
from .test_given_resume_real import BITS, Stubbed, _publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

LIMIT = "amqp:resource-limit-exceeded"


class Rejecting(Stubbed):
    """Sends each request unsettled and waits for its disposition: a rejected one goes to the
    stub (``stub.request_rejected``), its condition recorded in :attr:`rejected`."""

    def __init__(self, stub: SubscriberStub) -> None:
        super().__init__(stub)
        self.rejected: list[str | None] = []
        self.asked: list[SourceGapRequest] = []

    def perform(self, events: list[Any]) -> None:
        rest = []
        for event in events:
            if isinstance(event, RequestGap | RequestSourceGap):
                self._ask(event.request)
            else:
                rest.append(event)
        super().perform(rest)

    def _ask(self, request: GapRequest | SourceGapRequest) -> None:
        sub = self.sub
        assert sub is not None
        if isinstance(request, SourceGapRequest):
            self.asked.append(request)
        message = encode(request)
        sub.ids += 1
        message.id = sub.ids
        message.reply_to = LINK_PREFIX + NAME
        message.properties = {**dict(message.properties or {}), PROP_LINK: NAME}
        delivery = sub.control.link.send(message)
        sub.conn.wait(lambda: delivery.remote_state != 0 or delivery.settled, timeout=10)
        if delivery.remote_state == Delivery.REJECTED:
            cond = delivery.remote.condition
            self.rejected.append(cond.name if cond else None)
            delivery.settle()
            self.perform(self.stub.request_rejected(
                request, cond.name if cond else None, time.monotonic()))
        else:
            delivery.settle()


class Hog:
    """A link of the same (anonymous) principal with no credit, on its own connection, whose
    source replay the component runs and cannot send: it holds the principal's replay room."""

    def __init__(self, url: str) -> None:
        self.conn = BlockingConnection(url, timeout=10)
        self.conn.create_receiver("/w/#", name="hog", credit=0)
        control = self.conn.create_sender(CONTROL_ADDRESS)
        control.send(Message(
            properties={"message-type": "SOURCE-GAP-REQUEST", PROP_LINK: "hog"},
            body={"feed.c": ulong(0)}, reply_to=LINK_PREFIX + "hog", id=1), timeout=10)

    def close(self) -> None:
        self.conn.close()


WANT = [("feed.b", n) for n in range(1, 9)] + [("feed.c", n) for n in range(1, 21)]
"""What the application of :func:`rejected_resume` has in the end, once each, in order."""


def rejected_resume(comp_url: str, url: str) -> Rejecting:
    """The scenario (see the module) against the component at ``comp_url``, the subscriber
    attached at ``url`` (the component, or a gateway in front of it; the hog, the same
    anonymous principal, at the component), run until the application has :data:`WANT` (at
    most 10 s once the room frees); returns the run, for the test to check."""
    run = Rejecting(SubscriberStub(bits=BITS, heartbeat_interval=0.2))
    opened: list[Scripted] = []
    hog: Hog | None = None
    want = WANT
    try:
        _first_resume(url, run, opened, read_answer=False)
        hog = Hog(comp_url)
        assert run.sub is not None
        run.sub = Scripted(url, BITS, epoch=run.sub.epoch)
        opened.append(run.sub)
        run.perform([RequestSourceGap(run.stub.resume_point())])
        assert run.rejected == [LIMIT]  # the premise: the replay room is full
        _publish(comp_url, "feed.b", 3, after=5)  # the kept link goes on
        run.run(lambda: False, 0.6)
        hog.close()  # its replay ends with its connection: the room frees
        hog = None
        run.run(lambda: sorted(run.got) == sorted(want), 10)
    finally:
        if hog is not None:
            hog.close()
        for sub in opened:
            sub.conn.close()
    return run


def check_rejected_resume(run: Rejecting) -> None:
    """What :func:`rejected_resume`'s run must show: every publication once, in order, the
    rejection passed to the stub and the resume asked again after it."""
    _check(run, WANT)
    assert run.stub.stats.requests_rejected >= 1
    assert len(run.asked) >= 2, run.asked  # asked again after the rejection


def test_a_rejected_resume_is_asked_again_and_brings_what_the_link_passed_over(
    redis_url: str, tmp_path: Path,
) -> None:
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                            str(BITS), "--max-replays-per-principal", "1").start()
    try:
        run = rejected_resume(comp.url, comp.url)
    finally:
        comp.stop()
    check_rejected_resume(run)


LIBRARY_LIMITS = ("--heartbeat", "0.2", "--link-bits", "4", "--drop-rate", "0.3",
                  "--drop-seed", "2", "--request-rate", "2", "--request-burst", "2")
"""The component's options for :func:`library_rejected`: forced loss, 2 requests a second."""
LIBRARY_COUNT = 60
"""Publications of feed.a in :func:`library_rejected`."""


def library_rejected(comp_url: str, url: str) -> tuple[list[tuple[str, int]], list[Any], Any,
                                                       int]:
    """The library :class:`Subscriber` attached at ``url`` (the component at ``comp_url``
    started with :data:`LIBRARY_LIMITS`, or a gateway in front of it) under 60 publications
    of feed.a: what the application got, what was Unrecoverable, the subscriber's report and
    the rejections its stub was told of (:func:`check_library_rejected`)."""
    from seqrepair.amqp.client.subscriber import Subscriber

    got: list[tuple[str, int]] = []
    count = LIBRARY_COUNT
    with Subscriber(url, "/w/#", on_publication=lambda p: got.append(
            (p.source, p.source_seq)), heartbeat_interval=0.2, link_name="lib") as sub:
        assert sub.connected.wait(10)
        _publish(comp_url, "feed.a", count)
        deadline = time.monotonic() + 20
        while len(got) < count and not sub.unrecoverable and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)  # a duplicate would come now
    # read once stopped: a rejection counted by the adapter meanwhile reaches the stub after
    report = sub.stats()
    lost = list(sub.unrecoverable)
    rejected = sub.stub.stats.requests_rejected
    return got, lost, report, rejected


def check_library_rejected(got: list[tuple[str, int]], lost: list[Any], report: Any,
                           rejected: int) -> None:
    """:func:`library_rejected`'s outcome: it hears rejected requests (``rejected`` >= 1,
    each passed to the stub) and the application has the stream once, in order, nothing
    Unrecoverable."""
    assert got == [("feed.a", n) for n in range(1, LIBRARY_COUNT + 1)], (got, lost, report)
    assert lost == []
    assert report.rejected >= 1, report  # before: 0, never heard
    assert rejected >= report.rejected, (report, rejected)


def test_the_library_subscriber_hears_its_rejected_requests_and_repairs_what_they_asked(
    redis_url: str, tmp_path: Path,
) -> None:
    """The library :class:`Subscriber` under forced loss and a request rate of 2/s: the
    component rejects most of its range requests ``amqp:resource-limit-exceeded``. Its
    requests link sent them pre-settled, so no rejection ever came back (``on_rejected``
    never ran: ``rejected`` 0); now each reaches the stub, which asks by source for what they
    asked (again with backoff while rejected), and the application has the stream once."""
    comp = ComponentProcess(redis_url, tmp_path, *LIBRARY_LIMITS).start()
    try:
        outcome = library_rejected(comp.url, comp.url)
    finally:
        comp.stop()
    check_library_rejected(*outcome)
