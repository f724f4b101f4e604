"""The component's per-link state without a network: entitlement answers, queueing, credit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from proton import Message

from seqrepair.amqp.client.runner import BatchedCredit
from seqrepair.amqp.component.links import (
    ALLOWS_CACHE,
    ANSWERS_PER_TURN,
    MAX_WAITING_ANSWERS,
    ResponseRoute,
    SubscriberLink,
)
from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.errors import RequestFloodError
from seqrepair.amqp.wire.rawamqp import decode_message
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import GapError, GapRequest, Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer


def _link(entitlement: Entitlement, max_pending: int = 100) -> SubscriberLink:
    return SubscriberLink(
        name="l", address="/w/#", entitlement=entitlement,
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 1000), batch=True,
        max_batch=8, max_pending=max_pending, source_bits=lambda _s: 32,
    )


def _pub(seq: int, topic: str = "/w/a", token: str | None = None) -> Publication:
    return Publication(topic, "s", seq, "update", {"n": seq}, permtoken=token)


def test_link_allows_what_its_entitlement_allows_for_every_topic_and_token() -> None:
    ent = Entitlement(topics=("/w/#",), grant={"gold"}, deny={"bad"})
    link = _link(ent)
    cases = [_pub(1), _pub(2, "/x/a"), _pub(3, token="gold"), _pub(4, token="bad"),
             _pub(5, token="other"), _pub(6, "/x/a", "gold")]
    for _ in range(2):  # asked again: the remembered answer
        assert [link.allows(p) for p in cases] == [ent.allows(p) for p in cases]
    for i in range(ALLOWS_CACHE + 10):  # bounded memory: it starts again, answers unchanged
        assert link.allows(_pub(7, f"/w/t{i}"))
    assert len(link._allowed) <= ALLOWS_CACHE
    assert not link.allows(_pub(8, "/x/a"))


def test_offer_many_queues_in_order_and_pauses_past_max_pending() -> None:
    link = _link(Entitlement(topics=("/#",)), max_pending=5)
    link.offer_many([(_pub(i), None) for i in range(1, 4)], 0.0)
    link.offer(_pub(4), 0.0, b"x")
    assert [(p.source_seq, e) for p, e in link.pending] == [(1, None), (2, None), (3, None),
                                                            (4, b"x")]
    link.offer_many([(_pub(5), None), (_pub(6), None)], 0.0)
    assert link.paused
    assert not link.pending
    assert link.stats["paused"] == 1
    link.offer_many([(_pub(7), None)], 0.0)  # paused: nothing queued until it resumes
    assert not link.pending


class _Receiver:
    is_receiver = True

    def __init__(self) -> None:
        self.credit = 0
        self.flows: list[int] = []

    def flow(self, n: int) -> None:
        self.flows.append(n)
        self.credit += n


class _Event:
    def __init__(self, link: Any) -> None:
        self.link = link


def test_batched_credit_grants_the_window_and_tops_up_at_half() -> None:
    credit = BatchedCredit(10)
    link = _Receiver()
    credit.on_link_local_open(_Event(link))
    assert link.flows == [10]
    for _ in range(4):  # 10 -> 6: above half, no flow frame
        link.credit -= 1
        credit.on_delivery(_Event(link))
    assert link.flows == [10]
    link.credit -= 1  # 5: half used, back to the window in one grant
    credit.on_delivery(_Event(link))
    assert link.flows == [10, 5]
    assert link.credit == 10
    credit.on_link_flow(_Event(link))  # nothing due
    assert link.flows == [10, 5]


def test_batched_credit_leaves_senders_alone() -> None:
    flows: list[int] = []

    class _Sender:
        is_receiver = False

        def flow(self, n: int) -> None:
            flows.append(n)

    BatchedCredit(10).on_link_remote_open(_Event(_Sender()))
    assert flows == []  # a sender is given no credit


class _Sender:
    """A proton sender's credit: each send spends one."""

    def __init__(self, credit: int) -> None:
        self.credit = credit
        self.sent: list[object] = []

    def send(self, message: object) -> SimpleNamespace:
        self.sent.append(message)
        self.credit -= 1
        return SimpleNamespace(pending=100)  # a delivery: the bytes proton holds of it


def test_a_link_without_batches_numbers_no_more_publications_than_its_credit() -> None:
    link = SubscriberLink(
        name="plain", address="/w/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 1000), batch=False,
        max_batch=256, max_pending=1000, source_bits=lambda _s: 32,
    )
    link.offer_many([(_pub(i), None) for i in range(1, 301)], 0.0)
    sender = _Sender(credit=5)
    link.attach(sender)
    link.pump(0.0)
    assert (len(sender.sent), sender.credit) == (5, 0)
    assert len(link.pending) == 295  # unnumbered: still free to pause or drop
    assert link.sequencer.absolute == 5


def _received(sent: list[object]) -> list[object]:
    """What a subscriber decodes from the messages sent, through bytes as on the wire."""
    frames: list[object] = []
    decoder = Decoder()
    for message in sent:
        wire = Message()
        wire.decode(message.encode())  # type: ignore[attr-defined]
        frames.extend(decoder.decode(wire))
    return frames


def _context_of(count: int) -> tuple[LinkContext, LinkSequencer]:
    context, link = LinkContext(16, 10_000), LinkSequencer(16, 1.0)
    for seq in range(1, count + 1):
        context.record(link.stamp(_pub(seq), 0.0))
    return context, link


def test_a_large_resend_is_read_and_sent_a_quota_of_chunks_per_turn() -> None:
    context, _ = _context_of(1000)
    route = ResponseRoute(Entitlement.everything(), 8, lambda _s: 64)
    sender = _Sender(credit=10_000)
    route.sender = sender
    resend = context.resend(GapRequest(1, 1000))
    assert not isinstance(resend, GapError)
    route.start_resend(resend, 7)
    turns = 0
    while route.wants_turn():
        assert route.pump() <= ANSWERS_PER_TURN  # the event loop gets its turn between
        turns += 1
    assert turns == -(-1000 // 8 // ANSWERS_PER_TURN)
    frames = _received(sender.sent)
    assert [(f.link_seq, f.source_seq, f.retransmit) for f in frames] == [  # type: ignore[attr-defined]
        (n, n, True) for n in range(1, 1001)
    ]
    assert {m.correlation_id for m in sender.sent} == {7}  # type: ignore[attr-defined]


def test_a_resend_waits_for_credit_and_reads_nothing_meanwhile() -> None:
    context, link = _context_of(20)
    route = ResponseRoute(Entitlement.everything(), 8, lambda _s: 64)
    route.sender = _Sender(credit=0)
    resend = context.resend(GapRequest(11, 20))
    assert not isinstance(resend, GapError)
    route.start_resend(resend, None)
    assert route.pump() == 0
    assert route.busy()
    assert not route.wants_turn()
    for seq in range(21, 10_021):  # the context moves on past the range before credit comes
        context.record(link.stamp(_pub(seq), 0.0))
    route.sender.credit = 5
    route.pump()
    assert _received(route.sender.sent) == [
        GapError("context-lost", GapRequest(11, 20), "range no longer held")
    ]


def test_a_route_refuses_requests_while_too_many_answers_wait_for_credit() -> None:
    route = ResponseRoute(Entitlement.everything(), 8, lambda _s: 64)
    route.sender = _Sender(credit=0)
    for n in range(MAX_WAITING_ANSWERS):
        route.check_room()
        route.respond(encode(GapError("refused", GapRequest(1, 1), "no")), n)
    with pytest.raises(RequestFloodError, match="grant credit"):
        route.check_room()
    route.sender.credit = 10
    route.pump()
    route.check_room()  # room again once answers went out


@pytest.mark.parametrize(("size", "taken", "replay", "expected"), [
    (10, 0, True, [32, 32, 32, 4]),  # small: 4 x max_batch a transfer
    (10, 1 << 30, True, [32, 32, 32, 4]),
    (10, 1 << 20, True, [8] * 12 + [4]),  # the receiver takes transfers of 1 MiB at most
    (10, 0, False, [8] * 12 + [4]),  # not a source replay
    (30_000, 0, True, [9] * 11 + [1]),  # past max_batch while under 256 KiB (the 9th passes)
    (300_000, 0, True, [8] * 12 + [4]),
])
def test_a_replay_of_small_publications_goes_in_larger_transfers(
    size: int, taken: int, replay: bool, expected: list[int]
) -> None:
    from seqrepair.amqp.component.responses import REPLAY_CHUNK_BYTES
    from seqrepair.amqp.wire.framing import encode_entry

    assert 8 * 30_000 < REPLAY_CHUNK_BYTES <= 9 * 30_000
    route = ResponseRoute(Entitlement.everything(), 8, lambda _s: 64)
    sender = _Sender(credit=10_000)
    sender.remote_max_message_size = taken  # type: ignore[attr-defined]
    route.sender = sender
    pubs = [Publication("/w/a", "s", n, "update", {"pad": "x" * size}) for n in range(1, 101)]
    entries = [encode_entry(p, lambda _s: 64) for p in pubs]
    if replay:
        route.start_replay("l", iter(entries), 3)
    else:
        route.batch = True
        route.start_replay("l", iter(entries), 3)
        route.replays["l"].replay = False
    while route.wants_turn():
        route.pump()
    counts = [len(decode_message(m.encode()).body) for m in sender.sent]  # type: ignore[attr-defined]
    assert counts == expected
    frames = _received(sender.sent)
    assert [f.source_seq for f in frames] == list(range(1, 101))  # type: ignore[attr-defined]
