"""What the component does with the publications a publisher sends: journal, then fan out.

:class:`Ingest` takes a message from a publishing link (:meth:`Ingest.publish`), checks it
(publications only, topics inside the link's address), numbers a plain publisher's publications (the
component is their sequencer, continuing what the journal holds), journals what is new of it through
the :class:`~seqrepair.amqp.component.journalport.RedisJournalPort` and fans out what the journal
holds. Journaled is published: when an append fails part-way, what the journal took is fanned out
all the same. Whether a message the journal could not take is released or rejected is
:mod:`.holdback`'s rule; settling the delivery is the component's.

An append whose outcome is unknown (Redis gone, a timeout: the answer is lost, the journal may
hold the publications) leaves its source *in doubt*: what the journal took of it is published,
but not fanned out yet. :meth:`Ingest.poll`, on the component's timer, reads the source's
high-water again and fans out what the journal holds past what went out
(:meth:`Ingest._catch_up`), so subscribers get it without waiting for the source to publish
again; while Redis stays unreachable it asks again after a capped, jittered backoff. A message
of a source in doubt that comes first takes the same path before its own publications, so
per-source order holds and nothing goes out twice. What retention trimmed of it before it could
be read back is passed over (a warning names it): it never goes out, the rest does.

A journal that hangs (Redis stopped, a network path that drops packets) does not fail at once:
each call waits for the client's socket timeout, and the event loop, which serves every link,
waits with it. A failed call that held the loop :data:`STALL` seconds or more makes the journal
*quiet* for twice that time: messages are released untried (the publishers send them again
later) and :meth:`Ingest.poll` waits, so the loop spends at most a third of its time on a
journal that does not answer, and heartbeats and live links keep going.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection
from typing import Any, cast

import attrs
from proton import Message

from seqrepair.amqp.component import holdback
from seqrepair.amqp.component.authz import check_publish_topic, topics_cache
from seqrepair.amqp.component.journalport import (
    NotJournaledError,
    RedisJournalPort,
    ReusedNumberError,
    StaleNumberingError,
)
from seqrepair.amqp.component.sourcelimits import SourceLimits
from seqrepair.amqp.wire.backoff import Backoff
from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.errors import (
    MalformedMessageError,
    OversizedMessageError,
    UnknownMessageTypeError,
)
from seqrepair.amqp.wire.rawamqp import decode_message
from seqrepair.amqp.wire.technical import DEFAULT_SOURCE_BITS
from seqrepair.core.errors import OversizedPublicationError, UndeliverableError
from seqrepair.core.limits import check_deliverable
from seqrepair.core.messages import Publication
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal.format import as_journaled, plainly_sendable
from seqrepair.journal.gapfill import undeliverable
from seqrepair.logs import get_logger
from seqrepair.rest.catalog import SharedCatalog

log = get_logger(__name__)

# the entries by index: those known (a dict), or every one of them (a list)
Entries = dict[int, bytes | None] | list[bytes | None]
FanOut = Callable[[list[Publication], Entries], None]
"""Offers journaled publications to the subscriber links (with, by index, the entries as
received, where a batch's entry can be sent on as it is)."""

STALL = 0.5
"""Seconds a failed journal call must have held the event loop to make the journal quiet."""

TOPIC_CACHE = 4096
"""How many checked topics a publishing link remembers (then it starts again)."""


@attrs.frozen
class Released:
    """The outcome of a message the component did not process: the publisher sends it again."""

    reason: str


FOLLOWS_RELEASED = Released("follows a released message")


class Ingest:
    """Journal before fan-out, for every message a publishing link sends.

    ``ingested`` is, per source, the last number fanned out, or passed over as trimmed by
    retention before it could go out (it starts at the journal's high-waters); ``sequencers``
    number the sources the component numbers (plain publishers); ``in_doubt`` holds the
    sources an append may have journaled more of than went out; ``topics`` learns the topic
    of everything that goes out.
    """

    def __init__(
        self,
        journal: RedisJournalPort,
        decoder: Decoder,
        fan_out: FanOut,
        stats: dict[str, int],
        *,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        topics: SharedCatalog | None = None,
    ) -> None:
        self.journal = journal
        self.topics = topics if topics is not None else SharedCatalog()
        """Where the topics of what goes out are listed (``GET /topics``)."""
        self.decoder = decoder
        self.fan_out = fan_out
        self.stats = stats
        self.ingested: dict[str, int] = dict(journal.high_waters())
        for source, hw in self.ingested.items():
            decoder.unwrapper.seed(source, hw)
        self.sequencers: dict[str, SourceSequencer] = {}
        self.in_doubt: set[str] = set()
        self._owed: set[str] = set()  # in doubt because a replay left them to the links
        self.backoff = backoff or Backoff(initial=0.1, maximum=5.0)
        """Between tries to read the journal again while a source is in doubt."""
        self._retry_at: float | None = None  # None: at the next poll
        self._rng = random.Random()
        self.clock = clock
        self.quiet_until: float | None = None
        self.limits: SourceLimits | None = None
        """The bounds on sources (and their topics' classes) a publishing link's message is
        checked against before anything of it is journaled (:mod:`.sourcelimits`)."""
        self._counting: tuple[str, set[str]] | None = None  # new sources of the message taken
        self.on_lost_journaled: Callable[[set[str]], None] | None = None
        """A relay's: told of the sources a lost-upstream marker was journaled for, before
        the publications after it are fanned out."""
        """Until then (``clock`` time) the journal is not tried: its last failed call stalled
        the event loop (:data:`STALL`)."""

    def _quiet_for(self, now: float) -> float:
        """Seconds the journal stays quiet after ``now`` (0: it may be tried)."""
        return 0.0 if self.quiet_until is None else max(0.0, self.quiet_until - now)

    def _stalled(self, started: float, exc: NotJournaledError) -> None:
        """A journal call begun at ``started`` failed with ``exc``: when it held the event loop
        :data:`STALL` seconds or more, leave the journal quiet for twice that time."""
        now = self.clock()
        held = now - started
        if held < STALL or isinstance(exc, StaleNumberingError):  # Redis answered that one
            return
        self.quiet_until = now + 2 * held
        log.warning("the journal stalled the event loop: not tried for a while",
                    held=round(held, 3), quiet_for=round(2 * held, 3), error=exc.message)

    def _refuse_while_quiet(self) -> None:
        """Raise an untouched :class:`NotJournaledError` while the journal is quiet."""
        wait = self._quiet_for(self.clock())
        if wait > 0:
            raise NotJournaledError(
                f"the journal stalled and is not tried for {wait:.1f} s; publish again",
                untouched=True,
            )

    def poll(self, now: float) -> None:
        """Fan out what the journal took of the sources in doubt (the component's timer).

        Each source in doubt costs one high-water read and one range read; when the journal
        cannot be read, the sources wait (they stay in doubt) until ``now`` passes the next
        delay of :attr:`backoff`, so an outage does not stall the event loop on every tick.
        """
        if not self.in_doubt or (self._retry_at is not None and now < self._retry_at):
            return
        if self._quiet_for(self.clock()) > 0:
            return
        for source in sorted(self.in_doubt):
            started = self.clock()
            try:
                self._catch_up(source)
            except NotJournaledError as exc:
                self._stalled(started, exc)
                delay = self.backoff.next_delay(self._rng)
                if delay is None:  # a backoff that gives up: keep trying at its longest
                    delay = self.backoff.maximum
                self._retry_at = now + delay
                log.warning("journaled publications not fanned out yet: the journal cannot be "
                            "read", sources=sorted(self.in_doubt), retry_in=round(delay, 3),
                            error=exc.message)
                return
        self.backoff.reset()
        self._retry_at = None

    def _catch_up(self, source: str) -> None:
        """Fan out what the journal holds of ``source`` past what went out, and clear its doubt:
        the one path for publications journaled but never fanned out, whether an append's
        answer was lost or their publisher died between journaling and sending them (a read:
        raises :class:`NotJournaledError`, ``untouched``, when the journal cannot be read).

        What retention trimmed of them first can never go out: it is passed over, with a
        warning that names it, counted in ``stats["trimmed_unsent"]`` and taken as ingested (a
        request for it is answered ``GapError("trimmed")``; the same numbers sent again by
        their publisher are duplicates), so the rest goes out in order and the source leaves
        doubt.
        """
        self.journal.high_water(source)  # forgotten after an unknown outcome: read again
        unsent = self.journal.unsent(source, self.ingested.get(source, 0))
        trimmed, pubs = unsent.trimmed, unsent.publications
        if trimmed:
            self.ingested[source] = trimmed[-1]
            self.stats["trimmed_unsent"] += len(trimmed)
            log.warning("journaled publications trimmed before they were fanned out",
                        source=source, first=trimmed[0], last=trimmed[-1], count=len(trimmed))
        poison = [pub for pub in pubs if undeliverable(pub) is not None]
        if poison:  # journaled before publishers refused such publications: never sendable
            self.ingested[source] = max(self.ingested.get(source, 0), poison[-1].source_seq)
            self.stats["undeliverable"] = self.stats.get("undeliverable", 0) + len(poison)
            bad = {pub.source_seq for pub in poison}
            pubs = [pub for pub in pubs if pub.source_seq not in bad]
            log.error("journaled publications that cannot be delivered passed over (a source "
                      "request for them is answered GapError trimmed)", source=source,
                      numbers=[pub.source_seq for pub in poison[:20]], count=len(poison))
        if pubs:
            self._publish(pubs, {})
            if source in self.in_doubt:
                log.info("journaled publications fanned out from the journal", source=source,
                         first=pubs[0].source_seq, last=pubs[-1].source_seq,
                         why="left to the links by a replay" if source in self._owed
                         else "an append outcome unknown, or the publisher gone")
        self.in_doubt.discard(source)
        self._owed.discard(source)

    def publisher_gone(self, receiver: Any) -> None:
        """A publishing link ended (closed, or its connection lost): a publisher that numbers
        and journals its own publications may have died between journaling some and sending
        them, and a source that stays silent would never bring them. Its sources are put in
        doubt, so :meth:`poll` fans out what the journal holds past what went out."""
        sources: set[str] = getattr(receiver, "own_sources", set())
        for source in sources:
            self.journal.forget(source)  # the high-water it knows may be behind the journal's
            self.in_doubt.add(source)
        sources.clear()

    def owe(self, sources: Collection[str]) -> None:
        """A source replay left to the links what the journal holds of ``sources`` past what
        went out (journaled by a publisher that has not sent it here yet): those sources are
        put in doubt, so :meth:`poll` fans that out from the journal, unless their publisher
        sends it first."""
        for source in sources:
            self.journal.forget(source)
            self.in_doubt.add(source)
            self._owed.add(source)

    def _assign(self, source: str) -> int:
        """The next number of a source the component numbers (started in :meth:`publish`)."""
        return self.sequencers[source].next_seq()

    def publish(self, receiver: Any, message: Message) -> Released | None:
        """Journal and fan out ``message`` of the publishing link ``receiver``: None when done
        (accept it), :class:`Released` when the publisher should send it again; bad input, or
        a failure where a resend is not safe, raises. A message not accepted leaves the
        decoder's source numbering as it found it, but for what the journal took of it, and
        adds no source to what the component keeps (:meth:`_refused`)."""
        unwrapper = self.decoder.unwrapper
        unwrapper.begin()
        try:
            outcome = self._take(receiver, message)
        except BaseException:
            self._refused(unwrapper.trial_sources())
            unwrapper.rollback(self.ingested)
            raise
        finally:
            self._count_new_sources()
        if outcome is None:
            unwrapper.commit()
        else:
            self._refused(unwrapper.trial_sources())
            unwrapper.rollback(self.ingested)
        return outcome

    def _admit(self, receiver: Any, pubs: list[Publication]) -> None:
        """Refuse ``pubs`` (:class:`~seqrepair.amqp.wire.admission.LimitExceededError`) when
        keeping their sources,
        or the classes of their topics, would pass the component's bounds (:mod:`.sourcelimits`)."""
        limits = self.limits
        if limits is None:
            return
        # new: nothing of it went out. A source numbered or in doubt but not kept is one
        # whose first append failed (or whose answer was lost): new still, so its first
        # journaling, whenever it lands, records its principal and counts (sourcelimits.py);
        # one the journal took meanwhile is not refused (asked when a limit would refuse it)
        kept = self.ingested
        new = {pub.source for pub in pubs if pub.source not in kept}
        principal = str(getattr(receiver, "principal", ""))
        self._counting = (principal, limits.check(principal, pubs, new, len(kept)))

    def _brought_by(self) -> dict[str, str]:
        """The new sources of the message being taken, each with the principal it counts
        against (recorded by the journal with its first journaling)."""
        counting = self._counting
        if counting is None or not counting[0] or not counting[1]:
            return {}
        return dict.fromkeys(counting[1], counting[0])

    def _count_new_sources(self) -> None:
        """The new sources of the message just taken that are now kept count as its
        principal's (a message journaled part-way counts what it kept)."""
        counting, self._counting = self._counting, None
        if counting is not None and self.limits is not None:
            principal, sources = counting
            self.limits.took(principal, [s for s in sources if s in self.ingested])

    def relayed_rising(self, pubs: list[Publication]) -> bool:
        """Whether ``pubs`` (as received by a relay) are one source's, bare, in increasing
        order past what went out of it: a relay's usual batch, which neither
        :func:`~seqrepair.amqp.relay.journaler.bare` nor :meth:`relayed_unsent` changes."""
        return bool(pubs) and _rising(pubs, self.ingested.get(pubs[0].source, 0))

    def relayed_unsent(self, pubs: list[Publication]) -> list[int] | None:
        """Before a relay journals ``pubs`` (bare): the indexes of those that did not go
        out yet (None: all of them); those that did are checked against the journal first
        (:class:`ReusedNumberError` when it holds other publications under their numbers:
        nothing is journaled past them) and counted as duplicates."""
        ingested = self.ingested
        if not any(p.source_seq <= ingested.get(p.source, 0) for p in pubs):
            return None
        unsent = [i for i, p in enumerate(pubs) if p.source_seq > ingested.get(p.source, 0)]
        kept = set(unsent)
        copies = [p for i, p in enumerate(pubs) if i not in kept]
        self._check_copies(copies)
        self.stats["duplicates"] += len(copies)
        return unsent

    def relayed_journaled(self, pubs: list[Publication], items: list[bytes],
                          rising: bool = False) -> int:
        """Fan out publications a relay's journal already holds (its appends run off the
        event loop: :mod:`seqrepair.amqp.relay.journaler`), as :meth:`relayed` would once it
        journaled them: those that went out already are skipped (checked against the journal
        as copies). ``items``: by index, the entry bytes they came in; ``rising``: ``pubs``
        are one source's, bare, in increasing order (:meth:`relayed_rising` said so when
        they were submitted), so only the first is compared with what went out since. The
        number fanned out."""
        after = self.ingested.get(pubs[0].source, 0) if pubs else 0
        if pubs and (pubs[0].source_seq > after if rising else _rising(pubs, after)):
            # the relay's usual batch: _fresh's answer (all fresh, bare already) without its
            # per-publication work
            regular = len(items) == len(pubs) and all(map(_regular_entry, items))
            self._publish(pubs, list(items) if regular else
                          {i: e for i, e in enumerate(items) if _regular_entry(e)},
                          pubs[0].source)
            return len(pubs)
        fresh, entries = self._fresh(pubs, items)
        if fresh:
            self._publish(fresh, entries)
        return len(fresh)

    def _refused(self, sources: list[str]) -> None:
        """A message naming ``sources`` was not accepted: what the journal port learnt of the
        ones that never went out is forgotten, so the component keeps no state for a source
        only refused messages named (a peer sending them under ever new names grows nothing)."""
        for source in sources:
            if source not in self.ingested and source not in self.in_doubt:
                self.journal.forget(source)

    def _take(self, receiver: Any, message: Message) -> Released | None:
        default_topic = receiver.default_topic or message.address
        default_source = str(receiver.connection.remote_container or receiver.name)
        wanted: list[str] = []

        def count(source: str) -> int:  # a stand-in number: nothing is consumed yet
            wanted.append(source)
            return 1

        items: list[bytes] | None
        frames, items, message = self._read(message, default_source, default_topic, count)
        checked = topics_cache(receiver)  # emptied by a policy reload
        plain = True  # every frame deliverable and journaled as it is, proven in one pass
        for frame in frames:
            if not isinstance(frame, Publication):
                raise UnknownMessageTypeError(
                    "only publications may be sent to a topic address", got=type(frame).__name__
                )
            if frame.topic not in checked:
                check_topic(receiver, frame.topic)
            if not plainly_sendable(frame.topic, frame.fields, frame.permtoken):
                check_sendable(frame)
                plain = False
        check_frames = getattr(receiver, "check_frames", None)  # source names (contributions)
        if check_frames is not None:
            check_frames(receiver, frames)
        if plain:  # as_journaled gives each of them itself
            pubs = cast(list[Publication], frames)
        else:
            pubs, items = _journal_forms(cast(list[Publication], frames), items)
        held: holdback.HeldBack = receiver.held_back
        if not wanted:
            if held and holdback.continues_past(held, pubs):
                return FOLLOWS_RELEASED  # what it follows is sent again first
            started = self.clock()
            try:
                self._refuse_while_quiet()
                self._admit(receiver, pubs)
                self._journal(pubs, items, ())
            except NotJournaledError as exc:  # numbered by the publisher: a resend is safe
                self._stalled(started, exc)
                holdback.hold(held, pubs)
                # sent all the same: a publisher that journals them did so first, and should
                # its link end before it sends them again, its end must put them in doubt
                receiver.own_sources.update(pub.source for pub in pubs)
                return Released(exc.message)
            except BaseException:
                if held:  # rejected: nothing to wait for
                    holdback.settle(held, pubs)
                raise
            if held:
                holdback.settle(held, pubs)
            receiver.own_sources.update(pub.source for pub in pubs)
            return None
        # publications without a number, all valid: only now may numbers be taken (a
        # number taken for a rejected message would leave a hole the journal refuses)
        numbered = dict.fromkeys(wanted)
        started = self.clock()
        try:
            self._refuse_while_quiet()
            self._admit(receiver, cast(list[Publication], frames))
            for source in numbered:  # continue what the journal holds (read before decoding)
                if source not in self.sequencers:
                    hw = self.journal.high_water(source)
                    self.sequencers[source] = SourceSequencer(source, DEFAULT_SOURCE_BITS, hw)
            frames = self.decoder.decode(message, default_source=default_source,
                                         default_topic=default_topic, assign=self._assign)
            pubs, items = _journal_forms(cast(list[Publication], frames), items)
            self._journal(pubs, items, numbered)
        except BaseException as exc:
            # not all of it journaled: the next numbers continue what the journal holds
            for source in numbered:
                self.sequencers.pop(source, None)
            if isinstance(exc, NotJournaledError):
                self._stalled(started, exc)
            if not holdback.resend_is_safe(exc, numbered_here=True):
                raise
            return Released(exc.message)  # the journal took nothing of it
        return None

    def _read(self, message: Any, default_source: str, default_topic: str | None,
              assign: Callable[[str], int]) -> tuple[list[Any], list[bytes] | None, Any]:
        """The frames of ``message``, its entries' bytes (None: not known) and the message
        as the usual way reads it. A publishing link's transfers come with their list body
        unread (``lazy_body``): a batch of regular, numbered publication entries (what
        publishers send) is read in one pass (:func:`read_publications`, the same frames,
        entries and numbering as the decoder's), anything else the usual way."""
        if getattr(message, "body_at", None) is not None:
            read = read_publications(message, self.decoder)
            if read is not None:
                return list(read[0]), read[1], message  # numbered: nothing to assign
            message = decode_message(message._raw)  # read (or refused) the usual way
        frames = self.decoder.decode(message, default_source=default_source,
                                     default_topic=default_topic, assign=assign)
        return frames, getattr(message, "items", None), message

    def _journal(
        self, pubs: list[Publication], items: list[bytes] | None, numbered: Collection[str],
        *, filtered: bool = False,
    ) -> None:
        """Journal what is new of ``pubs`` (all publications, checked), then fan it out.

        Journaled is published: when the append fails part-way (it goes source by source),
        what the journal took of this message is fanned out and counted as ingested all the
        same, and the error is raised: the message is released or rejected (holdback). Sent
        again, its numbered publications the journal took are skipped as duplicates; a plain
        publisher's are numbered again. A source whose append outcome is unknown is left in
        doubt (:meth:`poll`). The sources the component numbers (``numbered``) and those of
        ``pubs`` in doubt first fan out what the journal took of them without answering (a
        lost reply), so nothing of this message overtakes it. Should such a lost append land
        after they were numbered (:class:`StaleNumberingError`), none of them is journaled:
        the source is left in doubt, the message released and numbered again when it comes
        back, after what landed went out.
        """
        if items is not None and len(items) != len(pubs):
            items = None  # a batch's entries, as received, are what subscribers get
        behind = set(numbered)
        if self.in_doubt:
            behind.update(self.in_doubt.intersection(pub.source for pub in pubs))
        # a relayed feed skips numbers it was not selected (ingest.relayed), not ones unsent
        for source in () if filtered else self._skipped_ahead(pubs):
            self.journal.forget(source)  # its publisher journaled past what the port knows
            behind.add(source)
        for source in behind:
            self._catch_up(source)
        fresh, entries = self._fresh(pubs, items)
        if not fresh:
            return
        try:
            brought = self._brought_by()
            if brought:  # a first journaling records its principal (sourcelimits.py)
                self.journal.append(fresh, numbered, brought_by=brought)
            else:
                self.journal.append(fresh, numbered)  # journal before fan-out
        except BaseException as exc:
            if isinstance(exc, NotJournaledError) and exc.source and (
                not exc.untouched or isinstance(exc, StaleNumberingError)
            ):
                if not self.in_doubt:  # a new episode: the next poll tries first
                    self.backoff.reset()
                    self._retry_at = None
                self.in_doubt.add(exc.source)  # the journal may hold more of it: poll() reads
            kept = self.journal.journaled(fresh)
            self._publish([fresh[i] for i in kept],
                          {j: entries[i] for j, i in enumerate(kept) if i in entries})
            raise
        self._publish(fresh, entries)

    def _fresh(self, pubs: list[Publication], items: list[bytes] | None
               ) -> tuple[list[Publication], dict[int, bytes | None]]:
        """``pubs`` not ingested yet, bare (no link number, not a retransmission), with the
        entry bytes they came in by index among them (``items``: by index in ``pubs``, where
        regular); the rest are copies, checked against the journal and counted."""
        fresh: list[Publication] = []
        copies: list[Publication] = []
        ingested = self.ingested
        entries: dict[int, bytes | None] = {}
        for i, frame in enumerate(pubs):
            bare = (frame.with_link(None, retransmit=False)
                    if frame.link_seq is not None or frame.retransmit else frame)
            if frame.source_seq <= ingested.get(frame.source, 0):
                copies.append(bare)
                continue
            if items is not None and _regular_entry(items[i]):
                entries[len(fresh)] = items[i]
            fresh.append(bare)
        if copies:
            self._check_copies(copies)
            self.stats["duplicates"] += len(copies)
        return fresh, entries

    def _check_copies(self, copies: list[Publication]) -> None:
        """``copies`` (bare) carry numbers that already went out: a resend is the same
        publication again, to skip; one the journal holds differently reuses the number (its
        publisher started again below the source's high-water) and raises
        :class:`ReusedNumberError`, so it is rejected rather than lost as a duplicate. What
        retention trimmed cannot be compared: it is taken as a resend."""
        by_source: dict[str, list[Publication]] = {}
        for pub in copies:
            by_source.setdefault(pub.source, []).append(pub)
        for source, pubs in by_source.items():
            held: dict[int, Publication] = {}
            for first, last in _runs(sorted({pub.source_seq for pub in pubs})):
                held.update((p.source_seq, p) for p in self.journal.read(source, first, last))
            for pub in pubs:
                kept = held.get(pub.source_seq)
                if kept is not None and kept != pub:
                    hw = self.journal.high_water(source)
                    raise ReusedNumberError(
                        f"{source!r}: number {pub.source_seq} is already journaled for another "
                        f"publication (the journal holds {source!r} through {hw}); a restarted "
                        f"publisher without a journal must start after {hw}",
                        source=source, expected=hw + 1, got=pub.source_seq,
                    )

    def _skipped_ahead(self, pubs: list[Publication]) -> list[str]:
        """The sources whose first publication in ``pubs`` skips numbers past what went out.

        A publisher journals before it sends: one that died in between resumes after its
        high-water, so what it journaled and never sent is skipped on its link. Subscribers
        would see no gap (link numbers stay contiguous), so what the journal holds of those
        numbers goes out first (:meth:`_catch_up`); numbers it does not hold are refused by
        the append as ever. ``ingested`` starts at the journal's high-waters: after a restart of
        the component, links start again at 0 and subscribers repair by source what was
        journaled before it. A source the journal did not hold then was born in this run, so
        nothing of it went out before what ``ingested`` says: none, if it is not there yet (its
        publisher may have journaled its first numbers and died before sending any).
        """
        ingested = self.ingested
        first: dict[str, int] = {}
        for pub in pubs:
            first.setdefault(pub.source, pub.source_seq)
        return [source for source, seq in first.items() if seq > ingested.get(source, 0) + 1]

    def _publish(self, pubs: list[Publication], entries: Entries,
                 source: str | None = None) -> None:
        """Count journaled ``pubs`` as ingested, list their topics and fan them out (after
        telling a relay of numbers journaled as lost upstream: its live links must learn of
        the loss before anything after it reaches them). ``source``: all of ``pubs`` are
        that source's, in increasing order."""
        lost = self.journal.lost_journaled
        if lost and self.on_lost_journaled is not None:
            sources = set(lost)
            lost.clear()
            self.on_lost_journaled(sources)
        known = self.topics.known
        if source is not None:
            self.ingested[source] = pubs[-1].source_seq
            for topic in dict.fromkeys(pub.topic for pub in pubs):  # in order
                if topic not in known:
                    self.topics.learn(topic)
        else:
            for pub in pubs:
                if pub.source_seq > self.ingested.get(pub.source, 0):
                    self.ingested[pub.source] = pub.source_seq
                if pub.topic not in known:
                    self.topics.learn(pub.topic)
        self.stats["ingested"] += len(pubs)
        self.fan_out(pubs, entries)


def check_topic(receiver: Any, topic: str) -> None:
    """``topic`` (a publication's, so a valid topic) is inside the publishing link's address,
    and the access policy lets the link's principal publish to it, else raise; the topics
    that passed are remembered per link (bounded, emptied by a policy reload)."""
    checked = topics_cache(receiver)
    if topic in checked:
        return
    if not receiver.pattern.matches(topic):
        raise MalformedMessageError(
            f"topic {topic!r} is outside this link's address {receiver.pattern}",
            expected=str(receiver.pattern), got=topic,
        )
    check_publish_topic(receiver, topic)
    if len(checked) >= TOPIC_CACHE:
        checked.clear()
    checked.add(topic)


def check_sendable(pub: Publication) -> None:
    """Raise unless ``pub`` can be delivered (:mod:`seqrepair.core.limits`): checked before
    anything is journaled, as the publishers' sequencers do when they stamp (a plain AMQP
    publisher's ulong past an AMQP long, say). Too large: ``message-size-exceeded``; anything
    else: ``decode-error``."""
    try:
        check_deliverable(pub.topic, pub.fields, pub.permtoken)
    except OversizedPublicationError as exc:
        raise OversizedMessageError(exc.message, expected=exc.expected, got=exc.got) from exc
    except UndeliverableError as exc:
        raise MalformedMessageError(exc.message, expected=exc.expected, got=exc.got) from exc


def _journal_forms(
    pubs: list[Publication], items: list[bytes] | None
) -> tuple[list[Publication], list[bytes] | None]:
    """``pubs`` with their fields as the journal holds them (what subscribers then get, live
    as by replay), and the batch's entries only when no fields changed."""
    forms = [as_journaled(pub) for pub in pubs]
    if items is not None and any(form is not pub for form, pub in zip(forms, pubs, strict=True)):
        items = None  # the entries carry the fields as sent
    return forms, items


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct ``numbers`` as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and runs[-1][1] + 1 == n:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def _rising(pubs: list[Publication], after: int) -> bool:
    """Whether ``pubs`` are one source's, bare (no link number, not retransmissions), with
    numbers rising from past ``after``."""
    source = pubs[0].source
    previous = after
    for pub in pubs:
        seq = pub.source_seq
        if pub.source != source or seq <= previous or pub.link_seq is not None or pub.retransmit:
            return False
        previous = seq
    return True


def _regular_entry(entry: bytes) -> bool:
    """A publication entry of 8 elements (no per-entry link number or retransmit flag)."""
    if entry[0] == 0xC0:
        return entry[2] == 8
    return entry[0] == 0xD0 and entry[5:9] == b"\x00\x00\x00\x08"
