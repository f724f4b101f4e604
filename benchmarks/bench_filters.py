"""What subscription filters cost the component's fan-out decision, as ratios in one run.

The fan-out asks each link ``SubscriberLink.allows(pub)`` for every publication; the answer is
remembered per (topic, permission token), and per source and publish type as well when the
link has filters. Figures, each against a baseline timed in the same run, rounds alternating:

* a filtered link's decision (two basic filters: subject suffix and publish type) vs an
  unfiltered link's, over the same stream of publications (the cached path);
* the same, with the cache emptied before every round (each distinct key decided once: the
  cost of evaluating the filters themselves);
* ``Entitlement.allows`` with the two filters vs without them (uncached).

Run: .venv/bin/python benchmarks/bench_filters.py [--n 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable

from bench_core import best_rates

from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer

FILTERS = [
    {"dialect": "basic", "type": "suffix", "property": "subject", "value": "/LEMD"},
    {"dialect": "basic", "type": "exact", "property": "type", "value": "update"},
]
AIRPORTS = ("LEMD", "LFPG", "EGLL", "EDDF", "EHAM", "LIRF", "LOWW", "LSZH")
KINDS = ("wind", "rain", "temp", "visibility")
PTYPES = ("update", "update", "update", "correction", "image")


def stream(n: int) -> list[Publication]:
    """``n`` publications over 32 topics, 4 sources and three publish types."""
    return [
        Publication(f"/weather/{KINDS[i % 4]}/{AIRPORTS[(i // 4) % 8]}", f"feed.{i % 4}", i + 1,
                    PTYPES[i % 5], {"n": i})
        for i in range(n)
    ]


def link(entitlement: Entitlement) -> SubscriberLink:
    return SubscriberLink(
        name="bench", address="/weather/#", entitlement=entitlement,
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 16), batch=True,
        max_batch=256, max_pending=1000, source_bits=lambda _s: 64,
    )


def deciding(pubs: list[Publication], decide: Callable[[Publication], bool],
             before: Callable[[], None] = lambda: None) -> Callable[[], object]:
    def body() -> int:
        before()
        return sum(1 for pub in pubs if decide(pub))

    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pubs = stream(args.n)
    plain = Entitlement(topics=("/weather/#",))
    filtered = Entitlement(topics=("/weather/#",), filters=FILTERS)
    plain_link, filtered_link = link(plain), link(filtered)
    rates = best_rates(args.n, args.repeat, {
        "unfiltered link (cached)": deciding(pubs, plain_link.allows),
        "filtered link (cached)": deciding(pubs, filtered_link.allows),
        "unfiltered link (cache emptied each round)": deciding(
            pubs, plain_link.allows, plain_link._allowed.clear),
        "filtered link (cache emptied each round)": deciding(
            pubs, filtered_link.allows, filtered_link._allowed.clear),
        "Entitlement.allows, no filters": deciding(pubs, plain.allows),
        "Entitlement.allows, two filters": deciding(pubs, filtered.allows),
    })
    print(f"# filter benchmarks: n={args.n}, best of {args.repeat}, "
          f"Python {platform.python_version()}")
    pairs = [
        ("filtered link (cached)", "unfiltered link (cached)"),
        ("filtered link (cache emptied each round)", "unfiltered link (cache emptied each round)"),
        ("Entitlement.allows, two filters", "Entitlement.allows, no filters"),
    ]
    for figure, baseline in pairs:
        print(f"{baseline:<44} {rates[baseline]:>12,.0f} /s  (baseline)")
        ratio = rates[figure] / rates[baseline]
        print(f"{figure:<44} {rates[figure]:>12,.0f} /s  ratio {ratio:.3f}")
    passed = sum(1 for pub in pubs if filtered.allows(pub))
    print(f"the filters pass {passed} of {len(pubs)} publications")


if __name__ == "__main__":
    main()
