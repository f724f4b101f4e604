"""What a relay's journal lacks, asked of its upstream (XEP-0040 §1: a relay serves gap fill
and source replay "from its own journal, going upstream only for what it lacks").

A relay's journal lacks numbers a subscriber is owed in two ways: a run of *not selected*
markers whose selection does not cover the subscriber (the relay did not carry its topics then:
:mod:`seqrepair.journal.selection`), and numbers below what the relay's retention has trimmed.
A :class:`~seqrepair.journal.gapfill.Replay` given a :data:`Fetcher` asks it for such a range
instead of answering ``trimmed`` at once, waits (paused, without holding the event loop) while
nothing has come, sends what came as it comes, in order, until the :class:`UpstreamAnswer` is
:attr:`~UpstreamAnswer.done`, filtered by the link's entitlement; only what the upstream could
not deliver either (or could not be asked for) is answered ``trimmed``, a lacking run at a
time, naming its numbers (an ``Unrecoverable``); what the journal holds among them is still
sent.

The transport side (:mod:`seqrepair.amqp.relay.fetch`) makes the answers; this module only
says what one is.
"""

from __future__ import annotations

from typing import Protocol

from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement


class UpstreamAnswer(Protocol):
    """The upstream's answer for numbers ``first``..``last`` of ``source``, as one link (its
    entitlement) may see them."""

    source: str
    first: int
    last: int

    @property
    def done(self) -> bool:
        """Whether the answer is complete (the fields below are final)."""

    @property
    def ready(self) -> bool:
        """Whether :meth:`arrived` has something, or the answer is :attr:`done`."""

    def arrived(self) -> list[Publication]:
        """What came since the last call (taken: held no longer), in source order, each number
        once, all within ``first``..``last``; after :attr:`done`, the rest."""

    @property
    def through(self) -> int:
        """The last number answered (``first - 1``..``last``): below ``last`` when the answer
        was cut short (a bound on what the relay holds at once): the replay reads on from
        there (and asks again where its journal lacks)."""

    @property
    def lost(self) -> tuple[int, int] | None:
        """The first range the upstream could not deliver either (trimmed there), if any:
        the answer ends before it."""

    @property
    def lost_items(self) -> tuple[str, ...] | None:
        """The topics the upstream named as held by :attr:`lost` (its ``GAP-ERROR``'s
        ``items``, for the asking link's entitlement), None when it did not name them."""

    @property
    def error(self) -> str | None:
        """Why the upstream could not be asked (unreachable, refused, too slow), if so."""

    def cancel(self) -> None:
        """Nothing more is wanted (the replay that asked went away)."""


class Fetcher(Protocol):
    """Asks the upstream for ``source``'s numbers ``first``..``last`` for a link with the
    given entitlement (never wider: the upstream filters by it too), returning at once;
    ``principal``: who the link acts for (a relay shares its fetch links fairly by it)."""

    def __call__(self, entitlement: Entitlement, source: str, first: int, last: int, *,
                 principal: str = "") -> UpstreamAnswer: ...
