"""The per-source ranges a source replay reads (:mod:`.gapfill`), and the per-request cap."""

from __future__ import annotations

import attrs


@attrs.define
class Segment:
    """One source's numbers ``first``..``last`` a replay reads."""

    source: str
    first: int
    last: int
    upstream_through: int = 0
    """Numbers ``first``..this are below the journal's trim: asked of the upstream (a relay's
    :data:`~seqrepair.journal.lacking.Fetcher`), the rest read from the journal."""


def capped(
    segments: list[Segment], through: dict[str, int], limit: int
) -> tuple[list[Segment], dict[str, int], bool]:
    """The first ``limit`` numbers of ``segments``, and ``through`` cut to what they cover.

    A source the cut does not reach is left out of ``through``: nothing was answered for it.
    """
    kept: list[Segment] = []
    room = limit
    more = False
    for seg in segments:
        if room == 0:
            more = True
            del through[seg.source]
            continue
        last = min(seg.last, seg.first + room - 1)
        if last < seg.last:
            more = True
            through[seg.source] = last
        kept.append(Segment(seg.source, seg.first, last, seg.upstream_through))
        room -= last - seg.first + 1
    return kept, through, more
