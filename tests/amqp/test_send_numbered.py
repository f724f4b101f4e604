"""A lossless batch link's live runs numbered by position (``SubscriberLink._send_numbered``,
``LinkSequencer.take_many``, ``LinkContext.record_numbered``: no stamped copy of each
publication) against the stamped way (``stamp_many`` + ``_send_frames``, taken when ``drop``
is not known lossless): for random offers, credits, resets, wraps, byte bounds and windows,
the same bytes on the wire, the same numbering, and the same context (what a gap request is
answered with, what a cover reads, its bytes)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from seqrepair.amqp.component.links import SubscriberLink, _never_drop
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.context import LinkContext
from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.messages import GapError, GapRequest, Heartbeat, Publication, PublishType
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.core.window import LinkWindow


class _Sender:
    def __init__(self) -> None:
        self.credit = 0
        self.sent: list[bytes] = []

    def send(self, message: object) -> SimpleNamespace:
        self.sent.append(message.encode())  # type: ignore[attr-defined]
        self.credit -= 1
        return SimpleNamespace(pending=10)


def _link(bits: int, capacity: int, max_bytes: int | None, max_batch: int, windowed: bool,
          stamped: bool) -> SubscriberLink:
    link = SubscriberLink(
        name="l", address="/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(bits, 1.0),
        context=LinkContext(bits, capacity, max_bytes=max_bytes), batch=True,
        max_batch=max_batch, max_pending=10_000, source_bits=lambda _s: 32,
        # a drop of its own that drops nothing: not known lossless, so stamped
        drop=(lambda _f: False) if stamped else _never_drop,
        window=LinkWindow(bits, 1 << (bits - 2)) if windowed else None,
    )
    link.attach(_Sender())
    return link


def _pub(rng: random.Random, seq: int) -> Publication:
    pub = Publication(f"/t/{rng.randint(0, 2)}", "s", seq, PublishType.UPDATE,
                      {"v": seq, "x": "a" * rng.randint(0, 9)},
                      timestamp=float(seq) if rng.random() < 0.5 else None)
    roll = rng.random()
    if roll < 0.03:
        return pub.with_link(rng.randint(1, 3))
    if roll < 0.06:
        return pub.with_link(None, retransmit=True)
    return pub


def _context(link: SubscriberLink, rng: random.Random) -> list[object]:
    ctx = link.context
    seen: list[object] = [ctx._head, ctx._base, ctx._generation, ctx.bytes, ctx.recorded,
                          list(ctx._through), ctx.next_number()]
    top = ctx.space.max
    for _ in range(6):
        start = rng.randint(1, top)
        span = rng.randint(1, min(top, 12))
        answer = ctx.answer(GapRequest(start, (start + span - 2) % top + 1))
        seen.append(answer if isinstance(answer, GapError) else [
            (f.link_seq, f.retransmit, f.source_seq if isinstance(f, Publication) else None,
             type(f).__name__) for f in answer])
    cover = ctx.cover(rng.randint(0, top))
    seen.append((cover.limit("s"), cover.scanned))
    return seen


@pytest.mark.parametrize("seed", range(60))
def test_numbered_runs_send_and_hold_what_stamped_runs_do(seed: int) -> None:
    rng = random.Random(seed)
    bits = rng.choice([2, 3, 16])
    shape = (bits, rng.randint(2, 60), rng.choice([None, 400, 2000]), rng.randint(1, 9),
             bits == 16 and rng.random() < 0.5)
    fast, slow = _link(*shape, stamped=False), _link(*shape, stamped=True)
    seq, now = 0, 1.0
    for _ in range(40):
        roll = rng.random()
        if roll < 0.5:
            offers = []
            for _ in range(rng.randint(1, 12)):
                seq += 1
                pub = _pub(rng, seq)
                entry = None if rng.random() < 0.05 else encode_entry(pub, lambda _s: 32)
                offers.append((pub, entry))
            for link in (fast, slow):
                link.offer_many(list(offers), now)
        elif roll < 0.55:
            for link in (fast, slow):
                link.reset()
        elif roll < 0.65 and fast.window is not None and fast.window.newest is not None:
            through = fast.window.newest  # the subscriber consumed all it was sent
            for link in (fast, slow):
                assert link.window is not None
                link.window.ack(through)
        credit = rng.randint(0, 10)
        now += 0.01
        for link in (fast, slow):
            link.sender.credit = credit
            link.pump(now)
        assert fast.sender.sent == slow.sender.sent
        assert fast.stats == slow.stats
        assert (fast.sequencer.absolute, fast.sequencer.next_number) == (
            slow.sequencer.absolute, slow.sequencer.next_number)
        assert len(fast.pending) == len(slow.pending)
        state = rng.getstate()
        fast_context = _context(fast, rng)
        rng.setstate(state)
        assert fast_context == _context(slow, rng)


def test_take_many_gives_the_numbers_stamp_many_gives() -> None:
    rng = random.Random(7)
    for bits in (2, 3, 16):
        taken, stamped = LinkSequencer(bits, 1.0), LinkSequencer(bits, 1.0)
        for _ in range(300):
            if rng.random() < 0.1:
                taken.reset()
                stamped.reset()
            count = rng.randint(1, 20)
            pubs = [Publication("/t", "s", i + 1, PublishType.UPDATE, {}) for i in range(count)]
            first = taken.take_many(count, 1.0)
            frames = stamped.stamp_many(pubs, 1.0)
            assert first == frames[0].link_seq
            assert (taken.absolute, taken.next_number, taken.next_deadline) == (
                stamped.absolute, stamped.next_number, stamped.next_deadline)
    with pytest.raises(InvalidConfigError):
        LinkSequencer().take_many(0, 1.0)
    with pytest.raises(InvalidConfigError):
        LinkSequencer().take_many(1, float("nan"))


def test_record_numbered_refuses_what_it_cannot_number_and_keeps_nothing_of_it() -> None:
    ctx = LinkContext(16, 100)
    pub = Publication("/t", "s", 1, PublishType.UPDATE, {})
    with pytest.raises(InvalidConfigError):
        ctx.record_numbered([pub], 2)  # the context's next number is 1
    with pytest.raises(InvalidConfigError):
        ctx.record_numbered([pub, pub.with_link(4)], 1)
    with pytest.raises(InvalidConfigError):
        ctx.record_numbered([pub, Heartbeat(link_seq=2, timestamp=1.0)], 1)  # type: ignore[list-item]
    assert (ctx._head, list(ctx._frames), list(ctx._through), ctx.recorded) == (0, [], [], 0)
    ctx.record_numbered([pub, pub], 1, sizes=[10, 20])
    assert [f.link_seq for f in ctx.answer(GapRequest(1, 2))] == [1, 2]  # type: ignore[union-attr]
    assert (ctx.bytes, ctx.recorded, ctx.next_number()) == (30, 2, 3)
