"""Runs of in-order publications in a batch of link frames.

:meth:`SubscriberStub.receive_many <seqrepair.core.stub.SubscriberStub.receive_many>` takes a
transfer's frames at once. While nothing is buffered, missing or being replayed, the frames
that carry the expected link numbers one after another (across the wrap) are delivered as they
are; :func:`scan_run` finds how far that run goes and what it delivers, without changing
anything, so the stub can check the rest of the batch before it takes the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import attrs

from seqrepair.core.messages import Publication


@attrs.define
class Run:
    """Frames the stub can take in order, before it takes them."""

    stop: int  # index of the first frame after the run
    expected_wire: int  # the wire number expected after the run
    publications: tuple[Publication, ...] = ()  # to deliver
    last: dict[str, int] = attrs.Factory(dict)  # per source, the last number delivered
    duplicates: int = 0


def scan_run(
    frames: Sequence[object], start: int, expected: int, top: int, delivered: Mapping[str, int]
) -> Run:
    """The run of publications from ``frames[start]`` numbered ``expected`` (a wire number),
    the next one and so on, wrapping after ``top``. The run stops before a publication at or
    below the last number ``delivered`` for its source: that one may be a stale frame in the
    slot of one that was lost, which the stub's slow path judges."""
    first = expected
    wraps = 0
    source: str | None = None
    source_last = 0
    last: dict[str, int] = {}
    publication = Publication
    # the loop is the batch path's whole cost per frame: locals only, one branch per test,
    # nothing stored per frame (the run is sliced out of ``frames`` afterwards)
    for frame in frames[start:] if start else frames:
        if type(frame) is not publication:
            break
        if frame.link_seq != expected:
            if expected <= top or frame.link_seq != 1:
                break
            expected = 1  # the wrap: expected ran one past the top of the space
            wraps += 1
        expected += 1
        if frame.source != source:  # most runs are of one source: no dict work per frame
            if source is not None:
                last[source] = source_last
            source = frame.source
            source_last = last[source] if source in last else delivered.get(source, 0)
        seq = frame.source_seq
        if seq > source_last:
            source_last = seq
        else:
            # one its source has delivered: the run stops before it, for the stub's slow path
            # to judge (the stop below counts the same for expected 1 after a wrap as for
            # top + 1 before it)
            expected = frame.link_seq
            break
    if source is not None:
        last[source] = source_last
    stop = start + expected - first + wraps * top
    run = Run(stop=stop, expected_wire=1 if expected > top else expected, last=last)
    run.publications = tuple(cast("Sequence[Publication]", frames[start:stop]))
    return run
