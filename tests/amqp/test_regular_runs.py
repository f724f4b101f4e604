"""``framing.regular_runs`` (each frame's number and flag read once) against the plain
definition: the same ``[start, end)`` cuts for random frames (numbers consecutive, wrapping,
absent, repeated; retransmissions and heartbeats mixed in)."""

from __future__ import annotations

import random

import pytest

from seqrepair.amqp.wire.framing import regular_runs
from seqrepair.core.messages import Heartbeat, Publication, PublishType


def _reference(frames: list[Publication | Heartbeat]) -> list[tuple[int, int]]:
    runs = []
    start = 0
    for i in range(1, len(frames) + 1):
        if i < len(frames):
            prev, cur = frames[i - 1], frames[i]
            if prev.link_seq is None:
                same = cur.link_seq is None
            else:
                same = cur.link_seq == prev.link_seq + 1
            if same and prev.retransmit is cur.retransmit:
                continue
        runs.append((start, i))
        start = i
    return runs


def _frames(rng: random.Random) -> list[Publication | Heartbeat]:
    frames: list[Publication | Heartbeat] = []
    seq: int | None = rng.choice([None, 0, 1, 65534])
    for i in range(rng.randint(0, 40)):
        roll = rng.random()
        if roll < 0.1:
            seq = None
        elif roll < 0.2:
            seq = rng.randint(0, 65535)
        elif seq is not None and roll < 0.9:
            seq = 1 if seq == 65535 else seq + 1
        elif seq is None and roll < 0.5:
            seq = rng.randint(1, 9)
        retransmit = rng.random() < 0.15
        if rng.random() < 0.1:
            frames.append(Heartbeat(link_seq=0 if seq is None else seq, timestamp=1.0,
                                    retransmit=retransmit))
        else:
            frames.append(Publication("/t", "s", i + 1, PublishType.UPDATE, {"v": i},
                                      link_seq=seq, retransmit=retransmit))
    return frames


@pytest.mark.parametrize("seed", range(200))
def test_regular_runs_equals_reference(seed: int) -> None:
    frames = _frames(random.Random(seed))
    assert regular_runs(frames) == _reference(frames)


def test_regular_runs_edges() -> None:
    pub = Publication("/t", "s", 1, PublishType.UPDATE, {}, link_seq=5)
    assert regular_runs([]) == []
    assert regular_runs([pub]) == [(0, 1)]
    assert regular_runs([pub, pub.with_link(6), pub.with_link(6)]) == [(0, 2), (2, 3)]
    assert regular_runs([pub, pub.with_link(6, retransmit=True)]) == [(0, 1), (1, 2)]
