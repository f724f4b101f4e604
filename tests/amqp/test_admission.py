"""The count limits' bookkeeping (:mod:`seqrepair.amqp.wire.admission`), without I/O:
connections and links held, refused one past each limit, released when they end, and the
open deadline, with time moved by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.amqp.component.config import ComponentConfig
from seqrepair.amqp.wire.admission import Admission, CountLimits, LimitExceededError
from seqrepair.core.errors import InvalidConfigError

CONDITION = "amqp:resource-limit-exceeded"


def admitted(adm: Admission, conn: str, principal: str, now: float = 0.0) -> None:
    assert adm.accept(conn, now) is None
    assert adm.open(conn, principal) is None


def test_the_connection_past_max_connections_is_refused_until_one_ends() -> None:
    adm = Admission(CountLimits(max_connections=2))
    assert adm.room() == 2
    assert adm.accept("a", 0) is None
    assert adm.accept("b", 0) is None
    assert adm.room() == 0
    refusal = adm.accept("c", 0)
    assert isinstance(refusal, LimitExceededError)
    assert refusal.condition == CONDITION
    assert (refusal.expected, refusal.got) == (2, 3)
    assert "--max-connections" in refusal.message
    assert adm.connections == 2
    assert adm.stats["connections_refused"] == 1
    adm.forget("a")
    adm.forget("a")  # idempotent
    assert adm.room() == 1
    assert adm.accept("c", 0) is None
    assert adm.connections == 2
    assert adm.room() == 0
    assert adm.stats["connections_peak"] == 2


def test_connections_per_principal_are_counted_at_the_open() -> None:
    adm = Admission(CountLimits(max_connections_per_principal=2))
    admitted(adm, "a1", "alice")
    admitted(adm, "a2", "alice")
    admitted(adm, "b1", "bob")
    assert adm.accept("a3", 0) is None  # the transport is held: its principal is not known
    refusal = adm.open("a3", "alice")
    assert isinstance(refusal, LimitExceededError)
    assert (refusal.expected, refusal.got) == (2, 3)
    assert "alice" in refusal.message
    assert adm.connections_of("alice") == 2
    assert adm.stats["connections_refused"] == 1
    # refused at its open, it is not waiting for one: no open timeout, no links
    assert adm.expired(100.0) == []
    assert isinstance(adm.attach("a3", "l"), LimitExceededError)
    adm.forget("a3")
    adm.forget("a1")
    assert adm.connections_of("alice") == 1
    assert adm.accept("a4", 0) is None
    assert adm.open("a4", "alice") is None


def test_links_per_connection_refuse_only_the_one_more() -> None:
    adm = Admission(CountLimits(max_links_per_connection=3))
    admitted(adm, "c", "p")
    admitted(adm, "d", "p")
    for i in range(3):
        assert adm.attach("c", i) is None
    assert adm.attach("c", 1) is None  # the same link again is not a new one
    refusal = adm.attach("c", 3)
    assert isinstance(refusal, LimitExceededError)
    assert (refusal.expected, refusal.got) == (3, 4)
    assert "--max-links-per-connection" in refusal.message
    assert adm.links_of("c") == 3
    assert adm.attach("d", 0) is None  # another connection's links are its own
    adm.detach("c", 0)
    adm.detach("c", 0)
    adm.detach("c", "never held")
    assert adm.attach("c", 3) is None
    assert adm.stats["links_refused"] == 1
    assert adm.stats["links_peak"] == 4


def test_links_per_principal_add_up_over_its_connections() -> None:
    adm = Admission(CountLimits(max_links_per_principal=3))
    admitted(adm, "c1", "p")
    admitted(adm, "c2", "p")
    admitted(adm, "c3", "q")
    assert adm.attach("c1", "x") is None
    assert adm.attach("c1", "y") is None
    assert adm.attach("c2", "x") is None
    refusal = adm.attach("c2", "z")
    assert isinstance(refusal, LimitExceededError)
    assert "--max-links-per-principal" in refusal.message
    assert adm.attach("c3", "z") is None
    adm.forget("c1")  # its connection ends: both its links go
    assert adm.links_of_principal("p") == 1
    assert adm.links == 2
    assert adm.attach("c2", "z") is None


def test_a_connection_that_does_not_open_in_time_expires_once() -> None:
    adm = Admission(CountLimits(open_timeout=5.0))
    assert adm.accept("silent", 10.0) is None
    assert adm.accept("late", 12.0) is None
    admitted(adm, "prompt", "p", 10.0)
    assert adm.opening == 2
    assert adm.next_deadline() == 15.0
    assert adm.expired(14.9) == []
    assert adm.expired(15.0) == ["silent"]
    adm.forget("silent")
    assert adm.next_deadline() == 17.0
    assert adm.expired(20.0) == ["late"]
    adm.forget("late")
    assert adm.next_deadline() is None
    assert adm.expired(1000.0) == []
    assert adm.stats["opens_timed_out"] == 2
    assert adm.connections == 1


def test_a_link_on_a_connection_never_taken_is_refused() -> None:
    adm = Admission()
    assert isinstance(adm.attach("unknown", "l"), LimitExceededError)
    assert adm.links == 0


def test_limits_are_checked_and_reported() -> None:
    with pytest.raises(InvalidConfigError):
        CountLimits(max_connections=0)
    with pytest.raises(InvalidConfigError):
        ComponentConfig(open_timeout=0)
    config = ComponentConfig(max_connections=7, max_links_per_connection=9, open_timeout=2.5)
    assert config.count_limits().max_links_per_connection == 9
    limits = config.limits()
    assert limits["max-connections"] == 7
    assert limits["max-links-per-connection"] == 9
    assert limits["open-timeout"] == 2.5
    assert {"max-connections-per-principal", "max-links-per-principal"} <= set(limits)


ops = st.lists(st.tuples(
    st.sampled_from(["accept", "open", "attach", "detach", "forget"]),
    st.integers(0, 4), st.sampled_from(["p", "q"]), st.integers(0, 5),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_counts_match_a_recount_and_never_pass_a_limit(steps: list[tuple[str, int, str, int]]
                                                       ) -> None:
    limits = CountLimits(max_connections=3, max_connections_per_principal=2,
                         max_links_per_connection=3, max_links_per_principal=4)
    adm = Admission(limits)
    model: dict[int, tuple[str | None, set[int]]] = {}  # conn -> (principal, links)
    for op, conn, principal, link in steps:
        if op == "accept":
            ok = adm.accept(conn, 0) is None
            if conn not in model and ok:
                model[conn] = (None, set())
        elif op == "open":
            if adm.open(conn, principal) is None and conn in model and model[conn][0] is None:
                model[conn] = (principal, model[conn][1])
        elif op == "attach":
            if adm.attach(conn, link) is None:
                model[conn][1].add(link)
        elif op == "detach":
            adm.detach(conn, link)
            if conn in model:
                model[conn][1].discard(link)
        else:
            adm.forget(conn)
            model.pop(conn, None)
        assert adm.connections == len(model) <= 3
        assert adm.links == sum(len(links) for _, links in model.values())
        for who in ("p", "q"):
            assert adm.connections_of(who) == sum(1 for p, _ in model.values() if p == who) <= 2
            assert adm.links_of_principal(who) == sum(
                len(links) for p, links in model.values() if p == who) <= 4
        for key, (_, links) in model.items():
            assert adm.links_of(key) == len(links) <= 3


def test_wire_md_lists_every_limit_capabilities_reports() -> None:
    """The Resource model table of WIRE.md and ``ComponentConfig.limits()`` name the same
    limits (a new limit needs its row)."""
    wire = (Path(__file__).resolve().parents[2] / "seqrepair" / "amqp" / "WIRE.md").read_text()
    section = wire.split("## Resource model", 1)[1].split("\n## ", 1)[0]
    keys = set(re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.MULTILINE))
    assert keys == set(ComponentConfig().limits())


def test_serve_options_default_to_the_config_defaults() -> None:
    """``seqrepair serve`` without limit options runs with ComponentConfig's defaults."""
    from seqrepair.cli import build_parser

    args = build_parser().parse_args(["serve", "--redis-url", "redis://127.0.0.1:1"])
    defaults = ComponentConfig()
    for name in ("max_connections", "max_connections_per_principal", "max_links_per_connection",
                 "max_links_per_principal", "open_timeout"):
        assert getattr(args, name) == getattr(defaults, name), name


def test_links_acting_for_another_principal_count_as_its_and_are_released() -> None:
    """A forwarding gateway's connection: each principal it acts for has its own link
    allowances there; the gateway's own links count as the gateway's; everything is released
    link by link and with the connection (no counter left behind: bounded memory)."""
    adm = Admission(CountLimits(max_links_per_connection=2, max_links_per_principal=3))
    admitted(adm, "gw-conn", "gw")
    admitted(adm, "direct", "alice")
    assert adm.attach("gw-conn", "control") is None  # the gateway's own
    assert adm.attach("gw-conn", "a1", "alice") is None
    assert adm.attach("gw-conn", "a2", "alice") is None
    refused = adm.attach("gw-conn", "a3", "alice")  # alice's two on this connection
    assert isinstance(refused, LimitExceededError)
    assert "for principal 'alice'" in refused.message
    assert adm.attach("gw-conn", "b1", "bob") is None  # bob is not slowed by alice
    assert adm.attach("direct", "a4") is None  # alice's third, anywhere
    refused = adm.attach("direct", "a5")
    assert isinstance(refused, LimitExceededError)
    assert "principal 'alice' holds 3 links" in refused.message
    assert adm.links_of_principal("gw") == 1
    adm.detach("gw-conn", "a1")
    assert adm.links_of_principal("alice") == 2
    assert adm.attach("direct", "a5") is None
    adm.forget("gw-conn")
    assert adm.links_of_principal("alice") == 2  # those of her own connection
    assert adm.links_of_principal("bob") == 0
    assert adm.links_of_principal("gw") == 0
    assert adm.links == 2
