"""What a narrow link passed over as given by a replay its subscriber never took arrives through
the later, cut answers to that subscriber's requests, over real processes (issue 27, the carry
of ``requests._not_taken``): ``seqrepair serve`` at 3 and 4 link bits with forced loss and
``--max-gap-range 6``, a private redis-server, and a subscriber over loopback.

The subscriber is scripted (a raw proton client) so the order of events is fixed: it acks
nothing (its window stays shut once full), takes feed.c 1 and asks, by hand, for a replay of
feed.c to the journal's high-water (no ``link_through``). The link passes over every
publication waiting in its queue (given by that replay). Then its connection is cut, with that
answer and the window's other frames: its application took none of them. It resumes the link
and asks as a stub does, after what it delivered and through the last link number it saw: the
link numbered feed.c 2.. after that number, so the cover cuts the replay at 1, and only the
carry brings the numbers the link passed over. Each answer stops at ``max_gap_range``
(``more``) and the subscriber asks again after its ``through``, with the same ``link_through``:
every one of those answers must carry on.

What must hold: the application takes feed.c 1..N exactly once, in order, and the component
passed publications over (``given_skipped``). With the carry disabled (``_not_taken``
returning nothing) the first answer after the resume ends at 1 without ``more`` and feed.c
after the window is never sent: the test fails."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from proton import symbol
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

from seqrepair.amqp.client.publisher import Publisher
from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.sizelimit import LinkProperties
from seqrepair.amqp.wire.vocabulary import (
    CONTROL_ADDRESS,
    LINK_PREFIX,
    PROP_ACK,
    PROP_EPOCH,
    PROP_LINK,
    PROP_RESUME,
)
from seqrepair.core.messages import GapRequest, Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.window import window_size

from .conftest import ComponentProcess

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

N = 40
NAME = "s"
MAX_GAP_RANGE = 6


class Scripted:
    """A subscriber link ``s`` on /w/# and its requests link, on one connection."""

    def __init__(self, url: str, bits: int, epoch: str | None = None) -> None:
        self.conn = BlockingConnection(url, timeout=10)
        props: dict[Any, Any] = {PROP_ACK: True}
        if epoch is not None:
            props.update({PROP_RESUME: True, PROP_EPOCH: epoch})
        self.data: BlockingReceiver = self.conn.create_receiver(
            "/w/#", name=NAME, credit=500, options=LinkProperties(props))
        self.control: BlockingSender = self.conn.create_sender(CONTROL_ADDRESS)
        reply = dict(self.data.link.remote_properties or {})
        self.epoch = str(reply[symbol("seqrepair-epoch")])
        self.decoder = Decoder(link_bits=bits)
        self.ids = 0

    def ask(self, request: GapRequest | SourceGapRequest) -> None:
        message = encode(request)
        self.ids += 1
        message.id = self.ids
        message.reply_to = LINK_PREFIX + NAME
        message.properties = {**dict(message.properties or {}), PROP_LINK: NAME}
        self.control.send(message, timeout=10)

    def frames(self, timeout: float) -> list[Any]:
        """The frames of the next message, or [] when none comes within ``timeout``."""
        try:
            message = self.data.receive(timeout=timeout)
        except Exception:  # proton's Timeout
            return []
        return list(self.decoder.decode(message))


def _replay_through(sub: Scripted, request_id: int, taken: list[int]) -> ReplayComplete:
    """Read until the REPLAY-COMPLETE of ``request_id``, taking its feed.c publications in
    order (``taken``: what the application has; one out of order fails the test)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for frame in sub.frames(1.0):
            if isinstance(frame, Publication) and frame.retransmit and frame.link_seq is None:
                if frame.source_seq <= taken[-1]:
                    continue  # one it has: a stub drops it as a duplicate
                assert frame.source_seq == taken[-1] + 1, (frame.source_seq, taken[-1])
                taken.append(frame.source_seq)
            elif isinstance(frame, ReplayComplete) and frame.request is not None and (
                    frame.request.request_id == request_id):
                return frame
    raise AssertionError(f"no REPLAY-COMPLETE for request {request_id}; took {taken[-1]}")


def _ask_to_the_end(sub: Scripted, after: int, link_through: int | None, first_id: int,
                    taken: list[int]) -> list[tuple[int, int, bool]]:
    """Ask for feed.c after ``after`` (and again after each answer's ``through`` while it
    says ``more``, the same ``link_through``, WIRE.md): the (after, through, more) of each."""
    answers = []
    request_id = first_id
    while True:
        assert len(answers) < 4 * N // MAX_GAP_RANGE, answers
        sub.ask(SourceGapRequest({"feed.c": after}, request_id=request_id,
                                 link_through=link_through))
        complete = _replay_through(sub, request_id, taken)
        answers.append((after, complete.through["feed.c"], complete.more))
        if not complete.more:
            return answers
        after = complete.through["feed.c"]
        request_id += 1


def _link_stats(log: str) -> dict[str, int]:
    lines = [line for line in log.splitlines()
             if "link stats at stop" in line and f"link={NAME} " in line]
    assert lines, log[-3000:]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)\b", lines[-1])}


@pytest.mark.parametrize("bits", [3, 4])
def test_what_the_link_passed_over_arrives_through_cut_answers_after_a_cut_connection(
    bits: int, redis_url: str, tmp_path: Path,
) -> None:
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                            str(bits), "--drop-rate", "0.3", "--drop-seed", str(bits),
                            "--max-gap-range", str(MAX_GAP_RANGE)).start()
    window = window_size(bits)
    opened: list[Scripted] = []
    try:
        first = Scripted(comp.url, bits)
        opened.append(first)
        publisher = Publisher(comp.url, "feed.c").start()
        publisher.publish_many([("/w/a", {"n": i}, "update", None) for i in range(N)])
        assert publisher.flush(20)
        publisher.close()
        # the window's frames come (forced loss drops some; its tail probe resends the
        # newest); link number 1 is asked for again until it comes
        seen: dict[int, Publication] = {}
        deadline = time.monotonic() + 10
        asked_at = 0.0
        while 1 not in seen:
            assert time.monotonic() < deadline, seen
            for frame in first.frames(0.2):
                if isinstance(frame, Publication) and frame.link_seq is not None:
                    seen.setdefault(frame.link_seq, frame)
            if seen and 1 not in seen and time.monotonic() > asked_at + 0.5:
                first.ask(GapRequest(1, 1))  # lost on its way: asked for by number
                asked_at = time.monotonic()
        assert (seen[1].source, seen[1].source_seq) == ("feed.c", 1)
        taken = [0, 1]  # the application takes feed.c 1 (link number 1) and nothing else
        # a replay to the journal's high-water (asked on while it says more): the link
        # passes over what waits in its queue
        gave = _ask_to_the_end(first, 0, None, 1 << 20, [0])
        assert gave[-1][1:] == (N, False), gave
        time.sleep(0.5)  # a tick at least: the pump has passed the queue over
        first.conn.close()  # those answers and the window's frames go with the connection

        second = Scripted(comp.url, bits, epoch=first.epoch)
        opened.append(second)
        assert second.epoch == first.epoch  # the context was kept: the link resumed
        answers = _ask_to_the_end(second, 1, 1, 1, taken)
    finally:
        for sub in opened:
            sub.conn.close()
        comp.stop()
    assert taken[1:] == list(range(1, N + 1)), (answers, taken, gave)
    assert len(answers) > 2, answers  # max_gap_range cut the carried replay
    stats = _link_stats(comp.log_text())
    assert stats["given_skipped"] >= N - window, stats
