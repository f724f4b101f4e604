"""One subscriber link inside the component: numbering, context, queues and the source replay.

A :class:`SubscriberLink` owns the core objects of one link (a
:class:`~seqrepair.core.sequencers.LinkSequencer` and a
:class:`~seqrepair.core.context.LinkContext`) and three bounded queues, sent in this order
whenever the link has credit:

1. ``responses``: answers (link range resends, read from the context a chunk per transfer,
   GAP-ERROR, SUBSCRIPTION, CAPABILITIES), at most ``MAX_WAITING_ANSWERS`` before requests are
   refused;
2. the source replays in progress (one per requesting link), read from the journal one chunk
   per transfer;
3. ``pending``: live publications not yet numbered; numbers are taken at send time, so a link
   without credit never burns numbers and never holds more than ``max_pending`` publications.

When ``pending`` overflows the link is *paused* (SWIM SUBSCRIPTION technical message), its
queue dropped; when credit comes back it is resumed with a link reset (the next frame is 0), so
the subscriber's stub repairs by source from the journal: bounded memory, and other links are
never slowed. No sequencing decision is made here that the core does not make.

The first two queues are the link's :class:`~.responses.ResponseRoute` (:mod:`.responses`).
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any

import attrs
from proton import Condition

from seqrepair.amqp.component.responses import ANSWERS_PER_TURN as ANSWERS_PER_TURN
from seqrepair.amqp.component.responses import MAX_WAITING_ANSWERS as MAX_WAITING_ANSWERS
from seqrepair.amqp.component.responses import AnswerFrame as AnswerFrame
from seqrepair.amqp.component.responses import ReplayFrame as ReplayFrame
from seqrepair.amqp.component.responses import ResponseRoute as ResponseRoute
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.errors import InvalidLinkPropertyError
from seqrepair.amqp.wire.framing import (
    Outgoing,
    encode_batch,
    encode_entry,
    encode_frames,
    pack_frame,
    regular_runs,
    tail_probe,
)
from seqrepair.amqp.wire.rawamqp import Unsupported
from seqrepair.amqp.wire.technical import SubscriptionState
from seqrepair.core.context import FRAME_OVERHEAD, LinkContext
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    SourceGapRequest,
    relinked,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequence import RESET
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.core.window import LinkWindow
from seqrepair.logs import get_logger

ALLOWS_CACHE = 4096
"""How many (topic, permission token) answers of its entitlement a link remembers."""

log = get_logger(__name__)

_OFFERED = itemgetter(0)
_ENTRY = itemgetter(1)

def _new_epoch() -> str:
    """A fresh name for a link context (48 random bits: unique across component restarts)."""
    return secrets.token_hex(6)


def _never_drop(_frame: Publication | Heartbeat) -> bool:
    """A link's default ``drop``: no frame is lost on its way out."""
    return False


@attrs.define(eq=False)
class SubscriberLink:
    """The component's state for one subscriber link (keyed by the AMQP link name)."""

    name: str
    address: str
    entitlement: Entitlement
    sequencer: LinkSequencer
    context: LinkContext
    batch: bool
    max_batch: int
    max_pending: int
    source_bits: Callable[[str], int]
    drop: Callable[[Publication | Heartbeat], bool] = attrs.field(default=_never_drop)
    lossless: Callable[[], bool] | None = None
    """Whether ``drop`` now drops nothing but (maybe) a frame numbered 0 (fault injection
    off); None: not known unless ``drop`` is the default. A lossless batch link sends its
    live runs numbered by position (:meth:`_send_numbered`)."""
    sender: Any = None
    pending: deque[tuple[Publication, bytes | None]] = attrs.field(factory=deque)
    """Live publications waiting for credit, each with its encoded batch entry (shared by
    every link the publication goes to; None when only proton's codec can encode it)."""
    route: ResponseRoute = attrs.field(init=False)
    paused: bool = False
    memory_paused: bool = False
    """Paused for bytes its peer has not taken (:mod:`.memory`): it resumes only once the
    peer has taken every transfer."""
    held: bool = False
    """Paused by its subscription (not for want of credit): it stays paused until released."""
    detached_at: float | None = None
    max_credit: int = 0
    reset_pending: bool = False
    epoch: str = attrs.field(factory=_new_epoch)
    """Names the link context: a new one whenever the numbering restarts at 0, so a
    subscriber that re-attaches naming an older epoch is not resumed in a context it never
    saw begin."""
    stats: dict[str, int] = attrs.field(
        factory=lambda: {"sent": 0, "dropped": 0, "transfers": 0, "paused": 0,
                         "window_full": 0, "window_peak": 0, "stale_resends": 0,
                         "tail_probes": 0, "tail_probes_replaced": 0,
                         "tail_probes_dropped": 0, "context_full": 0, "given_skipped": 0}
    )
    totals: dict[str, int] = attrs.field(factory=dict)
    """Counters the link adds its tail probes to besides its own ``stats`` (the component's
    stop counters)."""
    window: LinkWindow | None = None
    """The window discipline of a subscriber that acknowledges (``seqrepair-ack``): no link
    number is stamped more than ``window.size`` past what it acknowledged. None: no window
    (a client that does not ack gets the numbering as before)."""
    _stalled: tuple[str, int] | None = attrs.field(default=None, init=False)
    skipped_top: dict[str, int] = attrs.field(factory=dict, init=False)
    """Per source, the highest number :meth:`pump` passed over as given by a replay
    (:meth:`_not_given`): a later source request that shows the subscriber lacks it is
    replayed through it (:func:`~.requests.answer_gap`)."""
    _allowed: dict[tuple[object, ...], bool] = attrs.field(factory=dict, init=False)
    _filtered: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self.route = ResponseRoute(self.entitlement, self.max_batch, self.source_bits, self.batch)
        self._filtered = bool(self.entitlement.filters)

    def attach(self, sender: Any) -> None:
        """Bind (or rebind, on resume) the AMQP sender of this link."""
        if self.sender is not None and self.sender != sender:
            # stolen by a new connection before the old one's end was read: that end no
            # longer names the link (detach.forget), and what the replay sent on the old
            # connection may never arrive, so a repeat must not continue past it
            self.route.drop_replay(self.name)
        self.sender = sender
        self.route.sender = sender
        self.detached_at = None
        self.route.unsent.clear()

    def detach(self, now: float) -> None:
        """The subscriber went away; the state is kept for resumption until it expires."""
        self.sender = None
        self.route.sender = None
        self.detached_at = now
        self.route.unsent.clear()  # its transfers go with its connection

    @property
    def log(self) -> Any:
        """A logger bound with this link."""
        return log.bind(link=self.name, topic=self.address)

    # --- feeding ------------------------------------------------------------------------

    def allows(self, pub: Publication) -> bool:
        """``entitlement.allows(pub)``, remembered per (topic, permission token), and per
        source and publish type too when the link has filters (they may read those): the
        answer depends on nothing else, and the entitlement of a link never changes."""
        key: tuple[object, ...] = (
            (pub.topic, pub.permtoken, pub.source, pub.ptype) if self._filtered
            else (pub.topic, pub.permtoken)
        )
        allowed = self._allowed.get(key)
        if allowed is None:
            if len(self._allowed) >= ALLOWS_CACHE:
                self._allowed.clear()
            allowed = self._allowed[key] = self.entitlement.allows(pub)
        return allowed

    def allows_keyed(self, keyed: Mapping[tuple[str, str | None], Publication]
                     ) -> dict[tuple[str, str | None], bool] | None:
        """:meth:`allows` of a batch at once: ``keyed`` holds one of its publications per
        (topic, permission token); the answer per key, or None when the link has filters
        (they read more than the key: ask :meth:`allows` per publication)."""
        if self._filtered:
            return None
        allows = self.allows
        return {key: allows(pub) for key, pub in keyed.items()}

    def offer(self, pub: Publication, now: float, entry: bytes | None = None) -> None:
        """A live publication for this link (already filtered by the caller), with its
        encoded batch entry when the caller has one (see :func:`framing.encode_entry`)."""
        self.offer_many([(pub, entry)], now)

    def offer_many(self, offers: list[tuple[Publication, bytes | None]], now: float) -> None:
        """Several live publications for this link, in order (see :meth:`offer`)."""
        if self.paused:
            return
        self.pending.extend(offers)
        if len(self.pending) > self.max_pending:
            self.pause(now, f"more than {self.max_pending} publications waiting for credit")

    def pause(self, now: float, reason: str) -> None:
        """Stop queueing: drop the queue, tell the subscriber, resume later with a reset."""
        self.paused = True
        self.pending.clear()
        self.stats["paused"] += 1
        self.log.warning("link paused", reason=reason)
        self.route.respond(encode(self._state("PAUSED", reason)), None)

    def pause_for_memory(self, now: float, unsent: int) -> None:
        """Pause (or keep paused) until the peer has taken what it was sent (:mod:`.memory`)."""
        self.memory_paused = True
        if not self.paused:
            self.pause(now, f"{unsent} bytes sent and not yet taken by the peer")

    def _state(self, status: str, reason: str = "") -> SubscriptionState:
        return SubscriptionState(
            status=status,
            topic=",".join(str(p) for p in self.entitlement.topics),
            subscription_id=self.name,
            queue=self.address,
            reason=reason,
            epoch=self.epoch,
        )

    # --- sending ------------------------------------------------------------------------

    def pump(self, now: float) -> int:
        """Send what credit allows; return the number of transfers made."""
        sender = self.sender
        if sender is None:
            return 0
        credit = sender.credit
        if credit > self.max_credit:
            self.max_credit = credit
        if (
            self.paused and not self.held and not self.route.busy()
            and credit >= max(1, self.max_credit // 2)
            and (not self.memory_paused or self.route.unsent.update(sender.queued) == 0)
        ):
            self._resume(now)
        route = self.route
        while sender.credit > 0:
            if route.send_one(read=False):
                continue
            if route.holds_live():
                # answers go out first, in order: read on the component's repair turn, or
                # parked (a relay's image waiting for its upstream)
                break
            if self.reset_pending:
                self.reset_pending = False
                self._send_frames([self.sequencer.heartbeat(now)])
            elif self.pending and not self.paused:
                pending = self.pending
                given = route.given.get(self.name)
                if given and self._skip_given(given):
                    continue  # passed over before the window is asked: it takes no number
                # a batch link sends a chunk per transfer; a plain one a publication each, so
                # no more than its credit is numbered (what waits unnumbered can be paused)
                most = self.max_batch if self.batch else sender.credit
                window = self.window
                if window is not None:
                    room = window.room()
                    if room <= 0:
                        self.stats["window_full"] += 1
                        break  # until an ACK: what waits stays unnumbered (and may pause)
                    if self._context_full(window):
                        # the unacknowledged frames fill the context's bytes: a number
                        # stamped now could push out one the subscriber may still ask for
                        self.stats["context_full"] += 1
                        break
                    most = min(most, room)
                if most >= len(pending):  # all of it (usual): one copy, not a pop each
                    chunk = list(pending)
                    pending.clear()
                else:
                    chunk = [pending.popleft() for _ in range(most)]
                if given:
                    chunk = self._not_given(chunk, given)
                    if not chunk:
                        continue
                pubs = list(map(_OFFERED, chunk))
                entries = list(map(_ENTRY, chunk))
                if self._send_numbered(pubs, entries, now):
                    continue
                frames: list[Publication | Heartbeat] = list(
                    self.sequencer.stamp_many(pubs, now))
                if window is not None:
                    self._counted(window, len(frames))
                self._send_frames(frames, entries)
            else:
                break
        transfers: int = max(0, credit - sender.credit)  # each transfer spends one credit
        self.stats["transfers"] += transfers
        return transfers

    def _skip_given(self, given: Mapping[str, int]) -> bool:
        """Drop from the head of ``pending`` the publications a replay gave (see
        :meth:`_not_given`), whether or not the window has room; whether any was dropped."""
        pending = self.pending
        skipped = False
        while pending and self._given_already(pending[0][0], given):
            pending.popleft()
            skipped = True
        return skipped

    def _not_given(self, chunk: list[tuple[Publication, bytes | None]],
                   given: Mapping[str, int]) -> list[tuple[Publication, bytes | None]]:
        """``chunk`` (live, about to be numbered) less the publications a replay of this link
        gave it already (at or below ``given`` for their source: :attr:`ResponseRoute.given`):
        sent live after the replay, each would be a stale frame to the subscriber, which at
        narrow link widths costs it a tail probe and a source replay per window of them. Only
        those: a number above what the replays gave always goes out."""
        return [offer for offer in chunk if not self._given_already(offer[0], given)]

    def _given_already(self, pub: Publication, given: Mapping[str, int]) -> bool:
        """Whether a replay gave ``pub`` (at or below ``given`` for its source); if so it is
        passed over: counted, and kept in :attr:`skipped_top`."""
        seq = pub.source_seq
        if seq > given.get(pub.source, 0):
            return False
        top = self.skipped_top
        if seq > top.get(pub.source, 0):
            top[pub.source] = seq
        self.stats["given_skipped"] += 1
        return True

    def heartbeat(self, now: float) -> None:
        """A heartbeat if the link is idle for an interval and can send (a held link too: its
        subscriber must not take the pause for a dead link); never a reset's frame 0
        (:meth:`pump`)."""
        if self.sender is None or self.sender.credit <= 0 or self.pending:
            return
        if self.paused and not self.held:
            return
        if self.reset_pending:
            # a reset's frame 0 goes out from pump, after the answers queued before it (its
            # ACTIVE, an old context's resend): here it would pass them while they wait
            # (parked behind a relay's image fetch, or to be read on the repair turn)
            return
        window = self.window
        if window is not None and window.room() <= 0:
            return  # a full window takes no new number; the subscriber's ACK opens it
        beat = self.sequencer.poll(now)
        if beat is not None:
            if window is not None:
                self._counted(window, 1)
            self._send_frames([beat])

    def probe_tail(self) -> None:
        """On the component's tick: a window that was full at the last tick, with no ACK
        since, gets its newest frame sent again (a tail loss probe). A full window sends no
        heartbeat, so a subscriber that lost the frames at its end would otherwise learn of it
        only from the silence (missed heartbeats); given the newest, it sees the gap before it
        and asks for it. One frame per tick, whatever the cause (a slow subscriber too). A
        window whose frames fill the context's byte bound is full too (:meth:`pump`)."""
        window = self.window
        if (
            window is None or self.sender is None or self.paused
            or (window.room() > 0 and not self._context_full(window))
        ):
            self._stalled = None
            return
        mark = (self.epoch, window.acked_through)
        newest = window.newest
        if self._stalled != mark or newest is None:
            self._stalled = mark
            return
        self._count("tail_probes")
        if not self.route.probe(lambda: self._tail_probe(mark[0], newest)):
            self._count("tail_probes_replaced")  # the one still waiting for credit: bounded

    def _tail_probe(self, epoch: str, newest: int) -> Outgoing | None:
        """The tail probe of frame ``newest`` of the context ``epoch``, made as it is sent; None
        (dropped) when that context is gone or the subscriber acknowledged the frame since
        (stale: read now it could pass for new, and a probe of a gone context reaching the
        subscriber after the new context's frames would be taken in it)."""
        if epoch != self.epoch:
            self._count("tail_probes_dropped")
            return None
        resend = self.context.resend(GapRequest(newest, newest))
        if not isinstance(resend, GapError) and len(resend):
            # marked with the epoch: the stub can tell it from an old context's answer
            for frame in self.fresh(resend):
                if isinstance(frame, Publication | Heartbeat):
                    return tail_probe(frame, epoch, self.route.source_bits)
        self._count("tail_probes_dropped")
        return None

    def _count(self, key: str) -> None:
        """One more of ``key`` in the link's stats and in ``totals`` (the component's)."""
        self.stats[key] += 1
        totals = self.totals
        totals[key] = totals.get(key, 0) + 1

    def _context_full(self, window: LinkWindow) -> bool:
        """Whether the frames ``window`` has outstanding fill the context's byte bound."""
        context = self.context
        return (
            context.max_bytes is not None
            and context.newest_bytes(window.outstanding) >= context.max_bytes
        )

    def _counted(self, window: LinkWindow, count: int) -> None:
        window.stamped(count)
        if window.outstanding > self.stats["window_peak"]:
            self.stats["window_peak"] = window.outstanding

    def fresh(self, frames: Iterable[AnswerFrame]) -> Iterator[AnswerFrame]:
        """The frames of a resend, read as they are sent, less those at or below what the
        subscriber acknowledged (stale: it has them, and read now they could pass for new)."""
        for frame in frames:
            window = self.window
            if (
                window is not None
                and isinstance(frame, Publication | Heartbeat)
                and frame.link_seq is not None
                and window.stale(frame.link_seq)
            ):
                self.stats["stale_resends"] += 1
                continue
            yield frame

    def hold(self, now: float, reason: str) -> None:
        """Pause the link until :meth:`release` (its subscription was paused)."""
        self.held = True
        if not self.paused:
            self.pause(now, reason)

    def release(self, now: float) -> None:
        """End a :meth:`hold`: send again, from link number 0 (the subscriber repairs the
        pause by source)."""
        if self.held:
            self.held = False
            if self.paused:
                self._resume(now)

    def _resume(self, now: float) -> None:
        self.paused = False
        self.memory_paused = False
        self.reset()
        self.log.info("link resumed with a reset")
        self.route.respond(encode(self._state("ACTIVE", "resumed with a link reset")), None)

    def restart(self, reason: str) -> None:
        """:meth:`reset` and tell the subscriber the new context (``SUBSCRIPTION`` ACTIVE
        naming its epoch, ahead of the reset frame), as a resume does: an acknowledging
        subscriber names the context in its ``ACK``, and one still naming the old epoch is
        never taken, so its window would stay shut for good.

        A paused link (held, or short of credit) is reset only: ``ACTIVE`` would tell its
        subscriber it is live again while it stays paused, and the resume that ends the pause
        resets it and announces that context itself (:meth:`_resume`)."""
        self.reset()
        if not self.paused:
            self.route.respond(encode(self._state("ACTIVE", reason)), None)

    def reset(self) -> None:
        """Void the link context: a new epoch, and the next frame carries link number 0."""
        self.sequencer.reset()
        self.reset_pending = True
        self.epoch = _new_epoch()
        if self.window is not None:
            self.window.reset()

    def _send_frames(
        self, frames: list[Publication | Heartbeat], entries: list[bytes | None] | None = None
    ) -> None:
        # the byte bound never evicts what the subscriber has not acknowledged (pump)
        keep = self.window.outstanding if self.window is not None else 0
        if entries is None:
            self.context.record_run(frames, keep)
        else:  # a publication's encoded entry, shared by every link, sizes it at once
            if len(entries) != len(frames):
                raise ValueError(f"{len(frames)} frames, {len(entries)} entries")
            self.context.record_run(
                frames, keep,
                [None if entry is None else FRAME_OVERHEAD + len(entry) for entry in entries])
        drop = self.drop
        kept = [i for i, frame in enumerate(frames) if not drop(frame)]
        self.stats["dropped"] += len(frames) - len(kept)
        self.stats["sent"] += len(frames)
        if not kept:
            return
        wire = [frames[i] for i in kept]
        send = self.sender.send
        sent = self.route.unsent.sent
        if not self.batch:
            for frame in wire:
                sent(send(pack_frame(frame, self.source_bits)))
            return
        cached: list[bytes | None] = (
            [None] * len(kept) if entries is None else [entries[i] for i in kept]
        )
        for start, end in regular_runs(wire):
            if end - start == 1:
                sent(send(pack_frame(wire[start], self.source_bits)))
                continue
            sent(send(self._batch(wire[start:end], cached[start:end])))

    def _send_numbered(self, pubs: list[Publication], entries: list[bytes | None],
                       now: float) -> bool:
        """Number, count, record and send ``pubs`` as the pump's stamping and
        :meth:`_send_frames` do, without a stamped copy of each (the context holds them bare,
        numbered by position: a relinked publication each was a tenth of a relay's event
        loop), when that is the same: a lossless batch link, every one a bare live
        publication with its entry, the link's next number not a reset's 0 and the
        context's next. False: nothing done."""
        if not self.batch or not pubs:
            return False
        drop = self.drop
        if drop is not _never_drop and (self.lossless is None or not self.lossless()):
            return False
        first = self.sequencer.next_number
        context = self.context
        if first == RESET or context.next_number() != first:
            return False
        sizes: list[int] = []
        add = sizes.append
        for pub, entry in zip(pubs, entries, strict=True):
            if entry is None or type(pub) is not Publication or pub.link_seq is not None or (
                    pub.retransmit):
                return False
            add(FRAME_OVERHEAD + len(entry))
        count = len(pubs)
        if first != self.sequencer.take_many(count, now):
            raise AssertionError("the sequencer's next number moved")
        window = self.window
        if window is not None:
            self._counted(window, count)
        # the byte bound never evicts what the subscriber has not acknowledged (pump)
        keep = window.outstanding if window is not None else 0
        context.record_numbered(pubs, first, keep, sizes)
        self.stats["sent"] += count
        send = self.sender.send
        sent = self.route.unsent.sent
        top = context.space.max
        # the numbers run first.. and wrap after top to 1 (maybe more than once in a narrow
        # space): a run cut there, as regular_runs cuts stamped frames
        start, seq = 0, first
        while start < count:
            end = min(count, start + top - seq + 1)
            if end - start == 1:
                sent(send(pack_frame(relinked(pubs[start], seq), self.source_bits)))
            else:
                sent(send(encode_batch(entries[start:end],  # type: ignore[arg-type]
                                       first_link_seq=seq, retransmit=False)))
            start, seq = end, 1
        return True

    def _batch(
        self, frames: list[Publication | Heartbeat], entries: list[bytes | None]
    ) -> Outgoing:
        """One run of consecutive frames as one ``PUBLICATIONS`` transfer."""
        try:
            encoded = [
                entry if entry is not None else encode_entry(frame, self.source_bits)
                for frame, entry in zip(frames, entries, strict=True)
            ]
        except Unsupported:
            return encode_frames(frames, self.source_bits)
        return encode_batch(encoded, first_link_seq=frames[0].link_seq, retransmit=False)


# --- attaching ----------------------------------------------------------------------------


def close_stolen(link: SubscriberLink, sender: Any) -> None:
    """Detach the link's sender on another connection: a link name has one subscriber."""
    old = link.sender
    if old is not None and old != sender:
        old.subscriber = None
        old.condition = Condition("amqp:link:stolen", "attached on another connection")
        old.close()


def start_map(value: Any) -> dict[str, int]:
    """A subscriber's ``seqrepair-start-after`` property: source -> absolute number."""
    problem = "seqrepair-start-after must map sources to numbers >= 0"
    if not isinstance(value, Mapping):
        raise InvalidLinkPropertyError(problem, expected="map", got=value)
    try:
        return dict(SourceGapRequest(after={str(k): v for k, v in value.items()}).after)
    except SeqRepairError as exc:
        raise InvalidLinkPropertyError(f"{problem}: {exc.message}", got=exc.got) from None


def tokens(value: Any, name: str = "seqrepair-permtokens") -> list[str]:
    """A subscriber's ``seqrepair-permtokens`` (or ``name``) property: the permission tokens
    it names."""
    if value is None:
        return []
    if isinstance(value, str):
        return [t for t in value.split(",") if t]
    if isinstance(value, list | tuple) and all(isinstance(t, str) for t in value):
        return [str(t) for t in value]
    raise InvalidLinkPropertyError(
        f"{name} must be a comma-separated string of tokens",
        expected="string", got=repr(value)[:100],
    )
