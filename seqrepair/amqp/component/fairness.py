"""How live delivery and repair share the component's one event loop (issue 24).

Live fan-out runs as publications arrive and is never made to wait for anybody's repair.
Repair work (reading the journal for a source replay, reading a link context for a range
resend, encoding the chunks) runs only in *repair turns*: a turn serves the routes that have
such work, one step each in turn (:class:`FairRing`: round-robin across connections, and within
a connection across its routes, so a connection's share does not grow with its requests or
links), until its time budget is spent (:class:`TurnBudget`, ``--repair-turn``); the rest
waits for the next turn, which comes after the event loop has served every other connection's
I/O. One step sends at most one chunk of answers, or reads at most one journal page of entries
the link is not entitled to (a replay that scans and skips yields too).

A route whose transfers its peer has not yet taken (:class:`~.memory.Unsent`) reach ``ahead``
bytes gets no step until they drop below: without this a peer granting much credit has a whole
replay read, encoded and handed to proton in a few turns, faster than its socket takes it, and
the component holds all of it (measured: ~13 MiB of RSS per 10,000-entry replay of 1 KiB
publications). The component's tick asks again for every route (:meth:`RepairTurns.want`);
the component's ``ahead`` is a quarter of ``--link-unsent-bytes`` (1 MiB by default), below the
bound at which a link is paused.

How much repair may be in flight is bounded too: source replays
per connection and per principal (``--max-replays-per-connection``,
``--max-replays-per-principal``; behind a forwarding gateway per principal it acts for:
:func:`check_replay_room`); a request past either is rejected
``amqp:resource-limit-exceeded`` and its requester asks again later (a subscriber stub backs
off and retries).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import attrs

from seqrepair.amqp.component.config import ComponentConfig
from seqrepair.amqp.component.grants import principal_of
from seqrepair.amqp.component.links import ResponseRoute
from seqrepair.amqp.wire.admission import FORWARDING_FACTOR
from seqrepair.amqp.wire.errors import RequestFloodError
from seqrepair.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T", bound=Hashable)

TRANSPORT_BACKLOG = 16 << 10
"""Bytes of a connection's transport output not yet written to its socket past which its routes
get no repair step: proton frames every transfer its peer's window allows at once and keeps
the frames in a buffer that never shrinks while the connection lasts (a replay read faster than
the socket takes it grew the component ~13 MiB per connection). ``pending()`` shows at most
the transport's output buffer (16-32 KiB), so this says "the socket is behind"."""

RETRY_AHEAD = 0.005
"""Seconds after which routes that waited for their peer to take what was sent are tried
again, at most: the first retry comes on the event loop's next pass (after its socket writes:
a replay chunk alone passes :data:`TRANSPORT_BACKLOG`, and a loopback socket takes it at
once), each retry that finds a route still waiting doubles the wait from
:data:`RETRY_FIRST` up to this. A fixed 5 ms paced a replay at one chunk per 5 ms (256
publications: ~50k/s at most; issue 26)."""
RETRY_FIRST = 0.0005


@attrs.define
class FairRing(Generic[T]):
    """Items waiting for a turn, served round-robin across groups, then within a group.

    ``add(group, item)`` queues an item (again: no effect while it waits); ``pop()`` takes the
    next one: the first item of the group whose turn it is, after which that group goes to the
    back of the ring. An item is in at most one group.
    """

    _groups: dict[Hashable, dict[T, None]] = attrs.field(factory=dict, init=False)
    _group_of: dict[T, Hashable] = attrs.field(factory=dict, init=False)

    def add(self, group: Hashable, item: T) -> None:
        """Queue ``item`` of ``group`` at the back of its group (if not queued already)."""
        if item in self._group_of:
            return
        self._group_of[item] = group
        self._groups.setdefault(group, {})[item] = None

    def pop(self) -> T | None:
        """The item whose turn it is (None: nothing waits)."""
        if not self._groups:
            return None
        group = next(iter(self._groups))
        members = self._groups.pop(group)
        item = next(iter(members))
        del members[item]
        del self._group_of[item]
        if members:
            self._groups[group] = members  # the group's next item waits a round
        return item

    def discard(self, item: T) -> None:
        """Forget ``item`` (its route went away)."""
        group = self._group_of.pop(item, None)
        if group is None:
            return
        members = self._groups[group]
        del members[item]
        if not members:
            del self._groups[group]

    def __len__(self) -> int:
        return len(self._group_of)

    def __contains__(self, item: object) -> bool:
        return item in self._group_of


@attrs.define
class TurnBudget:
    """The event-loop time one repair turn may take: ``seconds`` from :meth:`start`."""

    seconds: float
    clock: Callable[[], float]
    _started: float = attrs.field(default=0.0, init=False)

    def start(self) -> None:
        """A new turn begins now."""
        self._started = self.clock()

    def spent(self) -> bool:
        """Whether the turn has used its time."""
        return self.clock() - self._started >= self.seconds


class RepairTurns:
    """The component's repair turns: routes whose answers must be read wait in a
    :class:`FairRing` (by connection); a turn gives them a step each in turn until its
    :class:`TurnBudget` is spent, and the next turn is scheduled after the event loop has
    served everything else that is ready.

    ``schedule(fn)`` runs ``fn`` on the event loop as soon as it has served what is ready;
    ``pump(sender)`` sends what a step made ready on ``sender`` (a link's live frames behind
    it) and asks for the route's next step through :meth:`want`. ``ahead`` (None: no bound): the
    unsent bytes past which a route waits (module docstring). ``stats`` gains ``repair_turns``,
    ``repair_steps``, ``repair_turns_cut``, ``repair_failures`` and ``repair_waits_ahead``.
    """

    def __init__(self, budget: TurnBudget, stats: dict[str, int], *,
                 schedule: Callable[[Callable[[], None]], Any],
                 pump: Callable[[Any], None], ahead: int | None = None,
                 later: Callable[[float, Callable[[], None]], Any] | None = None) -> None:
        self.later = later
        self.ahead = ahead
        self.budget = budget
        self.stats = stats
        self.schedule = schedule
        self.pump = pump
        self.ring: FairRing[ResponseRoute] = FairRing()
        self.waiting: set[ResponseRoute] = set()
        self.retry_scheduled = False
        self.retry_delay = 0.0
        self.scheduled = False
        for key in ("repair_turns", "repair_steps", "repair_turns_cut", "repair_failures",
                    "repair_waits_ahead"):
            stats.setdefault(key, 0)

    def want(self, route: ResponseRoute) -> None:
        """Queue ``route`` for a step if answers wait there that must be read and its peer
        gave credit for them (credit coming back queues it again)."""
        if not route.wants_turn() or not route.needs_reading() or self.too_far_ahead(route):
            return
        self.ring.add(getattr(route.sender.connection, "seqrepair_id", None), route)
        if not self.scheduled:
            self.scheduled = True
            self.schedule(self.turn)

    def too_far_ahead(self, route: ResponseRoute) -> bool:
        """Whether ``route``'s peer has not yet taken ``ahead`` bytes or more of it, or its
        connection's transport has output its socket has not yet taken (it is asked again a
        moment later, and on every tick)."""
        sender = route.sender
        if self.ahead is None or sender is None:
            return False
        transport = sender.connection.transport
        backlog = transport.pending() if transport is not None else 0
        if route.unsent.update(sender.queued) < self.ahead and backlog < TRANSPORT_BACKLOG:
            return False
        self.stats["repair_waits_ahead"] += 1
        self.waiting.add(route)
        return True

    def discard(self, route: ResponseRoute) -> None:
        """Forget ``route`` (its connection or target went away)."""
        self.ring.discard(route)
        self.waiting.discard(route)

    def turn(self) -> None:
        """One repair turn (see the module's docstring)."""
        ring = self.ring
        self.budget.start()
        self.stats["repair_turns"] += 1
        while ring:
            route = ring.pop()
            if route is None or route.sender is None or route.sender.credit <= 0:
                continue  # its peer's credit puts it back
            if self.too_far_ahead(route):
                continue  # the tick puts it back
            self.stats["repair_steps"] += 1
            try:
                route.send_one(read=True)
            except Exception:  # a timer's handler is not Guarded: the loop must go on
                self.stats["repair_failures"] += 1
                log.exception("repair step failed: that answer ends unfinished")
            self.pump(route.sender)  # what the step made ready, live frames behind it
            if self.budget.spent():
                break
        self.scheduled = bool(ring)
        if ring:
            self.stats["repair_turns_cut"] += 1
            self.schedule(self.turn)
        if self.waiting and not self.retry_scheduled and self.later is not None:
            self.retry_scheduled = True
            self.later(self.retry_delay, self._retry)

    def _retry(self) -> None:
        """Ask again for the routes that waited for their peer (:meth:`too_far_ahead`); the
        next retry waits longer while some still wait (:data:`RETRY_AHEAD`)."""
        self.retry_scheduled = False
        waiting, self.waiting = self.waiting, set()
        for route in waiting:
            self.want(route)
        if not self.waiting:
            self.retry_delay = 0.0
        elif self.later is not None:
            self.retry_delay = min(RETRY_AHEAD, max(RETRY_FIRST, 2 * self.retry_delay))
            if not self.retry_scheduled:
                self.retry_scheduled = True
                self.later(self.retry_delay, self._retry)


def check_replay_room(
    routes: Iterable[ResponseRoute], route: ResponseRoute, config: ComponentConfig,
    stats: dict[str, int], principal: str | None = None,
    principals: Mapping[str, str] | None = None,
) -> None:
    """RequestFloodError (``amqp:resource-limit-exceeded``) when the connection, or the
    principal, of ``route`` runs as many source replays as ``max_replays_per_connection``
    (``max_replays_per_principal``) allow, counted over ``routes``; the requester asks again
    later (a stub backs off and retries). Counted in ``stats["replays_refused"]``.

    ``principal``: the asking link's (None: its connection's), ``principals``: every link's
    by name. A replay counts for its link's principal, so on a connection acting for others
    (a forwarding gateway) "this connection" is the principal it acts for on it: one client
    uses up its own allowance, never the gateway's; such a connection runs at most
    :data:`~seqrepair.amqp.wire.admission.FORWARDING_FACTOR` times
    ``max_replays_per_connection`` in all."""
    conn = route.sender.connection
    actor = principal_of(conn)
    principal = actor if principal is None else principal
    known = principals or {}
    forwarded = principal != actor
    on_conn = mine_on_conn = by_principal = 0
    for other in routes:
        if other.replays and other.sender is not None:
            other_conn = other.sender.connection
            owner = principal_of(other_conn)
            for name in other.replays:
                whose = known.get(name, owner)
                if other_conn == conn:
                    on_conn += 1
                    mine_on_conn += whose == principal
                by_principal += whose == principal
    for count, limit, whose_text in (
        (mine_on_conn if forwarded else on_conn, config.max_replays_per_connection,
         f"principal {principal!r} on this connection" if forwarded else "this connection"),
        (on_conn, FORWARDING_FACTOR * config.max_replays_per_connection,
         "this connection, for all the principals it acts for"),
        (by_principal, config.max_replays_per_principal, f"principal {principal!r}"),
    ):
        if count >= limit:
            stats["replays_refused"] = stats.get("replays_refused", 0) + 1
            raise RequestFloodError(
                f"{count} source replays already run for {whose_text} (at most {limit}); "
                "ask again later", expected=limit, got=count)
