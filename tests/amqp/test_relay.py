"""Fractal relays (XEP-0040 §1, §2.3) over real processes: ``seqrepair serve`` (A) and
``seqrepair relay`` chains (A -> B -> C), each with its own redis-server, forced loss on every
hop and a ``kill -9`` of the middle relay. The relays' subscribers must get exactly their
selection, once, in order, as A's journal holds it."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.core.topics import TopicPattern
from seqrepair.journal import EmbeddedRedis, Journal
from seqrepair.journal.selection import NotSelected
from seqrepair.journal.trimsummary import record_trim

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

LOSS = ("--drop-rate", "0.03", "--heartbeat", "0.2")


class RelayProcess(ComponentProcess):
    """``seqrepair relay`` in a child process (kill -9 and restart on the same port)."""

    kind = "relay"

    def __init__(self, redis_url: str, tmp: Path, upstream: str, name: str, *args: str) -> None:
        super().__init__(redis_url, tmp, *args)
        self.upstream = upstream
        self.name = name

    def command(self, ready: Path) -> list[str]:
        return [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "relay",
                "--listen", self._url, "--upstream", self.upstream, "--name", self.name,
                "--redis-url", self.redis_url, "--ready-file", str(ready), "--allow-anonymous",
                *self.args]

    def start(self) -> RelayProcess:
        super().start()
        return self

    def wait_upstream(self) -> None:
        """Until its upstream link is attached (what is published before is not its own)."""
        assert wait_for(lambda: "upstream link attached" in self.log_text(), 60), (
            self.log_text())


def expected(redis_url: str, source: str, pattern: str,
             tokens: tuple[str | None, ...] | None = None) -> list[tuple[str, int]]:
    """What A's journal holds of ``source`` on ``pattern`` (with one of ``tokens``, when
    given), in order."""
    with Journal.from_url(redis_url) as journal:
        hw = journal.high_water(source)
        match = TopicPattern(pattern).matches
        return [(p.topic, p.source_seq) for p in journal.read_range(source, 1, hw)
                if match(p.topic) and (tokens is None or p.permtoken in tokens)]


def publish(url: str, source: str, count: int, pace: float = 0.0, after: int = 0,
            tokens: tuple[str | None, ...] = (None,)) -> None:
    """``count`` publications of ``source`` after number ``after``, on five topics (two of
    them outside ``/w/#``) and the permission ``tokens`` in turn, ``pace`` seconds between
    batches of 50."""
    publisher = Publisher(url, source, start_after=after).start()
    topics = ["/w/a/1", "/w/b/2", "/x/c/3", "/w/a/4", "/x/d/5"]
    for start in range(after, after + count, 50):
        publisher.publish_many([(topics[i % len(topics)], {"n": i}, "update",
                                 tokens[i % len(tokens)])
                                for i in range(start, min(after + count, start + 50))])
        if pace:
            time.sleep(pace)
    assert publisher.flush(60)
    publisher.close()


def test_three_hop_chain_with_loss_and_a_killed_middle_relay(
    redises: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis, c_redis = redises
    a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "1").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", *LOSS,
                     "--drop-seed", "2").start()
    c = RelayProcess(c_redis, tmp_path, b.url, "C", "--subscribe", "/w/#", *LOSS,
                     "--drop-seed", "3").start()
    everything: list[Publication] = []
    filtered: list[Publication] = []
    subs = [Subscriber(c.url, "/w/#", on_publication=everything.append, link_name="all",
                       heartbeat_interval=0.2).start(),
            Subscriber(c.url, "/w/a/*", on_publication=filtered.append, link_name="some",
                       heartbeat_interval=0.2).start()]
    try:
        for sub in subs:
            assert sub.wait_connected(20)
        b.wait_upstream()
        c.wait_upstream()
        publisher = threading.Thread(target=publish, args=(a.url, "feed.a", 3000, 0.05))
        publisher.start()
        time.sleep(1.0)
        assert publisher.is_alive()
        b.kill()  # kill -9 of the middle relay, mid-stream
        time.sleep(0.5)
        b.start()
        publisher.join(120)
        with Journal.from_url(a_redis) as journal:
            assert journal.high_water("feed.a") == 3000
        want_all = expected(a_redis, "feed.a", "/w/#")
        want_some = expected(a_redis, "feed.a", "/w/a/*")
        assert len(want_all) == 1800
        assert len(want_some) == 1200
        assert wait_for(lambda: len(everything) >= len(want_all)
                        and len(filtered) >= len(want_some), 90), (
            len(everything), len(filtered), c.log_text()[-3000:])
        time.sleep(0.5)  # nothing more may come
    finally:
        for sub in subs:
            sub.stop()
        for proc in (c, b, a):
            proc.stop()
    assert [(p.topic, p.source_seq) for p in everything] == want_all
    assert [(p.topic, p.source_seq) for p in filtered] == want_some
    assert [p.fields["n"] for p in everything] == [n - 1 for _t, n in want_all]
    for sub in subs:
        assert sub.stats().unrecoverable == 0
        assert not sub.unrecoverable
    assert sum(sub.stats().repaired for sub in subs) > 0  # the loss toward C was repaired
    assert b.starts == 2
    # each relay journaled its selection with the origin's numbers, the rest as not selected
    for redis_url in (b_redis, c_redis):
        with Journal.from_url(redis_url) as journal:
            entries = list(journal.iter_entries("feed.a", 1))
        held = [e for e in entries if isinstance(e, Publication)]
        assert [(p.topic, p.source_seq) for p in held] == want_all
        gaps = [e for e in entries if isinstance(e, NotSelected)]
        assert gaps
        assert all(g.selection == "/w/#" for g in gaps)
        assert sum(g.last - g.first + 1 for g in gaps) == held[-1].source_seq - len(held)


def selections(log_text: str) -> list[str]:
    """The upstream selections (patterns, tokens) a relay's log reports, in order."""
    found = []
    for line in log_text.splitlines():
        if "relay upstream selection" in line:
            patterns = re.search(r"selection=(\[[^\]]*\])", line)
            tokens = re.search(r"tokens=(\[[^\]]*\]|None)", line)
            found.append(f"{patterns and patterns.group(1)} {tokens and tokens.group(1)}")
    return found


def test_one_upstream_link_carries_the_union_of_the_subscribers_selections(
    redises: list[str], tmp_path: Path
) -> None:
    """APEX §2.6: two subscribers of a relay with different patterns -> one upstream link whose
    selection is their union (of patterns, and of their grants: the relay grants t1, so it
    asks A for t1 only); one leaves -> the selection narrows; each subscriber gets exactly its
    own selection."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "4",
                         "--default-grant", "*").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--aggregate", "--linger", "0.5",
                     "--context-retention", "0.5", "--default-grant", "t1", *LOSS,
                     "--drop-seed", "5").start()
    tokens = (None, "t1", "t2")
    seen = (None, "t1")
    got_a: list[Publication] = []
    got_b: list[Publication] = []
    sub_a = Subscriber(b.url, "/w/a/*", on_publication=got_a.append, link_name="wa",
                       heartbeat_interval=0.2).start()
    sub_b = Subscriber(b.url, "/w/b/#", on_publication=got_b.append, link_name="wb",
                       heartbeat_interval=0.2).start()
    try:
        assert sub_a.wait_connected(20)
        assert sub_b.wait_connected(20)
        union = "['/w/a/*', '/w/b/#'] ['t1']"
        assert wait_for(lambda: selections(b.log_text())[-1:] == [union], 20), (
            selections(b.log_text()))
        publish(a.url, "feed.a", 1000, tokens=tokens)
        want_a = expected(a_redis, "feed.a", "/w/a/*", seen)
        want_b = expected(a_redis, "feed.a", "/w/b/#", seen)
        assert wait_for(lambda: len(got_a) >= len(want_a) and len(got_b) >= len(want_b), 60), (
            len(got_a), len(got_b))
        sub_b.stop()  # leaves: the relay narrows its one upstream link
        assert wait_for(lambda: selections(b.log_text())[-1:] == ["['/w/a/*'] ['t1']"], 20), (
            selections(b.log_text()))
        publish(a.url, "feed.a", 500, after=1000, tokens=tokens)
        want_a2 = expected(a_redis, "feed.a", "/w/a/*", seen)
        assert wait_for(lambda: len(got_a) >= len(want_a2), 60), (len(got_a), len(want_a2))
        time.sleep(0.5)
    finally:
        sub_a.stop()
        sub_b.stop()
        b.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in got_a] == want_a2
    assert [(p.topic, p.source_seq) for p in got_b] == want_b
    assert not sub_a.unrecoverable
    assert not sub_b.unrecoverable
    # A only ever saw the relay's one upstream link, never one per subscriber
    attached = {line.split("link=", 1)[1].split()[0] for line in a.log_text().splitlines()
                if "link attached" in line}
    assert attached == {"relay.B"}
    # the relay's journal: the union while both were there, then /w/a/* only
    with Journal.from_url(b_redis) as journal:
        entries = list(journal.iter_entries("feed.a", 1))
    held = [(e.topic, e.source_seq) for e in entries if isinstance(e, Publication)]
    assert [h for h in held if h[1] > 1000] == [h for h in want_a2 if h[1] > 1000]
    gaps = [e for e in entries if isinstance(e, NotSelected)]
    assert {g.selection for g in gaps} >= {"/w/a/*,/w/b/#;tokens=t1", "/w/a/*;tokens=t1"}
    assert {p.permtoken for p in got_a + got_b} == {None, "t1"}


def test_a_relay_refuses_publishers_and_subscribers_outside_what_it_carries(
    redises: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#").start()
    outside = Subscriber(b.url, "/x/#", link_name="outside")
    publisher = Publisher(b.url, "feed.b").start()
    try:
        with pytest.raises(Exception, match="amqp:not-found"):
            outside.start().wait_connected(20)
        publisher.publish("/w/a", {"n": 1})
        assert not publisher.flush(3)
    finally:
        outside.stop()
        publisher.close()
        b.stop()
        a.stop()
    assert "this relay carries /w/#, not '/x/#'" in str(outside.error)
    assert "a relay takes no publications" in b.log_text()
    # stopped by SIGTERM, it logs its counters as ``seqrepair serve`` does (before: no line)
    assert b.stop_counters()["connections_peak"] >= 2
    with Journal.from_url(b_redis) as journal:
        assert journal.sources() == []


def test_a_relay_whose_journal_holds_other_publications_under_the_numbers_stops(
    redises: list[str], tmp_path: Path
) -> None:
    """Never journal past numbers it could not take (the skip would read as not selected):
    a relay pointed at an origin its journal does not belong to exits 1 and says why."""
    a_redis, b_redis, _ = redises
    with Journal.from_url(b_redis) as journal:  # an earlier life of another origin
        journal.append([Publication(topic="/w/old", source="feed.a", source_seq=n,
                                    fields={"old": n}) for n in (1, 2, 3)], 32)
    a = ComponentProcess(a_redis, tmp_path).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#").start()
    try:
        b.wait_upstream()
        publish(a.url, "feed.a", 20)
        assert b.proc is not None
        assert b.proc.wait(30) == 1
    finally:
        b.stop()
        a.stop()
    assert "already journaled for another publication" in b.log_text()
    with Journal.from_url(b_redis) as journal:
        assert journal.high_water("feed.a") == 3


def test_a_relay_serves_source_replay_from_its_own_journal_with_its_origin_gone(
    redises: list[str], tmp_path: Path
) -> None:
    """A durable subscriber of a relay that was away resumes from the relay's journal: the
    origin has been killed meanwhile, so nothing can come from upstream."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "6").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", *LOSS,
                     "--drop-seed", "7").start()
    got: list[Publication] = []
    try:
        b.wait_upstream()
        sub = Subscriber(b.url, "/w/a/*", on_publication=got.append, link_name="away",
                         heartbeat_interval=0.2).start()
        assert sub.wait_connected(20)
        publish(a.url, "feed.a", 500)
        first = expected(a_redis, "feed.a", "/w/a/*")
        assert wait_for(lambda: len(got) >= len(first), 30), (len(got), len(first))
        sub.stop()
        publish(a.url, "feed.a", 1000, after=500)
        want = expected(a_redis, "feed.a", "/w/a/*")
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.high_water("feed.a") >= want[-1][1], 30)
        a.kill()  # the origin is gone: what follows comes from B's journal alone
        later: list[Publication] = []
        again = Subscriber(b.url, "/w/a/*", on_publication=later.append, link_name="away",
                           heartbeat_interval=0.2).start()
        assert wait_for(lambda: bool(later) and later[-1].source_seq >= want[-1][1], 30), (
            len(later), len(want))
        time.sleep(0.5)
        again.stop()
    finally:
        b.stop()
        a.stop()
    # durable: it resumes after what it acknowledged, so what came after its last ACK comes again
    repeated = [p for p in later if p.source_seq <= got[-1].source_seq]
    def key(pubs: list[Publication]) -> list[tuple[str, int]]:
        return [(p.topic, p.source_seq) for p in pubs]

    assert key(repeated) == key(got[len(got) - len(repeated):])  # a tail, in order
    assert key(got + later[len(repeated):]) == want
    assert not again.unrecoverable


def test_three_relays_each_narrowing_the_selection(redises: list[str], tmp_path: Path) -> None:
    """A -> B (/w/#) -> C (/w/#) -> D (/w/a/#), loss on every hop: D's subscriber gets its
    selection once, in order; each relay's journal holds its own selection, with A's numbers."""
    a_redis, b_redis, c_redis = redises
    with EmbeddedRedis(appendfsync="always") as d_server:
        a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "8").start()
        b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", *LOSS,
                         "--drop-seed", "9").start()
        c = RelayProcess(c_redis, tmp_path, b.url, "C", "--subscribe", "/w/#", *LOSS,
                         "--drop-seed", "10").start()
        d = RelayProcess(d_server.url, tmp_path, c.url, "D", "--subscribe", "/w/a/#", *LOSS,
                         "--drop-seed", "11").start()
        got: list[Publication] = []
        sub = Subscriber(d.url, "/w/a/*", on_publication=got.append, link_name="far",
                         heartbeat_interval=0.2).start()
        try:
            assert sub.wait_connected(20)
            for relay in (b, c, d):
                relay.wait_upstream()
            publish(a.url, "feed.a", 1500)
            want = expected(a_redis, "feed.a", "/w/a/*")
            assert wait_for(lambda: len(got) >= len(want), 60), (len(got), len(want))
            time.sleep(0.5)
            sub.stop()
        finally:
            sub.stop()
            for proc in (d, c, b, a):
                proc.stop()
        with Journal.from_url(d_server.url) as journal:
            held_d = [(p.topic, p.source_seq) for p in journal.read_range("feed.a", 1, 1500)]
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable
    assert held_d == expected(a_redis, "feed.a", "/w/a/#")
    with Journal.from_url(c_redis) as journal:
        held_c = [(p.topic, p.source_seq) for p in journal.read_range("feed.a", 1, 1500)]
    assert held_c == expected(a_redis, "feed.a", "/w/#")


def test_a_chain_of_aggregating_relays_widens_hop_by_hop(
    redises: list[str], tmp_path: Path
) -> None:
    """A -> B (--aggregate) -> C (--aggregate), nothing standing: C's subscriber makes C
    subscribe at B, which makes B subscribe at A (each refused until the hop behind carries
    it, then attached again); it gets its selection once, in order."""
    a_redis, b_redis, c_redis = redises
    a = ComponentProcess(a_redis, tmp_path, *LOSS, "--drop-seed", "12").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--aggregate", *LOSS,
                     "--drop-seed", "13").start()
    c = RelayProcess(c_redis, tmp_path, b.url, "C", "--aggregate", *LOSS,
                     "--drop-seed", "14").start()
    got: list[Publication] = []
    sub = Subscriber(c.url, "/w/b/#", on_publication=got.append, link_name="deep",
                     heartbeat_interval=0.2).start()
    try:
        assert sub.wait_connected(30)
        assert wait_for(lambda: "['/w/b/#']" in " ".join(selections(b.log_text())), 20)
        b.wait_upstream()
        time.sleep(0.5)
        publish(a.url, "feed.a", 1000)
        want = expected(a_redis, "feed.a", "/w/b/#")
        assert wait_for(lambda: len(got) >= len(want), 60), (len(got), len(want))
        time.sleep(0.5)
    finally:
        sub.stop()
        for proc in (c, b, a):
            proc.stop()
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable
    attached = {line.split("link=", 1)[1].split()[0] for line in a.log_text().splitlines()
                if "link attached" in line}
    assert attached == {"relay.B"}


def resumed(before: list[Publication], after: list[Publication],
            want: list[tuple[str, int]]) -> None:
    """A durable subscriber got ``before``, then, back, ``after``: it resumed after what it
    acknowledged, so ``after`` may begin with a tail of ``before`` again (in order); together
    they are ``want``, each once, in order."""
    def key(pubs: list[Publication]) -> list[tuple[str, int]]:
        return [(p.topic, p.source_seq) for p in pubs]

    last = before[-1].source_seq if before else 0
    repeated = [p for p in after if p.source_seq <= last]
    assert key(repeated) == key(before[len(before) - len(repeated):])
    assert key(before + after[len(repeated):]) == want


def test_a_subscriber_owed_what_the_relay_did_not_select_gets_it_from_upstream(
    redises: list[str], tmp_path: Path
) -> None:
    """A durable subscriber leaves an aggregating relay, which narrows; what comes meanwhile on
    its topics is not in the relay's journal (not selected). Back, the relay fetches those
    numbers from its upstream for it (its journal lacks them, the origin holds them): it gets
    its whole selection, once, in order, and is told of no loss."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, "--heartbeat", "0.2").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--aggregate", "--linger", "0.3",
                     "--context-retention", "0.3", "--heartbeat", "0.2").start()
    stays: list[Publication] = []
    first: list[Publication] = []
    back: list[Publication] = []
    sub_a = Subscriber(b.url, "/w/a/*", on_publication=stays.append, link_name="stays",
                       heartbeat_interval=0.2).start()
    sub_b = Subscriber(b.url, "/w/b/#", on_publication=first.append, link_name="goes",
                       heartbeat_interval=0.2).start()
    try:
        assert sub_a.wait_connected(20)
        assert sub_b.wait_connected(20)
        union = "['/w/a/*', '/w/b/#'] []"
        assert wait_for(lambda: selections(b.log_text())[-1:] == [union], 20)
        publish(a.url, "feed.a", 200)
        assert wait_for(lambda: len(first) >= 40, 30), len(first)
        time.sleep(1.0)  # its ACKs reach the relay: its position is where it got to
        sub_b.stop()
        assert wait_for(lambda: selections(b.log_text())[-1:] == ["['/w/a/*'] []"], 20)
        publish(a.url, "feed.a", 200, after=200)  # /w/b/2 publications the relay skips
        assert wait_for(lambda: len(stays) >= 160, 30), len(stays)
        again = Subscriber(b.url, "/w/b/#", on_publication=back.append, link_name="goes",
                           heartbeat_interval=0.2, max_reconnect_delay=0.5).start()
        assert again.wait_connected(30)
        publish(a.url, "feed.a", 100, after=400)  # after its return: carried again
        want = expected(a_redis, "feed.a", "/w/b/#")
        assert wait_for(lambda: bool(back) and back[-1].source_seq >= want[-1][1], 30), (
            len(back), b.log_text()[-3000:])
        time.sleep(0.5)
        again.stop()
    finally:
        sub_a.stop()
        sub_b.stop()
        b.stop()
        a.stop()
    resumed(first, back, want)
    assert [p for p in back if 200 < p.source_seq <= 400]  # what the relay never had
    assert not again.unrecoverable
    assert "fetching from upstream what the journal lacks" in b.log_text()


RELAY_POLICY = """
[[allow]]
actors = ["anonymous"]
operations = ["subscribe"]
topics = ["/w/#"]

[[deny]]
actors = ["anonymous"]
operations = ["subscribe"]
topics = ["/w/b/#"]
"""


def test_a_relay_takes_a_component_s_policy_bounds_and_retention(
    redises: list[str], tmp_path: Path
) -> None:
    """``relay`` has ``serve``'s options for what it serves: its access policy decides and
    excludes for its own subscribers, its retention trims its own journal."""
    a_redis, b_redis, _ = redises
    policy = tmp_path / "policy.toml"
    policy.write_text(RELAY_POLICY)
    a = ComponentProcess(a_redis, tmp_path).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--policy",
                     str(policy), "--retain-count", "20", "--retention-interval", "0.5",
                     "--max-links-per-connection", "4", "--link-unsent-bytes", "1048576",
                     "--heartbeat", "0.2").start()
    got: list[tuple[str, int]] = []
    sub = Subscriber(b.url, "/w/#", link_name="allowed", heartbeat_interval=0.2,
                     on_publication=lambda p: got.append((p.topic, p.source_seq)))
    denied = Subscriber(b.url, "/w/b/#", link_name="denied")
    try:
        sub.start().wait_connected(20)
        b.wait_upstream()
        with pytest.raises(Exception, match="amqp:unauthorized-access"):
            denied.start().wait_connected(20)
        publish(a.url, "feed.a", 100)
        want = [t for t in expected(a_redis, "feed.a", "/w/#") if not t[0].startswith("/w/b/")]
        assert wait_for(lambda: len(got) >= len(want), 30), (len(got), b.log_text()[-2000:])
        assert got == want  # exactly once, in order, never an excluded topic
        with Journal.from_url(b_redis) as journal:  # its retention keeps the newest 20
            assert wait_for(lambda: journal.info("feed.a").trimmed_through > 0, 20)
    finally:
        sub.stop()
        denied.stop()
        b.stop()
        a.stop()
    assert "access policy loaded" in b.log_text()



def test_numbers_a_relay_lost_upstream_are_unrecoverable_downstream_not_passed_over(
    redises: list[str], tmp_path: Path
) -> None:
    """The origin trimmed numbers the relay had not received (it was down): its stub reports
    them Unrecoverable upstream. The relay's journal must not hold them as 'not selected'
    (a replay passes over those silently for a subscriber inside the selection): a durable
    subscriber of the relay replaying them is told (Unrecoverable), then gets the rest."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, "--heartbeat", "0.2").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#",
                     "--heartbeat", "0.2").start()
    try:
        b.wait_upstream()
        first = Subscriber(b.url, "/w/#", link_name="behind", durable=True,
                           heartbeat_interval=0.2).start()
        assert first.wait_connected(20)
        time.sleep(0.3)
        first.stop()
        b.stop()  # the relay is away while the origin publishes and trims
        publish(a.url, "feed.t", 100)
        want = [k for k in expected(a_redis, "feed.t", "/w/#") if k[1] > 40]
        with Journal.from_url(a_redis) as journal:
            journal.trim_through("feed.t", 40, now=time.time())
        b.start()
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.high_water("feed.t") >= want[-1][1], 30), (
                b.log_text())
        got: list[Publication] = []
        again = Subscriber(b.url, "/w/#", link_name="behind", durable=True,
                           on_publication=got.append, heartbeat_interval=0.2).start()
        assert wait_for(lambda: bool(got) and got[-1].source_seq >= want[-1][1], 30), got
        time.sleep(0.5)
        again.stop()
    finally:
        b.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in got] == want
    lost = [(u.source, u.reason) for u in again.unrecoverable]
    assert ("feed.t", "trimmed") in lost, lost


def took_live_then_lost_upstream(a: ComponentProcess, b: RelayProcess, a_redis: str,
                                 live: Subscriber, got: list[Publication]
                                 ) -> list[tuple[str, int]]:
    """``live``, a subscriber of B on /w/#, takes all of 10 publications of feed.t (into
    ``got``), then A stops: B's upstream goes away, B and its subscriber stay. What it took."""
    b.wait_upstream()
    assert live.start().wait_connected(20)
    publish(a.url, "feed.t", 10)
    before = expected(a_redis, "feed.t", "/w/#")
    assert wait_for(lambda: len(got) >= len(before), 30), (got, b.log_text()[-2000:])
    a.stop()
    return before


def upstream_back(a: ComponentProcess, b: RelayProcess, got: list[Publication],
                  after: list[tuple[str, int]]) -> None:
    """A starts again: until B's subscriber got through the last of ``after``."""
    a.start()
    assert wait_for(lambda: bool(got) and got[-1].source_seq >= after[-1][1], 40), (
        [p.source_seq for p in got], b.log_text()[-3000:])
    time.sleep(0.5)  # nothing more may come


LOST_UPSTREAM_TOPICS = ["/w/a/1", "/w/b/2", "/x/c/3", "/w/a/4", "/x/d/5"]


def lost_upstream_while_live(
    redises: list[str], tmp_path: Path, a_args: tuple[str, ...], b_args: tuple[str, ...],
    publications: list[Publication] | None = None, *, summarize: bool = False,
) -> tuple[list[Publication], list[tuple[str, int]], list[tuple[str, int]], Subscriber,
           RelayProcess]:
    """A live subscriber of a relay told of numbers lost upstream: A (``a_args``) and B
    (``b_args``, subscribing /w/#) start; ``live``, B's subscriber on /w/#, takes 10
    publications of feed.t and A stops; the origin's publisher journals ``publications``
    (default: 11..110 over ``LOST_UPSTREAM_TOPICS``) and A trims through 40 (recording its
    trimmed-items summary first if ``summarize``, as retention does); A starts again until
    ``live`` got through the last /w/# number after 40. All stopped, it returns what ``live``
    got, what it took before, what it must get after, ``live`` and B (for its log)."""
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *a_args).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", *b_args).start()
    got: list[Publication] = []
    live = Subscriber(b.url, "/w/#", link_name="live", heartbeat_interval=0.2,
                      on_publication=got.append)
    if publications is None:
        publications = [Publication(LOST_UPSTREAM_TOPICS[i % 5], "feed.t", i + 1,
                                    fields={"n": i}) for i in range(10, 110)]
    try:
        before = took_live_then_lost_upstream(a, b, a_redis, live, got)
        with Journal.from_url(a_redis) as journal:  # the origin's publisher journals on
            bits = journal.info("feed.t").bits or 32
            journal.append(publications, bits)
            after = [k for k in expected(a_redis, "feed.t", "/w/#") if k[1] > 40]
            if summarize:
                record_trim(journal, "feed.t", 1, 40)
            journal.trim_through("feed.t", 40, now=time.time())
        upstream_back(a, b, got, after)
    finally:
        live.stop()
        b.stop()
        a.stop()
    return got, before, after, live, b


def test_a_live_subscriber_of_a_relay_is_told_of_numbers_lost_upstream(
    redises: list[str], tmp_path: Path
) -> None:
    """The relay stays up with a subscriber attached while its upstream goes away and the
    origin journals, then trims, numbers the relay never got. The relay journals them as lost
    and restarts its links' contexts, so the live subscriber repairs by source and is told
    (Unrecoverable) before it gets what came after, once, in order."""
    got, before, after, live, b = lost_upstream_while_live(
        redises, tmp_path, ("--heartbeat", "0.2"), ("--heartbeat", "0.2"))
    assert [(p.topic, p.source_seq) for p in got] == before + after
    lost = [(u.source, u.reason) for u in live.unrecoverable]
    assert ("feed.t", "trimmed") in lost, (lost, b.log_text()[-2000:])
    assert "numbers lost upstream: every link restarts its context" in b.log_text()
