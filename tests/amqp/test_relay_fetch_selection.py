"""A fetch through an aggregating relay asks for the asking subscriber's selection alone
(issue 27; relay/relay.py ``_fetch_link``, relay/fetch.py): over real processes (``seqrepair
serve`` A, ``seqrepair relay`` B, each with its own redis-server), B carries /w/# and /x/#
(its union); a durable subscriber on /w/a/* whose position lies below B's trim is fetched what
B lacks on /w/a/* only (A's log: the fetch links attached on that pattern, never on B's union),
gets exactly /w/a/*, and nothing fetched is journaled at B (its journal is what it was)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from seqrepair.core.messages import Publication
from seqrepair.journal import Journal

from .conftest import ComponentProcess, wait_for
from .test_relay import RelayProcess, expected, publish, resumed
from .test_relay_fetch import FAST, durable, took_and_left, until_through

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def _entries(redis_url: str) -> list[object]:
    with Journal.from_url(redis_url) as journal:
        trimmed = journal.info("feed.a").trimmed_through
        return list(journal.iter_entries("feed.a", trimmed + 1))


def _settled_entries(b_redis: str, a_redis: str, quiet: float = 1.0) -> list[object]:
    """B's entries of feed.a once B journaled all that A holds and its retention (every 0.3
    s) left them alone for ``quiet`` seconds: a loaded machine can still be journaling and
    trimming what came when a fixed sleep ends (30 s ceiling)."""
    with Journal.from_url(a_redis) as origin, Journal.from_url(b_redis) as journal:
        high = origin.high_water("feed.a")
        assert wait_for(lambda: journal.high_water("feed.a") >= high, 30), (
            journal.info("feed.a"), high)
    last, since = _entries(b_redis), time.monotonic()
    deadline = since + 30
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "B's journal kept changing"
        time.sleep(0.1)
        now = _entries(b_redis)
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_a_fetch_asks_for_the_subscriber_s_selection_not_the_relay_s_union(
    redises: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "/x/#",
                     "--retain-count", "20", "--retention-interval", "0.3", *FAST).start()
    first: list[Publication] = []
    later: list[Publication] = []
    try:
        b.wait_upstream()
        took_and_left(a, b, a_redis, "/w/a/*", first)
        publish(a.url, "feed.a", 400, after=50)
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.info("feed.a").trimmed_through > 300, 30)
        held = _settled_entries(b_redis, a_redis)  # retention done with what came
        want = expected(a_redis, "feed.a", "/w/a/*")
        again = durable(b.url, "/w/a/*", later)
        until_through(later, want, b)
        again.stop()
        after = _entries(b_redis)
    finally:
        b.stop()
        a.stop()
    resumed(first, later, want)
    assert all(p.topic.startswith("/w/a/") for p in later)
    assert not again.unrecoverable
    fetch_links = [line for line in a.log_text().splitlines()
                   if "link attached" in line and "link=relay.B.fetch." in line]
    assert fetch_links
    assert all("topic=/w/a/*" in line for line in fetch_links), fetch_links
    # B's own upstream link carries its union; what it fetched is not in its journal
    assert any("link=relay.B " in line and "topic=/w/#" in line
               for line in a.log_text().splitlines() if "link attached" in line)
    assert after == held
