"""Publishing through a journal outage: which messages are released, and holding back the rest.

When the journal fails for a while
(:class:`~seqrepair.amqp.component.journalport.NotJournaledError`: Redis down, a timeout, an error
reply) the component answers RELEASED ("not processed, send again") where sending the message again
is safe, and REJECTED where it is not (:func:`resend_is_safe`). A publisher pipelines, though: the
deliveries it sent after a released one are on their way, and their numbers continue past the
released ones. Journaled now they would leave a hole the journal refuses
(``amqp:precondition-failed``), and the source would be wedged. So each publishing link keeps, per
source, the first number of the messages it released (:data:`HeldBack`); a later message of that
link that continues past one of them is released too, without trying the journal
(:func:`continues_past`), until a message carrying the held-back number comes again
(:func:`settle`). Only publications that carry their own source numbers take part: a plain
publisher's are numbered by the component when they are journaled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

from seqrepair.amqp.component.journalport import NotJournaledError
from seqrepair.core.messages import Publication

HeldBack = dict[str, int]
"""Per source, the first number of the messages a publishing link released (and not yet saw
again): what the publisher must send before anything after it."""


def resend_is_safe(
    error: BaseException, *, numbered_here: bool
) -> TypeGuard[NotJournaledError]:
    """Whether a message whose journaling failed with ``error`` may be released.

    Only a transient failure of the journal (:class:`NotJournaledError`; anything else is bad
    input, or a bug) and only when sending again cannot duplicate: every publication carries
    its own source number (the journal port skips the numbers the journal holds), or the
    journal surely took nothing of it (``error.untouched``: it failed on a read, before any
    write, or its append was refused: a plain publisher's numbers taken by a late write). A
    message the component numbers (``numbered_here``) that the journal may have taken part of
    is rejected: sent again, it would be numbered again (what the journal did take goes out
    all the same: :meth:`seqrepair.amqp.component.ingest.Ingest.poll`).
    """
    return isinstance(error, NotJournaledError) and (not numbered_here or error.untouched)


def _ranges(pubs: Sequence[Publication]) -> dict[str, tuple[int, int]]:
    """Per source, the lowest and highest number among ``pubs``."""
    out: dict[str, tuple[int, int]] = {}
    for pub in pubs:
        seq = pub.source_seq
        low, high = out.get(pub.source, (seq, seq))
        out[pub.source] = (min(low, seq), max(high, seq))
    return out


def continues_past(held: HeldBack, pubs: Sequence[Publication]) -> bool:
    """Whether ``pubs`` go on past a number held back on their link: release them untried."""
    return any(
        source in held and low > held[source] for source, (low, _high) in _ranges(pubs).items()
    )


def hold(held: HeldBack, pubs: Sequence[Publication]) -> None:
    """A message of ``pubs`` was released: hold back what follows it, per source."""
    for source, (low, _high) in _ranges(pubs).items():
        held[source] = min(held.get(source, low), low)


def settle(held: HeldBack, pubs: Sequence[Publication]) -> None:
    """A message of ``pubs`` was answered (accepted or rejected): a source whose held-back
    number it carries is held back no longer."""
    for source, (low, high) in _ranges(pubs).items():
        if source in held and low <= held[source] <= high:
            del held[source]
