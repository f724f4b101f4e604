"""Numbers a relay's journal holds as *not selected* (XEP-0040 §1 fractal relays, §2.4).

A relay (``seqrepair relay``) journals what it receives from its upstream component with the
origin's source numbers. Its upstream subscription is filtered (topic patterns, permission
tokens), so the numbers of a source it receives are not contiguous: the numbers between are
*not selected*, never lost. The journal records each such range as one marker entry (entry ID
``<first>-0``, ``ptype`` ``not-selected``, ``through`` the last number of the range,
``selection`` the upstream selection it was not selected under: its topic patterns,
comma-separated, then, when the relay narrowed the permission tokens it asked for,
``;tokens=`` and those tokens, comma-separated), written by the same atomic
append as the publication that follows it (:meth:`seqrepair.journal.journal.Journal.append`
with ``not_selected``). Readers pass over a marker as over a publication their subscriber is
not entitled to: a source replay counts its numbers as covered; only a subscriber whose
selection the marker's does not cover learns that the relay lacks them
(:meth:`NotSelected.covers`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import attrs

from seqrepair.core.errors import InvalidTopicPatternError
from seqrepair.core.permissions import ANY_TOKEN
from seqrepair.core.policy import covers as pattern_covers
from seqrepair.core.topics import TopicPattern

NOT_SELECTED = "not-selected"
"""The ``ptype`` of a marker entry."""
LOST_UPSTREAM = "!lost-upstream"
"""The ``selection`` of a marker for numbers the relay's upstream said it cannot deliver (an
``Unrecoverable`` there): no topic pattern, so it covers no subscriber, and every replay over
it answers that the relay lacks them (``trimmed``), never passes over them."""


def lost_selection(items: Iterable[str] | None = None, under: str | None = None) -> str:
    """The ``selection`` of a lost-upstream marker: :data:`LOST_UPSTREAM`, then, when the
    upstream named the items the loss held (``items``, the topics, as the relay's upstream
    selection ``under`` saw them), ``;`` and a JSON object ``{"items": [...], "under": ...}``
    (:meth:`NotSelected.lost_items` reads it)."""
    if items is None or under is None:
        return LOST_UPSTREAM
    return LOST_UPSTREAM + ";" + json.dumps({"items": sorted(set(items)), "under": under},
                                            separators=(",", ":"))


BEFORE_SUBSCRIPTION = "!before-subscription"
"""The ``selection`` of the marker for a source's numbers through the one a relay's upstream
subscription started after (the upstream's ``seqrepair-start-after`` named the source), written
with the first publication it journals of the source: published before the relay subscribed,
not filtered out by it (the numbers after that one and before the first journaled were: they
are marked not selected). No subscriber is owed them by default (they precede every subscription
the relay took); one that asks for them by number (its request or its link's start names the
source: a durable position, a context from before the relay's journal was new) is owed them,
and a relay asks its upstream (:mod:`seqrepair.journal.lacking`)."""


@attrs.frozen
class NotSelected:
    """Numbers ``first``..``last`` of ``source`` the relay's upstream selection
    (``selection``: its topic patterns, comma-separated) did not select."""

    source: str
    first: int
    last: int
    selection: str

    @property
    def lost(self) -> bool:
        """Whether these numbers were lost upstream, not filtered out (:data:`LOST_UPSTREAM`)."""
        return self.selection.startswith(LOST_UPSTREAM)

    @property
    def before(self) -> bool:
        """Whether these numbers precede the relay's subscription
        (:data:`BEFORE_SUBSCRIPTION`)."""
        return self.selection == BEFORE_SUBSCRIPTION

    def lost_items(self, topics: tuple[TopicPattern, ...],
                   grant: frozenset[str] | None = None,
                   deny: frozenset[str] = frozenset()) -> tuple[str, ...] | None:
        """For numbers lost upstream: the topics the upstream named as lost there that a
        subscriber on ``topics`` granted ``grant`` and denied ``deny`` may be owed, when the
        marker knows them for it (the upstream selection they were named under covers it: a
        wider subscriber may be owed items nobody named) and it sees every token that
        selection did (the items are topics only: of a narrower view, which of them it may
        see is not known, and naming them all would tell it of items it may not see); else
        None."""
        text = self.selection
        if not text.startswith(LOST_UPSTREAM + ";"):
            return None
        try:
            named = json.loads(text[len(LOST_UPSTREAM) + 1:])
            items, under = named["items"], named["under"]
            if not isinstance(under, str) or not all(isinstance(t, str) for t in items):
                return None
        except (ValueError, TypeError, KeyError):
            return None  # a marker is data: unreadable, the items are unknown
        named_under = NotSelected(self.source, self.first, self.last, under)
        if not named_under.covers(topics, grant):
            return None
        if grant is not None:
            asked = named_under.tokens()
            if asked is None:  # every token the relay was granted: only a link that sees all
                if ANY_TOKEN not in grant or deny:
                    return None
            elif (ANY_TOKEN not in grant and not asked <= grant) or asked & deny:
                return None
        return tuple(items)

    def patterns(self) -> tuple[TopicPattern, ...]:
        """The selection's topic patterns (an unreadable one is left out: covers nothing)."""
        out = []
        for text in self.selection.split(";", 1)[0].split(","):
            try:
                out.append(TopicPattern(text.strip()))
            except InvalidTopicPatternError:  # a marker is data: a bad pattern covers nothing
                continue
        return tuple(out)

    def tokens(self) -> frozenset[str] | None:
        """The permission tokens the selection asked for; None when it did not narrow them
        (every token the relay is granted upstream)."""
        _, sep, rest = self.selection.partition(";tokens=")
        return frozenset(t for t in rest.split(",") if t) if sep else None

    def covers(self, topics: tuple[TopicPattern, ...],
               grant: frozenset[str] | None = None) -> bool:
        """Whether a subscriber on ``topics`` granted ``grant`` (None: not asked) would not
        have been sent these numbers either (they are *filtered*, not lacking): every one of
        ``topics`` lies inside the selection's patterns and, when the selection narrowed the
        tokens, ``grant`` lies inside them."""
        if self.lost or self.before:
            return False  # lost upstream: lacking for every subscriber (before: see it)
        mine = self.patterns()
        if not all(any(pattern_covers(outer, inner) for outer in mine) for inner in topics):
            return False
        asked = self.tokens()
        if asked is None or grant is None:
            return True
        return ANY_TOKEN not in grant and grant <= asked


def selection_text(patterns: tuple[str, ...] | list[str],
                   tokens: frozenset[str] | None = None) -> str:
    """The ``selection`` of a marker for an upstream subscription on ``patterns`` asking for
    ``tokens`` (None: not narrowed)."""
    text = ",".join(sorted(set(patterns)))
    return text if tokens is None else f"{text};tokens={','.join(sorted(tokens))}"
