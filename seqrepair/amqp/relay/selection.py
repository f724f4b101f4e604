"""A relay's upstream subscription as pure bookkeeping (APEX §2.6 distributed subscription
management): no proton, no clock, no socket.

A relay holds **one** upstream link for all its subscribers. Its *selection* is the union of
the patterns it always carries (``seqrepair relay --subscribe``) and, with ``--aggregate``,
the patterns of the subscriber links attached to it now. :class:`SelectionTable` says what the
selection must be and whether a subscriber's patterns are carried:

* a subscriber whose patterns the selection covers is served from the relay's journal;
* one it does not cover (``--aggregate``) makes the selection *wider*: the relay switches its
  upstream link to the wider one, and until the switch is done the subscriber's attach is
  refused with a condition a client attaches again after
  (:class:`~seqrepair.amqp.relay.relay.NotCarriedYetError`): attached before the switch, its
  subscription would start where the relay's journal does not carry its topics yet;
* once no attached subscriber needs a pattern for :attr:`SelectionTable.linger` seconds, the
  selection narrows again (the relay carries less: its journal records the rest as not
  selected, :mod:`seqrepair.journal.selection`).

:func:`upstream_properties` is the one place the upstream attach properties are made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from proton import symbol

from seqrepair.amqp.wire.vocabulary import PROP_SELECTION
from seqrepair.core.policy import covers
from seqrepair.core.topics import TopicPattern


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


def upstream_properties(selection: tuple[TopicPattern, ...]) -> dict[symbol, Any]:
    """The attach properties of the relay's upstream link beyond the subscriber's own (the
    one place they are made: a hop path, say, is added here)."""
    if len(selection) <= 1:
        return {}
    return {PROP_SELECTION: ",".join(str(p) for p in selection)}


@attrs.define
class SelectionTable:
    """What a relay's upstream selection must be (see the module).

    ``standing``: the patterns always carried; ``aggregate``: follow the subscribers too;
    ``linger``: seconds a pattern no attached subscriber needs stays in the selection.
    """

    standing: tuple[TopicPattern, ...]
    aggregate: bool = False
    linger: float = 1.0
    current: tuple[TopicPattern, ...] = ()
    """The selection the upstream link has (or is being switched to)."""
    _narrow_since: float | None = None

    def __attrs_post_init__(self) -> None:
        if not self.current:
            self.current = normal(self.standing)

    def carries(self, patterns: Iterable[TopicPattern]) -> bool:
        """Whether a subscriber on ``patterns`` is served from what the relay carries now."""
        return covered(self.current, patterns)

    def may_carry(self, patterns: Iterable[TopicPattern]) -> bool:
        """Whether the relay would carry ``patterns`` at all: always with ``aggregate``, else
        only inside the standing selection."""
        return self.aggregate or covered(self.standing, patterns)

    def wanted(self, attached: Mapping[str, tuple[TopicPattern, ...]],
               waiting: Iterable[TopicPattern] = ()) -> tuple[TopicPattern, ...]:
        """The selection for the standing patterns, the ``attached`` subscriber links' (by
        link name) and those ``waiting`` to be carried."""
        if not self.aggregate:
            return normal(self.standing)
        every = list(self.standing) + list(waiting)
        for patterns in attached.values():
            every.extend(patterns)
        return normal(every)

    def next_selection(
        self, attached: Mapping[str, tuple[TopicPattern, ...]],
        waiting: Iterable[TopicPattern], now: float,
    ) -> tuple[TopicPattern, ...] | None:
        """The selection to switch to now, or None to keep :attr:`current`: wider at once
        (a subscriber waits), narrower once it has been for :attr:`linger` seconds."""
        wanted = self.wanted(attached, waiting)
        if wanted == self.current:
            self._narrow_since = None
            return None
        if not covered(self.current, wanted):  # something must be added: switch now, keeping
            self._narrow_since = None          # what may go until it has lingered
            return normal(self.current + wanted)
        if self._narrow_since is None:
            self._narrow_since = now
            return None
        if now - self._narrow_since < self.linger:
            return None
        self._narrow_since = None
        return wanted
