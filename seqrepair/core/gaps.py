"""The missing link numbers a subscriber stub knows of, and the repair state of each range.

A :class:`GapTracker` holds disjoint, sorted ranges of absolute link numbers that are missing
between the stub's delivery point and the highest number it has seen. Each range moves through
a small state table::

    WAITING   --nak delay elapsed-->        REQUESTED (a GapRequest is sent)
    REQUESTED --retry timer-->              REQUESTED (resent, backing off with jitter)
    REQUESTED --retries exhausted-->        SKIPPED   (Unrecoverable)
    any       --GapError context-lost-->    SOURCE    (waits for a source-level replay)
    any       --GapError refused/trimmed--> SKIPPED   (Unrecoverable)
    any       --replay complete-->          SKIPPED   (covered by the replay)

A frame that arrives for a missing number splits its range. The stub delivers up to the first
range that is not SKIPPED and jumps over SKIPPED ones.
"""

from __future__ import annotations

import enum
import random
from bisect import bisect_right
from collections.abc import Iterator

import attrs


class GapState(enum.Enum):
    WAITING = "waiting"
    REQUESTED = "requested"
    SOURCE = "source"
    SKIPPED = "skipped"


@attrs.define(on_setattr=attrs.setters.NO_OP)
class Gap:
    """A run of missing absolute link numbers ``start``..``end`` inclusive."""

    start: int
    end: int
    detected_at: float
    state: GapState = GapState.WAITING
    attempts: int = 0
    next_at: float = 0.0
    request_id: int = 0
    reopened: bool = False  # its frame came and was not what the slot holds (see reopen)

    @property
    def size(self) -> int:
        return self.end - self.start + 1

    def split_at(self, number: int) -> Gap:
        """Cut this gap before ``number``; return the upper part (starting at ``number``)."""
        upper = attrs.evolve(self, start=number)
        self.end = number - 1
        return upper


@attrs.frozen
class RetryPolicy:
    """When requests go out and how they back off."""

    nak_delay: float
    retry_interval: float
    backoff: float
    jitter: float
    max_retries: int
    max_outstanding: int
    max_span: int
    coalesce: int


@attrs.frozen
class DueRequest:
    """A link range to request now (absolute numbers)."""

    start: int
    end: int


@attrs.frozen
class GiveUp:
    """A range whose retries ran out (absolute numbers)."""

    start: int
    end: int


@attrs.define(on_setattr=attrs.setters.NO_OP)
class GapTracker:
    """Sorted, disjoint missing ranges with their repair state (see the module docstring)."""

    policy: RetryPolicy
    rng: random.Random
    _gaps: list[Gap] = attrs.field(factory=list)
    _request_ids: int = 0

    def __bool__(self) -> bool:
        return bool(self._gaps)

    def __iter__(self) -> Iterator[Gap]:
        return iter(self._gaps)

    def clear(self) -> None:
        self._gaps.clear()

    def missing(self) -> int:
        """How many link numbers are missing in all."""
        return sum(gap.size for gap in self._gaps)

    def first(self) -> Gap | None:
        return self._gaps[0] if self._gaps else None

    def pop_first(self) -> Gap:
        return self._gaps.pop(0)

    def add(self, start: int, end: int, now: float) -> None:
        """Record ``start``..``end`` as newly missing; it lies above every known gap."""
        last = self._gaps[-1] if self._gaps else None
        if last is not None and last.end + 1 == start and last.state is GapState.WAITING:
            last.end = end
        else:
            self._gaps.append(Gap(start, end, detected_at=now))

    def reopen(self, number: int, now: float) -> None:
        """``number``, below every known gap, is missing again (its frame was not what the
        slot holds); it is requested after the nak delay like a new gap."""
        self._gaps.insert(0, Gap(number, number, detected_at=now, reopened=True))

    def _index(self, number: int) -> int:
        """Index of the gap that could hold ``number`` (the last starting at or before it)."""
        return bisect_right(self._gaps, number, key=lambda gap: gap.start) - 1

    def fill(self, number: int) -> Gap | None:
        """Take ``number`` out of its gap (splitting it); None if it was not missing."""
        index = self._index(number)
        if index < 0:
            return None
        gap = self._gaps[index]
        if number > gap.end:
            return None
        if gap.start == gap.end:
            del self._gaps[index]
        elif number == gap.start:
            gap.start += 1
        elif number == gap.end:
            gap.end -= 1
        else:
            upper = gap.split_at(number + 1)
            gap.end = number - 1
            self._gaps.insert(index + 1, upper)
        return gap

    def mark(self, start: int, end: int, state: GapState) -> list[Gap]:
        """Put the missing numbers within ``start``..``end`` into ``state``; return those gaps."""
        marked: list[Gap] = []
        index = 0
        while index < len(self._gaps):
            gap = self._gaps[index]
            if gap.end < start:
                index += 1
                continue
            if gap.start > end:
                break
            if gap.start < start:
                self._gaps.insert(index + 1, gap.split_at(start))
                index += 1
                continue
            if gap.end > end:
                self._gaps.insert(index + 1, gap.split_at(end + 1))
            gap.state = state
            marked.append(gap)
            index += 1
        return marked

    def in_state(self, state: GapState) -> bool:
        return any(gap.state is state for gap in self._gaps)

    def next_deadline(self) -> float | None:
        deadlines = [
            gap.detected_at + self.policy.nak_delay
            if gap.state is GapState.WAITING
            else gap.next_at
            for gap in self._gaps
            if gap.state in (GapState.WAITING, GapState.REQUESTED)
        ]
        return min(deadlines) if deadlines else None

    def due(self, now: float, below: int) -> tuple[list[DueRequest], list[GiveUp]]:
        """Requests to send now and ranges to give up on, moving their states.

        Only gaps starting below ``below`` are requested (the stub has room to buffer them).
        Nearby due gaps coalesce into one request (``coalesce`` received numbers between them
        are re-sent rather than spending another request), each request spans at most
        ``max_span`` numbers, and at most ``max_outstanding`` requests are in flight.
        """
        policy = self.policy
        in_flight = {
            gap.request_id
            for gap in self._gaps
            if gap.state is GapState.REQUESTED and gap.next_at > now
        }
        slots = policy.max_outstanding - len(in_flight)
        give_ups: list[GiveUp] = []
        groups: list[list[Gap]] = []
        index = 0
        while index < len(self._gaps):
            gap = self._gaps[index]
            index += 1
            if gap.start >= below:
                break
            if gap.state is GapState.WAITING:
                if now < gap.detected_at + policy.nak_delay:
                    continue
            elif gap.state is GapState.REQUESTED:
                if now < gap.next_at:
                    continue
                if gap.attempts >= policy.max_retries:
                    gap.state = GapState.SKIPPED
                    give_ups.append(GiveUp(gap.start, gap.end))
                    continue
            else:
                continue
            if gap.size > policy.max_span:
                self._gaps.insert(index, gap.split_at(gap.start + policy.max_span))
            group = groups[-1] if groups else None
            if (
                group is not None
                and gap.start - group[-1].end - 1 <= policy.coalesce
                and gap.end - group[0].start + 1 <= policy.max_span
            ):
                group.append(gap)
            elif slots > len(groups):
                groups.append([gap])
        requests: list[DueRequest] = []
        for group in groups:
            self._request_ids += 1
            attempts = max(gap.attempts for gap in group) + 1
            wait = policy.retry_interval * policy.backoff ** (attempts - 1)
            next_at = now + wait * (1.0 + policy.jitter * self.rng.random())
            for gap in group:
                gap.state = GapState.REQUESTED
                gap.attempts = attempts
                gap.next_at = next_at
                gap.request_id = self._request_ids
            requests.append(DueRequest(group[0].start, group[-1].end))
        return requests, give_ups
