"""Hop paths through relays (WIRE.md "Hops, paths and loops", "Relays"): a relay's one upstream
attach carries every identity behind it, so relays subscribed to each other in a loop are
refused and say so, and a chain of relays past ``--max-hops`` is refused naming its path, over
real processes (``seqrepair serve``, ``seqrepair relay``, redis-server)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.relay.paths import (
    BAR_FIRST,
    BAR_MOST,
    BAR_QUIET,
    MAX_BARRED,
    Breaker,
    RelayPaths,
    union_path,
)
from seqrepair.amqp.relay.selection import Selection, upstream_properties
from seqrepair.amqp.wire.hops import (
    MAX_CARRIED,
    MAX_PATH,
    HopLimitError,
    Hops,
    MalformedPathError,
    RelayLoopError,
    read_route,
)
from seqrepair.amqp.wire.vocabulary import PROP_PATH, PROP_PATH_HOPS
from seqrepair.core.messages import Publication
from seqrepair.core.topics import TopicPattern
from seqrepair.journal import EmbeddedRedis

from .conftest import ComponentProcess, wait_for
from .test_authz import _Properties
from .test_relay import RelayProcess, expected, publish


def test_the_union_of_paths_is_stable_and_each_identity_once() -> None:
    assert union_path([("c", "b"), ("a",), ("c", "b"), ("d", "c")]) == ("a", "c", "b", "d")
    assert union_path([("d", "c"), ("a",), ("c", "b")]) == ("a", "c", "b", "d")
    assert union_path([]) == ()
    props = upstream_properties(Selection((TopicPattern("/w/#"),)), ("a", "b"))
    assert props == {PROP_PATH: ["a", "b"]}


def test_relay_paths_follow_identities_not_their_order_and_bound_what_they_bar() -> None:
    paths = RelayPaths()
    paths.attached("x", ("a", "b"))
    paths.attached("plain", ())
    assert paths.behind(["x", "plain"]) == ("a", "b")
    assert paths.changed(("a", "b"), now=0.0, linger=1.0)  # the attach carries nothing yet
    paths.current = ("b", "a")
    assert not paths.changed(("a", "b"), now=0.0, linger=1.0)  # the same set: no attach
    assert paths.changed(("a", "b", "c"), now=0.0, linger=1.0)  # one more: at once
    assert not paths.changed(("a",), now=1.0, linger=1.0)  # one less: after lingering
    assert paths.changed(("a",), now=2.5, linger=1.0)
    assert paths.offenders(["x", "plain"]) == ["x"]
    paths.forget(["x"])
    assert paths.behind(["x", "plain"]) == ()
    error = RelayLoopError("relay loop", path=("a",))
    paths.bar([f"h{i}" for i in range(MAX_BARRED + 10)], error, until=10.0)
    assert len(paths.barred) == MAX_BARRED
    assert paths.refusal(("h0",), 1.0) is None  # the oldest forgotten first
    assert paths.refusal(("z", f"h{MAX_BARRED + 9}"), 1.0) is error
    assert paths.refusal(("z",), 1.0) is None
    too_long = HopLimitError("hop limit exceeded", path=("a", "b"))
    paths.bar_paths([("a", "b")], too_long, until=10.0)
    assert paths.refusal(("a", "b"), 1.0) is too_long
    assert paths.refusal(("b",), 1.0) is None  # a shorter path may come
    paths.cut(error, until=10.0)
    assert paths.refusal((), 1.0) is error
    # nothing lasts: past its time a bar and a cut-off are gone, and forgotten
    assert not paths.cut_ended(9.0)
    assert paths.refusal((f"h{MAX_BARRED + 9}",), 10.5) is None
    assert paths.refusal(("a", "b"), 10.5) is None
    assert paths.cut_ended(10.5)
    assert paths.cut_off is None
    assert paths.barred == {}
    assert paths.barred_paths == {}


def test_a_bar_lasts_seconds_doubling_while_refusals_come_back_and_at_most_bar_most() -> None:
    breaker = Breaker()
    periods = []
    now = 0.0
    for _ in range(6):  # the loop is still there each time the relay tries again
        until = breaker.trip(now)
        periods.append(until - now)
        now = until
    assert periods == [BAR_FIRST, 2 * BAR_FIRST, 4 * BAR_FIRST, BAR_MOST, BAR_MOST, BAR_MOST]
    assert BAR_MOST <= 10.0  # "within seconds" once the loop is broken
    assert breaker.trip(now + BAR_QUIET + 1) - (now + BAR_QUIET + 1) == BAR_FIRST  # quiet: anew


def test_fan_in_counts_hops_not_identities() -> None:
    """Ten links behind a relay, each one hop deep: the upstream path carries eleven
    identities, but crosses two hops (``seqrepair-path-hops``), within a limit of 8."""
    paths = RelayPaths()
    for i in range(10):
        paths.attached(f"l{i}", (f"gw-{i}",), 1)
    behind = paths.behind([f"l{i}" for i in range(10)])
    assert len(behind) == 10
    assert paths.depth() == 1
    props = Hops("relay", 8).upstream_properties(
        upstream_properties(Selection((TopicPattern("/w/#"),)), behind, paths.depth()))
    assert len(props[PROP_PATH]) == 11
    assert props[PROP_PATH_HOPS] == 2
    assert Hops("origin", 8).check(props) == (*behind, "relay")
    assert read_route(props) == ((*behind, "relay"), 2)
    assert not paths.changed(behind, 0.0, 1.0, 1) or paths.current != behind
    paths.current, paths.current_hops = behind, 1
    assert not paths.changed(behind, 0.0, 1.0, 1)
    assert paths.changed(behind, 0.0, 1.0, 2)  # a deeper route behind: attach again at once


def test_a_path_holds_at_most_max_carried_identities_and_the_hops_still_count() -> None:
    many = [f"gw-{i}" for i in range(MAX_PATH)]
    props = Hops("relay", 8).upstream_properties({PROP_PATH: many, PROP_PATH_HOPS: 3})
    assert len(props[PROP_PATH]) == MAX_CARRIED
    assert props[PROP_PATH][-1] == "relay"
    assert props[PROP_PATH_HOPS] == 4
    with pytest.raises(HopLimitError, match="9 hops, more than 8"):
        Hops("relay", 8).upstream_properties({PROP_PATH: ["a"], PROP_PATH_HOPS: 8})
    with pytest.raises(MalformedPathError):
        read_route({PROP_PATH: ["a"], PROP_PATH_HOPS: "two"})
    assert read_route({PROP_PATH: ["a", "b"], PROP_PATH_HOPS: 0}) == (("a", "b"), 1)
    assert read_route({PROP_PATH: ["a", "b"]}) == (("a", "b"), 2)


def test_too_many_hops_are_blamed_on_the_deepest_links() -> None:
    """A subscriber of a relay attaching with a made-up path of 250 identities makes the
    relay's upstream route too deep: before, every link with a path (the gateway's client, the
    relay behind) was ended and its path barred with it; now only the deepest go, then the
    next deepest if the upstream refuses again."""
    paths = RelayPaths()
    paths.attached("made-up", tuple(f"fake-{i}" for i in range(250)))
    paths.attached("behind-gateway", ("gw-1",))
    paths.attached("relay-behind", ("relay-2", "gw-2"))
    paths.attached("plain", ())
    names = ["behind-gateway", "made-up", "plain", "relay-behind"]
    assert paths.deepest(names) == ["made-up"]
    paths.forget(["made-up"])
    assert paths.deepest(names) == ["relay-behind"]
    assert paths.deepest(["plain"]) == []


@pytest.mark.amqp
@pytest.mark.redis
@pytest.mark.parametrize("made_up", [[f"fake-{i}" for i in range(7)], ["origin"]],
                         ids=["too-long", "loop"])
def test_a_made_up_path_ends_only_the_link_that_brought_it(
    redises: list[str], tmp_path: Path, made_up: list[str]
) -> None:
    """A subscriber attaching to a relay with a path of made-up identities, as long as the
    relay lets in (its ``--max-hops`` 8: 7 and its own hop), makes the relay's upstream path
    too long for the origin (``--max-hops`` 7); one naming the origin's identity makes it a
    loop there: only that link is ended and what it brought barred; the link behind a gateway
    (its path one identity) goes on. (One past the relay's own limit is refused at its attach:
    test_relay_forged_hops.)"""
    a = ComponentProcess(redises[0], tmp_path, "--hop-id", "origin", "--max-hops", "7").start()
    relay = RelayProcess(redises[1], tmp_path, a.url, "R", "--subscribe", "/w/#",
                         "--hop-id", "hop-r").start()
    conns = []
    try:
        relay.wait_upstream()
        for name, path in (("behind-gateway", ["gw-1"]),
                           ("made-up", made_up)):
            conn = BlockingConnection(relay.url, timeout=10)
            conns.append(conn)
            conn.create_receiver("/w/#", name=name, credit=10,
                                 options=_Properties({PROP_PATH: path}))
        assert wait_for(lambda: "ending the subscriber links" in relay.log_text(), 20), (
            relay.log_text()[-3000:])
        time.sleep(1.0)
    finally:
        for conn in conns:
            conn.close()
        relay.stop()
        a.stop()
    ended = [line for line in relay.log_text().splitlines()
             if "ending the subscriber links" in line]
    assert ended
    assert all("made-up" in line for line in ended), ended
    assert not any("behind-gateway" in line for line in ended), ended


def attaches(relay: RelayProcess) -> int:
    """Upstream attaches the relay logged."""
    return relay.log_text().count("attaching upstream")


@pytest.mark.amqp
@pytest.mark.redis
@pytest.mark.parametrize(("count", "mode"), [(2, "--subscribe"), (3, "--subscribe"),
                                             (2, "--aggregate")])
def test_relays_subscribed_to_each_other_are_refused_as_a_loop(
    redises: list[str], tmp_path: Path, count: int, mode: str
) -> None:
    """L0 -> L1 (-> L2) -> L0: each relay's upstream attach comes to carry the others'
    identities, a relay finds its own on an attach: refused ``seqrepair:relay-loop``, within
    a generous deadline; the subscriber gets the typed error naming the loop, every relay
    logs it, and the relays attach again only as their cut-off expires (a circuit breaker:
    :data:`BAR_FIRST` seconds, doubling while the loop is there), each time refused again,
    so the attaches stay few (no churn) while the loop lasts. Aggregating
    relays (no upstream link until a subscriber needs one) carry the paths of the
    subscribers they widen for."""
    ids = [f"loop-{i}" for i in range(count)]
    selection = ("--subscribe", "/w/#") if mode == "--subscribe" else ("--aggregate",)
    relays = [RelayProcess(redises[i], tmp_path, "", f"L{i}", *selection,
                           "--hop-id", ids[i], "--heartbeat", "0.2") for i in range(count)]
    for i, relay in enumerate(relays):
        relay.upstream = relays[(i + 1) % count].url
    for relay in relays:
        relay.start()
    sub = Subscriber(relays[0].url, "/w/a/*", link_name="caught", heartbeat_interval=0.2,
                     max_reconnect_delay=0.5).start()
    try:
        assert wait_for(lambda: sub.error is not None, 60), [r.log_text()[-2000:]
                                                             for r in relays]
        assert wait_for(lambda: all("relay upstream refused for its path" in r.log_text()
                                    for r in relays), 60), [r.log_text()[-2000:] for r in relays]
        time.sleep(1.0)
        counts = [attaches(r) for r in relays]
        refusals = [r.log_text().count("relay upstream refused") for r in relays]
        time.sleep(6.0)  # the cut-offs expire, the relays try again: refused again, backing off
        later = [attaches(r) for r in relays]
        # each relay's expiry is a wave round the loop costing each relay an attach or two
        # (refused, then again without what it barred): a few per relay of the loop per
        # back-off period, never the runaway of hundreds a loop made before
        assert all(0 <= b - a <= 4 * count for a, b in zip(counts, later, strict=True)), (
            counts, later)
        assert all(r.log_text().count("relay upstream refused") >= n  # every try refused
                   for r, n in zip(relays, refusals, strict=True))
        assert sub.error is not None
    finally:
        sub.stop()
        for relay in relays:
            relay.stop()
    assert isinstance(sub.error, RelayLoopError), sub.error
    text = str(sub.error)
    assert text.startswith("seqrepair:relay-loop")
    assert sum(hop in text for hop in ids) >= 2, text  # the loop, named
    logs = "".join(r.log_text() for r in relays)
    assert all(hop in logs.split("relay upstream refused", 1)[1] for hop in ids)
    assert all(1 <= n <= 6 for n in counts), counts
    assert all("cut off" in r.log_text() for r in relays)  # none of them has an origin


@pytest.mark.amqp
@pytest.mark.redis
def test_a_chain_of_relays_past_the_hop_limit_is_refused_naming_its_path(
    redises: list[str], tmp_path: Path
) -> None:
    """A (--max-hops 2) <- B <- C: within the limit, C's subscriber gets its selection
    exactly. D subscribing to C makes the path D -> C -> B: A refuses it; D (too deep) is cut
    off and its subscriber gets ``seqrepair:hop-limit-exceeded`` naming the path, while C,
    having dropped D, attaches again and its subscriber still gets everything, once, in
    order."""
    a_redis, b_redis, c_redis = redises
    heartbeat = ("--heartbeat", "0.2")
    a = ComponentProcess(a_redis, tmp_path, "--max-hops", "2", "--hop-id", "origin",
                         *heartbeat).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--hop-id",
                     "hop-b", *heartbeat).start()
    c = RelayProcess(c_redis, tmp_path, b.url, "C", "--subscribe", "/w/#", "--hop-id",
                     "hop-c", *heartbeat).start()
    near: list[Publication] = []
    s1 = Subscriber(c.url, "/w/a/*", on_publication=near.append, link_name="near",
                    heartbeat_interval=0.2).start()
    with EmbeddedRedis(appendfsync="always") as d_server:
        d = RelayProcess(d_server.url, tmp_path, c.url, "D", "--subscribe", "/w/#",
                         "--hop-id", "hop-d", *heartbeat)
        far = Subscriber(d.url, "/w/a/*", link_name="far", heartbeat_interval=0.2,
                         max_reconnect_delay=0.5)
        try:
            assert s1.wait_connected(20)
            assert wait_for(lambda: "path='hop-c -> hop-b'" in b.log_text(), 20), b.log_text()
            c.wait_upstream()
            publish(a.url, "feed.a", 300)
            want = expected(a_redis, "feed.a", "/w/a/*")
            assert wait_for(lambda: len(near) >= len(want), 60), (len(near), len(want))
            d.start()
            far.start()
            assert wait_for(lambda: far.error is not None, 60), d.log_text()[-3000:]
            more = threading.Thread(target=publish, args=(a.url, "feed.a", 300, 0.0, 300))
            more.start()
            more.join(60)
            want = expected(a_redis, "feed.a", "/w/a/*")
            assert wait_for(lambda: len(near) >= len(want), 60), (
                len(near), len(want), c.log_text()[-3000:])
            time.sleep(0.5)
        finally:
            far.stop()
            s1.stop()
            for proc in (d, c, b, a):
                proc.stop()
    assert isinstance(far.error, HopLimitError), far.error
    assert str(far.error).startswith("seqrepair:hop-limit-exceeded")
    assert "hop-d -> hop-c -> hop-b" in str(far.error)
    assert "more than 2" in str(far.error)
    assert "hop-d -> hop-c -> hop-b" in b.log_text()  # B says what A refused
    assert "cut off" in d.log_text()
    assert "cut off" not in c.log_text()
    assert [(p.topic, p.source_seq) for p in near] == want
    assert not s1.unrecoverable
    # C attached again without D's identity: carried by B again, then quiet
    last = [line for line in b.log_text().splitlines() if "attaching upstream" in line][-1]
    assert "path='hop-c -> hop-b'" in last, last
