"""A relay serves what its own journal lacks from its upstream (issue 27; relay/fetch.py):
over real processes (``seqrepair serve`` A, ``seqrepair relay`` B and C, each with its own
redis-server, forced loss on the live links), a durable subscriber whose selection is wider
than what the relay selected, or whose position lies below the relay's retention trim, gets
exactly its selection from its position on, once, in order, as A's journal holds it; only
numbers A has trimmed too are Unrecoverable, named."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal import Journal
from seqrepair.journal.positions import create_position, link_durable
from seqrepair.journal.selection import NotSelected

from .conftest import ComponentProcess, wait_for
from .test_relay import LOSS, RelayProcess, expected, publish, resumed, selections

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

FAST = ("--heartbeat", "0.2")


def durable(url: str, pattern: str, got: list[Publication]) -> Subscriber:
    return Subscriber(url, pattern, on_publication=got.append, link_name="wide", durable=True,
                      heartbeat_interval=0.2, max_reconnect_delay=0.5).start()


def took_and_left(a: ComponentProcess, b: RelayProcess, a_redis: str, pattern: str,
                  first: list[Publication], count: int = 50) -> None:
    """A durable subscriber of B on ``pattern`` takes all it gets of the first ``count``
    publications of feed.a published at A (into ``first``), then goes away."""
    sub = durable(b.url, pattern, first)
    assert sub.wait_connected(20)
    publish(a.url, "feed.a", count)
    assert wait_for(lambda: len(first) >= len(expected(a_redis, "feed.a", pattern)), 30)
    time.sleep(1.0)  # its ACKs reach the relay: its position is where it got to
    sub.stop()


def until_through(got: list[Publication], want: list[tuple[str, int]], proc: RelayProcess
                  ) -> None:
    assert wait_for(lambda: bool(got) and got[-1].source_seq >= want[-1][1], 60), (
        len(got), len(want), proc.log_text()[-3000:])
    time.sleep(0.5)  # nothing more may come


def test_a_wider_subscriber_asking_after_n_gets_what_the_relay_did_not_select(
    redises: list[str], tmp_path: Path
) -> None:
    """B aggregates; one subscriber keeps it on /w/a/*. A durable subscriber that took /w/a/*
    through N comes back on /w/# (wider): B widens, and its replay "after N" meets numbers B
    did not select: B fetches them from A for it alone. It gets exactly /w/# from N on."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "21").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--aggregate", "--linger", "0.3",
                     "--context-retention", "0.3", *LOSS, "--drop-seed", "22").start()
    stays: list[Publication] = []
    first: list[Publication] = []
    later: list[Publication] = []
    keeper = Subscriber(b.url, "/w/a/*", on_publication=stays.append, link_name="stays",
                        heartbeat_interval=0.2).start()
    try:
        assert keeper.wait_connected(20)
        assert wait_for(lambda: selections(b.log_text())[-1:] == ["['/w/a/*'] []"], 20)
        b.wait_upstream()
        sub = durable(b.url, "/w/a/*", first)
        assert sub.wait_connected(20)
        publish(a.url, "feed.a", 300)
        narrow = expected(a_redis, "feed.a", "/w/a/*")
        assert wait_for(lambda: len(first) >= len(narrow), 30), (len(first), len(narrow))
        time.sleep(1.0)  # its ACKs reach the relay: its position is where it got to
        sub.stop()
        publish(a.url, "feed.a", 300, after=300)  # B selects /w/a/* only
        assert wait_for(lambda: len(stays) >= len(expected(a_redis, "feed.a", "/w/a/*")), 30)
        wide = durable(b.url, "/w/#", later)  # refused until B carries /w/#, then replayed
        assert wide.wait_connected(30)
        publish(a.url, "feed.a", 100, after=600)
        want = expected(a_redis, "feed.a", "/w/#")
        until_through(later, want, b)
        wide.stop()
    finally:
        keeper.stop()
        b.stop()
        a.stop()
    start = later[0].source_seq
    assert not [w for w in want if first[-1].source_seq < w[1] < start]  # nothing skipped
    assert [(p.topic, p.source_seq) for p in later] == [w for w in want if w[1] >= start]
    assert [p.fields["n"] for p in later] == [n - 1 for _t, n in want if n >= start]
    assert [p for p in later if p.topic.startswith("/w/b/") and p.source_seq <= 600]
    assert not wide.unrecoverable
    assert wide.stats().unrecoverable == 0
    assert "fetching from upstream what the journal lacks" in b.log_text()
    # what was fetched was passed through, not journaled: B's journal still says not selected
    with Journal.from_url(b_redis) as journal:
        held = [p.source_seq for p in journal.read_range("feed.a", 1, 600)]
    assert held == [n for _t, n in narrow] + [
        n for _t, n in expected(a_redis, "feed.a", "/w/a/*") if 300 < n <= 600]


def test_a_chain_fetches_hop_by_hop(redises: list[str], tmp_path: Path) -> None:
    """A -> B -> C, both aggregating, kept on /w/a/*; the wider subscriber comes back at C:
    C lacks the numbers, asks B, which lacks them too and asks A. It gets exactly /w/#
    from its position on, once, in order."""
    a_redis, b_redis, c_redis = redises
    a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "23").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--aggregate", "--linger", "0.3",
                     "--context-retention", "0.3", *LOSS, "--drop-seed", "24").start()
    c = RelayProcess(c_redis, tmp_path, b.url, "C", "--aggregate", "--linger", "0.3",
                     "--context-retention", "0.3", *LOSS, "--drop-seed", "25").start()
    stays: list[Publication] = []
    first: list[Publication] = []
    later: list[Publication] = []
    keeper = Subscriber(c.url, "/w/a/*", on_publication=stays.append, link_name="stays",
                        heartbeat_interval=0.2, max_reconnect_delay=0.5).start()
    try:
        assert keeper.wait_connected(30)
        assert wait_for(lambda: selections(b.log_text())[-1:] == ["['/w/a/*'] []"], 20)
        b.wait_upstream()
        c.wait_upstream()
        sub = durable(c.url, "/w/a/*", first)
        assert sub.wait_connected(20)
        publish(a.url, "feed.a", 300)
        narrow = expected(a_redis, "feed.a", "/w/a/*")
        assert wait_for(lambda: len(first) >= len(narrow), 30), (len(first), len(narrow))
        time.sleep(1.0)
        sub.stop()
        publish(a.url, "feed.a", 300, after=300)
        assert wait_for(lambda: len(stays) >= len(expected(a_redis, "feed.a", "/w/a/*")), 30)
        wide = durable(c.url, "/w/#", later)
        assert wide.wait_connected(30)
        publish(a.url, "feed.a", 100, after=600)
        want = expected(a_redis, "feed.a", "/w/#")
        until_through(later, want, c)
        wide.stop()
    finally:
        keeper.stop()
        for proc in (c, b, a):
            proc.stop()
    start = later[0].source_seq
    assert not [w for w in want if first[-1].source_seq < w[1] < start]
    assert [(p.topic, p.source_seq) for p in later] == [w for w in want if w[1] >= start]
    assert not wide.unrecoverable
    assert "fetching from upstream what the journal lacks" in c.log_text()
    assert "fetching from upstream what the journal lacks" in b.log_text()


def test_a_subscriber_below_the_relay_s_trim_gets_the_rest_from_upstream(
    redises: list[str], tmp_path: Path
) -> None:
    """B keeps only its newest 20 entries; a durable subscriber away meanwhile comes back with
    its position far below B's trim: B fetches from A what it trimmed, then serves its own
    journal. Exactly /w/# from its position on, no loss reported."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "26").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--retain-count",
                     "20", "--retention-interval", "0.3", *LOSS, "--drop-seed", "27").start()
    first: list[Publication] = []
    later: list[Publication] = []
    try:
        b.wait_upstream()
        took_and_left(a, b, a_redis, "/w/#", first)
        publish(a.url, "feed.a", 400, after=50)
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.info("feed.a").trimmed_through > 300, 30), (
                b.log_text()[-2000:])
        again = durable(b.url, "/w/#", later)
        want = expected(a_redis, "feed.a", "/w/#")
        until_through(later, want, b)
        again.stop()
    finally:
        b.stop()
        a.stop()
    resumed(first, later, want)
    assert not again.unrecoverable
    assert "fetching from upstream what the journal lacks" in b.log_text()


def test_numbers_trimmed_at_the_relay_and_the_origin_are_unrecoverable_and_named(
    redises: list[str], tmp_path: Path
) -> None:
    """As above, but A has trimmed through 200 too: the subscriber is told (Unrecoverable,
    trimmed, feed.a), the relay's log names the numbers, and it gets exactly /w/# after
    200, once, in order."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--retain-count",
                     "20", "--retention-interval", "0.3", *FAST).start()
    first: list[Publication] = []
    later: list[Publication] = []
    try:
        b.wait_upstream()
        took_and_left(a, b, a_redis, "/w/#", first)
        publish(a.url, "feed.a", 400, after=50)
        want = [w for w in expected(a_redis, "feed.a", "/w/#") if w[1] > 200]
        with Journal.from_url(a_redis) as journal:
            journal.trim_through("feed.a", 200, now=time.time())
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.info("feed.a").trimmed_through > 300, 30)
        again = durable(b.url, "/w/#", later)
        until_through(later, want, b)
        again.stop()
    finally:
        b.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in later] == want
    lost = [(u.source, u.reason) for u in again.unrecoverable]
    assert lost == [("feed.a", "trimmed")], again.unrecoverable
    # a new process: it had delivered nothing of it yet (``after`` None), then everything
    assert again.unrecoverable[0].after is None
    assert re.search(r"gapfill\.trimmed_upstream_too .*numbers=\d+\.\.200 .*source=feed\.a",
                     b.log_text()), b.log_text()[-3000:]


def test_a_fetch_asks_for_the_subscriber_s_grant_not_the_relay_s(
    redises: list[str], tmp_path: Path
) -> None:
    """A grants every token; B carries /w/# with every token, and grants its subscribers t1
    only. A subscriber below B's trim is fetched what it lacks with its own grant (A's log:
    the fetch link attached granted t1 alone), so nothing under t2 reaches it."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST, "--default-grant", "*").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--retain-count",
                     "20", "--retention-interval", "0.3", "--default-grant", "t1",
                     *FAST).start()
    tokens = (None, "t1", "t2")
    first: list[Publication] = []
    later: list[Publication] = []
    try:
        b.wait_upstream()
        sub = durable(b.url, "/w/#", first)
        assert sub.wait_connected(20)
        publish(a.url, "feed.a", 50, tokens=tokens)
        seen = expected(a_redis, "feed.a", "/w/#", (None, "t1"))
        assert wait_for(lambda: len(first) >= len(seen), 30), (len(first), len(seen))
        time.sleep(1.0)
        sub.stop()
        publish(a.url, "feed.a", 400, after=50, tokens=tokens)
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.info("feed.a").trimmed_through > 300, 30)
        again = durable(b.url, "/w/#", later)
        want = expected(a_redis, "feed.a", "/w/#", (None, "t1"))
        until_through(later, want, b)
        again.stop()
    finally:
        b.stop()
        a.stop()
    resumed(first, later, want)
    assert {p.permtoken for p in later} == {None, "t1"}
    assert not again.unrecoverable
    fetch_links = [line for line in a.log_text().splitlines()
                   if "link attached" in line and "link=relay.B.fetch." in line]
    assert fetch_links
    assert all("grants=['t1']" in line for line in fetch_links), fetch_links
    # the relay's own link sees every token
    assert any("link=relay.B " in line and "grants=['*']" in line
               for line in a.log_text().splitlines() if "link attached" in line)


def test_a_relay_that_just_started_serves_a_durable_position_from_before_it(
    redises: list[str], tmp_path: Path
) -> None:
    """B starts with an empty journal after A has published 300: B's journal records 1..300
    as before its subscription (not as not selected, which a replay would pass over in
    silence). A durable subscriber whose position at B is 100 (made by its operator) gets
    everything of /w/# after 100, the part before B from A; a new subscriber is not sent
    what precedes it."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b: RelayProcess | None = None
    later: list[Publication] = []
    fresh: list[Publication] = []
    try:
        publish(a.url, "feed.a", 300)
        b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", *FAST).start()
        b.wait_upstream()
        newcomer = Subscriber(b.url, "/w/#", on_publication=fresh.append, link_name="new",
                              heartbeat_interval=0.2).start()
        assert newcomer.wait_connected(20)
        publish(a.url, "feed.a", 100, after=300)
        want = expected(a_redis, "feed.a", "/w/#")
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.high_water("feed.a") >= want[-1][1], 30)
            marker = next(iter(journal.iter_entries("feed.a", 1, 1)))
        assert isinstance(marker, NotSelected)
        assert (marker.first, marker.last, marker.before) == (1, 300, True)
        client = redis.Redis.from_url(b_redis)
        assert create_position(client, link_durable("wide"), {"feed.a": 100})
        client.close()
        again = durable(b.url, "/w/#", later)
        until_through(later, want, b)
        again.stop()
        newcomer.stop()
    finally:
        if b is not None:
            b.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in later] == [w for w in want if w[1] > 100]
    assert not again.unrecoverable
    assert [(p.topic, p.source_seq) for p in fresh] == [w for w in want if w[1] > 300]
    assert not newcomer.unrecoverable


def test_many_subscribers_fetching_at_once_share_a_bounded_number_of_upstream_links(
    redises: list[str], tmp_path: Path
) -> None:
    """Eight durable subscribers far below B's trim come back at once: B runs at most four
    upstream fetches at a time (the rest wait their turn), and each gets exactly its
    selection after its position, once, in order."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--retain-count",
                     "20", "--retention-interval", "0.3", *FAST).start()
    patterns = ["/w/#", "/w/a/*", "/w/b/#", "/w/#"] * 2
    got: list[list[Publication]] = [[] for _ in patterns]
    subs: list[Subscriber] = []
    try:
        b.wait_upstream()
        publish(a.url, "feed.a", 1000)
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.info("feed.a").trimmed_through > 900, 30)
        client = redis.Redis.from_url(b_redis)
        for i in range(len(patterns)):
            assert create_position(client, link_durable(f"many{i}"), {"feed.a": 10 * i})
        client.close()
        subs = [Subscriber(b.url, pattern, on_publication=got[i].append, link_name=f"many{i}",
                           durable=True, heartbeat_interval=0.2).start()
                for i, pattern in enumerate(patterns)]
        wants = [[w for w in expected(a_redis, "feed.a", pattern) if w[1] > 10 * i]
                 for i, pattern in enumerate(patterns)]
        assert wait_for(lambda: all(len(g) >= len(w) for g, w in zip(got, wants, strict=True)),
                        90), ([len(g) for g in got], b.log_text()[-3000:])
        time.sleep(0.5)
    finally:
        for sub in subs:
            sub.stop()
        b.stop()
        a.stop()
    for i, (pubs, want) in enumerate(zip(got, wants, strict=True)):
        assert [(p.topic, p.source_seq) for p in pubs] == want, i
        assert not subs[i].unrecoverable
    running = [int(n) for n in re.findall(r"fetching from upstream what the journal lacks .*"
                                          r"running=(\d+)", b.log_text())]
    assert len(running) >= len(patterns)
    assert max(running) <= 4


def test_with_its_upstream_gone_a_relay_names_what_it_lacks_and_sends_what_it_holds(
    redises: list[str], tmp_path: Path
) -> None:
    """As the wider subscriber above, but A is gone when it comes back: B cannot fetch, so
    each run of numbers B lacks for it is Unrecoverable (trimmed), named, and everything B's
    journal holds for it still arrives, once, in order."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--aggregate", "--linger", "0.3",
                     "--context-retention", "0.3", *FAST).start()
    stays: list[Publication] = []
    first: list[Publication] = []
    later: list[Publication] = []
    keeper = Subscriber(b.url, "/w/a/*", on_publication=stays.append, link_name="stays",
                        heartbeat_interval=0.2).start()
    try:
        assert keeper.wait_connected(20)
        b.wait_upstream()
        took_and_left(a, b, a_redis, "/w/a/*", first, 100)
        publish(a.url, "feed.a", 100, after=100)
        held = expected(a_redis, "feed.a", "/w/a/*")
        assert wait_for(lambda: len(stays) >= len(held), 30)
        a.kill()
        wide = durable(b.url, "/w/#", later)  # B widens (its upstream is gone: no matter)
        assert wait_for(lambda: bool(later) and later[-1].source_seq >= held[-1][1], 60), (
            len(later), b.log_text()[-3000:])
        time.sleep(0.5)
        wide.stop()
    finally:
        keeper.stop()
        b.stop()
        a.stop()
    start = first[-1].source_seq
    # everything B held for it, in order, once; nothing it did not hold
    assert [(p.topic, p.source_seq) for p in later if p.source_seq > start] == [
        h for h in held if h[1] > start]
    told = [u for u in wide.unrecoverable if u.source == "feed.a"]
    assert told
    assert {u.reason for u in told} == {"trimmed"}
    assert "the upstream did not take the fetch link within 10 s" in b.log_text()
    assert "gapfill.not_selected" in b.log_text()
