"""The gateway's link relays as a pure state machine (no proton, no clock, no socket).

A *relay* pairs a subscriber's link at the gateway (downstream) with the gateway's link of the
same source at the component (upstream, named ``<gateway>.<link name>``). The gateway answers
the subscriber's attach only once the component has answered its own, so the component's reply
(the epoch it granted, the subscription's start) or its refusal reaches the subscriber as if it
had attached directly. A relay is therefore:

* ``HELD``: the downstream attach is not answered; the upstream attach waits until the
  upstream connection is open and no earlier upstream link of the same name is still closing
  (the component would take a new attach of a name it has not seen detached for the old link);
* ``ATTACHING``: the upstream attach is sent, its reply awaited;
* ``OPEN``: both attached, frames relayed.

A relay ends when either side detaches: the other side is detached too, with the remote's
error condition when there was one. When the upstream connection is lost every relay that had
reached the component ends and the connection of its subscriber is closed with
``amqp:connection:forced``: a subscriber behind the gateway then sees what it would see
connected directly (a lost connection), reconnects and attaches again with its epoch; its
attach is held until the gateway is back at the component. A held attach not answered within
``hold_timeout`` ends the same way, so a subscriber is never left waiting without end.

:class:`RelayTable` takes the adapter's events and returns the actions to perform;
:class:`~seqrepair.amqp.wire.backoff.Backoff` (re-exported here) spaces the gateway's attempts to
reach the component again.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
from proton import symbol

from seqrepair.amqp.wire.backoff import Backoff  # re-exported: it lived here first
from seqrepair.amqp.wire.errors import AmqpAdapterError, UnauthorizedAccessError
from seqrepair.amqp.wire.hops import (
    LOOP_CONDITION,
    HopError,
    Hops,
    Path,
    Route,
    hop_refusal,
    read_path,
    read_route,
)
from seqrepair.amqp.wire.loopbar import Bars, around, loop_cycle, looping_identity
from seqrepair.amqp.wire.security import ANONYMOUS
from seqrepair.amqp.wire.vocabulary import PROP_ON_BEHALF_OF

FORCED = "amqp:connection:forced"
"""The condition a subscriber's connection is closed with when its relay is lost: the AMQP
condition for "closed by the other side; try again later"."""

STOLEN = "amqp:link:stolen"
"""The condition of a relay whose link name was attached again (the component's own)."""
UNAUTHORIZED = UnauthorizedAccessError.condition
"""The condition of an attach whose link name another principal holds (refused)."""


def upstream_name(gateway: str, link: str) -> str:
    """The name, in the upstream scope, of a downstream link ``link``."""
    return f"{gateway}.{link}"


def relayed_properties(props: Mapping[Any, Any] | None) -> dict[symbol, Any]:
    """Link properties to pass on across the gateway, either way.

    The properties of seqrepair links (``seqrepair-epoch``, ``seqrepair-start-after``,
    ``seqrepair-resume``, ``seqrepair-batch``, ``seqrepair-permtokens``) name contexts, sources
    and tokens, never a link, so they pass unchanged: the epoch the component grants belongs to
    the upstream link, whose only user is the downstream link of the relay. Properties the
    gateway does not know pass unchanged too (the gateway is transparent); keys are made symbols,
    as AMQP ``fields`` require.
    """
    if not props:
        return {}
    return {k if isinstance(k, symbol) else symbol(str(k)): v for k, v in dict(props).items()}


def upstream_properties(props: Mapping[Any, Any] | None,
                        on_behalf_of: str | None) -> dict[symbol, Any]:
    """A downstream attach's properties as the gateway attaches upstream: relayed, except
    ``seqrepair-on-behalf-of``, which only the gateway sets (``on_behalf_of``: the principal
    its client proved, when the gateway forwards principals; a client never names its own)."""
    out = relayed_properties(props)
    out.pop(PROP_ON_BEHALF_OF, None)
    if on_behalf_of is not None:  # anonymous too: it must not act as the gateway
        out[PROP_ON_BEHALF_OF] = on_behalf_of
    return out


class RelayState(enum.Enum):
    """Where a relay is in its life (see the module docstring)."""

    HELD = "held"
    ATTACHING = "attaching"
    OPEN = "open"


@attrs.define(eq=False)
class Relay:
    """One downstream link and what the gateway attached upstream for it."""

    name: str
    """The downstream link's name."""
    address: str | None
    """The source address it attached (the same at the component)."""
    properties: dict[symbol, Any]
    """Its attach's link properties, relayed upstream."""
    downstream: Any
    """The adapter's handle of the downstream link."""
    since: float
    """When its attach came (the adapter's clock)."""
    principal: str = ANONYMOUS
    """Who attached it downstream (the principal its connection proved)."""
    state: RelayState = RelayState.HELD
    upstream: Any = None
    """The adapter's handle of the upstream link, set when it performs :class:`AttachUpstream`."""


@attrs.frozen
class AttachUpstream:
    """Attach ``name`` at the component with ``properties`` for ``relay``."""

    relay: Relay
    name: str
    properties: dict[symbol, Any]


@attrs.frozen
class AnswerDownstream:
    """Answer the relay's downstream attach, with the component's reply ``properties``."""

    relay: Relay
    properties: dict[symbol, Any]


@attrs.frozen
class DetachUpstream:
    """Detach the relay's upstream link (the component keeps its context for resumption)."""

    relay: Relay


@attrs.frozen
class DetachDownstream:
    """Detach (or refuse, when not answered yet) a downstream link, with ``condition`` unless
    it is None."""

    relay: Relay
    condition: str | None
    description: str = ""


@attrs.frozen
class CloseDownstreamConnection:
    """Close the connection of the relay's downstream link with ``condition``: its subscriber
    reconnects and attaches again."""

    relay: Relay
    condition: str
    description: str


Action = AttachUpstream | AnswerDownstream | DetachUpstream | DetachDownstream | (
    CloseDownstreamConnection
)


@attrs.define
class RelayTable:
    """Every relay of a gateway, keyed by downstream link name (the link's identity at the
    component too). Feed it the adapter's events; perform the actions it returns, in order."""

    gateway: str
    hold_timeout: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    upstream_ready: bool = False
    """Whether the upstream connection is open (the adapter says so)."""
    hops: Hops | None = None
    """The gateway's identity and hop limit: an attach is carried upstream with its
    ``seqrepair-path`` extended, or refused (a loop, a chain too long, a malformed path)
    before anything else happens (:mod:`seqrepair.amqp.wire.hops`). None: paths pass as
    they came."""
    bars: Bars = attrs.field(factory=Bars)
    """What the upstream's refusals for a path taught the gateway (:meth:`learn`): attaches
    refused at once for a while, a loop's storm stopped at the first gateway in it."""
    _cycle: Path | None = None
    """The identities the loop through this gateway crosses after it (the cut-off's)."""
    _relays: dict[str, Relay] = attrs.field(factory=dict)
    _upstream_names: set[str] = attrs.field(factory=set)
    """Names whose upstream link is attached or not yet seen detached at the component."""

    def __iter__(self) -> Iterator[Relay]:
        return iter(list(self._relays.values()))

    def __len__(self) -> int:
        return len(self._relays)

    def get(self, name: str) -> Relay | None:
        """The current relay of downstream link ``name``."""
        return self._relays.get(name)

    def is_current(self, relay: Relay) -> bool:
        """Whether ``relay`` has not ended (a newer attach of its name ends it)."""
        return self._relays.get(relay.name) is relay

    # --- downstream events --------------------------------------------------------------

    def attach(
        self,
        name: str,
        address: str | None,
        properties: Mapping[Any, Any] | None,
        downstream: Any,
        now: float,
        *,
        principal: str = ANONYMOUS,
        on_behalf_of: str | None = None,
    ) -> tuple[Relay, list[Action]]:
        """A subscriber (``principal``) attached ``name``: its relay, held until the component
        answers (attached upstream on behalf of ``on_behalf_of`` when the gateway forwards
        principals).

        A relay of the same name still current ends (``amqp:link:stolen``, as at the component):
        a link name has one subscriber. Another principal's attach with a name in use is
        refused (``amqp:unauthorized-access``) and the owner keeps its link. An attach whose
        path is refused (:attr:`hops`) is refused at once, never attached upstream, and
        touches no other relay.
        """
        actions: list[Action] = []
        relay = Relay(name, address, upstream_properties(properties, on_behalf_of), downstream,
                      now, principal)
        if self.hops is not None:
            try:
                relay.properties = self.hops.upstream_properties(relay.properties)
            except AmqpAdapterError as exc:
                return relay, [DetachDownstream(relay, exc.condition, exc.message)]
            barred = self.refusal(read_path(properties), now)
            if barred is not None:  # it would go round the loop (or too deep) again
                return relay, [DetachDownstream(relay, barred.condition, barred.message)]
        old = self._relays.get(name)
        if old is not None and old.principal != principal:
            return relay, [DetachDownstream(relay, UNAUTHORIZED,
                                            f"link name {name!r} belongs to another principal")]
        if old is not None:
            actions += self._end(old, DetachDownstream(old, STOLEN, "attached again"))
        self._relays[name] = relay
        actions += self._try_attach(relay)
        return relay, actions

    def downstream_detached(self, relay: Relay) -> list[Action]:
        """The subscriber's link went away (detached, or its connection was lost)."""
        if not self.is_current(relay):
            return []
        return self._end(relay, None)

    # --- upstream events ----------------------------------------------------------------

    def upstream_up(self) -> list[Action]:
        """The upstream connection is open: attach every held relay."""
        self.upstream_ready = True
        actions: list[Action] = []
        for relay in self:
            actions += self._try_attach(relay)
        return actions

    def upstream_down(self) -> list[Action]:
        """The upstream connection is lost, and every upstream link with it. Relays that had
        reached the component end and their subscribers' connections are closed; held ones
        keep waiting."""
        self.upstream_ready = False
        self._upstream_names.clear()
        actions: list[Action] = []
        for relay in self:
            if relay.state is not RelayState.HELD:
                del self._relays[relay.name]
                actions.append(CloseDownstreamConnection(
                    relay, FORCED, "the gateway lost its connection to the component; reconnect"
                ))
        return actions

    def upstream_attached(
        self,
        relay: Relay,
        properties: Mapping[Any, Any] | None,
        refused: tuple[str, str] | None = None,
    ) -> list[Action]:
        """The component answered the relay's upstream attach, with its link ``properties``;
        ``refused`` = (condition, description) when it detached the link at once."""
        if not self.is_current(relay) or relay.state is not RelayState.ATTACHING:
            return []  # ended meanwhile: its upstream link is being detached
        if refused is not None:
            del self._relays[relay.name]
            return [DetachDownstream(relay, refused[0], refused[1])]
        relay.state = RelayState.OPEN
        return [AnswerDownstream(relay, relayed_properties(properties))]

    def refusal(self, path: Path, now: float) -> HopError | None:
        """The refusal an attach with ``path`` (as it came) gets at ``now`` from what the
        upstream's refusals taught the gateway (:attr:`bars`), None when it may go upstream;
        while a loop through the gateway bars every attach, worded as that attach would come
        back from it (the first identity it would meet twice, its path by then)."""
        barred = self.bars.refusal(path, now)
        if (barred is not None and barred is self.bars.cut_off and self._cycle is not None
                and self.hops is not None):
            return around(path, self.hops.identity, self._cycle)
        return barred

    def learn(self, relay: Relay, condition: str, description: str, now: float) -> str | None:
        """The upstream refused (or ended) ``relay``'s attach: :meth:`learn_route` of its
        route upstream."""
        return self.learn_route(read_route(relay.properties), condition, description, now)

    def learn_route(self, route: Route, condition: str, description: str, now: float
                    ) -> str | None:
        """The upstream refused (or ended) an attach this gateway sent with ``route`` (its
        path, this gateway's identity last, and hops) with ``condition`` and
        ``description``: when that is for its path, bar what would go round again
        (:mod:`seqrepair.amqp.wire.loopbar`) and say what (for the log), else None.

        A loop whose identity found twice is this gateway's own: every attach through it
        goes round, so all are refused for a while (cut off). One whose identity found twice
        is on the path behind it: attaches through that identity are. Past the hop limit:
        that exact path (a route whose hop count its client claimed, or whose path was cut
        short, is not barred: the count is not its path's)."""
        error = hop_refusal(condition, description)
        if error is None or self.hops is None:
            return None
        path, hops = route
        behind = path[:-1]
        if condition == LOOP_CONDITION:
            twice = looping_identity(description)
            if twice == self.hops.identity:
                self._cycle = loop_cycle(description, twice)
                self.bars.cut(error, self.bars.breaker.trip(now))
                return "every attach (the loop runs through this gateway)"
            if twice is None or twice not in behind:
                return None
            self.bars.bar([twice], error, self.bars.breaker.trip(now))
            return f"attaches through {twice}"
        if hops != len(path):
            return None
        self.bars.bar_paths([behind], error, self.bars.breaker.trip(now))
        return "attaches with this path"

    def upstream_detached(
        self, relay: Relay, condition: tuple[str, str] | None = None
    ) -> list[Action]:
        """The relay's upstream link is detached at both ends (whoever began it), with the
        component's ``condition`` (name, description) when it gave one. The name is free again:
        a relay of that name waiting for it attaches now."""
        self._upstream_names.discard(relay.name)
        actions: list[Action] = []
        if self.is_current(relay):
            del self._relays[relay.name]
            actions.append(DetachDownstream(relay, *(condition or (None, ""))))
        waiting = self._relays.get(relay.name)
        if waiting is not None:
            actions += self._try_attach(waiting)
        return actions

    # --- time -----------------------------------------------------------------------------

    def expire(self, now: float) -> list[Action]:
        """Relays whose subscriber has waited more than ``hold_timeout`` for an answer end,
        their subscribers' connections closed so that they try again."""
        actions: list[Action] = []
        for relay in self:
            if relay.state is not RelayState.OPEN and now - relay.since > self.hold_timeout:
                actions += self._end(relay, CloseDownstreamConnection(
                    relay, FORCED,
                    f"the component did not answer within {self.hold_timeout:g} s; reconnect",
                ))
        return actions

    # --- internals ------------------------------------------------------------------------

    def _try_attach(self, relay: Relay) -> list[Action]:
        if (
            not self.upstream_ready
            or relay.state is not RelayState.HELD
            or relay.name in self._upstream_names
        ):
            return []
        relay.state = RelayState.ATTACHING
        self._upstream_names.add(relay.name)
        return [AttachUpstream(relay, upstream_name(self.gateway, relay.name), relay.properties)]

    def _end(self, relay: Relay, downstream: Action | None) -> list[Action]:
        """End a current relay: detach its upstream link if it has one, then ``downstream``."""
        del self._relays[relay.name]
        actions: list[Action] = []
        if relay.state is not RelayState.HELD:
            actions.append(DetachUpstream(relay))
        if downstream is not None:
            actions.append(downstream)
        return actions


__all__ = [
    "FORCED",
    "STOLEN",
    "Action",
    "AnswerDownstream",
    "AttachUpstream",
    "Backoff",
    "CloseDownstreamConnection",
    "DetachDownstream",
    "DetachUpstream",
    "Relay",
    "RelayState",
    "RelayTable",
    "relayed_properties",
    "upstream_name",
    "upstream_properties",
]
