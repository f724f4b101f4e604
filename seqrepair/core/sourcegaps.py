"""Per-source gap detection for a stream that carries no link numbers (brokered mode).

Theory of operation
-------------------
Through a third-party broker (RabbitMQ's AMQP 1.0 plugin) nobody numbers the link: the broker
is not our component. What the subscriber still has is each publication's *source* number,
absolute and contiguous per source (XEP-0040 §2). :class:`SourceGapDetector` orders by it:

* per source it keeps ``delivered``, the last number handed to the application (it starts at
  ``start_after[source]``, 0 for a source it has never heard of: a source born after the
  subscription started is owed from its first number);
* a publication at ``delivered + 1`` is delivered at once and the buffer drains behind it; one
  further ahead is buffered and opens a *gap*; one at or below ``delivered`` (or already
  buffered) is a duplicate and is dropped;
* ``nak_delay`` after a gap opens (reordering tolerance), :meth:`poll` returns a
  :class:`~seqrepair.core.events.RequestSourceGap` naming the last delivered number of *every*
  known source. The repair authority (the journal) answers with the publications after those
  numbers, in source order, then ``ReplayComplete(through=high-water per source)``;
* a source quiet for ``probe_interval`` is probed with the same request: the last publications
  of a source may be the lost ones, and nothing behind them would ever reveal the gap;
* on ``ReplayComplete`` everything at or below ``through`` has been answered for that source:
  the buffer below it is delivered in order (numbers the replay did not carry are not for this
  subscriber) and ``delivered`` moves up to ``through``. One marked ``more`` stopped at the
  journal's per-request limit: the detector asks again at once, from the new ``delivered``.

Filtered streams. Source numbers are contiguous only when the subscriber receives the source's
whole stream. A queue bound to part of a source's topics sees holes that are not losses; the
detector treats each as a gap and the repair answers it (the replay, filtered by the same
entitlement, carries nothing for the hole and ``ReplayComplete`` moves past it). This is
correct, exactly once and in order, but costs one repair round trip per hole and holds
deliveries for ``nak_delay``: give a filtered subscriber the same ``entitlement`` as its
queue's binding, or better, a queue that carries its sources' whole streams.

``entitlement`` (optional) is applied to live publications as well: a number whose publication
the subscriber may not see fills its place in the sequence but is not delivered, the same
answer the journal's filtered replay gives.

Repair is retried ``retry_interval * backoff**n`` after an unanswered request; after
``max_retries`` the gapped sources are reported :class:`~seqrepair.core.events.Unrecoverable`
and the detector moves past their gaps (it never stalls). A ``GapError`` "refused" or "trimmed"
does the same at once; "context-lost" (which the journal never says) is retried.

No I/O, no clock: ``receive(frame, now)`` and ``poll(now)`` return events;
:attr:`SourceGapDetector.next_deadline` says when to poll next.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

import attrs

from seqrepair.core.config import (
    check_now,
    non_negative_number,
    optional,
    positive_int,
    positive_number,
)
from seqrepair.core.errors import InvalidConfigError, InvalidMessageError
from seqrepair.core.events import (
    BufferOverflow,
    Delivered,
    Event,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.messages import GapError, Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.permissions import Entitlement

SourceFrame = Publication | ReplayComplete | GapError
"""What a :class:`SourceGapDetector` receives."""


@attrs.define(on_setattr=attrs.setters.NO_OP)
class SourceGapStats:
    """Counters of what the detector has done. Numbers count publications unless named."""

    delivered: int = 0
    duplicates: int = 0
    filtered: int = 0
    gaps_detected: int = 0
    repaired: int = 0
    covered: int = 0
    requests_sent: int = 0
    probes_sent: int = 0
    continued: int = 0  # replays that stopped at the journal's limit and were asked on
    unrecoverable: int = 0
    overflow_dropped: int = 0
    stray_dropped: int = 0
    max_buffered: int = 0


@attrs.define(on_setattr=attrs.setters.NO_OP)
class _Source:
    """What the detector keeps for one source."""

    delivered: int
    last_seen: float
    buffer: dict[int, Publication] = attrs.field(factory=dict)
    heap: list[int] = attrs.field(factory=list)
    gap_since: float | None = None


@attrs.define(on_setattr=attrs.setters.NO_OP)
class _Outstanding:
    """A repair request in flight."""

    request: SourceGapRequest
    attempts: int
    next_at: float


def _start_after(value: object) -> dict[str, int]:
    try:
        return dict(SourceGapRequest(after=value).after)
    except InvalidMessageError as exc:
        raise InvalidConfigError(
            f"start_after: {exc.message}", expected="Mapping[str, int >= 0]", got=value
        ) from None


def _entitlement(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Entitlement):
        raise InvalidConfigError(
            "SourceGapDetector.entitlement must be an Entitlement or None",
            expected="Entitlement | None",
            got=value,
        )


@attrs.define(on_setattr=attrs.setters.NO_OP)
class SourceGapDetector:
    """Orders a link-less stream by source number, detects gaps per source, asks for repair.

    ``SourceGapDetector(start_after={"feed.a": 41}, nak_delay=0.05, probe_interval=1.0)``.
    """

    start_after: dict[str, int] = attrs.field(factory=dict, converter=_start_after)
    entitlement: Entitlement | None = attrs.field(default=None, validator=_entitlement)
    nak_delay: float = attrs.field(default=0.05, validator=non_negative_number)
    probe_interval: float | None = attrs.field(default=1.0, validator=optional(positive_number))
    retry_interval: float = attrs.field(default=1.0, validator=positive_number)
    backoff: float = attrs.field(default=2.0, validator=positive_number)
    max_retries: int = attrs.field(default=5, validator=positive_int)
    max_buffer: int = attrs.field(default=100_000, validator=positive_int)

    _sources: dict[str, _Source] = attrs.field(init=False, factory=dict)
    _outstanding: _Outstanding | None = attrs.field(init=False, default=None)
    _epoch: float | None = attrs.field(init=False, default=None)
    _requested_at: float | None = attrs.field(init=False, default=None)
    _buffered: int = attrs.field(init=False, default=0)
    _events: list[Event] = attrs.field(init=False, factory=list)
    _stats: SourceGapStats = attrs.field(init=False, factory=SourceGapStats)

    # ------------------------------------------------------------------ read-only state

    @property
    def stats(self) -> SourceGapStats:
        """The counters (a live object: read, do not modify)."""
        return self._stats

    @property
    def buffered(self) -> int:
        """Publications held ahead of a gap, all sources together."""
        return self._buffered

    @property
    def last_delivered(self) -> dict[str, int]:
        """Per known source, the last number delivered (or the start point)."""
        out = dict(self.start_after)
        out.update({name: state.delivered for name, state in self._sources.items()})
        return out

    @property
    def repairing(self) -> bool:
        """Whether a repair request is in flight."""
        return self._outstanding is not None

    def resume_point(self) -> SourceGapRequest:
        """What a restarted subscriber passes as ``start_after`` to continue exactly once."""
        return SourceGapRequest(after=self.last_delivered)

    @property
    def next_deadline(self) -> float | None:
        """When :meth:`poll` has something to do next (None: nothing until a frame comes)."""
        if self._epoch is None:
            return None
        if self._outstanding is not None:
            return self._outstanding.next_at
        deadlines = [
            state.gap_since + self.nak_delay
            for state in self._sources.values()
            if state.gap_since is not None
        ]
        probe = self._probe_at()
        if probe is not None:
            deadlines.append(probe)
        return min(deadlines) if deadlines else None

    def _probe_at(self) -> float | None:
        if self.probe_interval is None or self._epoch is None:
            return None
        floor = self._epoch if self._requested_at is None else self._requested_at
        quiet = [max(state.last_seen, floor) for state in self._sources.values()]
        if not quiet or len(self._sources) < len(set(self.start_after) | set(self._sources)):
            quiet.append(floor)  # a source we have not heard from yet is quiet since the start
        return min(quiet) + self.probe_interval

    # ------------------------------------------------------------------ inputs

    def receive(self, frame: object, now: float) -> list[Event]:
        """Take a publication (live or replayed), a ``ReplayComplete`` or a ``GapError``.

        Never returns a request: requests come from :meth:`poll` (after ``nak_delay``).
        Anything else raises :class:`~seqrepair.core.errors.InvalidMessageError` and changes
        nothing.
        """
        now = check_now(now)
        if not isinstance(frame, Publication | ReplayComplete | GapError):
            raise InvalidMessageError(
                "a source gap detector receives Publication, ReplayComplete or GapError",
                expected="Publication | ReplayComplete | GapError",
                got=type(frame).__name__,
            )
        self._start(now)
        if isinstance(frame, Publication):
            self._on_publication(frame, now)
        elif isinstance(frame, ReplayComplete):
            self._on_replay_complete(frame, now)
        else:
            self._on_gap_error(frame, now)
        return self._take()

    def poll(self, now: float) -> list[Event]:
        """Requests that are due: a first request after ``nak_delay``, a retry, a probe."""
        now = check_now(now)
        self._start(now)
        outstanding = self._outstanding
        if outstanding is not None:
            if now >= outstanding.next_at:
                if outstanding.attempts >= self.max_retries:
                    self._abandon("give-up", outstanding.request, now)
                else:
                    self._send_request(now, outstanding.attempts + 1, probe=False)
            return self._take()
        gapped = any(
            state.gap_since is not None and now >= state.gap_since + self.nak_delay
            for state in self._sources.values()
        )
        probe = self._probe_at()
        if gapped:
            self._send_request(now, 1, probe=False)
        elif probe is not None and now >= probe:
            self._send_request(now, 1, probe=True)
        return self._take()

    # ------------------------------------------------------------------ internals

    def _start(self, now: float) -> None:
        if self._epoch is None:
            self._epoch = now

    def _take(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def _state(self, source: str, now: float) -> _Source:
        state = self._sources.get(source)
        if state is None:
            floor = self._epoch if self._epoch is not None else now
            state = self._sources[source] = _Source(
                delivered=self.start_after.get(source, 0), last_seen=floor
            )
        return state

    def _on_publication(self, pub: Publication, now: float) -> None:
        state = self._state(pub.source, now)
        state.last_seen = now
        seq = pub.source_seq
        if seq <= state.delivered or seq in state.buffer:
            self._stats.duplicates += 1
            return
        if seq == state.delivered + 1:
            self._deliver(state, pub)
            self._drain(state)
        elif self._buffered >= self.max_buffer:
            self._stats.overflow_dropped += 1
            self._events.append(BufferOverflow(limit=self.max_buffer, dropped=1))
        else:
            state.buffer[seq] = pub
            heapq.heappush(state.heap, seq)
            self._buffered += 1
            self._stats.max_buffered = max(self._stats.max_buffered, self._buffered)
        self._mark_gap(state, now)

    def _mark_gap(self, state: _Source, now: float) -> None:
        if not state.buffer:
            state.gap_since = None
        elif state.gap_since is None:
            state.gap_since = now
            self._stats.gaps_detected += 1

    def _deliver(self, state: _Source, pub: Publication) -> None:
        state.delivered = pub.source_seq
        if self.entitlement is not None and not self.entitlement.allows(pub):
            self._stats.filtered += 1
            return
        self._stats.delivered += 1
        if pub.retransmit:
            self._stats.repaired += 1
        self._events.append(Delivered(pub))

    def _pop(self, state: _Source) -> Publication:
        seq = heapq.heappop(state.heap)
        self._buffered -= 1
        return state.buffer.pop(seq)

    def _drain(self, state: _Source) -> None:
        while state.heap and state.heap[0] <= state.delivered + 1:
            pub = self._pop(state)
            if pub.source_seq <= state.delivered:
                self._stats.duplicates += 1
            else:
                self._deliver(state, pub)

    def _skip_to(self, state: _Source, through: int, *, answered: bool) -> int:
        """Deliver what is buffered at or below ``through`` and move ``delivered`` there.

        Returns how many numbers were passed over without a publication.
        """
        skipped = 0
        while state.heap and state.heap[0] <= through:
            pub = self._pop(state)
            if pub.source_seq <= state.delivered:
                self._stats.duplicates += 1
                continue
            skipped += pub.source_seq - state.delivered - 1
            self._deliver(state, pub)
        if through > state.delivered:
            skipped += through - state.delivered
            state.delivered = through
        if answered:
            self._stats.covered += skipped
        else:
            self._stats.unrecoverable += skipped
        self._drain(state)
        return skipped

    def _on_replay_complete(self, complete: ReplayComplete, now: float) -> None:
        # Everything at or below ``through`` was answered before this frame, on the same
        # ordered path, so even the end of a stale (retried) request is true information.
        for source, through in complete.through.items():
            state = self._state(source, now)
            self._skip_to(state, through, answered=True)
            if state.buffer:
                state.gap_since = now if state.gap_since is None else state.gap_since
            else:
                state.gap_since = None
        outstanding = self._outstanding
        if outstanding is None or (
            complete.request is not None and complete.request != outstanding.request
        ):
            return
        self._outstanding = None
        if complete.more:
            # the journal stopped at its per-request limit; ``delivered`` is now past what it
            # read, so asking again goes on from there (a repeat of the request would not)
            after = outstanding.request.after
            if any(seq > after.get(name, 0) for name, seq in complete.through.items()):
                self._stats.continued += 1
                self._send_request(now, 1, probe=False)
            else:
                self._abandon("no-progress", outstanding.request, now)

    def _on_gap_error(self, error: GapError, now: float) -> None:
        outstanding = self._outstanding
        if outstanding is None or (
            error.request is not None and error.request != outstanding.request
        ):
            self._stats.stray_dropped += 1
            return
        if error.reason == "context-lost":
            outstanding.next_at = now  # the journal never loses context: just ask again
            return
        trimmed = error.trimmed_through
        if error.reason == "trimmed" and trimmed and self._skip_trimmed(trimmed, now,
                                                                         error.items):
            return
        self._abandon(error.reason, outstanding.request, now)

    def _skip_trimmed(
        self, trimmed_through: Mapping[str, int], now: float,
        items: Mapping[str, tuple[str, ...]] | None = None,
    ) -> bool:
        """Report the sources retention trimmed past what was delivered (with the items lost
        where the journal named them), move them past the trimmed numbers and ask again for
        what the journal still holds after them."""
        moved = False
        for name, through in sorted(trimmed_through.items()):
            state = self._sources.get(name)
            if state is None or through <= state.delivered:
                continue
            self._events.append(Unrecoverable(
                source=name, after=state.delivered, reason="trimmed",
                items=None if items is None else items.get(name)))
            self._skip_to(state, through, answered=False)
            self._mark_gap(state, now)
            moved = True
        if moved:
            self._send_request(now, 1, probe=False)
        return moved

    def _abandon(self, reason: str, request: SourceGapRequest, now: float) -> None:
        """Report the gapped sources unrecoverable, and with them the sources the request does
        not name (``source=None``), and move past their gaps."""
        self._outstanding = None
        for name in sorted(self._sources):
            state = self._sources[name]
            if not state.heap:
                continue
            self._events.append(Unrecoverable(source=name, after=state.delivered, reason=reason))
            self._skip_to(state, state.heap[0] - 1, answered=False)
            self._mark_gap(state, now)
        # the sources it does not name (the replay brings them from their start) may have lost
        # some, as may a known source whose last publications were the lost ones
        self._events.append(Unrecoverable(source=None, after=None, reason=reason))
        self._requested_at = now

    def _send_request(self, now: float, attempts: int, *, probe: bool) -> None:
        request = SourceGapRequest(after=self.last_delivered)
        wait = self.retry_interval * self.backoff ** (attempts - 1)
        self._outstanding = _Outstanding(request=request, attempts=attempts, next_at=now + wait)
        self._requested_at = now
        self._stats.requests_sent += 1
        if probe:
            self._stats.probes_sent += 1
        self._events.append(RequestSourceGap(request))
