"""A relay passes on the items its origin named (issue 27; journal/gapfill.py, relay/fetch.py):
over real processes (``seqrepair serve`` A, ``seqrepair relay`` B, each with its own
redis-server), a durable subscriber of B whose position lies below what B and A have both
trimmed is told ``Unrecoverable`` with the items A's trimmed-items summary names for its
selection (so ``--resync-on-unrecoverable`` can target them), as a subscriber of A is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from seqrepair.core.messages import Publication
from seqrepair.journal import Journal
from seqrepair.journal.trimsummary import record_trim

from .conftest import ComponentProcess, wait_for
from .test_relay import (
    RelayProcess,
    expected,
    lost_upstream_while_live,
    publish,
)
from .test_relay_fetch import FAST, durable, took_and_left, until_through

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_numbers_trimmed_at_the_relay_and_the_origin_name_the_origin_s_items(
    redises: list[str], tmp_path: Path
) -> None:
    """A trims 51..200 through its retention summary, B trims past 300: B fetches 51.. from
    A, A answers ``trimmed`` naming the /w/# items of 51..200 (the summary knows them), and
    B's subscriber's ``Unrecoverable`` carries exactly those (not the /x/ ones, outside its
    pattern); then it gets exactly /w/# after 200."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--retain-count",
                     "20", "--retention-interval", "0.3", *FAST).start()
    first: list[Publication] = []
    later: list[Publication] = []
    try:
        b.wait_upstream()
        took_and_left(a, b, a_redis, "/w/#", first)
        # 51..200 on the /w/ topics but /w/a/4: what A names must be what those numbers held
        publish(a.url, "feed.a", 150, after=50)
        publish(a.url, "feed.a", 250, after=200)
        want = [w for w in expected(a_redis, "feed.a", "/w/#") if w[1] > 200]
        with Journal.from_url(a_redis) as journal:
            held = {p.topic for p in journal.read_range("feed.a", 51, 200)}
            record_trim(journal, "feed.a", 1, 200)  # as retention does before it trims
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
    [lost] = again.unrecoverable
    assert (lost.source, lost.reason) == ("feed.a", "trimmed"), lost
    assert lost.items == tuple(sorted(t for t in held if t.startswith("/w/"))), lost
    assert lost.items
    assert "/x/c/3" in held


def test_numbers_lost_upstream_while_a_subscriber_stays_attached_name_the_items(
    redises: list[str], tmp_path: Path
) -> None:
    """The relay stays up with a live subscriber while its upstream goes away and the origin
    journals, then trims through its retention summary, numbers the relay never got: the
    relay's own upstream link is told ``Unrecoverable`` naming their /w/# items, journals
    them as lost with those items, and its subscriber's ``Unrecoverable`` carries them (was:
    no items) before it gets what came after, once, in order."""
    # its subscribers see every token, as B's upstream link does: the items the marker keeps
    # are topics only, named to a link that sees less by none (test_relay_lost_items_hidden)
    topics = ["/w/a/1", "/w/b/2", "/x/c/3", "/w/z/9", "/x/d/5"]
    got, before, after, live, b = lost_upstream_while_live(
        redises, tmp_path, FAST, ("--default-grant", "*", *FAST),
        [Publication(topics[i % 5] if i < 40 else "/w/a/1", "feed.t", i + 1, fields={"n": i})
         for i in range(10, 110)], summarize=True)
    assert [(p.topic, p.source_seq) for p in got] == before + after
    lost = [u for u in live.unrecoverable if u.source == "feed.t"]
    assert [u.reason for u in lost] == ["trimmed"], (lost, b.log_text()[-2000:])
    # what the trimmed span (1..40, summarized whole) held on /w/#: /w/z/9 only after 10
    # (never delivered live), not the /x/ topics
    assert lost[0].items == ("/w/a/1", "/w/a/4", "/w/b/2", "/w/z/9"), lost
