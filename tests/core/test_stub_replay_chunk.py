"""A replay chunk taken at once (``receive_many``) is taken as frame by frame (issue 26)."""

from __future__ import annotations

import random

import pytest

from seqrepair.core.events import Delivered, DeliveredRun, Event
from seqrepair.core.messages import (
    Heartbeat,
    Publication,
    ReplayComplete,
    ReplayStarted,
)
from seqrepair.core.stub import SubscriberStub


def replayed(source: str, seqs: list[int]) -> list[Publication]:
    return [Publication("/t", source, s, fields={"n": s}, retransmit=True) for s in seqs]


def flat(events: list[Event]) -> list[object]:
    out: list[object] = []
    for ev in events:
        if isinstance(ev, DeliveredRun):
            out.extend(Delivered(p) for p in ev.publications)
        else:
            out.append(ev)
    return out


def run(chunks: list[list[object]], *, many: bool) -> tuple[list[object], SubscriberStub]:
    stub = SubscriberStub()
    request = stub.resume_point()
    events: list[object] = []
    now = 1.0
    first = ReplayStarted(request, {"a": 1000, "b": 1000})
    events += flat(stub.receive(first, now))
    for chunk in chunks:
        now += 0.01
        if many:
            events += flat(stub.receive_many(chunk, now))
        else:
            for frame in chunk:
                events += flat(stub.receive(frame, now))
    done = ReplayComplete(through={"a": 1000, "b": 1000}, request=request)
    events += flat(stub.receive(done, now + 0.01))
    events += flat(stub.receive_many([Heartbeat(link_seq=0, timestamp=None)], now + 0.02))
    return events, stub


@pytest.mark.parametrize("seed", range(20))
def test_a_replay_chunk_is_taken_as_its_frames_are(seed: int) -> None:
    rng = random.Random(seed)
    frames: list[object] = []
    for source in ("a", "b"):
        seqs = sorted(rng.sample(range(1, 400), 150))
        dups = rng.sample(seqs, 20)  # repeated (an earlier attempt's frames arriving late)
        frames += replayed(source, sorted(seqs + dups))
    rng.shuffle(frames)  # the two sources interleave; each in its order below
    by_source: dict[str, list[Publication]] = {"a": [], "b": []}
    for f in frames:
        by_source[f.source].append(f)  # type: ignore[attr-defined]
    frames = []
    ia = ib = 0
    while ia < len(by_source["a"]) or ib < len(by_source["b"]):
        if ib >= len(by_source["b"]) or (ia < len(by_source["a"]) and rng.random() < 0.5):
            frames.append(by_source["a"][ia])
            ia += 1
        else:
            frames.append(by_source["b"][ib])
            ib += 1
    cuts = sorted(rng.sample(range(1, len(frames)), 5))
    chunks = [frames[i:j] for i, j in zip([0, *cuts], [*cuts, len(frames)], strict=True)]
    one_by_one, slow = run(chunks, many=False)
    at_once, fast = run(chunks, many=True)
    assert at_once == one_by_one
    assert fast.stats == slow.stats
    assert fast.resume_point().after == slow.resume_point().after
    assert slow.stats.duplicates > 0


def test_a_replayed_frame_without_a_replay_is_still_stray() -> None:
    stub = SubscriberStub()
    events = stub.receive_many(replayed("a", [1, 2, 3]), 1.0)
    assert events == []
    assert stub.stats.stray_dropped == 3
