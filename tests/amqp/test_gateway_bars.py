"""What a gateway's upstream refusals for a path bar (issue 27; gateway/relays.py
``RelayTable.learn``, wire/loopbar.py): pure, no processes (the storm over real gateways is
tests/amqp/test_gateway_hops.py)."""

from __future__ import annotations

from typing import Any

from proton import ulong

from seqrepair.amqp.gateway.relays import AttachUpstream, DetachDownstream, RelayTable
from seqrepair.amqp.wire.hops import (
    HOP_LIMIT_CONDITION,
    LOOP_CONDITION,
    PROP_PATH,
    PROP_PATH_HOPS,
    Hops,
)
from seqrepair.amqp.wire.loopbar import BAR_FIRST, BAR_MOST


def _table() -> RelayTable:
    table = RelayTable("gw", hops=Hops("gw-a"))
    table.upstream_up()
    return table


def _attach(table: RelayTable, name: str, props: dict[Any, Any] | None, now: float
            ) -> list[Any]:
    return table.attach(name, "/w/#", props, object(), now)[1]


def _loop(twice: str) -> str:
    return (f"relay loop: {twice} is twice on this attach's path gw-a -> gw-b -> {twice}; "
            "gateways or relays forward to each other")


def test_a_loop_through_the_gateway_itself_refuses_every_attach_for_a_while() -> None:
    table = _table()
    [attach] = _attach(table, "first", None, 0.0)
    assert isinstance(attach, AttachUpstream)
    assert table.learn(attach.relay, LOOP_CONDITION, _loop("gw-a"), 0.0) is not None
    for props in (None, {PROP_PATH: ["other"]}):
        [refusal] = _attach(table, "again", props, 1.0)
        assert isinstance(refusal, DetachDownstream)
        assert refusal.condition == LOOP_CONDITION
        assert "gw-a -> gw-b -> gw-a" in refusal.description
    # the bar runs out: the next attach goes upstream again (and is checked there)
    [attach] = _attach(table, "later", None, BAR_FIRST + 0.1)
    assert isinstance(attach, AttachUpstream)
    # refused again at once: barred for longer, never more than BAR_MOST
    table.learn(attach.relay, LOOP_CONDITION, _loop("gw-a"), BAR_FIRST + 0.2)
    assert table.bars.cut_until == BAR_FIRST + 0.2 + 2 * BAR_FIRST
    for strike in range(10):
        table.learn(attach.relay, LOOP_CONDITION, _loop("gw-a"), 20.0 + strike)
    assert table.bars.cut_until == 29.0 + BAR_MOST


def test_a_loop_through_an_identity_behind_bars_only_attaches_through_it() -> None:
    table = _table()
    [attach] = _attach(table, "through-x", {PROP_PATH: ["x"]}, 0.0)
    assert table.learn(attach.relay, LOOP_CONDITION, _loop("x"), 0.0) is not None
    [refusal] = _attach(table, "x-again", {PROP_PATH: ["y", "x"]}, 1.0)
    assert isinstance(refusal, DetachDownstream)
    assert refusal.condition == LOOP_CONDITION
    [honest] = _attach(table, "direct", None, 1.0)
    assert isinstance(honest, AttachUpstream)
    # a loop naming someone not behind this attach (nor the gateway) bars nothing
    assert table.learn(honest.relay, LOOP_CONDITION, _loop("z"), 1.0) is None
    [still] = _attach(table, "direct-2", {PROP_PATH: ["z"]}, 1.5)
    assert isinstance(still, AttachUpstream)


def test_past_the_hop_limit_the_exact_path_is_barred_never_a_claimed_count() -> None:
    table = _table()
    [deep] = _attach(table, "deep", {PROP_PATH: ["p", "q"]}, 0.0)
    assert table.learn(deep.relay, HOP_LIMIT_CONDITION, "hop limit exceeded: ...", 0.0)
    [refusal] = _attach(table, "deep-again", {PROP_PATH: ["p", "q"]}, 1.0)
    assert isinstance(refusal, DetachDownstream)
    assert refusal.condition == HOP_LIMIT_CONDITION
    [shorter] = _attach(table, "shorter", {PROP_PATH: ["q"]}, 1.0)
    assert isinstance(shorter, AttachUpstream)
    # a client claiming many hops with no path: the count is its own, nobody else is barred
    [claimed] = _attach(table, "claims", {PROP_PATH_HOPS: ulong(7)}, 1.0)
    assert isinstance(claimed, AttachUpstream)
    assert table.learn(claimed.relay, HOP_LIMIT_CONDITION, "hop limit exceeded", 1.0) is None
    [direct] = _attach(table, "direct", None, 1.5)
    assert isinstance(direct, AttachUpstream)


def test_the_bars_are_bounded() -> None:
    from seqrepair.amqp.wire.loopbar import MAX_BARRED

    table = _table()
    for i in range(MAX_BARRED + 50):
        [attach] = _attach(table, f"l{i}", {PROP_PATH: [f"h{i}"]}, 0.0)
        table.learn(attach.relay, LOOP_CONDITION, _loop(f"h{i}"), 0.0)
    assert len(table.bars.barred) == MAX_BARRED


def test_while_cut_off_an_attach_is_refused_as_it_would_come_back() -> None:
    """Cut off for the loop gw-a -> gw-b -> gw-a, gw-a refuses an attach that came through
    gw-b with the refusal it would get once round (gw-b twice on gw-b -> gw-a -> gw-b), one
    without a path with the loop as it was refused."""
    from seqrepair.amqp.wire.loopbar import loop_cycle

    assert loop_cycle(_loop("gw-a"), "gw-a") == ("gw-b",)
    assert loop_cycle(_loop("gw-a"), "gw-x") is None
    assert loop_cycle("relay loop: gw-a is twice on this attach's path gw-a -> ... 9 more "
                      "... -> gw-a; gateways", "gw-a") is None
    table = _table()
    [attach] = _attach(table, "first", None, 0.0)
    table.learn(attach.relay, LOOP_CONDITION, _loop("gw-a"), 0.0)
    [direct] = _attach(table, "direct", None, 1.0)
    assert isinstance(direct, DetachDownstream)
    assert "gw-a is twice on this attach's path gw-a -> gw-b -> gw-a" in direct.description
    [through_b] = _attach(table, "via-b", {PROP_PATH: ["gw-b"]}, 1.0)
    assert isinstance(through_b, DetachDownstream)
    assert through_b.condition == LOOP_CONDITION
    assert "gw-b is twice on this attach's path gw-b -> gw-a -> gw-b" in (
        through_b.description)
    refused = table.refusal(("x", "gw-b"), 1.0)
    assert refused is not None
    assert "gw-b is twice on this attach's path x -> gw-b -> gw-a -> gw-b" in refused.message
