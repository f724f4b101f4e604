"""Publisher and subscriber clients over proton.

:class:`Subscriber` is a proton receiver driving a :class:`~seqrepair.core.stub.SubscriberStub`:
it decodes frames, feeds the stub, performs the events the stub returns (sends gap requests,
hands deliveries to the application) and polls the stub on a timer. Use it with a callback
(``on_publication``) in the foreground (:meth:`Subscriber.run`), or as an iterator with the
container in a background thread (:meth:`Subscriber.start`, ``for pub in subscriber``).
It reconnects by itself: the stub keeps its state, the link keeps its name, and the attach asks
the component to resume; a component that no longer holds the link's context starts the link at
0 and the stub repairs by source. Reconnects back off: ``reconnect_delay`` after the first failure,
doubled per failed attempt up to ``max_reconnect_delay``, jittered, and from the start again once
the component has accepted the link (see :mod:`seqrepair.amqp.runner`).

:class:`Publisher` stamps publications with a :class:`~seqrepair.core.sequencers.SourceSequencer`
(continuing after the journal's high-water when given a journal), journals them first when it
has one, and sends them batched; deliveries stay unsettled until the component accepts them
(after its own journaling) and are sent again after a reconnect.
"""

from __future__ import annotations

import ast
import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import structlog
from proton import symbol
from proton.reactor import ApplicationEvent, AtMostOnce, LinkOption

from seqrepair.amqp.backoff import Backoff
from seqrepair.amqp.codec import Decoder, encode, encode_gap_requests
from seqrepair.amqp.component import (
    CONTROL_ADDRESS,
    LINK_PREFIX,
    PROP_BATCH,
    PROP_EPOCH,
    PROP_GRANTS,
    PROP_LINK,
    PROP_RESUME,
    PROP_START,
    plain_properties,
)
from seqrepair.amqp.errors import OversizedMessageError, PublishRejectedError
from seqrepair.amqp.framing import Outgoing, encode_frames
from seqrepair.amqp.rawamqp import read_raw
from seqrepair.amqp.runner import DEFAULT_MAX_QUEUED, PublisherRunner, SubscriberRunner
from seqrepair.amqp.runner import FATAL_CONDITIONS as FATAL_CONDITIONS  # importable from here
from seqrepair.amqp.sizelimit import DEFAULT_MAX_MESSAGE_SIZE, limit_size
from seqrepair.amqp.technical import Capabilities, CapabilitiesRequest, SubscriptionState
from seqrepair.core.errors import InvalidConfigError, SeqRepairError
from seqrepair.core.events import (
    BufferOverflow,
    Delivered,
    DeliveredRun,
    Disconnect,
    Event,
    HeartbeatOverdue,
    LinkReset,
    RequestGap,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.messages import (
    GapError,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
)
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.core.stub import SubscriberStub
from seqrepair.journal.errors import JournalError, PublicationQueuedError
from seqrepair.journal.journal import Journal
from seqrepair.journal.publisher import Publisher as JournalPublisher

log = structlog.get_logger("seqrepair.amqp.client")

_FRAMES = (Publication, Heartbeat, GapError, ReplayComplete)
"""What the subscriber's stub receives."""

DEFAULT_MAX_RECEIVED = 256 * DEFAULT_MAX_MESSAGE_SIZE
"""The largest transfer a :class:`Subscriber` takes by default (256 MiB): the most a component
on its defaults sends in one, ``max_batch`` (256) publications that each came in a message of
at most its ``max_message_size`` (1 MiB). It bounds what a misbehaving or hostile peer can make
a subscriber hold, without refusing anything such a component may send."""


class _LinkProperties(LinkOption):
    def __init__(self, props: Mapping[symbol, Any], max_message_size: int = 0) -> None:
        self.props = dict(props)
        self.max_message_size = max_message_size

    def apply(self, link: Any) -> None:
        link.properties = self.props
        link.max_message_size = self.max_message_size


@attrs.define
class SubscriberReport:
    """What a subscriber saw: the stub's counters plus the adapter's own."""

    delivered: int = 0
    duplicates: int = 0
    gaps_detected: int = 0
    repaired: int = 0
    requests_sent: int = 0
    source_requests_sent: int = 0
    source_continued: int = 0
    resets: int = 0
    unrecoverable: int = 0
    sources_abandoned: int = 0  # source repairs refused or given up (see Unrecoverable events)
    link_view_lost: int = 0  # frames the link called old and their source proved new
    connections: int = 0
    disconnections: int = 0
    paused: int = 0
    rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return attrs.asdict(self)


class Subscriber(SubscriberRunner):
    """A subscriber to one topic pattern or subscription queue of a component.

    ``permtokens`` can only narrow what the component grants this subscriber's principal
    (``seqrepair serve --grant``): the authenticated user, else ``container_id`` (the AMQP
    container id of its connections; random when not given).

    After a lost connection, or a link the peer refused or detached (or whose session or
    connection it ended) for a reason a reconnect may cure, it reconnects after
    ``reconnect_delay``, doubled at each failed attempt up to ``max_reconnect_delay`` (plus up
    to a quarter at random), and from ``reconnect_delay`` again once the component (or gateway)
    has accepted its receiving link; it resumes its link context, or repairs by source when the
    component starts the link again at 0. A condition in :data:`FATAL_CONDITIONS`
    (``amqp:not-found``: an address it may not subscribe to; ``amqp:link:stolen``) stops it:
    :attr:`error` names the condition and the address, :meth:`run` returns and the iterator
    ends (see :class:`~seqrepair.amqp.runner.SubscriberRunner`).

    ``max_message_size`` (bytes; 0: no limit) is advertised on the receiving link; a transfer
    past it is refused as it arrives (:mod:`seqrepair.amqp.sizelimit`) and stops the
    subscriber, its :attr:`error` an :class:`~seqrepair.amqp.errors.OversizedMessageError`:
    taken again after a reconnect, the same frames would only come again.

    Deliveries go to ``on_publication`` (in the client's thread), or, for a subscriber started
    with :meth:`start` without one, to ``for pub in subscriber``: at most ``max_queued`` wait
    there for the reader, then the subscriber waits too (a slow reader is a slow subscriber:
    the component pauses its link and repairs it later), so memory stays bounded.
    """

    def __init__(
        self,
        url: str,
        address: str,
        *,
        link_name: str | None = None,
        on_publication: Callable[[Publication], None] | None = None,
        on_event: Callable[[Event], None] | None = None,
        bits: int = 16,
        heartbeat_interval: float = 1.0,
        missed_heartbeats: int = 3,
        nak_delay: float = 0.05,
        max_buffer: int = 100_000,
        permtokens: Sequence[str] = (),
        container_id: str | None = None,
        batch: bool = True,
        credit: int = 200,
        max_queued: int = DEFAULT_MAX_QUEUED,
        idle_timeout: float = 10.0,
        reconnect_delay: float = 0.2,
        max_reconnect_delay: float = 5.0,
        tick: float = 0.02,
        clock: Callable[[], float] = time.time,
        max_message_size: int = DEFAULT_MAX_RECEIVED,
    ) -> None:
        super().__init__(credit=credit, reconnect_delay=reconnect_delay,
                         max_reconnect_delay=max_reconnect_delay, max_queued=max_queued)
        if type(max_message_size) is not int or max_message_size < 0:
            raise InvalidConfigError(
                f"max_message_size must be an integer >= 0 (0: no limit), got "
                f"{max_message_size!r}", got=max_message_size,
            )
        self.max_message_size = max_message_size
        read_raw(self)
        limit_size(self, self._oversized)
        self.url = url
        self.address = address
        self.link_name = link_name or f"sub-{uuid.uuid4()}"
        self.on_publication = on_publication
        self.on_event = on_event
        self.stub = SubscriberStub(
            bits=bits,
            heartbeat_interval=heartbeat_interval,
            missed_heartbeats=missed_heartbeats,
            nak_delay=nak_delay,
            max_buffer=max_buffer,
        )
        self.decoder = Decoder(link_bits=bits)
        self.permtokens = tuple(permtokens)
        self.container_id = container_id
        self.batch = batch
        self.idle_timeout = idle_timeout
        self.tick = tick
        self.clock = clock
        self.report = SubscriberReport()
        self.capabilities: Capabilities | None = None
        self.unrecoverable: list[Unrecoverable] = []
        self._ids = itertools.count(1)
        self._outbox: deque[Outgoing] = deque()
        self._receiver: Any = None
        self._control: Any = None
        self._attached_once = False
        self._epoch: str | None = None  # the link context the stub is in, as the component names it
        # where the subscription started per source (the component's first attach reply): kept
        # so a component that lost the context replays sources not yet delivered from there
        self._start: dict[str, int] | None = None
        self.log = log.bind(link=self.link_name, topic=address)

    # --- public API ---------------------------------------------------------------------

    def drop_connection(self) -> None:
        """Tear down the transport abruptly (tests: a lost connection); it reconnects."""
        if self._injector is not None:
            self._injector.trigger(ApplicationEvent("seqrepair_drop"))

    # --- proton events ------------------------------------------------------------------

    def _connect(self) -> None:
        identity = {} if self.container_id is None else {"container_id": self.container_id}
        self._conn = self._container.connect(
            self.url, reconnect=False, heartbeat=self.idle_timeout,
            desired_capabilities=["RESPONSE_ANNOTATIONS_V1_0"], **identity,
        )
        props: dict[symbol, Any] = {PROP_BATCH: self.batch, PROP_RESUME: self._attached_once}
        if self._epoch is not None:
            props[PROP_EPOCH] = self._epoch
        if self._start is not None:
            props[PROP_START] = self._start
        if self.permtokens:
            props[PROP_GRANTS] = ",".join(self.permtokens)
        self._receiver = self._container.create_receiver(
            self._conn, self.address, name=self.link_name,
            options=_LinkProperties(props, self.max_message_size),
        )
        self._control = self._container.create_sender(
            self._conn, CONTROL_ADDRESS, options=AtMostOnce()
        )
        self._attached_once = True

    def _on_tick(self) -> None:
        conn = self._conn
        bound = conn is not None and getattr(conn, "seqrepair_bound", False)
        if bound and (conn.transport is None or conn.transport.closed):
            # a transport torn down without an on_disconnected reaching us: same recovery (a
            # connection not bound yet has no transport either, but it is still being made)
            self._lost(conn, "transport closed")
        now = self.clock()
        if not self.connected.is_set():
            # no link attached is no link gone silent: no overdue alert, no probe to send
            self.stub.listening(now)
        self._perform(self.stub.poll(now))
        self._listening(now)
        self._flush()

    def on_seqrepair_drop(self, event: Any) -> None:
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.close_tail()
            self._conn.transport.close_head()

    def on_connection_bound(self, event: Any) -> None:
        event.connection.seqrepair_bound = True

    def on_connection_opened(self, event: Any) -> None:
        if event.connection != self._conn:
            # a connection given up on while it was being made: one link, one connection
            event.connection.close()
            return
        self.report.connections += 1
        self.log.info("connected", connections=self.report.connections)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self._receiver:
            event.connection.seqrepair_attached = True
            props = plain_properties(event.link.remote_properties)
            start = props.get(str(PROP_START))
            if self._start is None and isinstance(start, Mapping):
                try:
                    self._start = {str(k): int(v) for k, v in start.items()}
                except (TypeError, ValueError):
                    self.log.warning("unreadable seqrepair-start-after ignored", value=start)
            epoch = props.get(str(PROP_EPOCH))
            self._enter_epoch(None if epoch is None else str(epoch))
            if self._accepted(event.link):
                self.connected.set()
        self._flush()

    def on_sendable(self, event: Any) -> None:
        self._flush()

    def _main_links(self) -> dict[str, Any]:
        return {"data": self._receiver, "control": self._control}

    def _forget_connection(self, conn: Any) -> None:
        if getattr(conn, "seqrepair_attached", False):
            self.report.disconnections += 1
        self._outbox.clear()
        self._receiver = self._control = None

    def _oversized(self, link: Any, size: int, limit: int) -> None:
        self.log.error("message too large: link detached, subscriber stopped", received=size,
                       limit=limit)
        self._fail(OversizedMessageError(
            f"{OversizedMessageError.condition}: the peer sent a message of at least {size} "
            f"bytes; this subscriber takes at most {limit} (max_message_size)",
            expected=limit, got=size,
        ))

    def on_rejected(self, event: Any) -> None:
        self.report.rejected += 1
        cond = event.delivery.remote.condition
        self.log.warning("request rejected", condition=cond.name if cond else None)

    def on_message(self, event: Any) -> None:
        now = self.clock()
        delivery = event.delivery
        if delivery.settled:  # sent pre-settled (the component's frames): only free it here
            delivery.settle()
        else:  # a peer that waits for an outcome: the frame is taken (repair covers the rest)
            self.accept(delivery)
        try:
            decoded = self.decoder.decode(event.message)
        except SeqRepairError as exc:
            self.log.warning("undecodable message dropped", error=exc.message)
            return
        frames: list[object] = []  # a transfer's frames go to the stub together
        for item in decoded:
            if type(item) is Publication or isinstance(item, _FRAMES):
                frames.append(item)
                continue
            if frames:
                self._take(frames, now)
                frames = []
            if isinstance(item, SubscriptionState):
                if item.status == "PAUSED":
                    self.report.paused += 1
                elif item.epoch:
                    self._enter_epoch(item.epoch)
                self.log.info("subscription state", status=item.status, reason=item.reason)
            elif isinstance(item, Capabilities):
                self.capabilities = item
        if frames:
            self._take(frames, now)
        self._listening(now)
        self._flush()

    def _listening(self, since: float) -> None:
        """Deliveries made since ``since`` may have held the thread (``on_publication`` is the
        application's): frames that came meanwhile wait unread in the transport, and proton
        fires due timers before it reads them. The stub must not count that time as silence of
        the link (a false HeartbeatOverdue, a probe for a frame already here, its answer a
        duplicate; with the disconnect policy, a healthy connection dropped)."""
        done = self.clock()
        if done - since > self.tick:
            self.stub.listening(done)

    def _take(self, frames: list[object], now: float) -> None:
        events = self.stub.receive_many(frames, now)
        if self.on_event is None and len(events) == 1 and type(events[0]) is DeliveredRun:
            for publication in events[0].publications:  # the usual outcome, in short
                self._deliver(publication)
        else:
            self._perform(events)

    def _enter_epoch(self, epoch: str | None) -> None:
        """The component named the link context; a different one than ours restarted at 0."""
        if epoch is None:
            return  # a component (or gateway) that does not name contexts: frame 0 tells
        if self._epoch is not None and epoch != self._epoch:
            self._perform(self.stub.link_reset(self.clock()))
        self._epoch = epoch

    # --- performing the stub's events ---------------------------------------------------

    def _perform(self, events: list[Event]) -> None:
        gaps = []
        for ev in events:
            if isinstance(ev, DeliveredRun):
                for publication in ev.publications:
                    self._deliver(publication)
                    if self.on_event is not None:  # one Delivered each, as receive() gives
                        self.on_event(Delivered(publication))
                continue
            if isinstance(ev, Delivered):
                self._deliver(ev.publication)
            elif isinstance(ev, RequestGap):
                gaps.append(ev.request)
            elif isinstance(ev, RequestSourceGap):
                self.log.info("source repair requested", after=dict(ev.request.after),
                              request_id=ev.request.request_id)
                self._request(encode(ev.request))
            elif isinstance(ev, Unrecoverable):
                self.unrecoverable.append(ev)
                self.log.warning("unrecoverable", source=ev.source, after=ev.after,
                                 reason=ev.reason, link_from=ev.link_from, link_to=ev.link_to)
            elif isinstance(ev, LinkReset):
                self.log.info("link reset", abandoned=ev.abandoned)
            elif isinstance(ev, HeartbeatOverdue):
                self.log.warning("heartbeat overdue", missed=ev.missed)
            elif isinstance(ev, BufferOverflow):
                self.log.warning("reorder buffer overflow", dropped=ev.dropped)
            elif isinstance(ev, Disconnect):
                self.on_seqrepair_drop(None)
            if self.on_event is not None:
                self.on_event(ev)
        for start in range(0, len(gaps), 256):
            self._request(encode_gap_requests(gaps[start : start + 256]))

    def _request(self, message: Outgoing) -> None:
        message.id = next(self._ids)
        message.reply_to = LINK_PREFIX + self.link_name
        props: dict[Any, Any] = dict(message.properties or {})
        props[PROP_LINK] = self.link_name
        message.properties = props
        self._outbox.append(message)

    def _flush(self) -> None:
        control = self._control
        while self._outbox and control is not None and control.credit > 0:
            control.send(self._outbox.popleft())

    def stats(self) -> SubscriberReport:
        """The stub's counters merged into the adapter's report."""
        s = self.stub.stats
        rep = self.report
        rep.delivered = s.delivered
        rep.duplicates = s.duplicates
        rep.gaps_detected = s.gaps_detected
        rep.repaired = s.link_repaired + s.source_repaired
        rep.requests_sent = s.requests_sent
        rep.source_requests_sent = s.source_requests_sent
        rep.source_continued = s.source_continued
        rep.resets = s.resets
        rep.unrecoverable = s.unrecoverable
        rep.sources_abandoned = s.sources_abandoned
        rep.link_view_lost = s.link_view_lost
        return rep

    def query_capabilities(self) -> None:
        """Ask the component for its capabilities; the answer lands in :attr:`capabilities`."""
        self._request(encode(CapabilitiesRequest()))


# ------------------------------------------------------------------------------------------


class Publisher(PublisherRunner[list[Publication]]):
    """Publishes one source's publications to a component, batched, at least once.

    ``journal``: when given, numbering continues after its high-water and every publication is
    journaled before it is sent (a publication counts as published once the journal holds it).
    Without one, numbering starts after ``start_after`` and the component journals. It takes a
    number at or below what it already has of the source for a resend and skips it (accepted,
    not delivered again): a publisher without a journal that restarts must start after the
    source's high-water: the component rejects a number it holds for another publication
    (``amqp:precondition-failed``), and the publisher stops, its :attr:`error` a
    :class:`~seqrepair.amqp.errors.PublishRejectedError` whose ``expected`` is the next number
    the source may use. Any rejection makes :meth:`flush` return False.
    Publications are sent to ``address`` (a topic or a pattern the topics fall under).

    A batch larger than the component takes (``amqp:link:message-size-exceeded``: more bytes
    than the ``max-message-size`` its link advertises, see :mod:`seqrepair.amqp.sizelimit`) is
    rejected and the sender link detached; a publisher without a journal stops then (its
    :attr:`error` is that rejection: the numbers of the batch will never be in the journal), one
    with a journal reconnects and goes on (the component fans the batch out from the journal).

    A lost connection, or a sender link the component refused or detached (or whose session
    or connection it ended) for a reason a reconnect may cure, is made again after
    ``reconnect_delay``, doubled at each failed attempt up to ``max_reconnect_delay`` (plus up
    to a quarter at random), and from ``reconnect_delay`` again once the component has accepted
    the sender link; the unsettled batches go again, in order. A condition in
    :data:`FATAL_CONDITIONS` (``amqp:not-found``: an address it may not publish to) stops it:
    :attr:`error` names the condition and :meth:`flush` returns False at once (see
    :class:`~seqrepair.amqp.runner.PublisherRunner`).

    A batch the component releases (its journal is out for now) is sent again after a backoff:
    ``reconnect_delay`` at first, doubled up to ``max_backoff`` while releases go on (no
    jitter), back to the start once a batch is accepted. Nothing newer is sent meanwhile, and
    the released batches go again in the order they were first sent, once the outcome of every
    batch sent after them is in (the component releases those too: see
    :mod:`seqrepair.amqp.holdback`).
    """

    def __init__(
        self,
        url: str,
        source: str,
        *,
        bits: int = 32,
        address: str = "/#",
        journal: Journal | None = None,
        max_batch: int = 256,
        max_unsettled: int = 64,
        reconnect_delay: float = 0.2,
        max_reconnect_delay: float = 5.0,
        idle_timeout: float = 10.0,
        on_sent: Callable[[Sequence[Publication]], None] | None = None,
        max_backoff: float = 5.0,
        start_after: int = 0,
    ) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnect_delay=max_reconnect_delay)
        self.url = url
        self.address = address
        self.sequencer = SourceSequencer(source, bits, start_after)
        self.embedded: JournalPublisher | None = None
        if journal is not None:
            self.embedded = JournalPublisher(
                source, journal, bits=bits, transport=self._pending.append,
                batch_size=max_batch,
            )
        self.bits = bits
        self.max_batch = max_batch
        self.max_unsettled = max_unsettled
        self.idle_timeout = idle_timeout
        self.on_sent = on_sent
        self.max_backoff = max_backoff
        self.accepted = 0
        self.rejected = 0
        """Publications the component rejected (refused for good, not sent again)."""
        self.rejection: PublishRejectedError | None = None
        """The last rejection: the component's condition and reason, the batch's numbers."""
        self.released = 0
        """Publications the component released (each time: a batch released twice counts
        twice); they were sent again."""
        self._released: set[Any] = set()  # tags of released batches, kept in _unsettled
        self._release_backoff = Backoff(
            initial=reconnect_delay, maximum=max(reconnect_delay, max_backoff), jitter=0.0
        )
        self._backing_off = False  # a backoff timer is pending: send nothing
        self._finish_when_done = False
        self.log = log.bind(source=source, topic=address)

    # --- public API ---------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        fields: Mapping[str, Any],
        ptype: PublishType | str = PublishType.UPDATE,
        *,
        permtoken: str | None = None,
        timestamp: float | None = None,
    ) -> Publication:
        """Stamp, journal (if configured) and queue one publication; thread-safe."""
        stamp = time.time() if timestamp is None else timestamp
        with self._lock:
            if self.embedded is not None:
                pub = self.embedded.publish(topic, fields, ptype, permtoken=permtoken,
                                            timestamp=stamp)
                self._journal([pub])
            else:
                pub = self.sequencer.stamp(topic, fields, ptype, permtoken=permtoken,
                                           timestamp=stamp)
                self._pending.append(pub)
        self._wake()
        return pub

    def publish_many(self, items: Sequence[tuple[Any, ...]]) -> list[Publication]:
        """Several ``(topic, fields, ptype[, permtoken])`` at once: one journal append per
        batch of ``max_batch``. Returns the stamped publications.

        With a journal, a failure to journal raises :class:`PublicationQueuedError` naming in
        ``stamped`` the publications stamped (and queued) before it: the first ones of
        ``items``; :meth:`flush` journals and sends them once the journal is back. A bad item
        raises its error (InvalidMessageError, ...) once the items before it are published.
        """
        stamped: list[Publication] = []
        with self._lock:
            now = time.time()
            for item in items:
                topic, fields, ptype = item[:3]
                token = item[3] if len(item) > 3 else None
                if self.embedded is None:
                    stamped.append(self.sequencer.stamp(topic, fields, ptype, permtoken=token,
                                                        timestamp=now))
                    self._pending.append(stamped[-1])
                    continue
                try:
                    stamped.append(self.embedded.publish(topic, fields, ptype, permtoken=token,
                                                         timestamp=now))
                except PublicationQueuedError as exc:
                    stamped.append(exc.publication)
                    raise self._queued(stamped, exc) from exc
                except JournalError as exc:  # nothing stamped for this item (backlog full)
                    if stamped:
                        raise self._queued(stamped, exc) from exc
                    raise
                except SeqRepairError as exc:  # a bad item: nothing stamped for it
                    if stamped:
                        self._journal(stamped)
                        exc.add_note(f"the {len(stamped)} items before it were published")
                    raise
            if self.embedded is not None:
                self._journal(stamped)
        self._wake()
        return stamped

    def _journal(self, stamped: list[Publication]) -> None:
        """Journal what the embedded publisher holds; a failure names what stays queued."""
        assert self.embedded is not None
        try:
            self.embedded.flush()
        except JournalError as exc:
            if stamped:
                raise self._queued(stamped, exc) from exc
            raise

    def _queued(self, stamped: list[Publication], cause: JournalError) -> PublicationQueuedError:
        assert self.embedded is not None
        return PublicationQueuedError(
            f"{len(stamped)} publication(s) through {stamped[-1].source_seq} stamped and "
            f"queued, not yet journaled: {cause.message}",
            publication=stamped[-1], pending=self.embedded.pending,
            source=self.sequencer.source, stamped=stamped,
        )

    def flush(self, timeout: float = 30.0) -> bool:
        """Journal what is stamped but not yet journaled (again and again while the journal is
        out), then wait until the component has accepted everything. False on timeout or error,
        so also while anything stamped is not yet journaled, and once the component has
        rejected anything (:attr:`rejected`, :attr:`rejection`)."""
        deadline = time.monotonic() + timeout
        while self.embedded is not None and self.embedded.pending:
            with self._lock:
                try:
                    self.embedded.flush()
                except JournalError as exc:
                    self.log.warning("journal out, publications wait", error=exc.message,
                                     pending=self.embedded.pending)
            if not self.embedded.pending:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        self._wake()
        return super().flush(max(0.0, deadline - time.monotonic())) and not self.rejected

    # --- sending ------------------------------------------------------------------------

    def _send(self) -> None:
        sender = self._sender
        if sender is None or self._backing_off or self._released:
            return  # nothing may overtake a released batch
        while sender.credit > 0 and len(self._unsettled) < self.max_unsettled:
            with self._lock:
                if not self._pending:
                    break
                n = min(self.max_batch, len(self._pending))
                batch = [self._pending.popleft() for _ in range(n)]
            delivery = sender.send(encode_frames(batch, self.bits))
            self._unsettled[delivery.tag] = batch
            if self.on_sent is not None:
                self.on_sent(batch)

    def on_accepted(self, event: Any) -> None:
        # counted before it leaves _unsettled: flush() returns once that is empty
        batch = self._unsettled.get(event.delivery.tag)
        if batch is not None:
            self.accepted += len(batch)
            del self._unsettled[event.delivery.tag]
            if not self._released:
                self._release_backoff.reset()  # the component journals again
        self._outcome()

    def on_rejected(self, event: Any) -> None:
        """Refused for good: counted in :attr:`rejected`, named in :attr:`rejection`. A
        condition in :data:`NUMBERING_CONDITIONS` stops the publisher (:attr:`error`), and so
        does a batch too large for the component when there is no journal: its numbers are
        lost, so the component would refuse every later batch as skipping them (with a journal
        they are journaled already, and the component fans them out from there)."""
        batch = self._unsettled.get(event.delivery.tag)
        self.rejection = rejection = _rejection(event.delivery.remote.condition, batch)
        self.rejected += len(batch or ())  # before it leaves _unsettled, as in on_accepted
        self._unsettled.pop(event.delivery.tag, None)
        self.log.error("publications rejected", condition=rejection.condition,
                       description=rejection.message, first=rejection.first,
                       last=rejection.last, expected=rejection.expected)
        if rejection.condition in NUMBERING_CONDITIONS or (
            rejection.condition == OversizedMessageError.condition and self.embedded is None
        ):
            self._fail(rejection)
            return
        self._outcome()

    def on_released(self, event: Any) -> None:
        """Not processed (the component's journal is out): kept, sent again after a backoff."""
        tag = event.delivery.tag
        batch = self._unsettled.get(tag)
        if batch is None:
            return
        self._released.add(tag)
        self.released += len(batch)
        if not self._backing_off:
            self._backing_off = True
            delay = self._release_backoff.next_delay(self._rng)
            assert delay is not None  # no max_attempts: it never gives up
            self.log.warning("publications released; sending them again after a backoff",
                             delay=delay, first=batch[0].source_seq)
            self._container.schedule(delay, self)

    def on_timer_task(self, event: Any) -> None:
        """The backoff after a release is over."""
        self._backing_off = False
        if not self._stopping:
            self._outcome()

    def _outcome(self) -> None:
        """An outcome came (or a backoff ended): once the outcome of every batch sent is in and
        no backoff is pending, the released batches go first, in the order first sent."""
        if self._released and not self._backing_off and len(self._released) == len(
            self._unsettled
        ):
            with self._lock:
                for tag in sorted(self._released, reverse=True, key=_tag_order):
                    self._pending.extendleft(reversed(self._unsettled.pop(tag)))
            self._released.clear()
        self._notify()
        self._send()

    def _requeue_unsettled(self) -> None:
        for tag in sorted(self._unsettled, reverse=True, key=_tag_order):
            self._pending.extendleft(reversed(self._unsettled[tag]))
        self._unsettled.clear()
        self._released.clear()  # among them, in their place


NUMBERING_CONDITIONS = frozenset({"amqp:precondition-failed"})
"""Rejections that say this source's numbering does not continue the journal (numbers skipped,
or reused for other publications): every later batch would be refused too, so the
:class:`Publisher` stops; the rejection's ``expected`` is the next number the source may use."""


def _rejection(cond: Any, batch: list[Publication] | None) -> PublishRejectedError:
    """The component's rejection ``cond`` of ``batch`` as a typed error."""
    info = (cond.info if cond is not None else None) or {}
    return PublishRejectedError(
        cond.name if cond is not None else "amqp:internal-error",
        (cond.description if cond is not None else None) or "rejected without a reason",
        first=batch[0].source_seq if batch else None,
        last=batch[-1].source_seq if batch else None,
        expected=_info_value(info.get(symbol("expected"))),
        got=_info_value(info.get(symbol("got"))),
    )


def _info_value(text: Any) -> Any:
    """A value the component sent as its ``repr`` (see ``Component._reject``), read back."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _tag_order(tag: Any) -> int:
    try:
        return int(tag)
    except (TypeError, ValueError):
        return 0
