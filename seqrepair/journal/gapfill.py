"""The gap-fill service: answers subscribers' repair requests (XEP-0040 §2.4), any transport.

Per subscriber link it keeps a bounded :class:`~seqrepair.core.context.LinkContext` (what was
sent, by link number), the subscriber's :class:`~seqrepair.core.permissions.Entitlement` and its
:class:`~seqrepair.core.budget.ResendBudget`. A transport adapter (AMQP) calls

* :meth:`GapFillService.attach` when a subscriber link opens, :meth:`~GapFillService.record`
  for every frame it sends on it, :meth:`~GapFillService.detach` when it closes;
* :meth:`~GapFillService.answer_gap` for a :class:`GapRequest`: the frames from the link
  context, or ``GapError("context-lost")`` when they are no longer held;
* :meth:`~GapFillService.answer_source_gap` for a :class:`SourceGapRequest`: a :class:`Replay`
  that reads the journal page by page, yielding the publications after each requested number
  that the subscriber is entitled to (live delivery's filter, so repair never leaks), as
  retransmissions without link numbers, in source order, then one
  ``ReplayComplete(through=high-water per source)``.

Refusals happen before anything is read or sent: a link request larger than ``max_range`` or
any request beyond the subscriber's budget gets ``GapError("refused", detail=reason)``; a
requested number in a trimmed range gets ``GapError("trimmed")``, and so does a journal entry
that cannot be delivered (:func:`undeliverable`: written before publishers refused such
publications): the replay stops before it with ``trimmed_through`` naming it, the subscriber
reports the source ``Unrecoverable`` and asks again after it. A source replay spanning more
than ``max_range`` numbers is not refused (it is the last-ditch repair, and a paused or
restarted subscriber legitimately owes a long one): it stops after ``max_range`` numbers and
ends ``ReplayComplete(more=True)`` with ``through`` the last number read per source, so the
subscriber asks again from there and every answer stays bounded.

A request that names ``link_through`` (the highest link number the subscriber had seen) is
replayed per source only up to the source's first publication the link numbered after that
point (:class:`~seqrepair.core.context.LinkCover`, read as the replay goes): the link brings
the rest. ``through`` then names where each source stopped.

A transport may hand :meth:`GapFillService.answer_source_gap` an ``encoder``
(:data:`RowEncoder`): the replay then reads undecoded rows (:meth:`Journal.iter_rows`, the next
page read while one is sent), asks the entitlement once per topic and permission token (per
source and publish type too when it has filters) from the first row of each decoded in full, and
yields the encoder's bytes for every entry it vouches for; any entry it does not vouch for is
decoded and checked as before (a corrupt one raises, an undeliverable one ends the replay).

Sources a request does not name are replayed after the point the link started at (the
journal's high-water when it attached, 0 for a source that appeared later): a subscriber is
entitled to everything published since it subscribed, including sources it has not seen yet.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, cast

from seqrepair.core.budget import RefusalPolicy
from seqrepair.core.context import LinkContext, LinkFrame, Resend
from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.journal.errors import UnknownLinkError
from seqrepair.journal.format import can_name_journal
from seqrepair.journal.lacking import Fetcher
from seqrepair.journal.recent import RecentEntries
from seqrepair.journal.replay import NotAsked as NotAsked
from seqrepair.journal.replay import Replay as Replay
from seqrepair.journal.replay import ReplayFrame as ReplayFrame
from seqrepair.journal.replay import RowEncoder as RowEncoder
from seqrepair.journal.replay import SubscriberLink as SubscriberLink
from seqrepair.journal.replay import undeliverable as undeliverable
from seqrepair.journal.segments import Segment
from seqrepair.journal.trimsummary import entitled_items
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

log = get_logger(__name__)


class GapFillService:
    """Answers GapRequest from link context and SourceGapRequest from the journal.

    ``link_bits``, ``context_capacity`` (frames) and ``context_bytes`` (None: no byte bound)
    size each link's context; ``policy`` bounds every request (its ``max_range`` also bounds
    link requests).
    """

    def __init__(
        self,
        journal: Journal,
        *,
        policy: RefusalPolicy | None = None,
        link_bits: int = 16,
        context_capacity: int = 65_536,
        context_bytes: int | None = None,
        page_size: int = 1000,
    ) -> None:
        self.journal = journal
        self.context_bytes = context_bytes
        self.policy = policy if policy is not None else RefusalPolicy()
        self.link_bits = link_bits
        self.context_capacity = context_capacity
        self.page_size = page_size
        self._links: dict[str, SubscriberLink] = {}

    def attach(
        self,
        link_id: str,
        entitlement: Entitlement,
        *,
        start_after: Mapping[str, int] | None = None,
    ) -> SubscriberLink:
        """Open (or re-open, with a fresh context) the link ``link_id``.

        ``start_after``: per source, the number after which the subscriber is entitled to
        replays of sources its requests do not name; default the journal's high-waters now.
        """
        if not isinstance(link_id, str) or not link_id:
            raise InvalidMessageError("a link id must be a non-empty string", got=link_id)
        if not isinstance(entitlement, Entitlement):
            raise InvalidMessageError(
                "attach needs an Entitlement", expected="Entitlement", got=entitlement
            )
        if start_after is None:
            sources = self.journal.sources()
            start = {s: hw for s, (hw, _) in self.journal.high_waters(sources).items()}
        else:
            start = dict(SourceGapRequest(after=start_after).after)
        link = SubscriberLink(
            link_id=link_id,
            entitlement=entitlement,
            context=LinkContext(
                bits=self.link_bits,
                capacity=self.context_capacity,
                max_range=self.policy.max_range,
                max_bytes=self.context_bytes,
            ),
            budget=self.policy.new_budget(),
            start_after=start,
        )
        self._links[link_id] = link
        log.info("gapfill.attached", link=link_id)
        return link

    def detach(self, link_id: str) -> None:
        """Forget the link (its context is lost; later requests raise UnknownLinkError)."""
        self._links.pop(link_id, None)

    def link(self, link_id: str) -> SubscriberLink:
        """The link ``link_id``; UnknownLinkError if it is not attached."""
        try:
            return self._links[link_id]
        except (KeyError, TypeError):
            raise UnknownLinkError(f"no subscriber link {link_id!r}", got=link_id) from None

    def record(self, link_id: str, frame: LinkFrame) -> None:
        """Remember a frame sent on the link (numbered 0 starts a new context)."""
        self.link(link_id).context.record(frame)

    def answer_gap(
        self, link_id: str, request: GapRequest, now: float
    ) -> list[LinkFrame] | GapError:
        """The requested link range from the link's context, or a GapError."""
        resend = self.resend_gap(link_id, request, now)
        if isinstance(resend, GapError):
            return resend
        return cast(list[LinkFrame], list(resend))  # read at once: nothing is dropped

    def resend_gap(self, link_id: str, request: GapRequest, now: float) -> Resend | GapError:
        """:meth:`answer_gap` read lazily: a :class:`~seqrepair.core.context.Resend` to
        iterate as credit allows (charged in full now), or a GapError."""
        link = self.link(link_id)
        if not isinstance(request, GapRequest):
            raise InvalidMessageError("answer_gap takes a GapRequest", got=request)
        answer = link.context.resend(request)
        if isinstance(answer, GapError):
            log.info("gapfill.gap_error", link=link_id, reason=answer.reason, detail=answer.detail)
            return answer
        reason = self.policy.refusal(answer.span, link.budget, now)
        if reason is not None:
            log.info("gapfill.refused", link=link_id, reason=reason)
            return GapError("refused", request, reason)
        return answer

    def answer_source_gap(
        self,
        link_id: str,
        request: SourceGapRequest,
        now: float,
        *,
        carried_after: Mapping[str, int] | None = None,
        carry_through: Mapping[str, int] | None = None,
        fetcher: Fetcher | None = None,
        visible: Callable[[Iterable[str]], Collection[str]] | None = None,
        encoder: RowEncoder | None = None,
        recent: RecentEntries | None = None,
    ) -> Replay | GapError:
        """A :class:`Replay` of the journal after the requested numbers, or a GapError.

        ``visible`` (None: every source): the sources, of those given, the caller may learn
        of; any other is answered exactly as a source the journal has never held (no
        high-water, no trimmed numbers, not named unless the request names it), so the
        answer is no oracle of hidden sources.

        ``carried_after`` (used with the request's ``link_through``): per source, the number
        after which the transport sends everything on the link from now on (what a component
        fans out next; 0 for a source it does not name); the replay stops there too, and names
        the sources whose journal reaches past it in :attr:`Replay.owed_to_link`, which the
        transport must then send.

        ``carry_through`` (with ``link_through`` too): per source, a number the replay carries
        through at least, whatever the link carries past the cover point: the transport's link
        passed over publications up to it, never numbered, as given by an earlier replay that
        this request shows its subscriber did not take, so only this replay can bring them.

        ``fetcher`` (a relay's, :mod:`seqrepair.journal.lacking`): numbers the journal lacks
        for this link (trimmed, or not selected for it) are asked of the upstream instead of
        answered ``trimmed``.

        ``encoder``: the transport's fast path (:data:`RowEncoder`); the replay then yields its
        bytes for the entries it encodes. ``recent`` (with an encoder): the transport's
        encoded entries of what it fanned out lately (:mod:`.recent`), sent where they hold
        the numbers instead of reading the journal's pages.
        """
        link = self.link(link_id)
        if not isinstance(request, SourceGapRequest):
            raise InvalidMessageError("answer_source_gap takes a SourceGapRequest", got=request)
        sources = sorted(set(request.after) | set(self.journal.sources()))
        if visible is not None:
            shown = set(visible(sources))
            sources = [s for s in sources if s in shown or s in request.after]
        else:
            shown = set(sources)
        # a name the journal cannot hold (see check_source) has nothing journaled
        marks = self.journal.high_waters([s for s in sources
                                          if s in shown and can_name_journal(s)])
        segments: list[Segment] = []
        through: dict[str, int] = {}
        trimmed_through: dict[str, int] = {}
        trimmed_after: dict[str, int] = {}
        for source in sources:
            high_water, trimmed = marks.get(source, (0, 0))
            listed = source in request.after
            # a source the request does not name is owed everything since the link started
            after = request.after[source] if listed else link.start_after.get(source, 0)
            if not listed and after >= high_water:
                continue
            through[source] = high_water
            if after >= high_water:
                continue
            if after < trimmed:
                if fetcher is not None:  # below the trim: the upstream may still hold it
                    segments.append(Segment(source, after + 1, high_water, trimmed))
                    continue
                trimmed_through[source] = trimmed
                trimmed_after[source] = after
                continue
            segments.append(Segment(source, after + 1, high_water))
        if trimmed_through:
            # One answer names every source that lost numbers; the subscriber reports them and
            # asks again after these points for what the journal still holds.
            log.info("gapfill.trimmed", link=link_id, trimmed_through=trimmed_through)
            detail = ", ".join(
                f"{source}: numbers after {trimmed_after[source]} through {seq} were trimmed"
                for source, seq in trimmed_through.items()
            )
            return GapError("trimmed", request, detail, trimmed_through,
                            items=self._trimmed_items(link, trimmed_after, trimmed_through))
        replay = Replay(self.journal, link, request, segments, through, self.page_size,
                        max_range=self.policy.max_range, carried_after=carried_after,
                        carry_through=carry_through,
                        fetcher=fetcher, encoder=encoder,
                        recent=recent if encoder is not None else None)
        reason = self.policy.refusal(replay.span, link.budget, now)
        if reason is not None:
            log.info("gapfill.refused", link=link_id, reason=reason)
            return GapError("refused", request, reason)
        return replay

    def _trimmed_items(self, link: SubscriberLink, after: Mapping[str, int],
                       through: Mapping[str, int]) -> dict[str, tuple[str, ...]] | None:
        """Per source, the topics the link may see that its trimmed numbers held, where the
        retention summary knows them all (:mod:`seqrepair.journal.trimsummary`)."""
        named: dict[str, tuple[str, ...]] = {}
        for source, seq in through.items():
            held = entitled_items(self.journal, link.entitlement, source, after[source] + 1, seq)
            if held is not None:
                named[source] = held
        return named or None

    def answer(
        self, link_id: str, request: GapRequest | SourceGapRequest, now: float
    ) -> Iterator[LinkFrame | ReplayComplete | GapError]:
        """Either request's answer as frames to send, in order."""
        if isinstance(request, GapRequest):
            result: list[LinkFrame] | GapError | Replay = self.answer_gap(link_id, request, now)
        elif isinstance(request, SourceGapRequest):
            result = self.answer_source_gap(link_id, request, now)
        else:
            raise InvalidMessageError(
                "a gap request is a GapRequest or a SourceGapRequest", got=request
            )
        if isinstance(result, GapError):
            return iter((result,))
        # no encoder given: a replay yields no bytes here
        return cast(Iterator[LinkFrame | ReplayComplete | GapError], iter(result))
