"""An in-memory pubsub component and a lossy, reordering, duplicating link to one subscriber.

Used by the property tests and the in-process demo, in the manner of h11's ``ConnectionPair``:
both ends run in one process on simulated time, frame by frame. Nothing here does I/O.

Two assumptions keep small sequence spaces meaningful, as they must on any real network:

* **flow control**: the component sends a new frame only while it is less than half the link
  space ahead of the number the subscriber expects (the subscriber's credit);
* **maximum frame lifetime**: a copy that is more than half the space older than the next
  number the component would send dies on the wire (like a packet past its time to live).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import attrs

from seqrepair.core.context import LinkContext
from seqrepair.core.events import (
    Delivered,
    Event,
    RequestGap,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.image import ImageCache
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.sequencers import LinkSequencer, SourceSequencer
from seqrepair.core.stub import SubscriberStub

ToSubscriber = Publication | Heartbeat | GapError | ReplayComplete


@attrs.frozen
class LinkConditions:
    """How the simulated link misbehaves. Probabilities are per frame copy."""

    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    latency: float = 0.01
    reorder_delay: float = 0.02
    request_loss: float = 0.0
    # A given repair (or request) copy is lost at most this many times, so repair converges.
    max_repair_losses: int = 2


@attrs.define(on_setattr=attrs.setters.NO_OP)
class _InFlight:
    frames: list[ToSubscriber]
    context: int  # link context (reset count) the frames belong to
    position: int  # component's position of the first link frame (0 for none)
    tail: bool = False  # a tail probe, marked with its context (see Simulation.tail_probes)


@attrs.frozen
class SimulationReport:
    """What happened: compare ``delivered`` with ``published`` to judge the run."""

    published: tuple[Publication, ...]
    delivered: tuple[Publication, ...]
    events: Counter[str]
    stats: Any
    unrecoverable: tuple[Unrecoverable, ...]
    resets: int
    elapsed: float
    publisher_images: dict[str, dict[str, Any]]
    subscriber_images: dict[str, dict[str, Any]]

    @property
    def spurious_resets(self) -> int:
        """Resets the stub took that the component never made: a second copy of an announced
        reset's in-band frame 0 (the first, however late, is that reset's frame) coming after
        later frames reads as a new reset (only a transport that both announces resets and
        duplicates frames can do that). The stub then replays by source and asks for the
        frames it voided by link again."""
        return int(self.stats.resets) - self.resets

    @property
    def exactly_once_in_order(self) -> bool:
        """Every publication delivered once, each source's in its own order."""
        return _by_source(self.delivered) == _by_source(self.published)


def _by_source(publications: Iterable[Publication]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for publication in publications:
        out.setdefault(publication.source, []).append(publication.source_seq)
    return out


class ComponentBackend(Protocol):
    """The component's publishing and repair side, as the simulation drives it.

    :class:`InMemoryComponent` keeps everything in lists; the journal adapter offers one that
    journals to Redis and repairs through its gap-fill service.
    """

    def publish(self, source: str, topic: str, fields: dict[str, Any], ptype: PublishType) -> None:
        """Stamp and queue one publication."""

    def flush(self) -> list[Publication]:
        """The queued publications, once they count as published, in order."""

    def record(self, frame: Publication | Heartbeat) -> None:
        """Remember a frame sent on the subscriber's link."""

    def answer(self, request: GapRequest | SourceGapRequest, now: float) -> list[ToSubscriber]:
        """The frames that answer ``request`` (ending with ReplayComplete or a GapError)."""


@attrs.define(on_setattr=attrs.setters.NO_OP)
class InMemoryComponent:
    """Sequencers, a journal in a list and one link context, all in memory.

    A replay carries the journaled publications after the requested numbers in publication
    order. ``replay_limit``: the most one replay carries (None: no limit); a longer one stops
    there and ends ``ReplayComplete(more=True)``, as the gap-fill service does past its
    ``max_range``.
    """

    bits: int
    context_capacity: int = 1 << 20
    replay_limit: int | None = None
    cut_at_link: bool = True
    """False: replay to the high-water whatever ``link_through`` a request names, as a
    component from before that field did (a baseline to compare with)."""
    _sequencers: dict[str, SourceSequencer] = attrs.field(init=False, factory=dict)
    _journal: list[Publication] = attrs.field(init=False, factory=list)
    _queued: list[Publication] = attrs.field(init=False, factory=list)
    _context: LinkContext = attrs.field(init=False)

    @_context.default
    def _new_context(self) -> LinkContext:
        return LinkContext(bits=self.bits, capacity=self.context_capacity)

    def publish(self, source: str, topic: str, fields: dict[str, Any], ptype: PublishType) -> None:
        sequencer = self._sequencers.get(source)
        if sequencer is None:
            sequencer = self._sequencers[source] = SourceSequencer(source, bits=32)
        self._queued.append(sequencer.stamp(topic, fields, ptype))

    def flush(self) -> list[Publication]:
        published, self._queued = self._queued, []
        self._journal.extend(published)
        return published

    def record(self, frame: Publication | Heartbeat) -> None:
        self._context.record(frame)

    def answer(self, request: GapRequest | SourceGapRequest, now: float) -> list[ToSubscriber]:
        if isinstance(request, GapRequest):
            result = self._context.answer(request)
            return [result] if isinstance(result, GapError) else list(result)
        after = request.after
        cover = (
            None if request.link_through is None or not self.cut_at_link
            else self._context.cover(request.link_through)
        )
        limits = {
            name: limit
            for name in self._sequencers
            if cover is not None and (limit := cover.limit(name)) is not None
        }  # the link carries each source from its limit on (LinkCover)
        owed = (
            p for p in self._journal
            if after.get(p.source, 0) < p.source_seq <= limits.get(p.source, p.source_seq)
        )
        carried = list(itertools.islice(owed, self.replay_limit))
        replay: list[ToSubscriber] = [p.with_link(None, retransmit=True) for p in carried]
        through = {
            name: min(seq.high_water, max(limits.get(name, seq.high_water), after.get(name, 0)))
            for name, seq in self._sequencers.items()
        }
        more = next(owed, None) is not None
        if more:  # everything up to the last one carried was answered, nothing further
            through = {name: request.after.get(name, 0) for name in through}
            for publication in carried:
                through[publication.source] = publication.source_seq
        replay.append(ReplayComplete(through=through, request=request, more=more))
        return replay


@attrs.define(on_setattr=attrs.setters.NO_OP)
class Simulation:
    """A component (sequencers, journal, link context) and one subscriber stub over a bad link.

    ``plan`` lists (source, topic, fields, ptype) in publication order. ``resets_at`` holds
    publication indices before which the component loses the link (reset to 0 and drop what is
    on the wire). ``context_capacity`` bounds the component's link context, so old gaps get
    "context-lost" and are repaired by source. ``send_rate`` is frames per step.
    ``announce_resets``: the stub learns of each reset out of band (``link_reset``), as the
    AMQP attach of a new link context tells it, and the reset frame is a heartbeat that the link
    may lose, reorder or duplicate like any other; otherwise the reset frame itself is the only
    signal and travels reliably (it stands for the attach).
    ``stale_after_reset``: publications of an old link context still on the wire at a reset
    are not dropped: reordered, they may arrive after the new context's first frames (a
    transport that does not tie a reset to a new link). Stale heartbeats still die: one carries
    no source number, so in the slot of a lost frame it cannot be told from it.
    ``window``: how far ahead of the number the subscriber expects the component may send
    (None: half the space less one, what flow control allows;
    more violates the window and makes link numbers ambiguous).
    ``tail_probes``: a full window whose subscriber has not moved for a step gets its newest
    frame resent, marked with its link context (the component's ``tail_probe``); the stub takes
    it by ``receive_tail_probe`` when it is in that context (the context the attach or the
    announced reset named), else by ``receive``. ``mark_tail_probes`` False: unmarked, as a
    component before the mark sent them (a baseline to compare with).
    """

    bits: int
    plan: Sequence[tuple[str, str, dict[str, Any], PublishType]]
    conditions: LinkConditions = LinkConditions()
    resets_at: frozenset[int] = frozenset()
    context_capacity: int = 1 << 20
    heartbeat_interval: float = 0.1
    step: float = 0.005
    send_rate: int = 64
    seed: int = 0
    announce_resets: bool = False
    stub_options: dict[str, Any] = attrs.field(factory=dict)
    component: ComponentBackend | None = None
    """None: an :class:`InMemoryComponent` with ``context_capacity`` and ``replay_limit``."""
    replay_limit: int | None = None
    stale_after_reset: bool = False
    window: int | None = None
    tail_probes: bool = False
    mark_tail_probes: bool = True

    def run(self, max_time: float = 600.0) -> SimulationReport:
        """Run until everything published is delivered (and the link is quiet) or ``max_time``."""
        rng = random.Random(self.seed)
        conditions = self.conditions
        component = self.component or InMemoryComponent(
            self.bits, self.context_capacity, self.replay_limit
        )
        link = LinkSequencer(bits=self.bits, heartbeat_interval=self.heartbeat_interval)
        options: dict[str, Any] = {
            "heartbeat_interval": self.heartbeat_interval,
            "nak_delay": 0.02,
            "seed": self.seed,
            "retry_interval": 0.05,
        }
        options.update(self.stub_options)
        stub = SubscriberStub(bits=self.bits, **options)
        space = stub.space
        window = space.half - 1 if self.window is None else self.window
        journal: list[Publication] = []
        delivered: list[Publication] = []
        unrecoverable: list[Unrecoverable] = []
        counts: Counter[str] = Counter()
        publisher_images = ImageCache()
        subscriber_images = ImageCache()
        to_subscriber: list[tuple[float, int, _InFlight]] = []
        to_component: list[tuple[float, int, GapRequest | SourceGapRequest]] = []
        order = itertools.count()
        repair_losses: Counter[object] = Counter()
        context_id = 0
        reset_base = -1  # next position = link.absolute - reset_base; a reset context starts at 0
        resets = 0
        resets_done: set[int] = set()
        reset_frame: object = None
        reset_pending = False  # a reset frame is on its way: the subscriber's credit is unknown
        newest: Publication | Heartbeat | None = None  # this context's newest frame
        stub_context = 0  # the context the subscriber's adapter is in (its epoch)
        stuck_at: int | None = None  # the expected number a full window last saw

        def next_position() -> int:
            """The stub-side position (absolute link number) of the next frame sent."""
            return link.absolute - reset_base

        def position_of(wire: int) -> int:
            """Position of a recent frame with wire number ``wire`` (within the space)."""
            head = next_position() - 1
            if head < 1:
                return wire
            return head - space.distance(wire, space.wire(head))

        def ahead() -> int:
            """How far the next frame is ahead of what the subscriber expects (its credit)."""
            upcoming = next_position()
            expected = stub.expected_link_seq
            if upcoming == 0 or expected == 0 or reset_pending:
                return upcoming  # counted from the reset frame the subscriber waits for
            return space.distance(expected, space.wire(upcoming))

        def send(frames: list[ToSubscriber], first: int, *, repair: bool, now: float,
                 tail: bool = False) -> None:
            if first == 0 and not repair and resets and not self.announce_resets:
                # A reset frame opens a new link (an attach): the transport neither loses it nor
                # lets the new link's frames overtake it.
                item = _InFlight(frames, context_id, first)
                heapq.heappush(to_subscriber, (now + conditions.latency, next(order), item))
                return
            if rng.random() < conditions.loss:
                # Repair losses are bounded per link number, whatever form the answer takes
                # (the frames, later "context-lost"), so the stub's retries always suffice.
                kinds = tuple(type(f).__name__ for f in frames)
                key: object = (context_id, first) if first else (context_id, kinds)
                if not repair:
                    counts["wire_lost"] += 1
                    if first == 0 and resets:
                        counts["reset_frame_lost"] += 1
                    return
                if repair_losses[key] < conditions.max_repair_losses:
                    repair_losses[key] += 1
                    counts["wire_lost"] += 1
                    return
            copies = 2 if rng.random() < conditions.duplicate else 1
            for _ in range(copies):
                delay = conditions.latency
                if rng.random() < conditions.reorder:
                    delay += rng.random() * conditions.reorder_delay
                item = _InFlight(frames, context_id, first, tail)
                heapq.heappush(to_subscriber, (now + delay, next(order), item))

        def request(req: GapRequest | SourceGapRequest, now: float) -> None:
            # Losses are bounded per link number (or per source request), not per request: a
            # retry may cover a different range, and every number must get through eventually.
            keys: list[object]
            if isinstance(req, GapRequest):
                first = position_of(req.link_from)
                keys = [(context_id, n) for n in range(first, first + space.distance(
                    req.link_from, req.link_to) + 1)]
            else:
                keys = [(context_id, "source")]
            if rng.random() < conditions.request_loss and all(
                repair_losses["request", key] < conditions.max_repair_losses for key in keys
            ):
                for key in keys:
                    repair_losses["request", key] += 1
                counts["request_lost"] += 1
                return
            heapq.heappush(to_component, (now + conditions.latency, next(order), req))

        def act(events: list[Event], now: float) -> None:
            for event in events:
                counts[type(event).__name__] += 1
                if isinstance(event, Delivered):
                    delivered.append(event.publication)
                    subscriber_images.apply(event.publication)
                elif isinstance(event, RequestGap | RequestSourceGap):
                    request(event.request, now)
                elif isinstance(event, Unrecoverable):
                    unrecoverable.append(event)

        def answer(req: GapRequest | SourceGapRequest, now: float) -> None:
            frames = component.answer(req, now)
            resent = [f for f in frames if isinstance(f, Publication | Heartbeat) and f.link_seq]
            if isinstance(req, GapRequest) and len(resent) == len(frames):
                for frame in resent:  # each resent link frame travels on its own
                    assert frame.link_seq is not None
                    send([frame], position_of(frame.link_seq), repair=True, now=now)
            elif isinstance(req, GapRequest):  # a GapError about these link numbers
                send(frames, position_of(req.link_from), repair=True, now=now)
            elif frames:  # a replay, or its GapError, travels as one message
                send(frames, 0, repair=True, now=now)

        now = 0.0
        next_index = 0
        total = len(self.plan)
        while now < max_time:
            now += self.step
            # the component publishes, within the subscriber's credit
            sent = 0
            while next_index < total and sent < self.send_rate:
                if next_index in self.resets_at and next_index not in resets_done:
                    resets_done.add(next_index)
                    link.reset()
                    context_id += 1
                    resets += 1
                    reset_base = link.absolute
                    newest = stuck_at = None
                    if self.stale_after_reset:  # heartbeats carry no source number: see above
                        to_subscriber[:] = [
                            entry for entry in to_subscriber
                            if any(isinstance(f, Publication) for f in entry[2].frames)
                        ]
                        heapq.heapify(to_subscriber)
                    else:
                        to_subscriber.clear()
                    if self.announce_resets:
                        stub_context = context_id
                        act(stub.link_reset(now), now)
                        beat = link.heartbeat(now)
                        component.record(beat)
                        send([beat], 0, repair=False, now=now)
                    else:
                        reset_pending = True
                next_reset = min((r for r in self.resets_at if r > next_index), default=total)
                room = min(window - ahead(), self.send_rate - sent,
                           next_reset - next_index)
                if room <= 0:
                    break
                for row in self.plan[next_index : next_index + room]:
                    component.publish(*row)
                for publication in component.flush():
                    journal.append(publication)
                    publisher_images.apply(publication)
                    pos = next_position()
                    stamped = link.stamp(publication, now)
                    if pos == 0:
                        reset_frame = stamped
                    component.record(stamped)
                    newest = stamped
                    send([stamped], pos, repair=False, now=now)
                next_index += room
                sent += room
            if not sent and ahead() < window:
                pos = next_position()
                heartbeat = link.poll(now)
                if heartbeat is not None:
                    component.record(heartbeat)
                    newest = heartbeat
                    send([heartbeat], pos, repair=False, now=now)
            if self.tail_probes and not sent and newest is not None and ahead() >= window:
                expected = stub.expected_link_seq
                if stuck_at == expected and newest.link_seq:
                    again = (newest.with_link(newest.link_seq, retransmit=True)
                             if isinstance(newest, Publication)
                             else attrs.evolve(newest, retransmit=True))
                    counts["tail_probes"] += 1
                    send([again], position_of(newest.link_seq), repair=True, now=now,
                         tail=self.mark_tail_probes)
                stuck_at = expected
            else:
                stuck_at = None
            # the link delivers to the subscriber; stale copies die of old age
            while to_subscriber and to_subscriber[0][0] <= now:
                _, _, item = heapq.heappop(to_subscriber)
                if item.context != context_id:
                    if not self.stale_after_reset:
                        continue
                    counts["stale"] += 1
                elif item.position and item.position < next_position() - space.half:
                    counts["expired"] += 1
                    continue
                for frame in item.frames:
                    if frame is reset_frame:
                        reset_pending = False
                        stub_context = item.context
                    if item.tail and item.context == stub_context:
                        act(stub.receive_tail_probe(frame, now), now)
                    else:
                        act(stub.receive(frame, now), now)
            deadline = stub.next_deadline
            if deadline is None or deadline <= now:  # None: not polled yet, start its clock
                act(stub.poll(now), now)
            while to_component and to_component[0][0] <= now:
                _, _, req = heapq.heappop(to_component)
                answer(req, now)
            if next_index >= total and len(delivered) >= len(journal) and not to_subscriber:
                break
        return SimulationReport(
            published=tuple(journal),
            delivered=tuple(delivered),
            events=counts,
            stats=stub.stats,
            unrecoverable=tuple(unrecoverable),
            resets=resets,
            elapsed=now,
            publisher_images=publisher_images.snapshot(),
            subscriber_images=subscriber_images.snapshot(),
        )
