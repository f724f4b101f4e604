"""Hop paths and limits (:mod:`seqrepair.amqp.wire.hops`), and the gateway's relay table using
them: pure, no process, no socket."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proton import Array, Data, symbol, ulong

from seqrepair.amqp.client.runner import FATAL_CONDITIONS
from seqrepair.amqp.gateway.relays import AttachUpstream, DetachDownstream, RelayTable
from seqrepair.amqp.wire.hops import (
    DEFAULT_MAX_HOPS,
    HOP_LIMIT_CONDITION,
    HOPS_PROPERTY,
    LOOP_CONDITION,
    MAX_HOP_ID,
    MAX_PATH,
    PROP_PATH,
    PROP_PATH_HOPS,
    HopLimitError,
    Hops,
    MalformedPathError,
    RelayLoopError,
    count_hop,
    default_hop_id,
    describe_path,
    hop_refusal,
    read_hops,
    read_path,
)
from seqrepair.core.errors import InvalidConfigError, SeqRepairError

A, B, C = "a@127.0.0.1:1~aa", "b@127.0.0.1:2~bb", "c@127.0.0.1:3~cc"


def props(path: Any) -> dict[symbol, Any]:
    return {PROP_PATH: path}


# --- reading a path ------------------------------------------------------------------------


def test_a_path_is_read_in_order_and_absent_means_no_hop() -> None:
    assert read_path(None) == ()
    assert read_path({}) == ()
    assert read_path({symbol("seqrepair-batch"): True}) == ()
    assert read_path(props(None)) == ()
    assert read_path(props([A, B])) == (A, B)
    assert read_path({"seqrepair-path": [A]}) == (A,)  # string keys, as plain_properties has
    assert read_path(props([symbol("x")])) == ("x",)  # a symbol is ASCII text
    assert read_path(props(Array(Data.NULL, Data.STRING, A, B))) == (A, B)  # an AMQP array


@pytest.mark.parametrize(
    "value",
    [
        "a,b",  # text, not a list
        b"ab",
        7,
        {"a": 1},
        [A, 3],  # an element not a string
        [A, ""],  # empty
        ["x" * (MAX_HOP_ID + 1)],  # too long
        ["evil\nline"],  # a control character would forge log lines
        [f"h{i}" for i in range(MAX_PATH + 1)],  # longer than any limit
    ],
)
def test_a_malformed_path_is_an_invalid_field_naming_what_is_wrong(value: Any) -> None:
    with pytest.raises(MalformedPathError) as caught:
        read_path(props(value))
    assert caught.value.condition == "amqp:invalid-field"
    assert "seqrepair-path" in caught.value.message
    assert isinstance(caught.value, SeqRepairError)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=200) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=4),
    max_leaves=30,
))
def test_any_value_is_a_path_or_a_malformed_path_error(value: Any) -> None:
    hops = Hops(A, 4)
    try:
        path = hops.extend(props(value))
    except (MalformedPathError, RelayLoopError, HopLimitError):
        return
    assert path[-1] == A
    assert len(path) <= 4
    assert all(isinstance(hop, str) and 0 < len(hop) <= MAX_HOP_ID for hop in path)


# --- extending and checking ------------------------------------------------------------------


def test_a_hop_extends_the_path_with_its_identity_and_keeps_the_other_properties() -> None:
    hops = Hops(C)
    out = hops.upstream_properties({symbol("seqrepair-batch"): True, "seqrepair-epoch": "e",
                                    PROP_PATH: [A, B]})
    assert out == {symbol("seqrepair-batch"): True, symbol("seqrepair-epoch"): "e",
                   PROP_PATH: [A, B, C], PROP_PATH_HOPS: 3}
    assert all(isinstance(k, symbol) for k in out)
    assert isinstance(out[PROP_PATH_HOPS], ulong)
    assert Hops(A).upstream_properties(None) == {PROP_PATH: [A], PROP_PATH_HOPS: 1}


def test_its_own_identity_on_the_path_is_a_loop_naming_the_whole_path() -> None:
    with pytest.raises(RelayLoopError) as caught:
        Hops(A).extend(props([A, B]))
    error = caught.value
    assert error.condition == LOOP_CONDITION
    assert error.path == (A, B, A)
    assert error.got == A
    assert f"{A} -> {B} -> {A}" in error.message
    with pytest.raises(RelayLoopError):  # at the end of the chain, not extended
        Hops(A).check(props([B, A]))


def test_a_path_that_already_holds_a_loop_is_refused_by_whoever_sees_it() -> None:
    with pytest.raises(RelayLoopError) as caught:
        Hops(C).extend(props([A, B, A]))
    assert caught.value.got == A


def test_past_the_limit_the_attach_is_refused_naming_the_path_and_the_limit() -> None:
    hops = Hops(C, max_hops=2)
    assert hops.extend(props([A])) == (A, C)
    with pytest.raises(HopLimitError) as caught:
        hops.extend(props([A, B]))
    error = caught.value
    assert error.condition == HOP_LIMIT_CONDITION
    assert (error.expected, error.got, error.path) == (2, 3, (A, B, C))
    assert f"{A} -> {B} -> {C}" in error.message
    assert "2" in error.message
    # the end of the chain counts the hops crossed, its own not among them
    assert Hops(C, max_hops=2).check(props([A, B])) == (A, B)
    with pytest.raises(HopLimitError) as caught:
        Hops(C, max_hops=1).check(props([A, B]))
    assert f"has crossed 2 hops, more than 1 (at {C}): {A} -> {B}" in caught.value.message


def test_the_default_limit_is_eight() -> None:
    hops = Hops(A)
    assert hops.max_hops == DEFAULT_MAX_HOPS == 8
    seven = [f"h{i}" for i in range(7)]
    assert len(hops.extend(props(seven))) == 8
    with pytest.raises(HopLimitError):
        hops.extend(props([*seven, "h7"]))


def test_a_long_path_is_described_within_a_condition_description() -> None:
    path = [f"{i:03d}" + "x" * (MAX_HOP_ID - 3) for i in range(40)]
    with pytest.raises(HopLimitError) as caught:
        Hops("me", max_hops=10).check(props(path))
    message = caught.value.message
    assert len(message) <= 500
    assert path[0] in message
    assert path[-1] in message
    assert "38 more" in message
    short = [f"h{i}" for i in range(40)]
    assert describe_path(short, limit=50) == "h0 -> h1 -> ... 36 more ... -> h38 -> h39"
    assert describe_path(()) == "(no hop)"


# --- counts on requests and frames -----------------------------------------------------------


def test_a_forwarded_request_counts_one_hop_more_and_is_refused_past_the_limit() -> None:
    hops = Hops(A, max_hops=3)
    assert hops.forward_count(None) == 1
    assert hops.forward_count({HOPS_PROPERTY: ulong(2)}) == 3
    with pytest.raises(HopLimitError) as caught:
        hops.forward_count({HOPS_PROPERTY: ulong(3)})
    assert (caught.value.expected, caught.value.got) == (3, 4)
    assert A in caught.value.message


@pytest.mark.parametrize("value", [True, -1, "2", 1.0, 1 << 64])
def test_a_malformed_hop_count_is_an_invalid_field(value: Any) -> None:
    with pytest.raises(MalformedPathError) as caught:
        read_hops({HOPS_PROPERTY: value})
    assert caught.value.condition == "amqp:invalid-field"
    with pytest.raises(MalformedPathError):
        Hops(A).forward_count({HOPS_PROPERTY: value})


def test_a_forwarded_frame_is_counted_never_refused() -> None:
    assert count_hop(None) == {HOPS_PROPERTY: 1}
    out = count_hop({"message-type": "PUBLICATION", HOPS_PROPERTY: ulong(200)})
    assert out == {"message-type": "PUBLICATION", HOPS_PROPERTY: 201}
    assert isinstance(out[HOPS_PROPERTY], ulong)
    assert count_hop({HOPS_PROPERTY: "junk"})[HOPS_PROPERTY] == 1


# --- configuration and identities -----------------------------------------------------------


@pytest.mark.parametrize("identity", ["", "x" * (MAX_HOP_ID + 1), "tab\there", 5, None])
def test_an_identity_that_cannot_be_on_a_path_is_a_configuration_error(identity: Any) -> None:
    with pytest.raises(InvalidConfigError):
        Hops(identity)


@pytest.mark.parametrize("limit", [0, -1, 256, True, 2.0, "8"])
def test_a_limit_outside_1_to_255_is_a_configuration_error(limit: Any) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        Hops(A, limit)
    assert caught.value.expected == (1, 255)


def test_a_default_identity_names_the_process_and_is_unique_per_process() -> None:
    ids = {default_hop_id("edge", "127.0.0.1:5673") for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("edge@127.0.0.1:5673~") for i in ids)
    assert len(default_hop_id("n" * 300, "h:1")) <= MAX_HOP_ID
    Hops(default_hop_id("n" * 300, "h:1"))  # always usable as an identity


def test_the_clients_stop_on_hop_conditions_with_a_typed_error() -> None:
    assert {HOP_LIMIT_CONDITION, LOOP_CONDITION} <= FATAL_CONDITIONS
    loop = hop_refusal(LOOP_CONDITION, "seqrepair:relay-loop: a -> b -> a", "/w/#")
    assert isinstance(loop, RelayLoopError)
    assert loop.got == "/w/#"
    assert isinstance(hop_refusal(HOP_LIMIT_CONDITION, "x"), HopLimitError)
    assert hop_refusal("amqp:not-found", "x") is None


# --- the gateway's relay table ---------------------------------------------------------------


def test_the_relay_table_attaches_upstream_with_the_path_extended() -> None:
    table = RelayTable("gw", hops=Hops(B))
    table.upstream_up()
    relay, actions = table.attach("sub", "/w/#", {"seqrepair-batch": True, PROP_PATH: [A]},
                                  object(), 0.0)
    [attach] = actions
    assert isinstance(attach, AttachUpstream)
    assert attach.properties[PROP_PATH] == [A, B]
    assert attach.properties[symbol("seqrepair-batch")] is True
    assert table.is_current(relay)


def test_a_looping_attach_is_refused_at_once_and_leaves_the_relay_of_its_name_alone() -> None:
    table = RelayTable("gw", hops=Hops(A, max_hops=2))
    table.upstream_up()
    honest, _ = table.attach("sub", "/w/#", None, object(), 0.0)
    for bad, condition in (([B, A], LOOP_CONDITION), ([B, C], HOP_LIMIT_CONDITION),
                           ("junk", "amqp:invalid-field")):
        relay, actions = table.attach("sub", "/w/#", {PROP_PATH: bad}, object(), 1.0)
        [refusal] = actions
        assert isinstance(refusal, DetachDownstream)
        assert refusal.condition == condition
        assert refusal.relay is relay
        assert not table.is_current(relay)
    assert table.is_current(honest)
    assert len(table) == 1


# --- the commands' options ------------------------------------------------------------------


def test_serve_and_gateway_take_max_hops_1_to_255_and_report_it() -> None:
    from seqrepair.amqp.component.config import ComponentConfig
    from seqrepair.cli import build_parser

    parser = build_parser()
    for command in (["serve", "--redis-url", "redis://127.0.0.1:1"],
                    ["gateway", "--upstream", "127.0.0.1:1"]):
        args = parser.parse_args(command)
        assert (args.max_hops, args.hop_id) == (DEFAULT_MAX_HOPS, None)
        args = parser.parse_args([*command, "--max-hops", "2", "--hop-id", "edge-1"])
        assert (args.max_hops, args.hop_id) == (2, "edge-1")
        for bad in ("0", "256", "x"):
            with pytest.raises(SystemExit):
                parser.parse_args([*command, "--max-hops", bad])
    assert ComponentConfig().limits()["max-hops"] == DEFAULT_MAX_HOPS
    assert ComponentConfig(max_hops=3, hop_id="me").limits()["max-hops"] == 3
    for field, bad in (("max_hops", 0), ("max_hops", 256), ("hop_id", ""), ("hop_id", "a\nb")):
        with pytest.raises(InvalidConfigError):
            ComponentConfig(**{field: bad})
