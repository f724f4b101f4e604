"""The relay's upstream thread and journal text per publication, in one process (no proton):
``UpstreamSubscriber.on_message`` on lazily read ``PUBLICATIONS`` transfers as the origin sends
them in ``bench_relay.py`` (256 entries, fields ``{"n", "t"}``, two topics, a timestamp), the
runs handed to ``on_run``; then ``Journal._envelope`` of what it delivered, in batches of 1024.

    .venv/bin/python benchmarks/notes/relay_upstream_micro.py [TRANSFERS] [ROUNDS]

Prints CPU microseconds per publication of each (the best of ROUNDS). Run it in two trees
(``PYTHONPATH``) one after the other for a before/after; see ``relay-bound.md``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from seqrepair.amqp.relay.upstream import UpstreamSubscriber
from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.amqp.wire.rawamqp import decode_message
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

N = 256


def transfers(count: int) -> list[bytes]:
    out = []
    for k in range(count):
        pubs = [Publication("/load/a" if i % 2 else "/load/b", "bench", k * N + i + 1,
                            fields={"n": k * N + i, "t": time.time()},
                            link_seq=(k * N + i) % 65535 + 1, timestamp=time.time())
                for i in range(N)]
        out.append(encode_frames(pubs).encode())
    return out


class _Delivery:
    settled = True

    def settle(self) -> None:
        pass


class _Event:
    delivery = _Delivery()
    message: Any = None


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    best_up = best_env = float("inf")
    for _ in range(rounds):
        runs: list[tuple[list[Publication], list[bytes]]] = []
        sub = UpstreamSubscriber("127.0.0.1:1", "/load/#", link_name="relay.b",
                                 on_run=lambda p, e, runs=runs: runs.append((p, e)), durable=True,
                                 ack=True, acknowledge=False)
        data = transfers(count)
        event = _Event()
        began = time.process_time()
        for raw in data:
            event.message = decode_message(raw, True)
            sub.on_message(event)
        best_up = min(best_up, time.process_time() - began)
        pubs = [p for run, _ in runs for p in run]
        assert len(pubs) == count * N
        began = time.process_time()
        for i in range(0, len(pubs), 1024):
            Journal._envelope(pubs[i : i + 1024], 32, "bench", increasing=True)
        best_env = min(best_env, time.process_time() - began)
    per = count * N
    print(json.dumps({"publications": per, "upstream_us": round(best_up / per * 1e6, 3),
                      "envelope_us": round(best_env / per * 1e6, 3)}))


if __name__ == "__main__":
    main()
