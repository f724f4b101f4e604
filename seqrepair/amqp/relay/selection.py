"""A relay's upstream subscription as pure bookkeeping (APEX §2.6 distributed subscription
management): no proton, no clock, no socket.

A relay holds **one** upstream link for all its subscribers. Its *selection*
(:class:`Selection`) is the union of the patterns it always carries (``seqrepair relay
--subscribe``) and, with ``--aggregate``, the entitlements of its subscriber links (attached,
or detached with their context kept): their topic patterns, and their permission tokens (the
upstream link asks for the
union of their grants, ``seqrepair-permtokens``; not narrowed when one of them is granted
every token, or with ``--subscribe``). :class:`SelectionTable` says what the selection must be
and whether a subscriber's entitlement is carried:

* a subscriber whose entitlement the selection covers is served from the relay's journal;
* one it does not cover (``--aggregate``) makes the selection *wider*: the relay switches its
  upstream link to the wider one, and until the switch is done the subscriber's attach is
  refused with a condition a client attaches again after
  (:class:`~seqrepair.amqp.relay.relay.NotCarriedYetError`): attached before the switch, its
  subscription would start where the relay's journal does not carry its topics yet;
* once no subscriber link needs a pattern for :attr:`SelectionTable.linger` seconds, the
  selection narrows again (the relay carries less: its journal records the rest as not
  selected, :mod:`seqrepair.journal.selection`).

:func:`upstream_properties` is the one place the upstream attach properties are made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from proton import symbol, ulong

from seqrepair.amqp.wire.hops import Path
from seqrepair.amqp.wire.vocabulary import PROP_GRANTS, PROP_PATH, PROP_PATH_HOPS, PROP_SELECTION
from seqrepair.core.permissions import ANY_TOKEN
from seqrepair.core.policy import covers
from seqrepair.core.topics import TopicPattern
from seqrepair.journal.selection import selection_text


def normal(patterns: Iterable[TopicPattern]) -> tuple[TopicPattern, ...]:
    """``patterns`` without those another of them covers, sorted by text (the same union
    always has the same form, so an unchanged selection is seen unchanged)."""
    unique = sorted(set(patterns), key=str)
    kept = [p for p in unique
            if not any(q != p and covers(q, p) and not (covers(p, q) and str(p) < str(q))
                       for q in unique)]
    return tuple(kept)


def covered(selection: Iterable[TopicPattern], patterns: Iterable[TopicPattern]) -> bool:
    """Whether every one of ``patterns`` lies inside one pattern of ``selection``."""
    outer = tuple(selection)
    return all(any(covers(o, p) for o in outer) for p in patterns)


@attrs.frozen
class Selection:
    """What one subscription selects: topic ``patterns`` (normalised, :func:`normal`) and the
    permission ``tokens`` it asks for (None: every token granted, not narrowed)."""

    patterns: tuple[TopicPattern, ...] = attrs.field(converter=normal)
    tokens: frozenset[str] | None = None

    @classmethod
    def of_link(cls, patterns: Iterable[TopicPattern], grant: frozenset[str]) -> Selection:
        """A subscriber link's selection: its patterns, its grant (a grant of every token
        is not narrowed)."""
        return cls(tuple(patterns), None if ANY_TOKEN in grant else frozenset(grant))

    def covers(self, other: Selection) -> bool:
        """Whether everything ``other`` selects, this selects too (no patterns: nothing)."""
        if not other.patterns:
            return True
        if not covered(self.patterns, other.patterns):
            return False
        return self.tokens is None or (other.tokens is not None and other.tokens <= self.tokens)

    def union(self, other: Selection) -> Selection:
        """What this or ``other`` selects."""
        if not other.patterns:
            return self
        if not self.patterns:
            return other
        tokens = (None if self.tokens is None or other.tokens is None
                  else self.tokens | other.tokens)
        return Selection(self.patterns + other.patterns, tokens)

    def marker_text(self) -> str:
        """The ``selection`` its not-selected journal markers record."""
        return selection_text([str(p) for p in self.patterns], self.tokens)

    def describe(self) -> dict[str, Any]:
        """For the log: the patterns and the tokens."""
        return {"selection": [str(p) for p in self.patterns],
                "tokens": None if self.tokens is None else sorted(self.tokens)}


NOTHING = Selection(())
"""No selection at all (an aggregating relay without subscribers)."""


def upstream_properties(selection: Selection, behind: Path = (),
                        hops: int | None = None) -> dict[symbol, Any]:
    """The attach properties of the relay's upstream link beyond the subscriber's own (the
    one place they are made): the selection, and ``behind``, the identities behind the relay
    (:mod:`.paths`) as the ``seqrepair-path`` the relay then extends with its own
    (:meth:`~seqrepair.amqp.wire.hops.Hops.upstream_properties`), with ``hops``, the deepest
    route behind it, as ``seqrepair-path-hops`` (None: the length of ``behind``)."""
    props: dict[symbol, Any] = {}
    if behind:
        props[PROP_PATH] = list(behind)
        if hops is not None:
            props[PROP_PATH_HOPS] = ulong(hops)
    if len(selection.patterns) > 1:
        props[PROP_SELECTION] = ",".join(str(p) for p in selection.patterns)
    if selection.tokens is not None:
        props[PROP_GRANTS] = ",".join(sorted(selection.tokens))
    return props


@attrs.define
class SelectionTable:
    """What a relay's upstream selection must be (see the module).

    ``standing``: the patterns always carried (every token); ``aggregate``: follow the
    subscribers too; ``linger``: seconds what no subscriber link needs stays selected.
    """

    standing: tuple[TopicPattern, ...]
    aggregate: bool = False
    linger: float = 1.0
    current: Selection = NOTHING
    """The selection the upstream link has."""
    _narrow_since: float | None = None

    def __attrs_post_init__(self) -> None:
        if not self.current.patterns and self.standing:
            self.current = Selection(self.standing)

    def carries(self, wanted: Selection) -> bool:
        """Whether a subscriber selecting ``wanted`` is served from what the relay carries."""
        return self.current.covers(wanted)

    def may_carry(self, patterns: Iterable[TopicPattern]) -> bool:
        """Whether the relay would carry ``patterns`` at all: always with ``aggregate``, else
        only inside the standing selection."""
        return self.aggregate or covered(self.standing, patterns)

    def wanted(self, attached: Mapping[str, Selection], waiting: Iterable[Selection] = ()
               ) -> Selection:
        """The selection for the standing patterns, the ``attached`` subscriber links' (by
        link name) and those ``waiting`` to be carried."""
        every = Selection(self.standing) if self.standing else NOTHING
        if not self.aggregate:
            return every
        first = not self.standing
        for one in [*attached.values(), *waiting]:
            every = one if first else every.union(one)
            first = False
        return every

    def next_selection(
        self, attached: Mapping[str, Selection], waiting: Iterable[Selection], now: float,
    ) -> Selection | None:
        """The selection to switch to now, or None to keep :attr:`current`: wider at once
        (a subscriber waits), narrower once it has been for :attr:`linger` seconds."""
        wanted = self.wanted(attached, waiting)
        if wanted == self.current:
            self._narrow_since = None
            return None
        if not self.current.covers(wanted):  # something must be added: switch now, keeping
            self._narrow_since = None        # what may go until it has lingered
            return wanted if not self.current.patterns else self.current.union(wanted)
        if self._narrow_since is None:
            self._narrow_since = now
            return None
        if now - self._narrow_since < self.linger:
            return None
        self._narrow_since = None
        return wanted
