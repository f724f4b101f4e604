"""The real stub against a component built from the real core parts, over a hostile network.

The component is what the pubsub component is, minus I/O: a :class:`SourceSequencer` per
source, a journal (a list), one subscriber link numbered by a :class:`LinkSequencer` whose
every frame is recorded in a :class:`LinkContext` that answers the subscriber's
:class:`GapRequest` (``LinkContext.resend``, read lazily as the component sends it), and the
journal answering its :class:`SourceGapRequest` by the rules of
:mod:`seqrepair.journal.gapfill`: per source, the publications after the requested number in
source order; sources the request does not name from the point the link started at (the
journal's high-water when the subscriber attached); at most ``replay_limit`` numbers per
answer, ``ReplayComplete(more=True)`` naming how far it got; then ``ReplayComplete(through,
request)``. A publication is journaled first and sent on the link later, when the link has
credit, so replays and live frames overlap the way they do in the component.

Hypothesis plays the network and the clock, step by step: it publishes, sends, heartbeats,
delivers, duplicates, drops and reorders frames and answers, answers requests (or sits on them),
lets time pass so heartbeats go overdue and retries fire at any moment (before the link's first
frame too) and resets the link. 3, 4 and 8 bits make the link numbers wrap within a few steps;
context capacities of 1..3 frames make "context-lost" an everyday answer.

What the world assumes, as any real network must (see :mod:`seqrepair.simulation`):

* **flow control**: the component sends a new link frame only while it is less than half the
  link space ahead of the number the subscriber expects;
* **maximum frame lifetime**: a copy (a frame, a resend, a gap request or its GapError) whose
  link number is more than half the space older than the next number the component would send
  dies on the wire;
* **a reset is a new attach**: everything in flight on the old link dies, both ways, and the
  component's answers in preparation with it. Unannounced, the reset frame (number 0) stands for
  the attach: it is never lost or duplicated and nothing of the new link overtakes it, though it
  may be late. Announced (the attach tells the subscriber, ``link_reset``), frame 0 is a frame
  like any other. The link keeps the start point it was attached with;
* **a replay is a stream**: the link-less frames of one answer arrive in their order; another
  frame may come between two of them, a copy of the whole answer may come again later, and a
  lost part loses the rest of it (the ``ReplayComplete`` with it), never a frame in between.
  Without link numbers nothing could tell that one went missing;
* **the application is the only judge of loss**: anything the stub will not deliver, it must
  say so (``Unrecoverable``).

Invariants, at every step and once the network has healed (everything delivered and answered,
time passing, heartbeats flowing):

1. the application sees each publication at most once, each source's in its order, only what
   was journaled after the subscriber attached, and exactly as it was journaled;
2. a publication journaled and not delivered is covered by an ``Unrecoverable`` event (its
   source, from before it; or the skipped link numbers that carried it), and the stub does not
   stall: a publication journaled after the network healed is delivered;
3. with a **reliable repair channel** (requests and answers may be late by up to
   ``REPAIR_DELAY``, reordered and duplicated, but never lost or refused; original frames may
   still be lost at will) nothing is unrecoverable: every journaled publication is delivered
   exactly once, however small the link context (a lost context costs a replay, not data);
4. with a context of at least half the space (what flow control lets be outstanding), no
   reset and a reliable repair channel, link repair always suffices: the stub never asks by
   source. (A link range refused, or whose requests were never answered, is asked for by
   source: the journal may hold what the link context cannot give.)
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from seqrepair import (
    BufferOverflow,
    Delivered,
    GapError,
    GapRequest,
    Heartbeat,
    LinkContext,
    LinkSequencer,
    Publication,
    ReplayComplete,
    RequestGap,
    RequestSourceGap,
    SequenceSpace,
    SourceGapRequest,
    SourceSequencer,
    SubscriberStub,
    Unrecoverable,
)

TOPIC = "/weather/wind/LEMD"
REPAIR_DELAY = 0.5
"""How late a request or an answer may be on a reliable repair channel: well inside the stub's
retry schedule (0.2 s, backing off twice over, six tries), so it never gives up on one."""
HEARTBEAT_INTERVAL = 1.0

Frame = Publication | Heartbeat | GapError | ReplayComplete


@attrs.define(eq=False)
class Copy:
    """Frames on their way to the subscriber: one link frame, or a stream (a replay)."""

    frames: list[Frame]
    generation: int  # the link context they belong to
    position: int | None  # the link number they concern (their lifetime), None for a replay
    sent_at: float
    repair: bool  # an answer to a request
    reset_frame: bool = False  # the frame 0 of an unannounced reset: the attach itself
    taken: int = 0  # frames of a stream already arrived

    def rest(self) -> list[Frame]:
        return self.frames[self.taken :]


@attrs.define(eq=False)
class Asked:
    """A request on its way to the component, or one it is answering."""

    request: GapRequest | SourceGapRequest
    generation: int  # the link context the subscriber asked in
    position: int | None  # the first link number asked for (its lifetime)
    sent_at: float
    answer: Iterator[Copy] | None = None  # what the component still has to send of its answer


@attrs.define
class Config:
    bits: int
    sources: tuple[str, ...]
    before_attach: int  # publications per source journaled before the subscriber attached
    context_capacity: int
    replay_limit: int | None
    reliable_repair: bool
    announce_resets: bool
    missed_heartbeats: int


class World:
    """The component, the network and the real stub, on one simulated clock."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.space = SequenceSpace(config.bits)
        self.half = self.space.half
        self.now = 0.0
        # ---- the component
        self.sequencers = {name: SourceSequencer(name, bits=32) for name in config.sources}
        self.journal: dict[str, list[Publication]] = {name: [] for name in config.sources}
        for name in config.sources:
            for _ in range(config.before_attach):
                self._journal(name)
        self.start_after = {name: len(self.journal[name]) for name in config.sources}
        self.queue: list[Publication] = []  # journaled, not sent yet
        self.link = LinkSequencer(bits=config.bits, heartbeat_interval=HEARTBEAT_INTERVAL)
        self.context = LinkContext(bits=config.bits, capacity=config.context_capacity)
        self.generation = 0
        self.next_position = {0: 1}  # per link context: the number the next frame takes
        self.sent: dict[tuple[int, int], Publication | None] = {}
        self.carried: dict[str, int] = {}  # per source, the last number sent on the link
        # ---- the network
        self.to_subscriber: list[Copy] = []
        self.to_component: list[Asked] = []
        # ---- the subscriber
        self.stub = SubscriberStub(
            bits=config.bits,
            heartbeat_interval=HEARTBEAT_INTERVAL,
            missed_heartbeats=config.missed_heartbeats,
            nak_delay=0.05,
            seed=0,
        )
        self.stub_generation = 0  # the link context the stub knows of
        self.delivered: list[Publication] = []
        self.unrecoverable: list[Unrecoverable] = []
        # (source, or None for every source; reported lost after; journaled when reported)
        self.lost_sources: list[tuple[str | None, int, dict[str, int]]] = []
        self.lost_links: set[tuple[str, int]] = set()  # carried by link numbers given up
        self.healing: list[Publication] = []
        self.act(self.stub.poll(self.now))  # the link is attached: its heartbeat watch starts

    # ------------------------------------------------------------------ the component

    def _journal(self, source: str) -> Publication:
        number = sum(map(len, self.journal.values()))
        publication = self.sequencers[source].stamp(TOPIC, {"n": number})
        self.journal[source].append(publication)
        return publication

    def publish(self, source: str) -> None:
        """Journaled now; sent when the link has credit."""
        self.queue.append(self._journal(source))

    def published(self) -> list[Publication]:
        """What the subscriber is owed: everything journaled after it attached."""
        return [p for name, pubs in self.journal.items() for p in pubs[self.start_after[name] :]]

    @property
    def position(self) -> int:
        return self.next_position[self.generation]

    def ahead(self) -> int:
        """How far the next frame would be ahead of what the subscriber expects (its credit)."""
        expected = self.stub.expected_link_seq
        if self.stub_generation != self.generation or expected == 0:
            return self.position  # counted from the reset frame it waits for
        return self.space.distance(expected, self.space.wire(self.position))

    def has_credit(self) -> bool:
        return self.ahead() < self.half

    def wire(self, position: int) -> int:
        return 0 if position == 0 else self.space.wire(position)

    def position_of(self, wire: int, generation: int) -> int:
        """The recent link number of context ``generation`` with this wire value."""
        upcoming = self.next_position[generation]
        return upcoming - (self.space.wire(upcoming) - wire) % self.space.max

    def send(self, frame: Publication | Heartbeat, *, reset_frame: bool = False) -> None:
        position = self.position
        if isinstance(frame, Publication):
            frame = self.link.stamp(frame, self.now)
            self.carried[frame.source] = frame.source_seq
        assert frame.link_seq == self.wire(position)
        self.context.record(frame)
        self.sent[self.generation, position] = frame if isinstance(frame, Publication) else None
        self.next_position[self.generation] = position + 1
        self.to_subscriber.append(
            Copy([frame], self.generation, position, self.now, repair=False,
                 reset_frame=reset_frame)
        )

    def send_next(self) -> None:
        if self.queue and self.has_credit():
            self.send(self.queue.pop(0))

    def heartbeat(self) -> None:
        if not self.queue and self.has_credit():
            self.send(self.link.heartbeat(self.now))

    def reset(self, with_publication: bool) -> None:
        """The component loses the link and attaches it anew: the next frame carries 0."""
        self.generation += 1
        self.next_position[self.generation] = 0
        self.to_subscriber.clear()
        self.to_component.clear()
        self.link.reset()
        if self.config.announce_resets:
            self.stub_generation = self.generation
            self.act(self.stub.link_reset(self.now))
        if with_publication and self.queue:
            self.send(self.queue.pop(0), reset_frame=not self.config.announce_resets)
        else:
            self.send(self.link.heartbeat(self.now), reset_frame=not self.config.announce_resets)

    def answer(self, asked: Asked) -> Iterator[Copy]:
        """The component's answer to ``asked``, a copy at a time as it sends it."""
        request = asked.request
        generation = self.generation
        if isinstance(request, SourceGapRequest):
            yield Copy(self.replay(request), generation, None, self.now, repair=True)
            return
        resend = self.context.resend(request)
        if isinstance(resend, GapError):
            yield Copy([resend], generation, asked.position, self.now, repair=True)
            return
        for frame in resend:  # read from the context as it is sent
            if isinstance(frame, GapError):
                assert isinstance(frame.request, GapRequest)
                wire = frame.request.link_from
            else:
                assert frame.link_seq is not None
                wire = frame.link_seq
            yield Copy([frame], generation, self.position_of(wire, generation), self.now,
                       repair=True)

    def replay(self, request: SourceGapRequest) -> list[Frame]:
        """The journal's answer, by the rules of :meth:`GapFillService.answer_source_gap`."""
        segments: list[tuple[str, int, int]] = []
        through: dict[str, int] = {}
        cover = None if request.link_through is None else self.context.cover(
            request.link_through)
        for name in sorted(set(request.after) | set(self.journal)):
            high_water = len(self.journal.get(name, ()))
            listed = name in request.after
            # a source the request does not name is owed everything since the link started
            after = request.after[name] if listed else self.start_after.get(name, 0)
            if not listed and after >= high_water:
                continue
            if cover is not None:
                # the link carries each source from its first number past the subscriber's
                # link_through on, and whatever it has not sent yet (LinkCover, carried_after)
                limit = cover.limit(name)
                carried = self.carried.get(name, 0)
                cut = carried if limit is None else min(limit, carried)
                high_water = min(high_water, max(cut, after))
            through[name] = high_water
            if after < high_water:
                segments.append((name, after + 1, high_water))
        more = False
        room = self.config.replay_limit
        if room is not None:  # _capped: stop after the limit; through says how far it got
            kept = []
            for name, first, last in segments:
                if room == 0:
                    more = True
                    del through[name]
                    continue
                cut = min(last, first + room - 1)
                if cut < last:
                    more = True
                    through[name] = cut
                kept.append((name, first, cut))
                room -= cut - first + 1
            segments = kept
        frames: list[Frame] = [
            attrs.evolve(p, retransmit=True, link_seq=None)
            for name, first, last in segments
            for p in self.journal[name][first - 1 : last]
        ]
        frames.append(ReplayComplete(through=through, request=request, more=more))
        return frames

    def refuse(self, asked: Asked) -> None:
        self.to_subscriber.append(
            Copy([GapError("refused", asked.request, "no")], self.generation, asked.position,
                 self.now, repair=True)
        )

    # ------------------------------------------------------------------ the network

    def expire(self) -> None:
        """Copies more than half the space older than the next number die of old age."""
        oldest = self.position - self.half
        self.to_subscriber = [
            c for c in self.to_subscriber
            if c.generation == self.generation and (c.position is None or c.position >= oldest)
        ]
        self.to_component = [
            a for a in self.to_component
            if a.generation == self.generation and (a.position is None or a.position >= oldest)
        ]

    def arrivable(self) -> list[Copy]:
        """What may arrive next: nothing of a new link before its reset frame."""
        if self.stub_generation == self.generation:
            return self.to_subscriber
        return [c for c in self.to_subscriber if c.reset_frame]

    def arrive(self, copy: Copy, *, whole: bool = False) -> None:
        """The next frame of ``copy`` (every frame left, if ``whole``) reaches the stub."""
        while copy.taken < len(copy.frames):
            frame = copy.frames[copy.taken]
            copy.taken += 1
            if copy.reset_frame:
                self.stub_generation = copy.generation
            self.act(self.stub.receive(frame, self.now))
            if not whole:
                break
        if copy.taken == len(copy.frames) and copy in self.to_subscriber:
            self.to_subscriber.remove(copy)

    def duplicate(self, copy: Copy) -> None:
        """A copy of what was sent arrives (again) later; a stream comes again whole."""
        if not copy.reset_frame:
            self.to_subscriber.append(attrs.evolve(copy, taken=0, sent_at=self.now))

    def droppable(self) -> list[Copy]:
        if self.config.reliable_repair:
            return [c for c in self.to_subscriber if not c.repair and not c.reset_frame]
        return [c for c in self.to_subscriber if not c.reset_frame]

    def drop(self, copy: Copy) -> None:
        """Lost: a link frame, or what is left of a stream."""
        self.to_subscriber.remove(copy)

    def answer_step(self, asked: Asked, *, whole: bool = False) -> None:
        """The component sends the next part of its answer (all of it, if ``whole``)."""
        if asked.answer is None:
            asked.answer = self.answer(asked)
        for copy in asked.answer:
            self.to_subscriber.append(copy)
            if not whole:
                return
        self.to_component.remove(asked)

    def tick(self, seconds: float) -> None:
        """Time passes: the stub's timers fire when due and, on a reliable repair channel,
        nothing of the repair is later than ``REPAIR_DELAY``."""
        until = self.now + seconds
        polled_at = None
        for _ in range(10_000):
            self.expire()
            due: list[float] = []
            late = self.late(until)
            if late is not None:
                due.append(late[0])
            deadline = self.stub.next_deadline
            if deadline is not None and deadline <= until:
                deadline = max(deadline, self.now)
                if deadline != polled_at:  # a timer that cannot act now waits for what can
                    due.append(deadline)
            if not due:
                break
            self.now = min(due)
            if late is not None and late[0] == self.now:
                late[1]()
            else:
                polled_at = self.now
                self.act(self.stub.poll(self.now))
        self.now = until

    def late(self, until: float) -> tuple[float, object] | None:
        """The oldest repair item that must be handled by ``until``, with how."""
        if not self.config.reliable_repair:
            return None
        items: list[tuple[float, object]] = []
        for asked in self.to_component:
            items.append((asked.sent_at, lambda asked=asked: self.answer_step(asked, whole=True)))
        for copy in self.arrivable():
            if copy.repair or copy.reset_frame:
                items.append((copy.sent_at, lambda copy=copy: self.arrive(copy, whole=True)))
        if not items:
            return None
        sent_at, handle = min(items, key=lambda item: item[0])
        at = max(sent_at + REPAIR_DELAY, self.now)
        return (at, handle) if at <= until else None

    # ------------------------------------------------------------------ the subscriber

    def act(self, events: list[object]) -> None:
        for event in events:
            if isinstance(event, Delivered):
                self.deliver(event.publication)
            elif isinstance(event, RequestGap):
                request = event.request
                position = None
                if self.stub_generation == self.generation:
                    position = self.position_of(request.link_from, self.generation)
                self.to_component.append(Asked(request, self.stub_generation, position, self.now))
            elif isinstance(event, RequestSourceGap):
                self.to_component.append(
                    Asked(event.request, self.stub_generation, None, self.now)
                )
            elif isinstance(event, Unrecoverable):
                self.report(event)
            else:
                assert not isinstance(event, BufferOverflow), event

    def deliver(self, publication: Publication) -> None:
        """Invariant 1, checked as it happens."""
        name, seq = publication.source, publication.source_seq
        last = self.delivered_through(name)
        assert seq > last, f"{name} {seq} delivered after {last}"
        assert seq > self.start_after[name], f"{name} {seq} was journaled before the attach"
        journaled = self.journal[name][seq - 1]
        assert (publication.topic, publication.fields) == (journaled.topic, journaled.fields)
        self.delivered.append(publication)

    def delivered_through(self, source: str) -> int:
        return max((p.source_seq for p in self.delivered if p.source == source), default=0)

    def report(self, event: Unrecoverable) -> None:
        self.unrecoverable.append(event)
        if event.link_from is None:  # a source request given up (None: it named no source)
            journaled = {name: len(pubs) for name, pubs in self.journal.items()}
            self.lost_sources.append((event.source, event.after or 0, journaled))
        else:
            assert event.link_to is not None
            start = self.position_of(event.link_from, self.stub_generation)
            for position in range(start, start + self.space.distance(
                    event.link_from, event.link_to) + 1):
                frame = self.sent.get((self.stub_generation, position))
                if frame is not None:
                    self.lost_links.add((frame.source, frame.source_seq))

    def covered(self, publication: Publication) -> bool:
        name, seq = publication.source, publication.source_seq
        return (name, seq) in self.lost_links or any(
            source in (None, name) and after < seq <= journaled[name]
            for source, after, journaled in self.lost_sources
        )

    # ------------------------------------------------------------------ healing

    def heal(self) -> None:
        """The network heals: one more publication per source, then everything is delivered
        and answered in order, heartbeats flow and time passes, until the link is quiet."""
        self.healing = [self._journal(name) for name in self.config.sources]
        self.queue += self.healing
        for _ in range(600):
            self.flush()
            if self.quiet():
                break
            self.heartbeat()
            self.flush()
            self.tick(0.25)
        assert self.quiet(), (
            f"the link never settled: the stub expects {self.stub.expected_link_seq} and holds "
            f"{self.stub.buffered}, the component sends {self.wire(self.position)} next"
        )

    def flush(self) -> None:
        for _ in range(10_000):
            self.expire()
            while self.queue and self.has_credit():
                self.send_next()
            if self.to_component:
                self.answer_step(self.to_component[0], whole=True)
            elif self.arrivable():
                self.arrive(self.arrivable()[0], whole=True)
            else:
                return
        raise AssertionError("the network never emptied")

    def quiet(self) -> bool:
        """Nothing in flight or queued, and the stub has taken (or skipped) every frame sent."""
        return (
            not self.to_subscriber
            and not self.to_component
            and not self.queue
            and self.stub_generation == self.generation
            and self.stub.buffered == 0
            and self.stub.expected_link_seq == self.wire(self.position)
        )

    def healing_delivered(self) -> bool:
        delivered = {(p.source, p.source_seq) for p in self.delivered}
        return all((p.source, p.source_seq) in delivered for p in self.healing)


@st.composite
def configs(draw: st.DrawFn) -> Config:
    bits = draw(st.sampled_from([3, 4, 8]))
    return Config(
        bits=bits,
        sources=draw(st.sampled_from([("feed.a",), ("feed.a", "feed.b"),
                                      ("feed.a", "feed.b", "feed.c")])),
        before_attach=draw(st.integers(0, 2)),
        context_capacity=draw(st.sampled_from([1, 2, 3, 1 << 10])),
        replay_limit=draw(st.sampled_from([None, 1, 3])),
        reliable_repair=draw(st.booleans()),
        announce_resets=draw(st.booleans()),
        missed_heartbeats=draw(st.sampled_from([1, 3])),
    )


MOVES = (
    ["arrive"] * 10 + ["publish"] * 6 + ["send"] * 6 + ["heartbeat"] * 2 + ["duplicate"] * 2
    + ["drop"] * 4 + ["answer"] * 6 + ["refuse", "ignore"] * 2 + ["tick"] * 6 + ["reset"]
)
"""The moves hypothesis picks from, each as often as it appears (the first is the simplest:
nothing happens when nothing is on its way)."""

moves = st.lists(st.tuples(st.sampled_from(MOVES), st.integers(0, 7)),
                 min_size=20, max_size=120)
"""A script: each move with a number that picks a source, a copy, a request or a time step."""


def play(world: World, script: list[tuple[str, int]]) -> None:
    """Hypothesis's moves, one by one; each is noted as it happens, so a failure reads as a
    story. ``pick`` chooses among what is possible: a lower number, an older copy."""
    reliable = world.config.reliable_repair
    for move, pick in script:
        world.expire()
        if move == "publish":
            source = world.config.sources[pick % len(world.config.sources)]
            world.publish(source)
            note(f"publish {source}")
        elif move == "send":
            world.send_next()
            note("send")
        elif move == "heartbeat":
            world.heartbeat()
            note("heartbeat")
        elif move in ("arrive", "duplicate", "drop"):
            copies = world.droppable() if move == "drop" else world.arrivable()
            if copies:
                copy = copies[pick % len(copies)]
                note(f"{move} {copy.rest()[:1]}")
                getattr(world, move)(copy)
        elif move in ("answer", "refuse", "ignore") and world.to_component:
            asked = world.to_component[pick % len(world.to_component)]
            if move == "answer":
                note(f"answer {asked.request}")
                world.answer_step(asked)
            elif not reliable:
                note(f"{move} {asked.request}")
                world.to_component.remove(asked)
                if move == "refuse":
                    world.refuse(asked)
        elif move == "tick":
            seconds = [0.01, 0.1, 0.3, 1.0, 3.5][pick % 5]
            world.tick(seconds)
            note(f"tick {seconds} -> {world.now:.2f}")
        elif move == "reset" and pick >= 6:  # rarer than the rest: a reset repairs everything
            world.reset(with_publication=pick == 7)
            note("reset")


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), script=moves)
def test_nothing_journaled_is_lost_silently_whatever_the_network_does(config, script):
    """Invariants 1-4 of the module docstring, after the script has played and the network has
    healed. Invariant 1 is checked at every delivery as well."""
    world = World(config)
    play(world, script)
    world.heal()

    published = world.published()
    delivered = {(p.source, p.source_seq) for p in world.delivered}
    assert len(delivered) == len(world.delivered)  # (1) at most once; order checked as it came
    missing = [p for p in published if (p.source, p.source_seq) not in delivered]
    assert [p for p in missing if not world.covered(p)] == []  # (2) no silent loss
    assert world.healing_delivered()  # (2) no stall
    if config.reliable_repair:  # (3)
        assert world.unrecoverable == []
        assert missing == []
    if (  # (4)
        config.reliable_repair
        and config.context_capacity >= world.half
        and world.generation == 0
    ):
        assert world.stub.stats.source_requests_sent == 0
