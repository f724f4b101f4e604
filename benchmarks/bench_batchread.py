"""A relay's upstream decode in one process: a ``PUBLICATIONS`` transfer as a component sends
it (256 entries, the fields ``seqrepair publish --count`` makes) read the usual way
(``read_message`` then ``Decoder.decode``, and the entries cut out) against
:func:`~seqrepair.amqp.wire.batchread.read_publications` (one pass), interleaved, same run.

    .venv/bin/python benchmarks/bench_batchread.py [TRANSFERS] [REPEAT]

Prints CPU microseconds per publication of each (the best of REPEAT rounds) and their ratio.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.amqp.wire.rawamqp import ReceivedMessage, decode_message
from seqrepair.core.messages import Publication

N = 256


def transfers(count: int) -> list[bytes]:
    out = []
    for k in range(count):
        pubs = [Publication("/load/a", "bench", k * N + i + 1,
                            fields={"n": k * N + i, "t": time.time()}, link_seq=k * N + i + 1,
                            timestamp=time.time()) for i in range(N)]
        out.append(encode_frames(pubs).encode())
    return out


def usual(data: list[bytes]) -> float:
    decoder = Decoder(link_bits=16)
    began = time.process_time()
    for raw in data:
        message = decode_message(raw)
        decoder.decode(message)
        message.items  # noqa: B018  (the entry bytes the relay passes on)
    return time.process_time() - began


def fused(data: list[bytes]) -> float:
    decoder = Decoder(link_bits=16)
    began = time.process_time()
    for raw in data:
        message = decode_message(raw, True)
        assert isinstance(message, ReceivedMessage)
        if read_publications(message, decoder) is None:
            raise AssertionError("a usual transfer was not read in one pass")
    return time.process_time() - began


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    data = transfers(count)
    best_usual = best_fused = float("inf")
    for _ in range(repeat):
        best_usual = min(best_usual, usual(data))
        best_fused = min(best_fused, fused(data))
    per = count * N
    print(json.dumps({"publications": per, "usual_us": round(best_usual / per * 1e6, 3),
                      "one_pass_us": round(best_fused / per * 1e6, 3),
                      "ratio": round(best_fused / best_usual, 3)}))


if __name__ == "__main__":
    main()
