"""The answers a component sends a peer on one link: its :class:`ResponseRoute`.

A route holds the link's first two queues (see :mod:`.links`): ``responses`` (link range
resends read from the context a chunk per transfer, GAP-ERROR, SUBSCRIPTION, CAPABILITIES), at
most ``MAX_WAITING_ANSWERS`` before requests are refused, and the source replays in progress,
read from the journal one chunk per transfer. It sends what is ready when the link has credit
and reads the rest a step at a time (:mod:`.fairness`).
"""


from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from seqrepair.amqp.component.memory import Unsent
from seqrepair.amqp.component.replaywire import plain_publication
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.errors import RequestFloodError
from seqrepair.amqp.wire.framing import (
    Outgoing,
    encode_batch,
    encode_entry,
    encode_frames,
)
from seqrepair.amqp.wire.respann import ADDRESS_COOKIE
from seqrepair.core.messages import (
    GapError,
    Heartbeat,
    Publication,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.snapshot import ImageComplete, ImageFrame
from seqrepair.logs import get_logger

# the links' logger, as before the route moved here: its events keep their name
log = get_logger("seqrepair.amqp.component.links")

ReplayFrame = Publication | bytes | ReplayComplete | GapError


AnswerFrame = (Publication | Heartbeat | ReplayComplete | GapError | ImageFrame | ImageComplete
               | bytes)
"""What an answer is read as; ``bytes`` are a source replay's batch entries, already encoded
(:mod:`.replaywire`)."""

ANSWERS_PER_TURN = 16
"""How many transfers of answers one :meth:`ResponseRoute.pump` makes. The component does not
read answers in a pump: it sends what is ready (:meth:`ResponseRoute.send_ready`) and reads the
rest one step per repair turn (:mod:`.fairness`), so a large resend or replay never stalls the
links of others while it is read and encoded."""

ENDED_KEPT = 4
"""How many replays that ended a route keeps per link, for repeats of their requests that
arrive late (:attr:`ResponseRoute.ended`): a pipelining subscriber may repeat one after the
request that followed it has ended too, and a replay restarted for it sends all again."""
REPLAY_CHUNK = 4
REPLAY_CHUNK_BYTES = 256 << 10
"""A source replay's transfer goes on past ``max_batch`` journaled entries, up to
``REPLAY_CHUNK`` times as many, while its entries' bytes stay under ``REPLAY_CHUNK_BYTES``
(the last may pass it), to a receiver that takes transfers of any size or of at least
``REPLAY_CHUNK_MIN_TAKEN`` bytes: a catch-up of small publications in fewer, larger
transfers (a page of the journal in one), each costing the component and the subscriber
their per-transfer work once."""
REPLAY_CHUNK_MIN_TAKEN = 16 << 20

MAX_WAITING_ANSWERS = 64
"""How many answers a route holds for a peer that gives no credit; requests beyond are refused
(see :meth:`ResponseRoute.check_room`)."""


@attrs.define(eq=False)
class _Stream:
    """An answer read as it is sent: frames a chunk per transfer, a closing frame on its own.

    A ``None`` among the frames ends a chunk early: the reader scanned a slice of the journal
    (see :meth:`seqrepair.journal.gapfill.Replay.steps`) and lets others have the event loop.
    """

    frames: Iterator[AnswerFrame | None]
    correlation_id: Any
    cookie: bytes | None = None
    replay: bool = False
    ready: deque[Outgoing] = attrs.field(factory=deque)
    done: bool = False
    request: SourceGapRequest | None = None
    """The source request a replay answers (the attempt it started from)."""
    answered: SourceGapRequest | None = None
    """The latest attempt of ``request`` (a repeat continues it): what its closing frame and
    ``REPLAY-STARTED`` echo, so a client that matches answers by ``after`` takes them."""
    through: Mapping[str, int] = attrs.field(factory=dict)
    """Per source, the last number the replay reads at most (REPLAY-STARTED)."""
    more: bool = False
    """Whether ``through`` is where the per-request limit stops it (REPLAY-STARTED)."""
    closing: ReplayComplete | GapError | None = None
    """The ``REPLAY-COMPLETE`` or ``GAP-ERROR`` that ended the replay, as read (before any
    echo)."""
    followed: bool = False
    """A request that follows it came already (queued, then started or dropped)."""
    parked: Callable[[], bool] | None = None
    """Whether the replay waits for something else (a relay's upstream fetch,
    :mod:`seqrepair.journal.lacking`): no repair turn reads it meanwhile (the tick asks
    again), so waiting costs the event loop nothing."""

    def waits(self) -> bool:
        """Whether it must be read before it can send, and can be read now."""
        return not self.ready and not self.done and not (
            self.parked is not None and self.parked())


@attrs.define(eq=False)
class _Probe:
    """A link's tail probe waiting for credit, made as it is sent (:meth:`ResponseRoute.probe`).

    ``make`` gives the message, or None when it is no longer worth sending (its number is at
    or below what the subscriber acknowledged since, or its link context is gone): decided when
    it goes out, never when it was queued."""

    make: Callable[[], Outgoing | None]


@attrs.define(eq=False)
class ResponseRoute:
    """Where answers go: a sender, the answers waiting for it and a source replay in progress.

    A subscriber link is its own route; requests that carried response annotations share one
    route per ``response-link-target-address`` of their connection (``target``). Each answer
    carries the ``address-cookie`` its request gave, if any (respann §2.3). Link ranges and
    source replays are read lazily, a chunk per transfer as credit allows, so one large answer
    neither stalls the component nor sits encoded in memory. A route runs one source replay
    per requesting link (``replays``, in the order they started).
    """

    entitlement: Entitlement
    max_batch: int
    source_bits: Callable[[str], int]
    batch: bool = True
    sender: Any = None
    target: str | None = None
    responses: deque[Outgoing | _Stream | _Probe] = attrs.field(factory=deque)
    replays: dict[str, _Stream] = attrs.field(factory=dict)
    queued: dict[str, _Stream] = attrs.field(factory=dict)
    """Per requesting link, the replay of a request that follows the one in progress (asked
    before that one ended: :meth:`follows`); it starts when that one has sent its end."""
    ended: dict[str, list[_Stream]] = attrs.field(factory=dict)
    """Per requesting link, its last replays (:data:`ENDED_KEPT`, newest last) that ended
    with a ``REPLAY-COMPLETE`` or a ``GAP-ERROR`` sent, one after another (queued ones),
    until a replay starts that follows none or the link detaches: a repeat of one's request
    that arrives after it is answered without replaying anything again
    (:meth:`ended_replay`), even once the request that followed it has ended too."""
    last_ended: dict[str, _Stream] = attrs.field(factory=dict)
    """Per requesting link, its last replay that ended, however (the same lifetime): a
    request that follows it is refused if it ended short (:meth:`follows_short`)."""
    given: dict[str, dict[str, int]] = attrs.field(factory=dict)
    """Per requesting link, per source, the highest number a replay of its ended with a
    ``REPLAY-COMPLETE`` sent: that replay gave the link everything of the source after its
    request's ``after`` through it, and the request said the subscriber had delivered what
    comes before. A live publication at or below it would only be stale on that link
    (:meth:`~.links.SubscriberLink.pump` skips it): forgotten with the link's replays
    (:meth:`drop_replay`)."""
    replayed: int = 0
    unsent: Unsent = attrs.field(factory=Unsent)
    """The transfers sent on ``sender`` its peer has not yet taken (:mod:`.memory`)."""

    def respond(
        self, message: Outgoing, correlation_id: Any, cookie: bytes | None = None
    ) -> None:
        """Queue an answer (requests are refused first when too many wait: check_room)."""
        self.responses.append(_finish(message, correlation_id, cookie))

    def probe(self, make: Callable[[], Outgoing | None]) -> bool:
        """Queue a tail probe, made as it is sent (``make``, see :class:`_Probe`), after the
        answers waiting; one waits at most per route: a newer one replaces one still waiting
        (False then). A link that gives no credit gets a probe per tick, and answers are
        bounded by requests refused (:meth:`check_room`), which a probe is not."""
        replaced = False
        for entry in self.responses:
            if type(entry) is _Probe:
                self.responses.remove(entry)
                replaced = True
                break
        self.responses.append(_Probe(make))
        return not replaced

    def check_room(self) -> None:
        """RequestFloodError when :data:`MAX_WAITING_ANSWERS` answers wait already: a peer
        that gives no credit but keeps asking must not fill the component's memory."""
        if len(self.responses) >= MAX_WAITING_ANSWERS:
            raise RequestFloodError(
                f"{len(self.responses)} answers wait for credit on this route; grant credit"
                " before asking again",
                got=len(self.responses),
            )

    def start_resend(
        self, frames: Iterable[AnswerFrame], correlation_id: Any, cookie: bytes | None = None,
        *, parked: Callable[[], bool] | None = None,
    ) -> None:
        """Queue the answer to a link range (a :class:`~seqrepair.core.context.Resend`), or an
        image request's (``parked``: a relay's waits for its upstream, see :class:`_Stream`)."""
        self.responses.append(_Stream(iter(frames), correlation_id, cookie, parked=parked))

    def start_replay(
        self,
        requester: str,
        replay: Iterable[ReplayFrame | None],
        correlation_id: Any,
        cookie: bytes | None = None,
        *,
        request: SourceGapRequest | None = None,
        through: Mapping[str, int] | None = None,
        parked: Callable[[], bool] | None = None,
        more: bool = False,
        queue: bool = False,
    ) -> None:
        """Send the gap-fill service's answer to ``request``, a source request about the link
        ``requester``, a chunk per transfer (``through``: how far it reads per source;
        ``more``: whether the per-request limit stops it there; ``parked``: whether the
        answer waits for something else now, see :class:`_Stream`).

        The answer is read lazily (the journal is paged as credit allows); a new replay for
        the same link replaces one in progress, whose requester has moved on to another
        request (a repeat of the same one continues it instead: :meth:`live_replay`), unless
        ``queue``: ``request`` follows the one in progress (:meth:`follows`), and its answer
        starts when that one has sent its end.
        """
        stream = _Stream(
            iter(replay), correlation_id, cookie, replay=True, request=request,
            answered=request, through=dict(through or {}), parked=parked, more=more,
        )
        self.queued.pop(requester, None)
        if queue and requester in self.replays:
            self.queued[requester] = stream
            return
        self.replays.pop(requester, None)
        self.ended.pop(requester, None)
        self.last_ended.pop(requester, None)
        self.replays[requester] = stream

    def follows(self, requester: str, request: SourceGapRequest) -> bool:
        """Whether ``request`` asks for what comes after the replay in progress for
        ``requester`` (a subscriber that pipelines: it asked on that replay's
        ``REPLAY-STARTED`` with ``more``, before its end): another ``request_id``, the same
        ``link_through``, and an ``after`` at or past, per source, that replay's ``after``
        and ``through``. Its answer then waits for the end of that replay instead of
        replacing it, as JetStream queues a consumer's pull requests and serves them in turn."""
        stream = self.replays.get(requester)
        return stream is not None and _follows(stream, request)

    def follows_short(self, requester: str, request: SourceGapRequest) -> bool:
        """Whether ``request`` follows (as :meth:`follows` tells) the replay for ``requester``
        that has ended already, short of it (:func:`_reached`), and is the first to: it was
        asked on that replay's ``REPLAY-STARTED`` and arrives after its end. Not answered, as
        one queued is dropped: the requester asks again after what it got, and this one's
        publications, sent first, would pass the numbers between. Only the first: a request
        after the end that happens to follow it (a trimmed range reaching past it) is
        answered when asked again."""
        stream = self.last_ended.get(requester)
        if (
            stream is None or stream.followed or not _follows(stream, request)
            or _reached(stream.closing, request)
        ):
            return False
        stream.followed = True
        return True

    def live_replay(self, requester: str, request: SourceGapRequest) -> _Stream | None:
        """The replay in progress for ``requester`` that ``request`` repeats, if any: one
        started by a request with the same ``request_id`` and ``link_through`` whose ``after``
        ``request``'s does not go below (a stub asks again "still going?" with the remainder
        it still lacks). Continuing it sends nothing twice; restarting it from the remainder
        would send again all it has sent that the stub has not received yet."""
        stream = self.replays.get(requester)
        if stream is None or not _repeats(stream.request, request):
            stream = self.queued.get(requester)  # asked again before it started
            if stream is None or not _repeats(stream.request, request):
                return None
        stream.answered = request
        return stream

    def ended_replay(self, requester: str, request: SourceGapRequest
                     ) -> ReplayComplete | GapError | None:
        """The closing frame to send again when ``request`` repeats (as :meth:`live_replay`
        tells) the request of the replay for ``requester`` that has ended already, echoing
        ``request``; None when it repeats none.

        Everything that replay read went out on this link before its closing frame, and
        the link is still the same (a detach forgets it: :meth:`drop_replay`): the repeat
        asked while it was on its way (a stub slow to read it, or one that asked while the
        component was paused with the last page sent). Replaying the remainder again would
        send all of it twice, and the replay's requester, which takes the first answer and
        then asks for what follows, would also take the part of the second that went past
        it, which its next request then asks for again: JetStream's pull consumers and Aeron
        archive replays never resend what is on its way either."""
        for stream in reversed(self.ended.get(requester, ())):
            if stream.closing is not None and _repeats(stream.request, request):
                return attrs.evolve(stream.closing, request=request)
        return None

    def drop_replay(self, requester: str) -> None:
        """Stop the replay for ``requester`` (its link detached: what was sent on the lost
        connection may not have arrived, so continuing it on a new one could skip that)."""
        self.replays.pop(requester, None)
        self.queued.pop(requester, None)
        self.ended.pop(requester, None)
        self.last_ended.pop(requester, None)
        self.given.pop(requester, None)

    def busy(self) -> bool:
        """Whether answers are waiting."""
        return bool(self.responses) or bool(self.replays)

    def send_one(self, read: bool = True) -> bool:
        """Send one waiting answer or answer chunk; False when there was nothing to send.

        ``read`` False sends only what is ready (no chunk is read or encoded): False then also
        when the next answer must be read first. A read that scans a journal slice without a
        frame to show sends nothing (False) and leaves the rest for the next call.
        """
        while True:
            if self.responses:
                head = self.responses[0]
                if type(head) is _Probe:
                    self.responses.popleft()
                    made = head.make()
                    if made is None:
                        continue  # stale by now: dropped
                    self.unsent.sent(self.sender.send(made))
                    return True
                if not isinstance(head, _Stream):
                    self.unsent.sent(self.sender.send(self.responses.popleft()))
                    return True
                message = self._next(head, read)
                if head.done and not head.ready:
                    self.responses.popleft()  # over: not busy for it any more
                if message is None:
                    if not head.done:
                        return False
                    continue
            elif self.replays:
                requester, stream = next(iter(self.replays.items()))
                reading = read and not stream.ready
                message = self._next(stream, read)
                if stream.done and not stream.ready:
                    log.info("replay finished", link=requester, replayed=self.replayed)
                    del self.replays[requester]
                    self.last_ended[requester] = stream  # a late follower is told so
                    if stream.closing is not None:  # sent now: a late repeat is answered so
                        ended = self.ended.setdefault(requester, [])
                        ended.append(stream)
                        del ended[:-ENDED_KEPT]
                        if isinstance(stream.closing, ReplayComplete):
                            _give(self.given.setdefault(requester, {}), stream.closing.through)
                    following = self.queued.pop(requester, None)
                    stream.followed = stream.followed or following is not None
                    if following is not None and _reached(stream.closing, following.request):
                        self.replays[requester] = following  # what follows it: its turn
                elif reading and len(self.replays) > 1:  # the route's other replays go next
                    self.replays[requester] = self.replays.pop(requester)
                if message is None:
                    if not stream.done:
                        return False
                    continue
            else:
                return False
            self.unsent.sent(self.sender.send(message))
            return True

    def send_ready(self) -> int:
        """Send, while credit lasts, the answers that are ready (nothing read or encoded);
        the number sent."""
        sent = 0
        while self.sender is not None and self.sender.credit > 0 and self.send_one(read=False):
            sent += 1
        return sent

    def holds_live(self) -> bool:
        """Whether live frames must wait: any answer heads ``responses`` (they go out in order,
        and one may be parked: a relay's image waiting for its upstream, when nothing else goes
        out on the link, WIRE.md "Image requests"), or a source replay must be read."""
        return bool(self.responses) or self.needs_reading()

    def needs_reading(self) -> bool:
        """Whether answers wait that must be read before they can be sent."""
        if self.responses:
            head = self.responses[0]
            return isinstance(head, _Stream) and head.waits()  # parked: a relay's image
        return any(stream.waits() for stream in self.replays.values())

    def pump(self) -> int:
        """Send answers while credit lasts, at most :data:`ANSWERS_PER_TURN`."""
        sent = 0
        while (
            sent < ANSWERS_PER_TURN
            and self.sender is not None
            and self.sender.credit > 0
            and self.send_one()
        ):
            sent += 1
        return sent

    def wants_turn(self) -> bool:
        """Whether answers wait that the sender has credit for (a pump stopped at its quota)."""
        return self.sender is not None and self.sender.credit > 0 and self.busy()

    def _next(self, stream: _Stream, read: bool = True) -> Outgoing | None:
        """The stream's next message; None once it is over (``stream.done``), or while it
        must be read (``read`` False) or its last read found nothing to send yet."""
        if not stream.ready and not stream.done and read:
            try:
                self._read_chunk(stream)
            except Exception:
                # the answer ends here (a journal that failed, say): no closing frame, so its
                # requester asks again; the caller logs what was raised
                stream.done = True
                stream.ready.clear()
                raise
        return stream.ready.popleft() if stream.ready else None

    def _read_chunk(self, stream: _Stream) -> None:
        chunk: list[Publication | Heartbeat | bytes] = []
        closing: Any = None
        single: ImageFrame | None = None
        room = self._replay_room(stream)
        size = 0  # bytes of the journaled entries in the chunk
        for frame in stream.frames:
            if frame is None:
                break  # a journal slice read: the rest on the next step
            if type(frame) is bytes:
                chunk.append(frame)
                size += len(frame)
                if len(chunk) >= self.max_batch and (
                    size >= room or len(chunk) >= REPLAY_CHUNK * self.max_batch
                ):
                    break
            elif isinstance(frame, Publication | Heartbeat):
                chunk.append(frame)
                if len(chunk) >= self.max_batch:
                    break
            elif isinstance(frame, ImageFrame):
                single = frame  # an IMAGE goes in a transfer of its own (component/images.py)
                break
            else:
                closing = frame  # ReplayComplete, a GapError or an ImageComplete ends it
                break
        else:
            stream.done = True
        if closing is not None:
            stream.done = True
        correlation_id, cookie = stream.correlation_id, stream.cookie
        if chunk:
            if stream.replay:
                self.replayed += len(chunk)
            if len(chunk) == 1 and type(chunk[0]) is bytes:  # a batch of one: PUBLICATION
                stream.ready.append(_finish(plain_publication(chunk[0], self.source_bits),
                                            correlation_id, cookie))
            elif any(type(frame) is bytes for frame in chunk):
                # a replay's fast path (replaywire.py): batch entries already, retransmissions
                # without link numbers, as the rest of the replay (only when batching)
                entries = [frame if type(frame) is bytes
                           else encode_entry(frame, self.source_bits)  # type: ignore[arg-type]
                           for frame in chunk]
                stream.ready.append(_finish(encode_batch(entries, first_link_seq=None,
                                                         retransmit=True),
                                            correlation_id, cookie))
            elif self.batch:
                stream.ready.append(
                    _finish(encode_frames(chunk, self.source_bits),  # type: ignore[arg-type]
                            correlation_id, cookie)
                )
            else:
                stream.ready.extend(
                    _finish(encode_frames([frame], self.source_bits),  # type: ignore[list-item]
                            correlation_id, cookie)
                    for frame in chunk
                )
        if single is not None:
            stream.ready.append(_finish(encode(single), correlation_id, cookie))
        if closing is not None:
            if stream.replay and isinstance(closing, ReplayComplete | GapError):
                stream.closing = closing
            answered = stream.answered
            if answered is not None and answered is not stream.request:
                # continued for a repeat: echo its after (everything after it is answered too)
                closing = attrs.evolve(closing, request=answered)
            stream.ready.append(_finish(encode(closing), correlation_id, cookie))


    def _replay_room(self, stream: _Stream) -> int:
        """Bytes of journaled entries a chunk of ``stream`` may take past ``max_batch`` of
        them (see :data:`REPLAY_CHUNK_BYTES`); 0: none. Never on a route answering annotated
        requests (``target``: a gateway's responses link): its receiver passes each transfer
        on as it came to subscribers whose limits it does not advertise."""
        if not stream.replay or not self.batch or self.sender is None or self.target is not None:
            return 0
        taken = getattr(self.sender, "remote_max_message_size", None)
        if type(taken) is not int or 0 < taken < REPLAY_CHUNK_MIN_TAKEN:
            return 0
        return REPLAY_CHUNK_BYTES


def _give(given: dict[str, int], through: Mapping[str, int]) -> None:
    """Raise ``given`` to ``through``, per source (never lower it)."""
    for source, seq in through.items():
        if seq > given.get(source, 0):
            given[source] = seq


def _follows(stream: _Stream, request: SourceGapRequest) -> bool:
    """The follow rule of :meth:`ResponseRoute.follows`, for ``stream``, running or ended."""
    first = stream.request
    if (
        first is None or not stream.more
        or request.request_id is None or first.request_id is None
        or first.request_id == request.request_id
        or first.link_through != request.link_through
    ):
        return False
    return _at_or_past(request.after, first.after) and _at_or_past(request.after, stream.through)


def _reached(closing: ReplayComplete | GapError | None, following: SourceGapRequest | None
             ) -> bool:
    """Whether a replay that ended with ``closing`` reached the ``after`` of the request
    queued behind it (:meth:`ResponseRoute.follows`), which then answers what comes next.

    Not when it ended short (a GAP-ERROR, a journal that failed, a ``through`` the link cut
    back, or no ``more``): its requester asks again after what it got, and a stub delivers a
    replayed publication above what it delivered while a request is in flight (source
    numbers have holes), so the follower's, sent first, would make the numbers between
    duplicates to it: lost. The follower is dropped; the requester's next request replaces
    it anyway (the seqrepair stub drops it too, as it takes it only on such an end)."""
    if not isinstance(closing, ReplayComplete) or not closing.more or following is None:
        return False
    after = following.after
    return all(after.get(name, 0) <= seq for name, seq in closing.through.items())


def _repeats(first: SourceGapRequest | None, request: SourceGapRequest) -> bool:
    """Whether ``request`` repeats ``first``: the same ``request_id`` (present) and
    ``link_through``, and an ``after`` nowhere below ``first``'s (a stub asks again "still
    going?" with the remainder it still lacks), naming no source ``first`` did not name
    unless ``first`` asked for every source (an id reused for other sources is a new ask)."""
    if (
        first is None or request.request_id is None
        or first.request_id != request.request_id
        or first.link_through != request.link_through
    ):
        return False
    if first.after and not request.after.keys() <= first.after.keys():
        return False
    return _at_or_past(request.after, first.after)


def _at_or_past(after: Mapping[str, int], positions: Mapping[str, int]) -> bool:
    """Whether ``after`` is at or past each of ``positions``, per source (a source ``after``
    does not name counts as 0)."""
    return all(after.get(name, 0) >= seq for name, seq in positions.items())


def _finish(message: Outgoing, correlation_id: Any, cookie: bytes | None) -> Outgoing:
    """An answer as it goes out: the request's id, and its cookie echoed (respann §2.3)."""
    if correlation_id is not None:
        message.correlation_id = correlation_id
    if cookie is not None:
        message.instructions = {ADDRESS_COOKIE: cookie}
    return message
