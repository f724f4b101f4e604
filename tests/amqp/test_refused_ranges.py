"""Link ranges the component refuses lose nothing while the journal holds them.

``serve --max-gap-range 3`` refuses (``GAP-ERROR refused``) every requested range wider than 3
numbers. The library follows the component's ``seqrepair-max-gap-range``, so its own requests
fit; a subscriber that does not (an older or foreign client, here the library with that reading
disabled) coalesces gaps into wider ranges and gets them refused. It used to give those up as
link-range ``Unrecoverable`` events naming no publication while the journal held every one;
it now asks for them by source. Real parts: a redis-server, the component process, publishers
and a subscriber over proton on loopback, 40% of the component's link frames dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs
import pytest

from seqrepair.amqp.client import acks
from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

PER_SOURCE = 200
SOURCES = ("feed.a", "feed.b")


@pytest.mark.parametrize("follows_the_component", [False, True])
def test_refused_link_ranges_are_repaired_by_source_and_nothing_is_lost(
    component: Callable[..., ComponentProcess], redis_url: str,
    monkeypatch: pytest.MonkeyPatch, follows_the_component: bool,
) -> None:
    if not follows_the_component:
        reading = acks.numbering_from_reply
        monkeypatch.setattr(
            acks, "numbering_from_reply",
            lambda *a, **k: attrs.evolve(reading(*a, **k), max_gap_range=None),
        )
    comp = component("--max-gap-range", "3", "--drop-rate", "0.4", "--drop-seed", "5",
                     "--heartbeat", "0.2")
    got: list[Publication] = []
    with Subscriber(comp.url, "/#", link_name="uncapped", heartbeat_interval=0.2,
                    on_publication=got.append) as sub:
        assert sub.connected.wait(10)
        assert wait_for(lambda: sub.stub.max_request_span != 10_000 or not follows_the_component)
        expected_span = 3 if follows_the_component else 10_000
        assert sub.stub.max_request_span == expected_span
        journal = Journal.from_url(redis_url)
        publishers = [Publisher(comp.url, s, journal=journal).start() for s in SOURCES]
        try:
            for first in range(0, PER_SOURCE, 40):
                for publisher in publishers:
                    publisher.publish_many(
                        [("/t", {"n": n}, "update") for n in range(first, first + 40)])
            assert all(p.flush(30) for p in publishers)
        finally:
            for publisher in publishers:
                publisher.close()
        done = wait_for(lambda: len(got) >= PER_SOURCE * len(SOURCES), 90)
        time.sleep(0.5)  # a duplicate would arrive now
        report = sub.stats().as_dict()
        unrecoverable = list(sub.unrecoverable)
        stub_stats = sub.stub.stats
    missing = {s: sorted(set(range(1, PER_SOURCE + 1))
                         - {p.source_seq for p in got if p.source == s})[:20] for s in SOURCES}
    assert done, (report, stub_stats, missing, unrecoverable[:5], comp.log_text()[-3000:])
    for source in SOURCES:
        # every publication exactly once, in order, per source
        assert [p.source_seq for p in got if p.source == source] == list(
            range(1, PER_SOURCE + 1)), source
    assert len(got) == PER_SOURCE * len(SOURCES)
    assert unrecoverable == [], (report, unrecoverable[:5])
    assert report["unrecoverable"] == 0, report
    assert report["gaps_detected"] > 0  # the drops did open gaps
    refusals = sum("gap request not answered" in line and "reason=refused" in line
                   for line in comp.log_text().splitlines())
    if follows_the_component:
        assert refusals == 0  # its ranges fit: none refused
    else:
        assert refusals > 0, comp.log_text()[-2000:]  # the path under test was taken
        assert report["source_requests_sent"] > 0
