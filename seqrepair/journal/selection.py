"""Numbers a relay's journal holds as *not selected* (XEP-0040 §1 fractal relays, §2.4).

A relay (``seqrepair relay``) journals what it receives from its upstream component with the
origin's source numbers. Its upstream subscription is filtered (topic patterns, permission
tokens), so the numbers of a source it receives are not contiguous: the numbers between are
*not selected*, never lost. The journal records each such range as one marker entry (entry ID
``<first>-0``, ``ptype`` ``not-selected``, ``through`` the last number of the range,
``selection`` the upstream selection it was not selected under), written by the same atomic
append as the publication that follows it (:meth:`seqrepair.journal.journal.Journal.append`
with ``not_selected``). Readers pass over a marker as over a publication their subscriber is
not entitled to: a source replay counts its numbers as covered; only a subscriber whose
selection the marker's does not cover learns that the relay lacks them
(:meth:`NotSelected.covers`).
"""

from __future__ import annotations

import attrs

from seqrepair.core.errors import InvalidTopicPatternError
from seqrepair.core.policy import covers as pattern_covers
from seqrepair.core.topics import TopicPattern

NOT_SELECTED = "not-selected"
"""The ``ptype`` of a marker entry."""


@attrs.frozen
class NotSelected:
    """Numbers ``first``..``last`` of ``source`` the relay's upstream selection
    (``selection``: its topic patterns, comma-separated) did not select."""

    source: str
    first: int
    last: int
    selection: str

    def patterns(self) -> tuple[TopicPattern, ...]:
        """The selection's topic patterns (an unreadable one is left out: covers nothing)."""
        out = []
        for text in self.selection.split(","):
            try:
                out.append(TopicPattern(text.strip()))
            except InvalidTopicPatternError:  # a marker is data: a bad pattern covers nothing
                continue
        return tuple(out)

    def covers(self, topics: tuple[TopicPattern, ...]) -> bool:
        """Whether every one of ``topics`` lies inside the selection: then a subscriber on
        ``topics`` would not have been sent these numbers either (they are *filtered*, not
        lacking)."""
        mine = self.patterns()
        return all(any(pattern_covers(outer, inner) for outer in mine) for inner in topics)


def selection_text(patterns: tuple[str, ...] | list[str]) -> str:
    """The ``selection`` of a marker for an upstream subscription on ``patterns``."""
    return ",".join(sorted(set(patterns)))
