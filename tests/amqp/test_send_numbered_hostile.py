"""Review of the numbered pump (``SubscriberLink._send_numbered``): the numbered link against
a twin that always stamps, driven through everything that reads the numbering later.

Beyond ``test_send_numbered.py``: heartbeats taking numbers between numbered runs, tail
probes, link-range answers queued on the route and read lazily while the link numbers on
(whole frames compared, not only their numbers), gap requests aimed at the held frames in a
wide space too, a cover taken early and read late, the byte bound shrunk and trimmed (as
:mod:`.memory` does), detach and reattach, and a drop that switches between lossless and
lossy (the component's ``--drop-rate`` set at run time, ``inthread.set_drop_rate``)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.context import LinkContext, LinkCover
from seqrepair.core.messages import GapError, GapRequest, Heartbeat, Publication, PublishType
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.core.window import LinkWindow


class _Sender:
    def __init__(self) -> None:
        self.credit = 0
        self.sent: list[bytes] = []
        self.queued = 0

    def send(self, message: object) -> SimpleNamespace:
        self.sent.append(message.encode())  # type: ignore[attr-defined]
        self.credit -= 1
        return SimpleNamespace(pending=10)


class _Faults:
    """The component's fault injection (``Component._drop``/``_lossless``), its rate
    changeable at run time."""

    def __init__(self, seed: int) -> None:
        self.rate = 0.0
        self.rng = random.Random(seed)

    def drop(self, frame: Publication | Heartbeat) -> bool:
        return self.rate > 0 and self.rng.random() < self.rate

    def lossless(self) -> bool:
        return not self.rate > 0


def _link(shape: tuple[int, int, int | None, int, bool], faults: _Faults,
          stamped: bool) -> SubscriberLink:
    bits, capacity, max_bytes, max_batch, windowed = shape
    link = SubscriberLink(
        name="l", address="/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(bits, 1.0),
        context=LinkContext(bits, capacity, max_bytes=max_bytes), batch=True,
        max_batch=max_batch, max_pending=10_000, source_bits=lambda _s: 64,
        # the twin: a drop not known lossless, so always stamped; the same faults
        drop=(lambda f: faults.drop(f)) if stamped else faults.drop,
        lossless=None if stamped else faults.lossless,
        window=LinkWindow(bits, max(1, 1 << (bits - 2))) if windowed else None,
    )
    link.attach(_Sender())
    return link


def _pub(rng: random.Random, seq: int) -> Publication:
    source = rng.choice(["s", "t"])
    pub = Publication(f"/t/{rng.randint(0, 2)}", source, seq, rng.choice(list(PublishType)),
                      {"v": seq, "x": "a" * rng.randint(0, 9)},
                      permtoken=rng.choice([None, "p"]),
                      timestamp=float(seq) if rng.random() < 0.5 else None)
    roll = rng.random()
    if roll < 0.02:
        return pub.with_link(rng.randint(1, 3))
    if roll < 0.04:
        return pub.with_link(None, retransmit=True)
    return pub


def _frames(answer: object) -> object:
    if isinstance(answer, GapError):
        return answer
    return list(answer)  # type: ignore[call-overload]


def _near_head(link: SubscriberLink, rng: random.Random) -> GapRequest:
    ctx = link.context
    top = ctx.space.max
    head = ctx._head + ctx._base
    back = rng.randint(0, min(top - 1, 2 * ctx.capacity + 2))
    start = ctx.space.wire(head - back) if head - back >= 1 else rng.randint(1, top)
    span = rng.randint(1, min(top, 12))
    return GapRequest(start, (start + span - 2) % top + 1)


@pytest.mark.parametrize("seed", range(80))
def test_numbered_link_reads_back_as_the_stamped_twin(seed: int) -> None:
    rng = random.Random(seed)
    bits = rng.choice([2, 3, 4, 5, 8, 16])
    shape = (bits, rng.randint(2, 80), rng.choice([None, 600, 3000]), rng.randint(1, 9),
             bits >= 3 and rng.random() < 0.5)
    fast_faults, slow_faults = _Faults(seed), _Faults(seed)
    fast, slow = _link(shape, fast_faults, False), _link(shape, slow_faults, True)
    twins = (fast, slow)
    slow.epoch = fast.epoch  # a tail probe names its context: the twins' alike
    seq, now = 0, 1.0
    lazy: list[tuple[object, object]] = []  # (fast, slow) resends read later
    covers: list[tuple[LinkCover, LinkCover]] = []
    for step in range(60):
        roll = rng.random()
        if roll < 0.45:
            offers = []
            for _ in range(rng.randint(1, 14)):
                seq += 1
                pub = _pub(rng, seq)
                entry = None if rng.random() < 0.03 else encode_entry(pub, lambda _s: 64)
                offers.append((pub, entry))
            for link in twins:
                link.offer_many(list(offers), now)
        elif roll < 0.5:
            for link in twins:
                link.reset()
            slow.epoch = fast.epoch
        elif roll < 0.57:
            now += 1.5  # past the heartbeat interval: an idle link takes a number
            credit = rng.randint(0, 2)
            for link in twins:
                link.sender.credit = credit
                link.heartbeat(now)
        elif roll < 0.62:
            rate = rng.choice([0.0, 0.0, 0.3])
            fast_faults.rate = slow_faults.rate = rate
        elif roll < 0.67 and fast.window is not None and fast.window.newest is not None:
            through = fast.window.newest
            for link in twins:
                assert link.window is not None
                link.window.ack(through)
        elif roll < 0.72:
            for _ in range(2):  # a stalled window over two ticks gets its tail probed
                for link in twins:
                    link.probe_tail()
        elif roll < 0.8:
            request = _near_head(fast, rng)
            answers = [link.context.resend(request) for link in twins]
            assert type(answers[0]) is type(answers[1])
            if isinstance(answers[0], GapError):
                assert answers[0] == answers[1]
            elif rng.random() < 0.5:
                for link, answer in zip(twins, answers, strict=True):
                    link.route.start_resend(link.fresh(answer), ("c", step))  # type: ignore[arg-type]
            else:
                lazy.append((answers[0], answers[1]))
        elif roll < 0.84:
            through = rng.randint(0, fast.context.space.max)
            covers.append((fast.context.cover(through), slow.context.cover(through)))
        elif roll < 0.88 and shape[2] is not None:
            smaller = max(1, rng.randint(300, 3000))
            for link in twins:
                link.context.max_bytes = smaller
                link.context.trim(link.window.outstanding if link.window is not None else 0)
        elif roll < 0.91:
            for link in twins:
                sender = link.sender
                link.detach(now)
                link.attach(sender)
        credit = rng.randint(0, 10)
        now += 0.01
        for link in twins:
            link.sender.credit = credit
            link.route.pump()  # the repair turn: answers read and sent
            link.pump(now)
        assert fast.sender.sent == slow.sender.sent, f"step {step}"
        assert fast.stats == slow.stats
        assert (fast.sequencer.absolute, fast.sequencer.next_number) == (
            slow.sequencer.absolute, slow.sequencer.next_number)
        assert (fast.context.recorded, fast.context.bytes, fast.context.next_number()) == (
            slow.context.recorded, slow.context.bytes, slow.context.next_number())
        if lazy and rng.random() < 0.3:
            a, b = lazy.pop(0)
            assert _frames(a) == _frames(b)
        if covers and rng.random() < 0.3:
            a, b = covers.pop(0)
            for source in ("s", "t"):
                assert a.limit(source) == b.limit(source)
        for _ in range(3):
            request = _near_head(fast, rng)
            assert _frames(fast.context.answer(request)) == _frames(
                slow.context.answer(request))
    for a, b in lazy:
        assert _frames(a) == _frames(b)
