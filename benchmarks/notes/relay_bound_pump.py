"""Throwaway microbenchmark: one batch link's ``offer_many`` + ``pump`` of 256-publication
runs, us per publication, best of 7 (notes/relay-bound.md, loop31). Run it with main's tree
and this one first on ``PYTHONPATH`` to compare."""

from __future__ import annotations

import time
from types import SimpleNamespace

from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer


class Sender:
    credit = 0

    def send(self, _message: object) -> SimpleNamespace:
        self.credit -= 1
        return SimpleNamespace(pending=10)


def make() -> SubscriberLink:
    link = SubscriberLink(
        name="l", address="/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(32, 1.0), context=LinkContext(32, 65536, max_bytes=64 << 20),
        batch=True, max_batch=256, max_pending=1 << 20, source_bits=lambda _s: 64)
    link.attach(Sender())
    return link


def main() -> None:
    pubs = [Publication("/load/x", "bench", i, PublishType.UPDATE, {"n": i, "price": 1.5},
                        timestamp=1.0) for i in range(1, 257)]
    offers = [(p, encode_entry(p, lambda _s: 64)) for p in pubs]
    best = 9.0
    for _ in range(7):
        link = make()
        start = time.perf_counter()
        for _ in range(200):
            link.offer_many(list(offers), 1.0)
            link.sender.credit = 10
            link.pump(1.0)
        best = min(best, time.perf_counter() - start)
    print(f"offer+pump {best / 200 / 256 * 1e6:.3f} us/pub")


if __name__ == "__main__":
    main()
