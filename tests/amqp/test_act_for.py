"""A gateway that forwards the principals its clients proved (``gateway --forward-principals``,
``seqrepair-on-behalf-of``, policy ``act-for``), over real processes: a redis-server,
``seqrepair serve`` with a policy, ``seqrepair gateway``, clients authenticated by SCRAM.

Without forwarding, every client behind a gateway reaches the component as the gateway; with
it, the component's policy, exclusions and link names apply to each client, and only a
principal granted ``act-for`` may name another: never a client, never for ``anonymous`` or an
administrator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import symbol
from proton.reactor import AtMostOnce

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.gateway.relays import upstream_properties
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.technical import Ack
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS, PROP_ACK, PROP_EPOCH
from seqrepair.core.policy import Policy, may_act_for

from .conftest import ComponentProcess, wait_for
from .principals import (
    GATEWAY_ACTS_FOR_EXAMPLE_COM,
    MISSING,
    WEATHER_FOR_EXAMPLE_COM,
    client_security,
    policy_args,
    serve_args,
    upstream_args,
)
from .test_authz import attach, publish_as, refusal
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]
needs_scram = pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")

ALICE, BOB, OPS, GW, CAROL, ANON = (
    "alice@example.com", "bob@example.com", "ops@example.com", "gw@example.net",
    "carol@example.org", "anonymous")
ON_BEHALF_OF = symbol("seqrepair-on-behalf-of")

POLICY = WEATHER_FOR_EXAMPLE_COM + """
[[deny]]
actors = ["bob@example.com"]
operations = ["subscribe"]
topics = ["/weather/secret/#"]

[[allow]]
actors = ["ops@example.com"]
operations = ["admin"]
""" + GATEWAY_ACTS_FOR_EXAMPLE_COM  # the gateway may act for example.com's people only


def test_act_for_is_only_ever_named_and_never_for_anonymous_or_an_administrator() -> None:
    policy = Policy.from_json({
        "allow": [{"actors": ["gw"], "operations": ["act-for"], "principals": ["*@x"]},
                  {"actors": ["*"], "operations": ["*"]},
                  {"actors": ["root@x"], "operations": ["admin"]}],
        "deny": [{"actors": ["gw"], "operations": ["act-for"], "principals": ["eve@x"]}],
    })
    assert may_act_for(policy, "gw", "alice@x")
    assert not may_act_for(policy, "gw", "alice@y")  # not among its principals
    assert not may_act_for(policy, "gw", "eve@x")  # the deny wins
    assert not may_act_for(policy, "gw", "anonymous")
    assert not may_act_for(policy, "gw", "root@x")  # an administrator it is not
    assert not may_act_for(policy, "alice@x", "bob@x")  # '*' does not grant act-for
    assert not may_act_for(policy, "root@x", "alice@x")  # nor does admin
    assert not may_act_for(Policy.allow_all(), "gw", "alice@x")  # nor no policy at all


def test_a_client_never_names_whom_the_gateway_acts_for() -> None:
    claimed = {ON_BEHALF_OF: ALICE, symbol("seqrepair-resume"): True}
    assert upstream_properties(claimed, None) == {symbol("seqrepair-resume"): True}
    assert upstream_properties(claimed, BOB) == {symbol("seqrepair-resume"): True,
                                                 ON_BEHALF_OF: BOB}
    # an anonymous client is forwarded as anonymous, never left to act as the gateway
    assert upstream_properties(claimed, ANON) == {symbol("seqrepair-resume"): True,
                                                  ON_BEHALF_OF: ANON}


@pytest.fixture
def policed(component: Callable[..., ComponentProcess],
            tmp_path: Path) -> tuple[ComponentProcess, tuple[str, ...]]:
    """The component with :data:`POLICY`; the gateway's options (SCRAM both ways)."""
    auth = serve_args(tmp_path, ALICE, BOB, OPS, GW, CAROL)
    # frames are lost on the way, so subscribers repair: their requests cross the gateway too
    comp = component("--heartbeat", "0.2", *auth, *policy_args(tmp_path, POLICY),
                     "--drop-rate", "0.3", "--drop-seed", "7")
    return comp, (*auth, *upstream_args(tmp_path, GW))


@needs_scram
def test_who_may_name_another_principal_at_the_component(
    policed: tuple[ComponentProcess, tuple[str, ...]],
) -> None:
    comp, _ = policed
    cases = [  # (connection's principal, on behalf of, expected refusal or None)
        (GW, ALICE, None),
        (GW, BOB, None),
        (BOB, ALICE, "amqp:unauthorized-access"),  # no act-for
        (ANON, ALICE, "amqp:unauthorized-access"),
        (GW, CAROL, "amqp:unauthorized-access"),  # not among its principals
        (GW, OPS, "amqp:unauthorized-access"),  # an administrator
        (GW, ANON, "amqp:unauthorized-access"),  # anonymous: no act-for, no subscribe
        (GW, 42, "amqp:invalid-field"),
        (GW, "x" * 300, "amqp:invalid-field"),
        (GW, None, "amqp:unauthorized-access"),  # as itself: it may subscribe to nothing
    ]
    for actor, claimed, expected in cases:
        props = {} if claimed is None else {ON_BEHALF_OF: claimed}
        outcome = attach(comp.url, "/weather/#", actor, properties=props)
        got = outcome[1].close() if isinstance(outcome, tuple) else outcome
        assert got == expected, (actor, claimed)
    # the exclusions are the named principal's: bob may not see the secrets, alice may
    assert _attached(comp.url, "/weather/secret/#", GW, ALICE)
    assert not _attached(comp.url, "/weather/secret/#", GW, BOB)


def _attached(url: str, address: str, actor: str, claimed: str) -> bool:
    outcome = attach(url, address, actor, properties={ON_BEHALF_OF: claimed})
    if isinstance(outcome, tuple):
        outcome[1].close()
        return True
    return False


@needs_scram
def test_behind_a_forwarding_gateway_each_client_is_itself(
    policed: tuple[ComponentProcess, tuple[str, ...]], tmp_path: Path,
) -> None:
    comp, gateway_args = policed
    with gateway_process(comp.url, tmp_path, (*gateway_args, "--forward-principals")) as url:
        got: dict[str, list[tuple[str, int]]] = {ALICE: [], BOB: []}
        subs = [Subscriber(url, "/weather/#", link_name=f"{who}-link", heartbeat_interval=0.2,
                           on_publication=lambda p, who=who: got[who].append(
                               (p.source, p.source_seq)),
                           security=client_security(who)).start() for who in (ALICE, BOB)]
        try:
            assert all(sub.connected.wait(20) for sub in subs), comp.log_text()[-2000:]
            # a client claiming another's identity is itself upstream: bob stays excluded
            assert refusal(url, "/weather/secret/#", BOB) == "amqp:unauthorized-access"
            outcome = attach(url, "/weather/secret/#", BOB, properties={ON_BEHALF_OF: ALICE})
            assert outcome == "amqp:unauthorized-access"
            # a link name stays its principal's at the gateway too: alice keeps hers
            assert refusal(url, "/weather/#", BOB, f"{ALICE}-link") == "amqp:unauthorized-access"
            assert publish_as(comp.url, ALICE, "/weather/wind/LEMD", 5,
                              source="feed.wind") == [None] * 5
            assert publish_as(comp.url, ALICE, "/weather/secret/x", 5, "/weather/secret/#",
                              source="feed.secret") == [None] * 5
            assert wait_for(lambda: len(got[ALICE]) >= 10 and len(got[BOB]) >= 5, 30), got
            wind = [("feed.wind", n) for n in range(1, 6)]
            secret = [("feed.secret", n) for n in range(1, 6)]
            assert got[ALICE] == wind + secret  # exactly once, in order, repaired
            assert got[BOB] == wind  # never a secret, live or in repair
            assert all(sub.error is None and sub.stats().connections == 1 for sub in subs)
        finally:
            for sub in subs:
                sub.stop()
    assert "Traceback" not in (tmp_path / "gateway.log").read_text()


@needs_scram
def test_a_gateway_that_does_not_forward_strips_a_claimed_identity(
    policed: tuple[ComponentProcess, tuple[str, ...]], tmp_path: Path,
) -> None:
    """Without ``--forward-principals`` the component sees the gateway, which may act for
    alice: were the client's claim passed on, it would be alice upstream."""
    comp, gateway_args = policed
    with gateway_process(comp.url, tmp_path, gateway_args) as url:
        outcome = attach(url, "/weather/#", BOB, properties={ON_BEHALF_OF: ALICE})
        assert outcome == "amqp:unauthorized-access"  # as the gateway: no subscribe grant


@needs_scram
def test_an_ack_on_behalf_of_another_principal_moves_nothing_of_the_link(
    policed: tuple[ComponentProcess, tuple[str, ...]],
) -> None:
    """A forwarding gateway's clients share its connection: an ``ACK`` one of them sends
    naming another's link (bob naming alice's) must not open its window nor move its durable
    position (which would skip what alice never took): it is ignored like one from another
    connection."""
    comp, _ = policed
    outcome = attach(comp.url, "/weather/#", GW, name="alice-link",
                     properties={ON_BEHALF_OF: ALICE, PROP_ACK: True})
    assert isinstance(outcome, tuple), outcome
    receiver, conn = outcome
    try:
        epoch = receiver.link.remote_properties[PROP_EPOCH]
        sender = conn.create_sender(CONTROL_ADDRESS, options=AtMostOnce())
        conn.wait(lambda: sender.link.credit > 0, timeout=5, msg="no credit")
        for through in range(1, 6):
            sender.send(_on_behalf(Ack("alice-link", epoch, through,
                                       taken={"feed.wind": through}), BOB))
        # alice's own, through the same gateway, is hers
        sender.send(_on_behalf(Ack("alice-link", epoch, 1), ALICE))
        time.sleep(1.0)
    finally:
        conn.close()
    assert comp.stop_counters()["acks_ignored"] == 5


def _on_behalf(ack: Ack, principal: str) -> Any:
    """``ack``'s message as a forwarding gateway sends it for ``principal``."""
    message = encode(ack)
    message.properties = {**(message.properties or {}), str(ON_BEHALF_OF): principal}
    return message
