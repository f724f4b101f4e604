"""Numbering of publications: per source (publisher side) and per subscriber link.

:class:`SourceSequencer` gives each publication of one source the next absolute source number,
continuing after a recovered high-water so a restarted publisher never reuses a number.
:class:`LinkSequencer` gives every frame on one subscriber link (publications *and* heartbeats)
the next link number, wrapping in its bit width, and decides when an idle link needs a
heartbeat. Neither reads the clock: time comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import inf, nextafter
from typing import Any

import attrs

from seqrepair.core.config import check_now, non_negative_int, positive_number
from seqrepair.core.errors import InvalidConfigError, InvalidMessageError
from seqrepair.core.limits import check_deliverable
from seqrepair.core.messages import Heartbeat, Publication, PublishType, relinked_run
from seqrepair.core.sequence import RESET, SequenceSpace


def _source_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidConfigError(
            "a source name must be a non-empty string", expected="non-empty str", got=value
        )




@attrs.define(on_setattr=attrs.setters.NO_OP)
class SourceSequencer:
    """Stamps the publications of one source with consecutive absolute source numbers.

    ``start_after`` is the recovered high-water (the journal's last number for the source);
    the first publication gets ``start_after + 1``. ``bits`` is the width the number travels
    in on the wire (see :attr:`wire_seq`).
    """

    source: str = attrs.field(validator=_source_name)
    bits: int = 32
    start_after: int = attrs.field(default=0, validator=non_negative_int)
    space: SequenceSpace = attrs.field(init=False)
    high_water: int = attrs.field(init=False)

    @space.default
    def _space(self) -> SequenceSpace:
        return SequenceSpace(self.bits)

    @high_water.default
    def _high_water_default(self) -> int:
        return self.start_after

    def stamp(
        self,
        topic: str,
        fields: Mapping[str, Any],
        ptype: PublishType | str = PublishType.UPDATE,
        *,
        permtoken: str | None = None,
        timestamp: float | None = None,
    ) -> Publication:
        """A publication carrying the next source number. Bad input consumes no number."""
        publication = Publication(
            topic=topic,
            source=self.source,
            source_seq=self.high_water + 1,
            ptype=ptype,
            fields=fields,
            permtoken=permtoken,
            timestamp=timestamp,
        )
        check_deliverable(publication.topic, publication.fields, publication.permtoken)
        self.high_water += 1
        return publication

    def next_seq(self) -> int:
        """Take the next absolute number without building a publication."""
        self.high_water += 1
        return self.high_water

    @property
    def wire_seq(self) -> int:
        """The wire value of the last number issued (0 before the first)."""
        return self.space.wire(self.high_water) if self.high_water else RESET


@attrs.define(on_setattr=attrs.setters.NO_OP)
class LinkSequencer:
    """Numbers the frames of one subscriber link and schedules its heartbeats.

    A fresh link starts at 1; after :meth:`reset` the next frame carries 0 (reset) and the
    following ones 1, 2, ... Heartbeats take link numbers too, so a receiver detects loss even
    when the link is quiet. :attr:`absolute` counts every number issued, wraps included.
    """

    bits: int = 16
    heartbeat_interval: float = attrs.field(default=1.0, validator=positive_number)
    space: SequenceSpace = attrs.field(init=False)
    absolute: int = attrs.field(init=False, default=0)
    _next_wire: int = attrs.field(init=False, default=1)
    _last_sent: float | None = attrs.field(init=False, default=None)
    _last_reset_at: float | None = attrs.field(init=False, default=None)  # the last frame 0's

    @space.default
    def _space(self) -> SequenceSpace:
        return SequenceSpace(self.bits)

    def _take(self, now: float) -> int:
        if type(now) is not float or not -inf < now < inf:  # the cheap test first: per frame
            now = check_now(now)
        wire = self._next_wire
        self._next_wire = self.space.next(wire)
        self.absolute += 1
        self._last_sent = now
        return wire

    def stamp(self, publication: Publication, now: float) -> Publication:
        """``publication`` with the next link number; resets the heartbeat timer."""
        if type(publication) is not Publication:
            raise InvalidMessageError(
                "a link stamps publications", expected="Publication", got=type(publication).__name__
            )
        return publication.with_link(self._take(now))

    def stamp_many(self, publications: list[Publication], now: float) -> list[Publication]:
        """``publications``, each with the next link number: what :meth:`stamp` gives one by
        one (the same numbers, wraps and a reset's 0 included), its checks made once for the
        run. Fan-out stamps every publication of every link this way."""
        if type(now) is not float or not -inf < now < inf:
            now = check_now(now)
        for publication in publications:
            if type(publication) is not Publication:
                raise InvalidMessageError(
                    "a link stamps publications", expected="Publication",
                    got=type(publication).__name__,
                )
        if not publications:
            return []
        top = self.space.max
        wire = self.space.check(self._next_wire, allow_reset=True)
        out, self._next_wire = relinked_run(publications, wire, top)
        self.absolute += len(out)
        self._last_sent = now
        return out

    @property
    def next_number(self) -> int:
        """The link number the next frame gets (0: a reset's frame)."""
        return self._next_wire

    def take_many(self, count: int, now: float) -> int:
        """The numbers :meth:`stamp_many` would give ``count`` (>= 1) publications, taken
        without stamping them: the first of them is returned, the rest follow it (after the
        space's max comes 1). For a caller that keeps its publications bare and numbers them
        by position (:meth:`LinkContext.record_numbered`)."""
        if type(now) is not float or not -inf < now < inf:
            now = check_now(now)
        if type(count) is not int or count < 1:
            raise InvalidConfigError("a run takes at least one number", expected=">= 1",
                                     got=count)
        space = self.space
        first = space.check(self._next_wire, allow_reset=True)
        last_absolute = first + count - 1  # the run's last number, unwrapped (0 starts at 0)
        last = last_absolute if last_absolute <= space.max else space.wire(last_absolute)
        self._next_wire = 1 if last == space.max else last + 1
        self.absolute += count
        self._last_sent = now
        return first

    def heartbeat(self, now: float) -> Heartbeat:
        """A heartbeat with the next link number, whether or not one is due.

        A reset's heartbeat (number 0) says when it was sent, later than every earlier reset
        frame of this link even when ``now`` is not: a stub tells a copy of its reset frame
        from a new reset's by that timestamp, and two equal frames 0 would let it read the new
        context's numbers as the old one's."""
        wire = self._take(now)
        if wire == RESET:
            last = self._last_reset_at
            if last is not None and not now > last:
                now = nextafter(last, inf)
            self._last_reset_at = now
        return Heartbeat(link_seq=wire, timestamp=now)

    def poll(self, now: float) -> Heartbeat | None:
        """A heartbeat when the link has been idle for an interval, else None."""
        now = check_now(now)
        if self._last_sent is None:
            self._last_sent = now
            return None
        if now - self._last_sent >= self.heartbeat_interval:
            return self.heartbeat(now)
        return None

    @property
    def next_deadline(self) -> float | None:
        """When :meth:`poll` will next produce a heartbeat (None before any activity)."""
        if self._last_sent is None:
            return None
        return self._last_sent + self.heartbeat_interval

    def reset(self) -> None:
        """Void the link context: the next frame carries 0, then 1, 2, ..."""
        self._next_wire = RESET
