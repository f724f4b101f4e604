"""The pieces of fair repair scheduling (issue 24) without a network: the round-robin ring,
the turn budget, and a route that reads answers only when told to, a step at a time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from seqrepair.amqp.component.config import ComponentConfig
from seqrepair.amqp.component.fairness import FairRing, RepairTurns, TurnBudget
from seqrepair.amqp.component.links import ResponseRoute, SubscriberLink
from seqrepair.core.context import LinkContext
from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.messages import GapError, GapRequest, ReplayComplete
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer

from .test_links import _pub, _received, _Sender


def test_the_ring_serves_connections_in_turn_not_in_proportion_to_their_routes() -> None:
    ring: FairRing[str] = FairRing()
    for route in ("a1", "a2", "a3"):
        ring.add("conn-a", route)
    ring.add("conn-b", "b1")
    ring.add("conn-a", "a1")  # queued already: no second place
    assert len(ring) == 4
    assert "a2" in ring
    order = [ring.pop() for _ in range(4)]
    assert order == ["a1", "b1", "a2", "a3"]
    assert ring.pop() is None
    assert len(ring) == 0


def test_a_route_served_goes_to_the_back_behind_the_other_connections() -> None:
    ring: FairRing[str] = FairRing()
    ring.add(1, "x")
    ring.add(2, "y")
    ring.add(3, "z")
    served = []
    for _ in range(7):  # each route asks again after its step, as a busy route does
        route = ring.pop()
        assert route is not None
        served.append(route)
        ring.add({"x": 1, "y": 2, "z": 3}[route], route)
    assert served == ["x", "y", "z", "x", "y", "z", "x"]


def test_discard_forgets_a_route_and_an_emptied_connection() -> None:
    ring: FairRing[str] = FairRing()
    ring.add(1, "x")
    ring.add(2, "y")
    ring.discard("x")
    ring.discard("nothing")
    assert ring.pop() == "y"
    assert ring.pop() is None


def test_the_turn_budget_is_spent_after_its_seconds() -> None:
    now = [100.0]
    budget = TurnBudget(0.01, lambda: now[0])
    budget.start()
    assert not budget.spent()
    now[0] += 0.009
    assert not budget.spent()
    now[0] += 0.002
    assert budget.spent()
    budget.start()
    assert not budget.spent()


class _Counted:
    """Frames of an answer with a count of how many were read; ``None`` where a replay pauses
    after scanning a journal slice without anything to send."""

    def __init__(self, frames: list[object]) -> None:
        self.frames = frames
        self.read = 0

    def __iter__(self) -> Iterator[object]:
        for frame in self.frames:
            self.read += 1
            yield frame


def test_a_route_reads_nothing_unless_told_and_a_scan_pause_sends_nothing() -> None:
    route = ResponseRoute(Entitlement.everything(), 8, lambda _s: 64)
    route.sender = _Sender(credit=100)
    pubs = [_pub(n) for n in (1, 2)]
    done = ReplayComplete(through={"s": 2})
    answer = _Counted([None, None, pubs[0], pubs[1], None, done])
    route.start_replay("L", answer, "c")  # type: ignore[arg-type]
    assert route.send_ready() == 0  # a pump sends only what is ready
    assert answer.read == 0
    assert route.needs_reading()
    assert route.wants_turn()
    assert not route.send_one(read=True)  # a slice scanned: a step ends
    assert answer.read == 1
    assert not route.send_one(read=True)
    assert answer.read == 2
    assert route.send_one(read=True)  # the two publications, cut at the pause
    assert answer.read == 5
    assert route.send_one(read=True)  # the closing frame
    assert not route.busy()
    got = _received(route.sender.sent)
    assert [(p.source_seq, p.retransmit) for p in got[:-1]] == [(1, False), (2, False)]  # type: ignore[attr-defined]
    assert got[-1] == done


def test_replays_of_one_route_take_turns_step_by_step() -> None:
    route = ResponseRoute(Entitlement.everything(), 1, lambda _s: 64)
    route.sender = _Sender(credit=100)
    route.start_replay("A", iter([_pub(1), _pub(2), ReplayComplete(through={"s": 2})]), "a")
    route.start_replay("B", iter([_pub(7), ReplayComplete(through={"s": 7})]), "b")
    while route.busy():
        route.send_one(read=True)
    assert [m.correlation_id for m in route.sender.sent] == ["a", "b", "a", "b", "a"]  # type: ignore[attr-defined]


def test_a_link_keeps_live_frames_behind_an_answer_still_to_read() -> None:
    link = SubscriberLink(
        name="l", address="/w/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 1000), batch=True,
        max_batch=8, max_pending=100, source_bits=lambda _s: 32,
    )
    link.attach(_Sender(credit=100))
    link.offer_many([(_pub(n), None) for n in range(1, 11)], 0.0)
    link.pump(0.0)  # nothing waits: live frames go
    resend = link.context.resend(GapRequest(1, 10))
    assert not isinstance(resend, GapError)
    link.route.start_resend(link.fresh(resend), "r")
    link.offer_many([(_pub(n), None) for n in range(11, 14)], 0.0)
    link.pump(0.0)
    assert len(link.pending) == 3  # the answer is read on a repair turn; live waits behind it
    sent_before = len(link.sender.sent)
    while link.route.needs_reading():
        assert link.route.send_one(read=True)
        link.pump(0.0)
    link.pump(0.0)
    assert not link.pending
    frames = _received(link.sender.sent[sent_before:])
    kinds = [(f.link_seq, f.retransmit) for f in frames]  # type: ignore[attr-defined]
    assert kinds == [(n, True) for n in range(1, 11)] + [(n, False) for n in range(11, 14)]


def test_an_answer_whose_reading_fails_ends_there_and_the_route_goes_on() -> None:
    def failing() -> Iterator[object]:
        yield _pub(1)
        raise ConnectionError("journal down")

    route = ResponseRoute(Entitlement.everything(), 8, lambda _s: 64)
    route.sender = _Sender(credit=100)
    route.start_replay("A", failing(), "a")  # type: ignore[arg-type]
    route.start_replay("B", iter([_pub(7), ReplayComplete(through={"s": 7})]), "b")
    try:
        route.send_one(read=True)
    except ConnectionError:
        pass
    else:
        raise AssertionError("the failure must reach the caller, which logs it")
    while route.busy():
        route.send_one(read=True)
    got = [(m.correlation_id, f) for m in route.sender.sent for f in _received([m])]  # type: ignore[attr-defined]
    # A's answer ended without a closing frame (its requester asks again); B's is whole
    assert [c for c, _ in got] == ["b", "b"]
    assert got[-1][1] == ReplayComplete(through={"s": 7})


def test_the_repair_bounds_are_checked_settings_and_reported_as_limits() -> None:
    limits = ComponentConfig().limits()
    assert limits["repair-turn"] == 0.01
    assert limits["replay-page"] == 1000
    assert limits["max-replays-per-connection"] == 16
    assert limits["max-replays-per-principal"] == 64
    for bad in ({"repair_turn": 0}, {"replay_page": 0}, {"max_replays_per_connection": 0},
                {"max_replays_per_principal": -1}):
        with pytest.raises(InvalidConfigError):
            ComponentConfig(**bad)  # type: ignore[arg-type]


class _ConnSender(_Sender):
    def __init__(self, credit: int, conn_id: int) -> None:
        super().__init__(credit)
        self.connection = type("Conn", (), {"seqrepair_id": conn_id})()


def test_repair_turns_serve_connections_in_turn_within_the_budget_and_continue_later() -> None:
    now = [0.0]
    stats: dict[str, int] = {}
    scheduled: list[object] = []
    steps: list[str] = []

    def route_of(conn_id: int, name: str, chunks: int) -> ResponseRoute:
        route = ResponseRoute(Entitlement.everything(), 1, lambda _s: 64)
        route.sender = _ConnSender(100, conn_id)

        def frames() -> Iterator[object]:
            for n in range(1, chunks + 1):
                steps.append(name)
                now[0] += 0.004  # each step costs 4 ms of the event loop
                yield _pub(n)
            yield ReplayComplete(through={"s": chunks})

        route.start_replay(name, frames(), name)  # type: ignore[arg-type]
        return route

    turns = RepairTurns(TurnBudget(0.01, lambda: now[0]), stats,
                        schedule=scheduled.append, pump=lambda sender: turns.want(sender.route))
    greedy = [route_of(1, f"g{k}", 4) for k in range(3)]  # one connection, three routes
    modest = route_of(2, "m", 4)
    for route in (*greedy, modest):
        route.sender.route = route
        turns.want(route)
    assert scheduled == [turns.turn]  # one turn scheduled, however many routes wait
    turns.turn()
    assert steps == ["g0", "m", "g1"]  # 12 ms: the budget ends the turn
    assert stats["repair_turns_cut"] == 1
    assert len(scheduled) == 2  # the rest on the next turn
    while turns.ring:
        turns.turn()
    # the modest connection got every other step until it was done, the greedy one no more
    assert steps[:8] == ["g0", "m", "g1", "m", "g2", "m", "g0", "m"]
    assert not any(route.busy() for route in (*greedy, modest))
    assert stats["repair_failures"] == 0


class _BackedUpSender(_ConnSender):
    """A sender whose connection's transport has ``backlog`` bytes its socket has not taken,
    and ``queued`` transfers proton has not yet written."""

    def __init__(self, credit: int, conn_id: int) -> None:
        super().__init__(credit, conn_id)
        self.backlog = 0
        self.queued = 0
        sender = self
        self.connection.transport = type(
            "Transport", (), {"pending": lambda _self: sender.backlog})()


def test_a_route_whose_socket_is_behind_gets_no_step_until_it_catches_up() -> None:
    stats: dict[str, int] = {}
    scheduled: list[object] = []
    later: list[tuple[float, object]] = []
    read: list[int] = []
    route = ResponseRoute(Entitlement.everything(), 1, lambda _s: 64)
    sender = _BackedUpSender(100, 1)
    route.sender = sender

    def frames() -> Iterator[object]:
        for n in range(1, 4):
            read.append(n)
            yield _pub(n)
        yield ReplayComplete(through={"s": 3})

    route.start_replay("L", frames(), "c")  # type: ignore[arg-type]
    turns = RepairTurns(TurnBudget(1.0, lambda: 0.0), stats, schedule=scheduled.append,
                        pump=lambda _sender: turns.want(route), ahead=1000,
                        later=lambda delay, fn: later.append((delay, fn)))
    sender.backlog = 64 << 10  # the socket is behind: nothing is read for it
    turns.want(route)
    assert (scheduled, read, stats["repair_waits_ahead"]) == ([], [], 1)
    sender.backlog = 0
    turns.want(route)
    assert scheduled == [turns.turn]
    sender.backlog = 64 << 10
    turns.turn()  # queued before the socket fell behind: still no step
    assert read == []
    assert len(later) == 1  # tried again a moment later
    sender.backlog = 0
    sender.queued = 11  # 11 transfers of 100 B not yet written: over ``ahead``
    for _ in range(11):
        route.unsent.sizes.append(100)
    route.unsent.bytes = 1100
    later.pop()[1]()  # type: ignore[operator]
    assert read == []
    assert len(later) == 1
    sender.queued = 0  # proton wrote them, the socket took them
    later.pop()[1]()  # type: ignore[operator]
    while turns.ring:
        turns.turn()
    assert read == [1, 2, 3]
    assert not route.busy()
