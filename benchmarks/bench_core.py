"""Core benchmarks: every figure is a ratio to a baseline measured in the same run.

Run: .venv/bin/python benchmarks/bench_core.py [--n 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence

import attrs

from seqrepair import (
    Delivered,
    Heartbeat,
    LinkSequencer,
    Publication,
    PublishType,
    RequestGap,
    SourceSequencer,
    SubscriberStub,
)
from seqrepair.core.sequence import SequenceSpace


def best_rates(n: int, repeat: int, bodies: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Operations per second of each body's best of ``repeat`` runs (each body does ``n``).

    The bodies take turns, round by round, so a baseline and what is compared with it see the
    same load on this shared machine: their ratio is what the figures report.
    """
    best = dict.fromkeys(bodies, float("inf"))
    for _ in range(repeat):
        for name, body in bodies.items():
            gc.collect()
            started = time.perf_counter()
            body()
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: n / seconds for name, seconds in best.items()}


def bare_wrap_loop(n: int, bits: int = 32) -> Callable[[], object]:
    top = (1 << bits) - 1

    def loop() -> int:
        x = 0
        for _ in range(n):
            x = 1 if x == top else x + 1
        return x

    return loop


def stamping(n: int) -> dict[str, Callable[[], object]]:
    src = SourceSequencer(source="feed.a", bits=32)
    fields = {"speed": 12, "gust": None}

    def stamp_publications() -> None:
        for _ in range(n):
            src.stamp("/weather/wind/LEMD", fields, PublishType.UPDATE)

    def next_numbers() -> None:
        for _ in range(n):
            src.next_seq()

    pubs = [src.stamp("/weather/wind/LEMD", fields) for _ in range(n)]
    link = LinkSequencer(bits=16)

    def link_stamp() -> None:
        for pub in pubs:
            link.stamp(pub, 0.0)

    return {"stamp": stamp_publications, "next_seq": next_numbers, "link": link_stamp}


def in_order_frames(n: int, bits: int = 16) -> list[Publication]:
    src = SourceSequencer(source="feed.a")
    link = LinkSequencer(bits=bits)
    return [link.stamp(src.stamp("/weather/wind/LEMD", {"speed": 1}), 0.0) for _ in range(n)]


def _resend(frame: Publication | Heartbeat) -> Publication | Heartbeat:
    """What a component's link context resends: the same frame, marked as a retransmission."""
    if isinstance(frame, Publication):
        return frame.with_link(frame.link_seq, retransmit=True)
    return frame


TRANSFER = 256  # publications per AMQP transfer: the library's default batch
REPAIR_ROUND_TRIP = 16  # frames that arrive while a gap request is answered


def feed(frames: Sequence[Publication | Heartbeat],
         context: Mapping[int, Publication | Heartbeat], bits: int) -> int:
    """Feed frames to a fresh stub, answering gap requests from ``context`` at once."""
    stub = SubscriberStub(bits=bits, nak_delay=0.0, seed=1)
    space = SequenceSpace(bits)
    delivered = 0
    pending: list[Publication | Heartbeat] = []
    now = 0.0
    for index, frame in enumerate(frames):
        now += 1e-6
        for event in stub.receive(frame, now):
            if isinstance(event, Delivered):
                delivered += 1
        if index % REPAIR_ROUND_TRIP == 0 or index == len(frames) - 1:
            for event in stub.poll(now + 1.0):
                if isinstance(event, RequestGap):
                    wire = event.request.link_from
                    for _ in range(space.distance(wire, event.request.link_to) + 1):
                        pending.append(_resend(context[wire]))
                        wire = space.next(wire)
            for resent in pending:
                for event in stub.receive(resent, now):
                    if isinstance(event, Delivered):
                        delivered += 1
            pending.clear()
    return delivered


def perturbed(frames: Sequence[Publication | Heartbeat], loss: float, reorder: float,
              seed: int) -> list[Publication | Heartbeat]:
    rng = random.Random(seed)
    # the last frame always arrives: tail loss is found by heartbeats, which this run has none of
    out = [f for f in frames[:-1] if rng.random() >= loss] + [frames[-1]]
    for i in range(len(out) - 1):
        if rng.random() < reorder:
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def memory_per_buffered_frame(n: int) -> tuple[float, float]:
    frames = in_order_frames(n + 1, bits=32)
    stub = SubscriberStub(bits=32, max_buffer=n + 10)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for frame in frames[1:]:  # frame 1 is missing, so every other frame is buffered
        stub.receive(frame, 0.0)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert stub.buffered == n
    overhead = (after - before) / n
    frame_size = _deep_size(frames[1])
    return overhead, frame_size


def _deep_size(pub: Publication) -> float:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    copies = [attrs.evolve(pub, fields=dict(pub.fields)) for _ in range(1000)]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del copies
    return (after - before) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.n, args.repeat
    print(f"# core benchmarks: n={n}, best of {repeat}, Python {platform.python_version()}")

    rates = best_rates(n, repeat, {"bare": bare_wrap_loop(n), **stamping(n)})
    baseline = rates["bare"]
    print(f"bare increment-and-wrap loop          {baseline:14,.0f} /s  (baseline)")
    for name, label in (("next_seq", "SourceSequencer.next_seq"),
                        ("stamp", "SourceSequencer.stamp -> Publication"),
                        ("link", "LinkSequencer.stamp (with_link)")):
        rate = rates[name]
        print(f"{label:<37} {rate:14,.0f} /s  ratio {rate / baseline:.3f}  (goal >= 0.4)")

    frames = in_order_frames(n)
    sink: list[object] = []
    batches = [frames[i:i + TRANSFER] for i in range(0, n, TRANSFER)]

    def append_loop() -> None:
        sink.clear()
        for frame in frames:
            sink.append(frame)

    def stub_in_order() -> None:
        stub = SubscriberStub(bits=16)
        for frame in frames:
            stub.receive(frame, 0.0)

    def stub_in_order_batches() -> None:
        stub = SubscriberStub(bits=16)
        for batch in batches:
            stub.receive_many(batch, 0.0)

    rates = best_rates(n, repeat, {"append": append_loop, "receive": stub_in_order,
                                   "receive_many": stub_in_order_batches})
    append_rate = rates["append"]
    print(f"list.append loop                      {append_rate:14,.0f} /s  (baseline)")
    print(f"stub in-order delivery, receive       {rates['receive']:14,.0f} /s  "
          f"ratio {rates['receive'] / append_rate:.3f}  (goal >= 0.25)")
    print(f"  receive_many, {TRANSFER} per transfer      {rates['receive_many']:14,.0f} /s  "
          f"ratio {rates['receive_many'] / append_rate:.3f}  (goal >= 0.25)")

    # 32-bit link numbers so the component's context (a dict by wire number) never wraps
    frames = in_order_frames(n, bits=32)
    context = {f.link_seq: f for f in frames if f.link_seq is not None}
    lossy = perturbed(frames, loss=0.01, reorder=0.01, seed=7)
    assert feed(lossy, context, 32) == n, "the lossy run must still deliver everything"
    rates = best_rates(n, repeat, {"lossless": lambda: feed(frames, context, 32),
                                   "lossy": lambda: feed(lossy, context, 32)})
    print(f"stub lossless (repair loop)           {rates['lossless']:14,.0f} /s  (baseline)")
    print(f"stub with 1% loss + 1% reordering     {rates['lossy']:14,.0f} /s  "
          f"ratio {rates['lossy'] / rates['lossless']:.3f}  (goal >= 0.8)")

    overhead, frame_size = memory_per_buffered_frame(min(n, 100_000))
    print(f"memory per buffered frame             {overhead:10.0f} bytes of stub bookkeeping "
          f"(+ {frame_size:.0f} bytes for the publication itself)")


if __name__ == "__main__":
    main()
