"""The fan-out's run forms (``LinkSequencer.stamp_many``, ``LinkContext.record_run``) against
the one-by-one ones (``stamp``, ``record``): the same frames, numbers and context state for
every shape (wraps, a reset's 0, capacity and byte bounds, ``keep``, given sizes, retransmit
flags, heartbeats among publications)."""

from __future__ import annotations

import random

import pytest

from seqrepair.core.context import LinkContext
from seqrepair.core.errors import InvalidConfigError, InvalidMessageError, InvalidSequenceError
from seqrepair.core.messages import Heartbeat, Publication, PublishType
from seqrepair.core.sequencers import LinkSequencer


def _pub(i: int, retransmit: bool = False) -> Publication:
    return Publication(
        f"/t/{i % 3}", f"s{i % 2}", i + 1, PublishType.UPDATE, {"v": i, "x": "a" * (i % 7)},
        link_seq=None if i % 4 else 7, permtoken="p" if i % 5 == 0 else None,
        timestamp=float(i) if i % 2 else None, retransmit=retransmit,
    )


def _fields(frame: Publication | Heartbeat) -> tuple[object, ...]:
    if isinstance(frame, Heartbeat):
        return ("hb", frame.link_seq, frame.timestamp, frame.retransmit)
    return (frame.topic, frame.source, frame.source_seq, frame.ptype, dict(frame.fields),
            frame.link_seq, frame.permtoken, frame.timestamp, frame.retransmit)


def _state(seq: LinkSequencer) -> tuple[object, ...]:
    return (seq.absolute, seq._next_wire, seq._last_sent, seq.next_deadline)


@pytest.mark.parametrize("bits", [2, 3, 16])
@pytest.mark.parametrize("reset_at", [None, 0, 3])
def test_stamp_many_equals_stamp(bits: int, reset_at: int | None) -> None:
    one, run = LinkSequencer(bits=bits), LinkSequencer(bits=bits)
    pubs = [_pub(i, retransmit=i % 3 == 0) for i in range(23)]
    now = 10.0
    for start, end in [(0, 1), (1, 5), (5, 5), (5, 14), (14, 23)]:
        if reset_at is not None and start == reset_at:
            one.reset()
            run.reset()
        singles = [one.stamp(p, now) for p in pubs[start:end]]
        many = run.stamp_many(pubs[start:end], now)
        assert [_fields(f) for f in many] == [_fields(f) for f in singles]
        assert many == singles
        assert _state(run) == _state(one)
        now += 1.0


def test_stamp_many_refuses_what_stamp_refuses() -> None:
    seq = LinkSequencer()
    with pytest.raises(InvalidMessageError):
        seq.stamp_many([_pub(0), Heartbeat(link_seq=1, timestamp=1.0)], 1.0)  # type: ignore[list-item]
    assert _state(seq) == _state(LinkSequencer())  # nothing taken
    with pytest.raises(InvalidConfigError):
        LinkSequencer().stamp(_pub(0), float("nan"))
    with pytest.raises(InvalidConfigError):
        seq.stamp_many([_pub(0)], float("nan"))
    assert seq.stamp_many([], 1.0) == []


def _context_state(ctx: LinkContext) -> tuple[object, ...]:
    return (list(ctx._frames), list(ctx._through), ctx._evicted, ctx._head, ctx._base,
            ctx._generation, ctx.bytes, ctx.recorded)


def _frames(
    rng: random.Random, bits: int, count: int, resets: bool
) -> list[Publication | Heartbeat]:
    seq = LinkSequencer(bits=bits)
    out: list[Publication | Heartbeat] = []
    for i in range(count):
        if resets and rng.random() < 0.05:
            seq.reset()
        if rng.random() < 0.15:
            out.append(seq.heartbeat(float(i)))
        else:
            out.append(seq.stamp(_pub(i), float(i)))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_record_run_equals_record(seed: int) -> None:
    rng = random.Random(seed)
    bits = rng.choice([3, 4, 16])
    capacity = rng.choice([3, 5, 64, 65_536])
    max_bytes = rng.choice([None, 300, 900, 5_000])
    frames = _frames(rng, bits, 120, resets=seed % 2 == 0)
    one = LinkContext(bits=bits, capacity=capacity, max_bytes=max_bytes)
    run = LinkContext(bits=bits, capacity=capacity, max_bytes=max_bytes)
    i = 0
    while i < len(frames):
        chunk = frames[i:i + rng.randint(1, 9)]
        keep = rng.randint(0, 6)
        sizes: list[int | None] | None = None
        if rng.random() < 0.5:
            sizes = [None if rng.random() < 0.3 else rng.randint(30, 200) for _ in chunk]
        for k, frame in enumerate(chunk):
            one.record(frame, keep, None if sizes is None else sizes[k])
        run.record_run(chunk, keep, sizes)
        assert _context_state(run) == _context_state(one)
        i += len(chunk)
    run.record_run([], 0)  # as recording nothing: no bound applied anew
    assert _context_state(run) == _context_state(one)


def test_record_run_refuses_what_record_refuses() -> None:
    ctx = LinkContext()
    with pytest.raises(InvalidConfigError):
        ctx.record_run([_pub(1).with_link(None)])
    with pytest.raises(InvalidConfigError):
        ctx.record_run([_pub(1).with_link(1)], 0, [])
    with pytest.raises(InvalidSequenceError):
        LinkContext(bits=3).record(_pub(1).with_link(9))
    with pytest.raises(InvalidSequenceError):
        LinkContext(bits=3).record_run([_pub(1).with_link(9)])
