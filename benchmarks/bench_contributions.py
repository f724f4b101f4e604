"""What the source-name check (``own-source``) costs the component's ingest, as ratios in
one run.

Every publication a publishing link sends is checked (:meth:`Contributions.check_publications`):
its source against the policy (cached per link and policy), and its fields for the reserved
``$contributor``/``$contribution`` keys. Figures, each against a baseline timed in the same
run, rounds alternating:

* the time to check the publications of a 256-publication ``PUBLICATIONS`` message against
  the time to decode it (ingest does both for every message; the journal append, not timed
  here, costs more than either): the check's share of the decoding cost;
* the same for a message whose publications all took in contributions (each one's claim is
  matched against the desk).

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_contributions.py [--n 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
from types import SimpleNamespace

from bench_core import best_rates
from proton import Message

from seqrepair.amqp.component.config import ComponentConfig
from seqrepair.amqp.component.contributions import Contributions
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.core.contributions import CONTRIBUTION_FIELD, CONTRIBUTOR_FIELD
from seqrepair.core.messages import Publication
from seqrepair.core.policy import Policy

BATCH = 256
POLICY = Policy.from_json({"allow": [
    {"actors": ["*"], "operations": ["publish"]},
    {"actors": ["alice"], "operations": ["own-source"], "sources": ["feed.*"]},
    {"actors": ["bob"], "operations": ["contribute"], "sources": ["feed.*"]},
]})


def message(fields: list[dict[str, object]]) -> Message:
    pubs = [Publication(f"/weather/wind/{i % 8}", "feed.a", i + 1, fields=f)
            for i, f in enumerate(fields)]
    wire = Message()
    wire.decode(encode_frames(pubs).encode())
    return wire


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200, help="messages per round")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    component = SimpleNamespace(config=ComponentConfig(), stats={},
                                subscriptions=SimpleNamespace(policy=lambda: POLICY))
    desk = Contributions(component)  # type: ignore[arg-type]
    pending = [desk.desk.open("feed.a", "bob", "/weather/x", 0.0) for _ in range(BATCH)]
    plain = message([{"speed": i, "gust": None} for i in range(BATCH)])
    contributed = message([{"speed": i, CONTRIBUTOR_FIELD: "bob", CONTRIBUTION_FIELD: p.id}
                           for i, p in enumerate(pending)])
    receiver = SimpleNamespace(principal="alice")

    def decode(msg: Message) -> object:
        def body() -> object:
            for _ in range(args.n):
                frames = Decoder(link_bits=16).decode(msg)
            return frames
        return body

    def check(msg: Message) -> object:
        frames = Decoder(link_bits=16).decode(msg)

        def body() -> object:
            for _ in range(args.n):
                desk.check_publications(receiver, frames)
            return frames
        return body

    rates = best_rates(args.n * BATCH, args.repeat, {
        "decode": decode(plain), "check": check(plain),
        "decode (contributed)": decode(contributed), "check (contributed)": check(contributed),
    })
    print(f"python {platform.python_version()}, {args.n} x {BATCH} publications, best of "
          f"{args.repeat}")
    for name, rate in rates.items():
        print(f"  {name:22s} {rate:14,.0f} publications/s")
    print(f"  check time / decode time, plain:       {rates['decode'] / rates['check']:.4f}")
    print(f"  check time / decode time, contributed: "
          f"{rates['decode (contributed)'] / rates['check (contributed)']:.4f}")


if __name__ == "__main__":
    main()
