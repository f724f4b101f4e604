"""Image request benchmark: the journal fold vs a plain Python fold, in the same run.

    .venv/bin/python benchmarks/bench_images.py [--quick]

A journal of N publications of one source over T items (an image per item now and then,
updates and corrections between) in an embedded redis-server. Measured, interleaved, best of
several runs:

* baseline: read the whole journal forward (``Journal.iter_range``) and fold every publication
  into an :class:`ImageCache` (what a subscriber would do from the start);
* ``ImageFold`` for the pattern ``/#`` (every item: reads back until each item's latest image,
  a page per step, as the component does in its repair turns);
* ``ImageFold`` for one topic (stops at that item's latest image).

Ratios are items/s of the fold over the baseline's (higher is better); the fold's answer is
checked equal to the baseline's cache first.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable

from seqrepair.core.image import ImageCache
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.snapshot import ImageFrame, ImageRequest
from seqrepair.journal import EmbeddedRedis, Journal
from seqrepair.journal.imagefold import ImageFold


def history(n: int, items: int) -> list[Publication]:
    rng = random.Random(7)
    pubs = []
    for seq in range(1, n + 1):
        topic = f"/bench/item/{rng.randrange(items)}"
        roll = rng.random()
        ptype = "image" if roll < 0.02 else "correction" if roll < 0.1 else "update"
        fields = ({"a": seq, "b": seq % 7, "c": None} if ptype == "image"
                  else {rng.choice("abcd"): seq})
        pubs.append(Publication(topic, "bench", seq, ptype, fields))
    return pubs


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, items, repeat = (20_000, 200, 3) if args.quick else (100_000, 1_000, 5)
    with EmbeddedRedis() as server, Journal.from_url(server.url) as journal:
        pubs = history(n, items)
        for start in range(0, n, 5000):
            journal.append(pubs[start:start + 5000], 32)
        entitlement = Entitlement.everything()
        allowed: dict[tuple[str, str | None], bool] = {}

        def everything(pub: Publication) -> bool:  # as SubscriberLink.allows: remembered
            key = (pub.topic, pub.permtoken)
            hit = allowed.get(key)
            if hit is None:
                hit = allowed[key] = entitlement.allows(pub)
            return hit

        def baseline() -> dict[str, dict[str, object]]:
            cache = ImageCache()
            for pub in journal.iter_range("bench", 1):
                cache.apply(pub)
            return cache.snapshot()

        def fold(request: ImageRequest) -> dict[str, dict[str, object]]:
            out = {}
            for step in ImageFold(journal, request, {"bench": n}, everything).steps():
                if isinstance(step, ImageFrame):
                    out[step.publication.topic] = dict(step.publication.fields)
            return out

        whole = baseline()
        assert fold(ImageRequest(patterns=["/#"])) == whole, "the fold disagrees"
        one = "/bench/item/3"
        assert fold(ImageRequest(topics=[one])) == {one: whole[one]}
        base_t, all_t, one_t = [], [], []
        for _ in range(repeat):  # interleaved: a load change hits all three alike
            base_t.append(timed(baseline))
            all_t.append(timed(lambda: fold(ImageRequest(patterns=["/#"]))))
            one_t.append(timed(lambda: fold(ImageRequest(topics=[one]))))
        base, every, single = min(base_t), min(all_t), min(one_t)
        print(f"journal: {n} publications, {items} items, best of {repeat}")
        print(f"baseline forward fold of the whole journal: {base:.3f} s")
        print(f"ImageFold /# (every item):   {every:.3f} s   ratio {base / every:.2f}")
        print(f"ImageFold one topic:          {single:.4f} s   ratio {base / single:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
