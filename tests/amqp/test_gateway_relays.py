"""The gateway's relay state machine and reconnect backoff, without proton or sockets.

A small simulated adapter performs the table's actions and checks what the gateway promises:
one upstream link per name at a time (a name is attached again only once the component has
seen the previous link detached), a subscriber's attach answered only with the component's
reply and at most once, nothing answered after it ended, every relay that had reached the
component ended when the upstream connection is lost, and nothing left waiting once the
component is back and has answered.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import symbol

from seqrepair.amqp.gateway.relays import (
    FORCED,
    STOLEN,
    Action,
    AnswerDownstream,
    AttachUpstream,
    Backoff,
    CloseDownstreamConnection,
    DetachDownstream,
    DetachUpstream,
    Relay,
    RelayState,
    RelayTable,
    relayed_properties,
    upstream_name,
)
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER

EPOCH = symbol("seqrepair-epoch")
START = symbol("seqrepair-start-after")


def test_properties_pass_unchanged_with_symbol_keys() -> None:
    props = relayed_properties({"seqrepair-epoch": "e1", START: {"feed.a": 7}, "other": [1, None]})
    assert props == {EPOCH: "e1", START: {"feed.a": 7}, symbol("other"): [1, None]}
    assert all(isinstance(k, symbol) for k in props)
    assert relayed_properties(None) == {}


def test_an_attach_is_answered_with_the_components_reply_only() -> None:
    table = RelayTable("gw")
    relay, actions = table.attach("sub", "/weather/#", {EPOCH: "old"}, "down", now=0.0)
    assert actions == []  # no upstream connection yet: held
    assert relay.state is RelayState.HELD
    (attach,) = table.upstream_up()
    assert attach == AttachUpstream(relay, "gw.sub", {EPOCH: "old"})
    assert table.upstream_up() == []  # attached once
    assert table.upstream_attached(relay, {EPOCH: "new", START: {"f": 3}}) == [
        AnswerDownstream(relay, {EPOCH: "new", START: {"f": 3}})
    ]
    assert relay.state is RelayState.OPEN


def test_a_refusal_upstream_refuses_the_subscriber_with_the_same_condition() -> None:
    table = RelayTable("gw", upstream_ready=True)
    relay, _ = table.attach("bad", "/weather/#", {START: "not a map"}, "down", now=0.0)
    refused = ("amqp:invalid-field", "seqrepair-start-after must map sources to numbers")
    assert table.upstream_attached(relay, None, refused) == [
        DetachDownstream(relay, *refused)
    ]
    assert table.get("bad") is None
    # the refused upstream link detaches; the name is free for the next attach
    assert table.upstream_detached(relay, refused) == []
    again, actions = table.attach("bad", "/weather/#", {}, "down2", now=1.0)
    assert actions == [AttachUpstream(again, "gw.bad", {})]


def test_a_name_is_attached_upstream_again_only_once_the_old_link_is_detached() -> None:
    table = RelayTable("gw", upstream_ready=True)
    first, _ = table.attach("sub", "/a", {}, "d1", now=0.0)
    table.upstream_attached(first, {EPOCH: "e"})
    assert table.downstream_detached(first) == [DetachUpstream(first)]
    second, actions = table.attach("sub", "/a", {EPOCH: "e"}, "d2", now=1.0)
    assert actions == []  # the component has not seen the first link detached yet
    assert table.upstream_detached(first) == [AttachUpstream(second, "gw.sub", {EPOCH: "e"})]


def test_a_second_attach_of_a_name_steals_it() -> None:
    table = RelayTable("gw", upstream_ready=True)
    first, _ = table.attach("sub", "/a", {}, "d1", now=0.0)
    table.upstream_attached(first, {EPOCH: "e"})
    second, actions = table.attach("sub", "/a", {}, "d2", now=1.0)
    assert actions == [DetachUpstream(first), DetachDownstream(first, STOLEN, "attached again")]
    assert table.get("sub") is second


def test_losing_the_upstream_ends_the_relays_that_reached_it_and_holds_the_rest() -> None:
    table = RelayTable("gw", upstream_ready=True)
    open_, _ = table.attach("open", "/a", {}, "d1", now=0.0)
    table.upstream_attached(open_, {EPOCH: "e"})
    table.attach("attaching", "/a", {}, "d2", now=0.0)
    actions = table.upstream_down()
    assert {type(a) for a in actions} == {CloseDownstreamConnection}
    assert {a.relay.name for a in actions} == {"open", "attaching"}
    assert all(isinstance(a, CloseDownstreamConnection) and a.condition == FORCED
               for a in actions)
    held, none = table.attach("held", "/a", {}, "d3", now=0.0)
    assert none == []
    assert table.upstream_up() == [AttachUpstream(held, "gw.held", {})]
    assert len(table) == 1


def test_a_subscriber_held_too_long_is_sent_to_try_again() -> None:
    table = RelayTable("gw", hold_timeout=5.0)
    relay, _ = table.attach("sub", "/a", {}, "d", now=0.0)
    assert table.expire(5.0) == []
    (closing,) = table.expire(5.1)
    assert closing == CloseDownstreamConnection(relay, FORCED, closing.description)
    assert table.get("sub") is None


# --- a simulated adapter driven by random events ----------------------------------------


@attrs.define
class _Up:
    relay: Relay
    state: str  # attaching, open, closing


@attrs.define
class _Sim:
    table: RelayTable
    now: float = 0.0
    relays: list[Relay] = attrs.field(factory=list)
    downstream: dict[int, str] = attrs.field(factory=dict)  # id(relay) -> held/answered/closed
    up: dict[str, _Up] = attrs.field(factory=dict)  # upstream links by downstream name
    replies: dict[int, dict[symbol, Any]] = attrs.field(factory=dict)

    def perform(self, actions: list[Action]) -> None:
        for action in actions:
            relay = action.relay
            if isinstance(action, AttachUpstream):
                assert self.table.upstream_ready
                assert relay.name not in self.up, "a name attached twice upstream"
                assert action.name == upstream_name("gw", relay.name)
                assert self.downstream[id(relay)] == "held"
                self.up[relay.name] = _Up(relay, "attaching")
            elif isinstance(action, AnswerDownstream):
                assert self.downstream[id(relay)] == "held", "answered twice or after its end"
                assert self.up[relay.name].relay is relay
                assert self.up[relay.name].state == "open"
                assert action.properties == self.replies[id(relay)]
                self.downstream[id(relay)] = "answered"
            elif isinstance(action, DetachUpstream):
                link = self.up[relay.name]
                assert link.relay is relay
                assert link.state in ("attaching", "open")
                link.state = "closing"
            elif isinstance(action, DetachDownstream | CloseDownstreamConnection):
                assert self.downstream[id(relay)] != "closed"
                self.downstream[id(relay)] = "closed"
                # the connection's end reaches the table too, and changes nothing
                assert self.table.downstream_detached(relay) == []

    def step(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "attach":
            relay, actions = self.table.attach(op[1], "/a", {EPOCH: op[1]}, None, self.now)
            self.relays.append(relay)
            self.downstream[id(relay)] = "held"
            self.perform(actions)
        elif kind == "detach" and self.relays:
            relay = self.relays[op[1] % len(self.relays)]
            if self.downstream[id(relay)] != "closed":
                self.downstream[id(relay)] = "closed"
                self.perform(self.table.downstream_detached(relay))
        elif kind in ("reply", "refuse", "confirm", "remote"):
            wanted = {"reply": "attaching", "refuse": "attaching", "confirm": "closing",
                      "remote": "open"}[kind]
            links = [link for link in self.up.values() if link.state == wanted]
            if not links:
                return
            link = links[op[1] % len(links)]
            relay = link.relay
            if kind == "reply":
                link.state = "open"
                self.replies[id(relay)] = {EPOCH: f"granted-{relay.name}"}
                self.perform(self.table.upstream_attached(relay, self.replies[id(relay)]))
            elif kind == "refuse":
                del self.up[relay.name]
                cond = ("amqp:invalid-field", "bad")
                self.perform(self.table.upstream_attached(relay, None, cond))
                self.perform(self.table.upstream_detached(relay, cond))
            else:
                del self.up[relay.name]
                cond = None if kind == "confirm" else (STOLEN, "elsewhere")
                self.perform(self.table.upstream_detached(relay, cond))
        elif kind == "lose" and self.table.upstream_ready:
            self.up.clear()
            self.perform(self.table.upstream_down())
        elif kind == "up" and not self.table.upstream_ready:
            self.perform(self.table.upstream_up())
        elif kind == "tick":
            self.now += op[1]
            self.perform(self.table.expire(self.now))
        self.check()

    def check(self) -> None:
        for relay in self.table:
            assert self.downstream[id(relay)] != "closed", "a relay outlived its subscriber"
            if relay.state is RelayState.OPEN:
                assert self.downstream[id(relay)] == "answered"
                assert self.up[relay.name].relay is relay
        for relay in self.relays:
            if not self.table.is_current(relay):
                assert self.downstream[id(relay)] == "closed", "a subscriber left waiting"

    def settle(self) -> None:
        """The component is back and answers everything: nothing may stay waiting."""
        if not self.table.upstream_ready:
            self.perform(self.table.upstream_up())
        for _ in range(100):
            busy = [link for link in self.up.values() if link.state != "open"]
            if not busy:
                break
            self.step(("confirm" if busy[0].state == "closing" else "reply", 0))
        for relay in self.table:
            assert relay.state is RelayState.OPEN
            assert self.downstream[id(relay)] == "answered"


names = st.sampled_from(["a", "b", "c"])
ops = st.one_of(
    st.tuples(st.just("attach"), names),
    st.tuples(st.sampled_from(["detach", "reply", "refuse", "confirm", "remote"]),
              st.integers(0, 20)),
    st.tuples(st.sampled_from(["lose", "up"])),
    st.tuples(st.just("tick"), st.floats(0.0, 4.0)),
)


@settings(max_examples=300)
@given(st.lists(ops, max_size=60))
def test_random_events_keep_every_promise_of_the_relay_table(events: list[tuple[Any, ...]]) -> None:
    sim = _Sim(RelayTable("gw", hold_timeout=10.0))
    for op in events:
        sim.step(op)  # each step asserts the table's promises on the actions it returns
    sim.settle()
    assert sim.table.upstream_ready
    assert all(link.state == "open" for link in sim.up.values())


@pytest.mark.amqp
def test_a_gateway_that_cannot_reach_the_component_gives_up_after_its_attempts() -> None:
    from seqrepair.amqp.gateway.gateway import Gateway

    from .conftest import free_port

    gw = Gateway("127.0.0.1:0", f"127.0.0.1:{free_port()}",
                 security=ANONYMOUS_LISTENER, backoff=Backoff(initial=0.02, max_attempts=3)).start()
    assert gw.stopped.wait(30)  # it stops by itself
    assert gw.error is not None
    assert "after 3 attempts" in gw.error
    assert gw.stats["upstream_connections"] == 0
