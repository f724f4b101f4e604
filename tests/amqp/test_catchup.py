"""Catch-up makes progress and never starts over (issue 26), over real processes.

A durable subscriber goes away, a few thousand publications are journaled, and it comes back:
its stub repairs the reset by source replay from its stored position. While it catches up the
component is frozen (SIGSTOP) for longer than a heartbeat interval, twice, and the application
holds its thread once: pauses that made the stub ask for the replay again, and the component
replace the replay in progress and send again everything on its way (213k-386k duplicates per
100,000 caught up). Now the component continues a replay a repeated request asks for
(``REPLAY-STARTED`` with ``continued``), so the catch-up ends exact with almost nothing twice.
No timing is asserted: only what arrived, and the stub's own count of duplicates.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

from proton import Message

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.component.component import Component, ComponentConfig
from seqrepair.amqp.component.links import ResponseRoute, SubscriberLink
from seqrepair.amqp.component.requests import answer_gap
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import (
    GapError,
    Publication,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer

from .conftest import ComponentProcess, wait_for
from .test_journalport import FakeJournal

N = 4_000


def test_a_catch_up_paused_on_both_sides_ends_exact_with_under_one_percent_twice(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--max-gap-range", "1500", "--replay-page", "200")
    assert comp.proc is not None
    pid = comp.proc.pid
    with Subscriber(comp.url, "/catch/#", link_name="catching") as first:
        assert first.wait_connected(20)
        time.sleep(0.3)  # its position is stored on the attach
    with Publisher(comp.url, "feed.c", address="/catch/#") as pub:
        pub.publish_many([("/catch/t", {"n": i, "pad": "x" * 100}, "update") for i in range(N)])
        assert pub.flush(60)

    got: list[int] = []
    thawed: list[threading.Timer] = []

    def freeze(seconds: float) -> None:
        os.kill(pid, signal.SIGSTOP)
        timer = threading.Timer(seconds, os.kill, (pid, signal.SIGCONT))
        thawed.append(timer)
        timer.start()

    def take(publication: Publication) -> None:
        got.append(publication.source_seq)
        if len(got) == N // 5:
            time.sleep(0.6)  # the application holds the subscriber's thread
        elif len(got) in (2 * N // 5, 3 * N // 5):
            freeze(1.5)  # the component stops answering for a heartbeat interval and more

    second = Subscriber(comp.url, "/catch/#", link_name="catching", on_publication=take)
    with second:
        try:
            wait_for(lambda: len(got) >= N, 120)
            time.sleep(0.3)  # anything sent twice after the last one is counted too
        finally:
            for timer in thawed:
                timer.join(5)
        stats = second.stats()
    comp.stop()
    counters = comp.stop_counters()
    assert got == list(range(1, N + 1))  # exactly once, in order
    assert second.unrecoverable == []
    assert stats.duplicates < N // 100, (stats, counters)
    assert counters["repair_failures"] == 0


def test_a_connection_lost_mid_catch_up_is_not_continued_blind(
    component: Callable[..., ComponentProcess],
) -> None:
    """The subscriber's connection drops twice while it catches up: what the component had
    sent on it may not have arrived, so the replay ends with the link's detach and the stub's
    next ask (after the silence) starts one after what it has: exact, nothing skipped."""
    comp = component("--max-gap-range", "1500", "--replay-page", "200")
    with Subscriber(comp.url, "/catch/#", link_name="dropping") as first:
        assert first.wait_connected(20)
        time.sleep(0.3)
    with Publisher(comp.url, "feed.d", address="/catch/#") as pub:
        pub.publish_many([("/catch/t", {"n": i, "pad": "x" * 100}, "update") for i in range(N)])
        assert pub.flush(60)
    got: list[int] = []
    holder: list[Subscriber] = []

    def take(publication: Publication) -> None:
        got.append(publication.source_seq)
        if len(got) in (N // 4, N // 2):
            holder[0].drop_connection()

    second = Subscriber(comp.url, "/catch/#", link_name="dropping", on_publication=take)
    holder.append(second)
    with second:
        wait_for(lambda: len(got) >= N, 120)
        time.sleep(0.3)
        stats = second.stats()
    assert got == list(range(1, N + 1))
    assert second.unrecoverable == []
    assert stats.disconnections >= 1


# --------------------------------------------------------------------------------------------
# the component's side, without I/O: continue or restart


def _route() -> ResponseRoute:
    return ResponseRoute(Entitlement.everything(), 4, lambda _source: 64)


FIRST = SourceGapRequest(after={"a": 10, "b": 3}, request_id=5, link_through=7)


def test_a_repeat_with_the_same_id_and_the_remainder_continues_the_replay() -> None:
    route = _route()
    route.start_replay("link", iter(()), 1, request=FIRST, through={"a": 90})
    repeat = SourceGapRequest(after={"a": 40, "b": 3}, request_id=5, link_through=7)
    live = route.live_replay("link", repeat)
    assert live is not None
    assert live.request is FIRST  # what it continues from: the first attempt's after
    assert live.answered is repeat  # what its closing frame echoes now
    assert live.through == {"a": 90}


def test_anything_else_restarts_it() -> None:
    route = _route()
    route.start_replay("link", iter(()), 1, request=FIRST)
    for other in (
        SourceGapRequest(after={"a": 40, "b": 3}, request_id=6, link_through=7),  # another id
        SourceGapRequest(after={"a": 40, "b": 3}, request_id=5, link_through=9),  # other cover
        SourceGapRequest(after={"a": 9, "b": 3}, request_id=5, link_through=7),  # went back
        SourceGapRequest(after={"a": 40, "b": 3}, link_through=7),  # names no request
        SourceGapRequest(after={"a": 40, "b": 3, "c": 0}, request_id=5, link_through=7),  # more
    ):
        assert route.live_replay("link", other) is None, other
    assert route.live_replay("another link", FIRST) is None
    route.drop_replay("link")  # its link detached
    assert route.live_replay("link", FIRST) is None


def test_an_id_reused_for_another_source_is_a_new_ask_unless_the_first_asked_for_all() -> None:
    """A client reusing a request id for sources its first ask did not name is asking anew:
    answered as a repeat, it would get the first ask's answer (found by test_authz_holes,
    whose probes reuse one id)."""
    route = _route()
    zero = SourceGapRequest(after={"hidden": 0}, request_id=7)
    route.start_replay("link", iter(()), 1, request=zero)
    assert route.live_replay("link", SourceGapRequest(after={"nosuch": 0}, request_id=7)) is None
    everything = SourceGapRequest(after={}, request_id=1)
    route.start_replay("link", iter(()), 1, request=everything)
    live = route.live_replay("link", SourceGapRequest(after={"a": 40}, request_id=1))
    assert live is not None
    assert live.request is everything


def test_a_link_attached_again_before_its_old_connection_closed_ends_its_replay() -> None:
    """A reconnecting subscriber's new attach may reach the component before the end of its
    old connection (half-open, or read first): the old sender is stolen, so the old
    connection's close no longer names the link. What the replay sent on the old connection
    may never have arrived: a repeat on the new one must start again from the remainder, not
    continue past numbers the subscriber never got."""
    link = SubscriberLink(
        name="link", address="/w/#", entitlement=Entitlement.everything(),
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 1000), batch=True,
        max_batch=8, max_pending=100, source_bits=lambda _s: 32,
    )
    link.attach(object())
    link.route.start_replay("link", iter(()), 1, request=FIRST, through={"a": 90})
    link.attach(object())  # the same link on a new connection (the old one stolen)
    repeat = SourceGapRequest(after={"a": 40, "b": 3}, request_id=5, link_through=7)
    assert link.route.live_replay("link", repeat) is None


class _Sender:
    """A proton sender's credit and what it was given to send."""

    def __init__(self) -> None:
        self.credit = 1_000_000
        self.connection = SimpleNamespace(seqrepair_id=1)
        self.sent: list[Message] = []

    def send(self, message: Message) -> SimpleNamespace:
        self.sent.append(message)
        self.credit -= 1
        return SimpleNamespace(pending=0)


def _sending_link(name: str) -> tuple[SubscriberLink, _Sender]:
    """A link that sends one publication per transfer (what went out is countable)."""
    link = SubscriberLink(
        name=name, address="/#", entitlement=Entitlement.everything(),
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 1000), batch=False,
        max_batch=1, max_pending=100, source_bits=lambda _s: 64,
    )
    sender = _Sender()
    link.attach(sender)
    return link, sender


class _PagedJournal(FakeJournal):
    """The fake journal, read as a replay reads it (its pages are one read here)."""

    def iter_entries(
        self, source: str, first: int, last: int | None = None, *, page_size: int | None = None
    ) -> Iterator[Publication]:
        assert last is not None
        return iter(self.read_range(source, first, last))


class _Replaying:
    """A component on the fake journal holding feed.c 1..4000 (``--max-gap-range 1500``,
    ``--replay-page 200``) and one subscriber link; requests are answered as ``$seqrepair``
    answers them, and what the link was sent is read back as the subscriber reads it."""

    def __init__(self, poison: int | set[int] | None = None) -> None:
        journal = _PagedJournal()  # ``poison``: numbers journaled that cannot be sent
        poisons = {poison} if isinstance(poison, int) else poison or set()
        journal.append([Publication("/catch/" + "t" * (1100 if n in poisons else 1), "feed.c",
                                    n, "update", {"n": n})
                        for n in range(1, N + 1)], 64)
        self.component = Component(
            ComponentConfig(security=ANONYMOUS_LISTENER, max_gap_range=1500, replay_page=200),
            journal)  # type: ignore[arg-type]
        self.component.ingest.ingested["feed.c"] = N
        self.link, self.sender = _sending_link("catching")
        self.component.links[self.link.name] = self.link
        self.component.gapfill.attach(self.link.name, Entitlement.everything(), start_after={})
        self.sent: list[object] = []

    def ask(self, after: int, request_id: int) -> None:
        request = SourceGapRequest(after={"feed.c": after}, request_id=request_id,
                                   link_through=0)
        answer_gap(self.component, self.link, self.link.route, request, None, None)

    def turn(self) -> None:
        """One repair turn of the component, and what it sent read back."""
        self.link.route.pump()
        for message in self.sender.sent:
            wire = Message()
            wire.decode(message.encode())
            self.sent.extend(self.component.decoder.decode(wire))
        self.sender.sent.clear()

    def drain(self) -> None:
        while self.link.route.busy():
            self.turn()

    def numbers(self) -> list[int]:
        return [frame.source_seq for frame in self.sent if isinstance(frame, Publication)]

    def ends(self) -> list[tuple[int, int | None, dict[str, int], bool]]:
        return [(c.request.after["feed.c"], c.request.request_id, dict(c.through), c.more)
                for c in self.sent if isinstance(c, ReplayComplete) and c.request is not None]


def test_a_repeat_that_arrives_after_its_replay_ended_sends_nothing_again() -> None:
    """The sequence of the catch-up that counted 200 duplicates under load: the replay of
    request 2 (after 1500, through 3000 with ``more``) had sent everything and its
    REPLAY-COMPLETE when the stub, which had read up to 2900 only, asked "still going?" (after
    2900, request 2). The component took it for a new request and replayed from 2901, one page
    before the stub's request 3 (after 3000, sent on reading the REPLAY-COMPLETE) replaced it:
    2901..3100 went twice. The repeat now gets its REPLAY-COMPLETE again, nothing else."""
    h = _Replaying()
    h.ask(1500, 2)
    h.drain()
    h.ask(2900, 2)  # the stub had not read 2901..3000 yet
    h.turn()
    h.ask(3000, 3)  # on reading request 2's REPLAY-COMPLETE
    h.drain()

    assert h.numbers() == list(range(1501, N + 1))  # each once, in order
    assert h.ends() == [
        (1500, 2, {"feed.c": 3000}, True),
        (2900, 2, {"feed.c": 3000}, True),  # the repeat's: the same end, echoing it
        (3000, 3, {"feed.c": 4000}, False),
    ]
    started = [frame for frame in h.sent if isinstance(frame, ReplayStarted)]
    assert [(s.continued, s.more) for s in started] == [(False, True), (True, True),
                                                        (False, False)]
    assert h.component.stats["replays_continued"] == 1


def test_a_request_for_what_follows_a_replay_in_progress_is_answered_after_it() -> None:
    """Pipelined: request 3 (after 3000, request 2's ``through``) comes while request 2's
    replay still runs. It is queued, not a replacement: REPLAY-STARTED at once, its replay
    once request 2's REPLAY-COMPLETE is out. Each number once, in order."""
    h = _Replaying()
    h.ask(1500, 2)
    h.turn()
    h.ask(3000, 3)
    h.drain()
    assert h.numbers() == list(range(1501, N + 1))
    assert h.ends() == [(1500, 2, {"feed.c": 3000}, True), (3000, 3, {"feed.c": 4000}, False)]
    first_of_3 = next(i for i, frame in enumerate(h.sent)
                      if isinstance(frame, Publication) and frame.source_seq == 3001)
    before = h.sent[first_of_3 - 1]  # 2's end, then 3's publications
    assert isinstance(before, ReplayComplete)
    assert before.request is not None
    assert before.request.request_id == 2
    assert h.component.stats["replays_queued"] == 1


def test_a_follower_does_not_start_behind_a_replay_that_ended_short_of_it() -> None:
    """Request 2 (after 1500, through 3000, ``more``) ends at 2500 with a GAP-ERROR (an entry
    that cannot be sent) after request 3 (after 3000) was queued behind it. The stub reports
    2500 and asks after it again, under a new id: 2501..3000 come from that request. Request
    3's replay must not start meanwhile: the stub delivers any replayed publication above what
    it delivered while a request is in flight (source numbers may have holes), so 3001.. sent
    first would make 2501..3000 duplicates to it, dropped: lost, and no Unrecoverable says so.
    The follower is dropped instead (its requester asks again)."""
    h = _Replaying(poison=2500)
    h.ask(1500, 2)
    h.turn()
    h.ask(3000, 3)  # pipelined, on request 2's REPLAY-STARTED
    h.drain()  # the stub's next request is on its way meanwhile
    assert h.numbers() == list(range(1501, 2500))  # nothing after the GAP-ERROR
    [error] = [frame for frame in h.sent if isinstance(frame, GapError)]
    assert error.request is not None
    assert error.request.request_id == 2
    assert dict(error.trimmed_through or {}) == {"feed.c": 2500}
    assert h.ends() == []
    h.ask(2500, 4)  # the stub asks again after what it reported
    h.drain()
    assert h.numbers() == [*range(1501, 2500), *range(2501, 4001)]  # each once, in order


def test_a_follower_arriving_after_its_replay_ended_short_is_not_answered() -> None:
    """The same end short of the follower, but request 2's GAP-ERROR (at 1600) went out
    before request 3 (pipelined on its REPLAY-STARTED) arrived: nothing runs for it to queue
    behind. Started then, its 3001.. would reach the stub before its new request's answer
    (after 1600) and pass 1601..3000. It is not answered; the new request is, and a request
    that follows after that is again."""
    h = _Replaying(poison=1600)
    h.ask(1500, 2)
    h.drain()  # request 2 ended with its GAP-ERROR
    h.ask(3000, 3)  # the follower, on its way meanwhile
    h.drain()
    assert h.numbers() == list(range(1501, 1600))
    h.ask(1600, 4)  # the stub's new request, on the GAP-ERROR
    h.drain()
    assert h.numbers() == [*range(1501, 1600), *range(1601, 3101)]
    h.ask(3100, 5)  # after what 4 reached, once it ended: answered
    h.drain()
    assert h.numbers() == [*range(1501, 1600), *range(1601, N + 1)]  # each once, in order


def test_a_repeat_arriving_after_the_request_that_followed_it_ended_sends_nothing_again(
) -> None:
    """Pipelined, the stub slow to read: it asks "still going?" for request 2 (after 2900)
    once 2 and request 3, queued behind it, have both ended. 2's end is echoed, nothing
    replayed again: a new replay from 2901 would send 2901..4000 a second time (the stub
    takes them from 2 and 3 before it reads the new one). Likewise once 3 ended short."""
    for poison, last in ((None, N), (3502, 3501)):
        h = _Replaying(poison=poison)
        h.ask(1500, 2)
        h.turn()
        h.ask(3000, 3)
        h.drain()  # 2's REPLAY-COMPLETE, then 3's publications and its end
        h.ask(2900, 2)  # sent before the stub read 2901..
        h.drain()
        assert h.numbers() == list(range(1501, last + 1))  # each once
        assert h.ends()[-1] == (2900, 2, {"feed.c": 3000}, True)  # 2's end again
        assert h.component.stats["replays_continued"] == 1


def test_a_request_that_does_not_follow_the_replay_in_progress_replaces_it() -> None:
    """One that asks after less than the replay in progress reaches is no follower: the
    replay in progress stops where it is (the requester moved on), as before."""
    h = _Replaying()
    h.ask(1500, 2)
    h.turn()
    h.ask(2000, 3)
    h.drain()
    assert h.ends() == [(2000, 3, {"feed.c": 3500}, True)]
    assert h.component.stats["replays_queued"] == 0


def test_a_replay_ended_before_its_link_detached_is_not_ended_again() -> None:
    """What an ended replay sent went out on the connection its link had then; once the link
    detaches, a repeat is a request for the remainder again."""
    route = _route()
    route.sender = _Sender()
    route.start_replay("link", iter([ReplayComplete(through={"a": 90}, request=FIRST)]), 1,
                       request=FIRST, through={"a": 90})
    while route.busy():
        route.pump()
    repeat = SourceGapRequest(after={"a": 40, "b": 3}, request_id=5, link_through=7)
    again = route.ended_replay("link", repeat)
    assert again is not None
    assert (again.request, again.through) == (repeat, {"a": 90})
    other = SourceGapRequest(after={"a": 40, "b": 3}, request_id=6, link_through=7)
    assert route.ended_replay("link", other) is None  # a new request: replayed
    route.drop_replay("link")  # its link detached
    assert route.ended_replay("link", repeat) is None
