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
the component has accepted the link (see :mod:`seqrepair.amqp.client.runner`).

:class:`Publisher` (in :mod:`seqrepair.amqp.client.publisher`, importable from here) stamps
publications with a :class:`~seqrepair.core.sequencers.SourceSequencer` (continuing after the
journal's high-water when given a journal), journals them first when it has one, and sends them
batched; deliveries stay unsettled until the component accepts them (after its own journaling)
and are sent again after a reconnect.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proton import symbol, ulong
from proton.reactor import ApplicationEvent

from seqrepair.amqp.client.acks import FollowedNumbering, consumed_through
from seqrepair.amqp.client.publisher import NUMBERING_CONDITIONS as NUMBERING_CONDITIONS
from seqrepair.amqp.client.publisher import Publisher as Publisher
from seqrepair.amqp.client.runner import DEFAULT_MAX_QUEUED, SubscriberRunner
from seqrepair.amqp.client.runner import (
    FATAL_CONDITIONS as FATAL_CONDITIONS,  # importable from here
)
from seqrepair.amqp.client.subreport import SubscriberReport as SubscriberReport
from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder, encode, encode_gap_requests
from seqrepair.amqp.wire.errors import (
    OversizedMessageError,
    SettingsMismatchError,
)
from seqrepair.amqp.wire.framing import TAIL_PROBE, Outgoing
from seqrepair.amqp.wire.rawamqp import RawIncomingHandler, decode_message, read_raw
from seqrepair.amqp.wire.refusal import attach_refused
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.sizelimit import DEFAULT_MAX_RECEIVED as DEFAULT_MAX_RECEIVED
from seqrepair.amqp.wire.sizelimit import LinkProperties, limit_size
from seqrepair.amqp.wire.technical import Capabilities, CapabilitiesRequest, SubscriptionState
from seqrepair.amqp.wire.vocabulary import (
    CONTROL_ADDRESS,
    LINK_PREFIX,
    PROP_ACK,
    PROP_BATCH,
    PROP_DURABLE,
    PROP_EPOCH,
    PROP_GRANTS,
    PROP_LINK,
    PROP_RESUME,
    PROP_START,
    SUBSCRIPTION_PREFIX,
    plain_properties,
)
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
    GapRequest,
    Heartbeat,
    Publication,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
)
from seqrepair.core.overdue import OverduePolicy
from seqrepair.core.snapshot import (
    ImageComplete,
    ImageDelivered,
    ImageFrame,
    ImageOutdated,
    ImageRefused,
    ImageRequest,
    ImageResynced,
    RequestImage,
)
from seqrepair.core.stub import SubscriberStub
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.client")

def is_durable(durable: bool | None, link_name: str | None, address: str) -> bool:
    """Whether a client ``Subscriber`` asks to be durable: as told, else when it named its
    link or subscribes to a subscription queue."""
    if durable is not None:
        return durable
    return link_name is not None or address.startswith(SUBSCRIPTION_PREFIX)


Asked = GapRequest | SourceGapRequest | ImageRequest
"""A request whose rejected delivery the stub is told of (:meth:`Subscriber.on_rejected`)."""

_FRAMES = (Publication, Heartbeat, GapError, ReplayComplete, ReplayStarted, ImageFrame,
           ImageComplete)
"""What the subscriber's stub receives."""

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
    ends (see :class:`~seqrepair.amqp.client.runner.SubscriberRunner`).

    ``durable`` and ``acknowledge``: a restart with the same link name or queue resumes after what
    the application took (:mod:`seqrepair.amqp.component.durable`,
    :mod:`seqrepair.amqp.client.taken`).

    ``max_message_size`` (bytes; 0: no limit) is advertised on the receiving link; a transfer
    past it is refused as it arrives (:mod:`seqrepair.amqp.wire.sizelimit`) and stops the
    subscriber, its :attr:`error` an :class:`~seqrepair.amqp.wire.errors.OversizedMessageError`:
    taken again after a reconnect, the same frames would only come again.

    ``bits``, ``heartbeat_interval``: None follows the component; one it contradicts stops the
    subscriber (SettingsMismatchError). ``ack``: run the window discipline (:mod:`.acks`).

    Deliveries go to ``on_publication`` (in the client's thread), or, for a subscriber started
    with :meth:`start` without one, to ``for pub in subscriber``: at most ``max_queued`` wait
    there for the reader, then the subscriber waits too (a slow reader is a slow subscriber:
    the component pauses its link and repairs it later), so memory stays bounded.

    Images (:meth:`request_image`, :mod:`seqrepair.core.snapshot`) go to ``on_image``, or
    without one the way deliveries go: a publication whose ``source_seq`` is the number it is
    current as of, never counted as taken by itself (one item's image is no position); an
    answer for every item of its sources (pattern ``/#``), taken by the callbacks, makes
    ``as_of`` the durable position of each source it names.
    An image request given up (the component rejected it for good, or for now until the
    stub's retries ran out; no answer after its tries; replaced by a newer one) goes to
    ``on_event`` and :attr:`images_refused` as an :class:`ImageRefused` naming why (the AMQP
    condition, or ``"no answer after N tries"``): its items stay as the application holds them.
    ``resync_on_unrecoverable``: on an :class:`Unrecoverable`, ask for the images of the items
    it names, else of every item of its source the link may see (every item, for a source it
    does not name); a resync refused leaves :meth:`resynced` false.
    ``overdue_policy``: what a silent link makes the stub do besides alerting
    (``request`` a probe, ``wait``, ``disconnect`` and attach again; see
    :mod:`seqrepair.core.overdue`).
    """

    def __init__(
        self,
        url: str,
        address: str,
        *,
        link_name: str | None = None,
        on_publication: Callable[[Publication], None] | None = None,
        on_event: Callable[[Event], None] | None = None,
        bits: int | None = None,
        heartbeat_interval: float | None = None,
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
        ack: bool = True, durable: bool | None = None, acknowledge: bool = True,
        security: ClientSecurity = NO_CLIENT_SECURITY,
        overdue_policy: OverduePolicy | str = OverduePolicy.REQUEST,
        on_image: Callable[[Publication], None] | None = None,
        resync_on_unrecoverable: bool = False,
        link_properties: Mapping[Any, Any] | None = None,
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
        handlers: list[Any] = self.handlers  # type: ignore[assignment]  # read_raw's list
        for handler in handlers:  # list bodies: read_publications reads them first
            if isinstance(handler, RawIncomingHandler):
                handler.lazy_body = True
        self.url = url
        self.security = security
        self.link_properties = dict(link_properties or {})
        """More attach properties (a relay's ``seqrepair-selection``)."""
        self.address = address
        self.link_name = link_name or f"sub-{uuid.uuid4()}"
        self.durable = ack and is_durable(durable, link_name, address)  # ACKs carry taken
        self.acknowledge_on_return = acknowledge and self.durable  # else: acknowledge()
        self.on_publication = on_publication
        self.on_event = on_event
        self.numbering = FollowedNumbering(self.link_name, bits, heartbeat_interval, {
            "missed_heartbeats": missed_heartbeats, "nak_delay": nak_delay,
            "max_buffer": max_buffer, "overdue_policy": overdue_policy,
        }, taken=self.taken)
        self.stub: SubscriberStub = self.numbering.first_stub()
        self.decoder = Decoder(link_bits=self.stub.bits)
        self.permtokens = tuple(permtokens)
        self.container_id = container_id
        self.batch = batch
        self.ack = ack
        self.idle_timeout = idle_timeout
        self.tick = tick
        self.clock = clock
        self.report = SubscriberReport()
        self.capabilities: Capabilities | None = None
        self.unrecoverable: list[Unrecoverable] = []
        self.on_image = on_image
        self.resync_on_unrecoverable = resync_on_unrecoverable
        self.resyncs: list[ImageResynced] = []
        """The image requests answered, oldest first."""
        self.resyncs_asked: list[ImageRequest] = []
        """The image requests ``resync_on_unrecoverable`` made, oldest first."""
        self.images_refused: list[ImageRefused] = []
        """The image requests given up (rejected, or unanswered), oldest first."""
        self._image_asks: deque[ImageRequest] = deque()  # from other threads (request_image)
        self._images_handed: set[int] = set()  # ids of images queued for the iterator
        self._ids = itertools.count(1)
        self._outbox: deque[Outgoing] = deque()
        self._asking: dict[object, tuple[Asked, ...]] = {}  # by message id
        # image requests queued while this connection is being made (before the resend)
        self._images_here: set[int | None] | None = set()
        self._receiver: Any = None
        self._control: Any = None
        self._attached_once = False
        self._epoch: str | None = None  # the link context the stub is in, as the component names it
        # where the subscription started per source (the component's first attach reply): kept
        # so a component that lost the context replays sources not yet delivered from there
        self._start: dict[str, int] | None = None
        self._began: tuple[dict[str, int], bool] | None = None
        self.log = log.bind(link=self.link_name, topic=address)

    # --- public API ---------------------------------------------------------------------

    @property
    def began(self) -> tuple[dict[str, int], bool] | None:
        """Where this subscriber's first attach started it, per source (the reply's
        ``seqrepair-start-after``: what comes is after it), and whether that is a durable
        subscription's stored position resumed (reply ``seqrepair-durable`` true; false: a
        new subscription, or none kept); None before the component answered. Read it in the
        client's thread (the callbacks) or once :meth:`wait_connected` returned."""
        return self._began

    def request_image(
        self, topics: Sequence[str] = (), patterns: Sequence[str] = (),
        sources: Sequence[str] = (),
    ) -> None:
        """Ask the component for the current image of ``topics`` and of the items matching
        ``patterns`` (of ``sources`` only, when given); safe from any thread. The images come
        to ``on_image`` (see the class), then an :class:`ImageResynced` to ``on_event`` and
        :attr:`resyncs`; or, when it is given up (the component rejected it for good, or for
        now until the retries ran out, or it got no answer), an :class:`ImageRefused` naming
        why to ``on_event`` and :attr:`images_refused`. A request that cannot be made (no
        topic nor pattern, a malformed one, too many) raises a
        :class:`~seqrepair.core.errors.SeqRepairError` at once."""
        self._image_asks.append(ImageRequest(tuple(topics), tuple(patterns), tuple(sources)))
        if self._injector is not None:
            self._injector.trigger(ApplicationEvent("seqrepair_image"))

    def on_seqrepair_image(self, event: Any) -> None:
        """Image requests made (:meth:`request_image`): ask the stub, send them."""
        while self._image_asks:
            asked = self._image_asks.popleft()
            self._perform(self.stub.request_image(asked.topics, asked.patterns, asked.sources))
        self._flush()

    def drop_connection(self) -> None:
        """Tear down the transport abruptly (tests: a lost connection); it reconnects."""
        if self._injector is not None:
            self._injector.trigger(ApplicationEvent("seqrepair_drop"))

    # --- proton events ------------------------------------------------------------------

    def _connect(self) -> None:
        identity = {} if self.container_id is None else {"container_id": self.container_id}
        self._conn = self._container.connect(
            self.security.url(self.url), reconnect=False, heartbeat=self.idle_timeout,
            desired_capabilities=["RESPONSE_ANNOTATIONS_V1_0"], **identity,
            **self.security.connect_kwargs(self.url),
        )
        props: dict[symbol, Any] = {**self.link_properties, PROP_BATCH: self.batch,
                                    PROP_RESUME: self._attached_once,
                                    PROP_ACK: self.ack, PROP_DURABLE: self.durable}
        if self._epoch is not None:
            props[PROP_EPOCH] = self._epoch
        if self._start is not None:
            props[PROP_START] = {source: ulong(seq) for source, seq in self._start.items()}
        if self.permtokens:
            props[PROP_GRANTS] = ",".join(self.permtokens)
        self._receiver = self._container.create_receiver(
            self._conn, self.address, name=self.link_name,
            options=LinkProperties(props, self.max_message_size),
        )
        # sent unsettled: a request the component rejects (its replay room, the request rate)
        # is rejected at the delivery, and a pre-settled one's rejection never comes back
        self._control = self._container.create_sender(self._conn, CONTROL_ADDRESS)
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
        self._ack(now)
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
            if attach_refused(event.link):  # its empty reply says nothing of the numbering
                self._flush()
                return
            props = plain_properties(event.link.remote_properties)
            start = props.get(str(PROP_START))
            if self._start is None and isinstance(start, Mapping):
                try:
                    self._start = {str(k): int(v) for k, v in start.items()}
                except (TypeError, ValueError):
                    self.log.warning("unreadable seqrepair-start-after ignored", value=start)
            if self._began is None:
                self._began = (dict(self._start or {}),
                               props.get(str(PROP_DURABLE)) is True)
            try:
                self._follow(props)
            except SettingsMismatchError as exc:
                self.log.error("settings contradict the component's", error=exc.message)
                self._fail(exc)
                return
            epoch = props.get(str(PROP_EPOCH))
            if self._epoch is None and props.get(str(PROP_DURABLE)) is True:  # durable.py
                self._perform(self.stub.link_reset(self.clock()))
            self._enter_epoch(None if epoch is None else str(epoch))
            if self._accepted(event.link):
                self.connected.set()
            self._resend_images()
            if self._image_asks:
                self.on_seqrepair_image(None)
        self._flush()

    def _resend_images(self) -> None:
        """The image requests not yet answered, again on this connection: an answer cut off
        by a lost connection never ends. Not those asked while it was being made: queued on it
        already (twice, they would take two of the component's image answer rooms)."""
        here, self._images_here = self._images_here or set(), None
        for asked in self.stub.resend_images(self.clock()):
            if asked.request_id not in here:  # else asked while connecting: queued already
                self._request(encode(asked), (asked,))

    def on_sendable(self, event: Any) -> None:
        self._flush()

    def _main_links(self) -> dict[str, Any]:
        return {"data": self._receiver, "control": self._control}

    def _forget_connection(self, conn: Any) -> None:
        if getattr(conn, "seqrepair_attached", False):
            self.report.disconnections += 1
        self._outbox.clear()
        self._asking.clear()
        self._images_here = set()
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
        delivery = event.delivery
        if getattr(delivery, "seqrepair_rejected", False):
            # proton calls this at every update of a rejected delivery (its state, then its
            # settlement, when they come in two dispositions): one rejection, counted once
            return
        delivery.seqrepair_rejected = True
        self.report.rejected += 1
        cond = delivery.remote.condition
        name = cond.name if cond else None
        asked = getattr(delivery, "seqrepair_asked", ())
        delivery.seqrepair_asked = ()  # told once
        self.log.warning("request rejected", condition=name,
                         description=cond.description if cond else None, requests=len(asked))
        # no answer comes for it: the stub takes it as refused (asks again or gives it up)
        now = self.clock()
        for request in asked:
            if isinstance(request, ImageRequest):  # a SNAPSHOT (stubimages)
                self._perform(self.stub.image_rejected(request, name, now))
            else:
                self._perform(self.stub.request_rejected(request, name, now))
        self._flush()

    def on_message(self, event: Any) -> None:
        now = self.clock()
        delivery = event.delivery
        if delivery.settled:  # sent pre-settled (the component's frames): only free it here
            delivery.settle()
        else:  # a peer that waits for an outcome: the frame is taken (repair covers the rest)
            self.accept(delivery)
        message = event.message
        if getattr(message, "body_at", None) is not None and type(self.decoder) is Decoder:
            # a list body left unread (a decoder of its own reads it its own way)
            read = read_publications(message, self.decoder, entries=False)
            if read is not None:  # a batch of regular publications, read in one pass
                self._took(read[0], now)
                return
            message = decode_message(message._raw)  # read (or refused) the usual way
        try:
            decoded = self.decoder.decode(message)
        except SeqRepairError as exc:
            self.log.warning("undecodable message dropped", error=exc.message)
            return
        frames: list[object] = []  # a transfer's frames go to the stub together
        items = decoded
        if len(decoded) == 1 and isinstance(decoded[0], Publication | Heartbeat):
            props = message.properties
            if props and self._epoch is not None and props.get(TAIL_PROBE) == self._epoch:
                # the component's tail probe: its current context's newest frame (WIRE.md)
                self._perform(self.stub.receive_tail_probe(decoded[0], now))
                items = []
        for item in items:
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
        self._took(frames, now, len(decoded))

    def _took(self, frames: Sequence[object], now: float, items: int | None = None) -> None:
        """The rest of a transfer's handling: its ``frames`` to the stub (if any), then the
        window discipline; ``items``: what the transfer carried (default: the frames)."""
        if frames:
            self._take(frames, now)
        self._listening(now)
        acks = self.numbering.acks
        if acks is not None and acks.received(len(frames) if items is None else items):
            self._ack(now)  # a quarter window came since the last ACK (else: the tick's)
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

    def _take(self, frames: Sequence[object], now: float) -> None:
        events = self.stub.receive_many(frames, now)
        if self.on_event is None and len(events) == 1 and type(events[0]) is DeliveredRun:
            self._deliver_run(events[0].publications)  # the usual outcome, in short
        else:
            self._perform(events)

    def _deliver_run(self, publications: Sequence[Publication]) -> None:
        """:meth:`_deliver` for each of a run, in order, with what was taken said once per
        source for the run: the last publication of each whose callback returned (the same
        positions as one :meth:`TakenPositions.take` each, since an ACK is drained on this
        thread, not while the run is delivered)."""
        deliver = self.on_publication
        if deliver is None or not self.acknowledge_on_return:
            for publication in publications:
                self._deliver(publication)
            return
        newest: dict[str, Publication] = {}
        try:
            for publication in publications:
                deliver(publication)
                newest[publication.source] = publication
        finally:
            take = self.taken.take
            for publication in newest.values():
                take(publication)

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
        lost: list[Unrecoverable] = []
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
                self._request(encode(ev.request), (ev.request,))
            elif isinstance(ev, Unrecoverable):
                self.unrecoverable.append(ev)
                lost.append(ev)
                self.log.warning("unrecoverable", source=ev.source, after=ev.after,
                                 reason=ev.reason, link_from=ev.link_from, link_to=ev.link_to,
                                 items=ev.items)
            elif isinstance(ev, RequestImage):
                self.log.info("image requested", topics=ev.request.topics,
                              patterns=ev.request.patterns, sources=ev.request.sources,
                              request_id=ev.request.request_id)
                self._request(encode(ev.request), (ev.request,))
            elif isinstance(ev, ImageDelivered):
                self._deliver_image(ev.publication)
            elif isinstance(ev, ImageResynced):
                self.resyncs.append(ev)
                self._taken_as_of(ev)
                self.log.info("images received", request_id=ev.request.request_id,
                              items=len(ev.topics), as_of=dict(ev.as_of),
                              partial=list(ev.partial))
            elif isinstance(ev, ImageRefused):
                self.images_refused.append(ev)
                self.log.warning("image request refused", reason=ev.reason,
                                 request_id=ev.request.request_id, topics=ev.request.topics,
                                 patterns=ev.request.patterns, sources=ev.request.sources)
            elif isinstance(ev, ImageOutdated):  # overtaken by the stream: ask again
                self.log.info("image outdated, asked again", topic=ev.publication.topic)
                self._perform(self.stub.request_image([ev.publication.topic],
                                                      sources=[ev.publication.source]))
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
            chunk = gaps[start : start + 256]
            self._request(encode_gap_requests(chunk), tuple(chunk))
        if lost and self.resync_on_unrecoverable:
            self._resync(lost)

    def _resync(self, lost: list[Unrecoverable]) -> None:
        """Ask for the images of what ``lost`` (one call's Unrecoverable events) affects:
        the items they name, else every item of their sources the link may see (the
        component filters by the link's entitlement: ``/#`` asks for exactly those)."""
        sources = [] if any(u.source is None for u in lost) else sorted(
            {u.source for u in lost if u.source is not None})
        if all(u.items is not None for u in lost):
            topics = sorted({t for u in lost for t in u.items or ()})
            if topics:
                self._perform(self._asked(self.stub.request_image(topics, sources=sources)))
            return
        self._perform(self._asked(self.stub.request_image(patterns=["/#"], sources=sources)))

    def _asked(self, events: list[Event]) -> list[Event]:
        self.resyncs_asked += [e.request for e in events if isinstance(e, RequestImage)]
        return events

    def resynced(self) -> bool:
        """Whether every :class:`Unrecoverable` so far was made good: there was none, or
        ``resync_on_unrecoverable`` asked for the images of what each affected and every
        such request was answered (an ``Unrecoverable`` naming no item it may see needs
        none)."""
        if not self.unrecoverable:
            return True
        if not self.resync_on_unrecoverable:
            return False
        answered = {r.request for r in self.resyncs}
        return all(request in answered for request in self.resyncs_asked)

    def _taken_as_of(self, resync: ImageResynced) -> None:
        """An answer for every item the link may see (``/#``) of its sources: the application
        holds each source as of ``as_of`` (its callbacks returned), so that is its position
        there (a restart resumes after it, not before the images). Only when deliveries are
        taken on return; an iterator's reader takes its images later."""
        if (
            "/#" in resync.request.patterns
            and self.acknowledge_on_return
            and (self.on_image is not None or self.on_publication is not None)
        ):
            self.taken.take_all(resync.as_of)

    def _deliver_image(self, publication: Publication) -> None:
        """An image to ``on_image``, else where deliveries go; never counted as taken."""
        if self.on_image is not None:
            self.on_image(publication)
        elif self.on_publication is not None:
            self.on_publication(publication)
        elif self._thread is not None:
            self._images_handed.add(id(publication))
            self._queue.put(publication, self._stopped)

    def _taken(self, publication: Publication) -> None:
        if id(publication) in self._images_handed:  # an image moves no position
            self._images_handed.discard(id(publication))
            return
        super()._taken(publication)

    def _request(self, message: Outgoing, asked: tuple[Asked, ...] = ()) -> None:
        """Queue ``message`` for the requests link; ``asked``: the repair or image requests it
        holds, passed to the stub if the component rejects its delivery (:meth:`on_rejected`)."""
        message.id = next(self._ids)
        if asked:
            self._asking[message.id] = asked
            if self._images_here is not None:
                self._images_here.update(
                    a.request_id for a in asked if isinstance(a, ImageRequest))
        message.reply_to = LINK_PREFIX + self.link_name
        props: dict[Any, Any] = dict(message.properties or {})
        props[PROP_LINK] = self.link_name
        message.properties = props
        self._outbox.append(message)

    def _follow(self, props: Mapping[str, Any]) -> None:
        """Configure the stub from the attach reply (acks.py): width, heartbeat interval,
        widest gap range, window."""
        stub = self.numbering.attached(props, self.stub)
        if stub is not self.stub:
            self.stub = stub
            self.decoder = Decoder(link_bits=stub.bits, unwrapper=self.decoder.unwrapper,
                                   max_publications=self.decoder.max_publications)

    def _ack(self, now: float) -> None:
        """Tell the component how far the stub has got, when it is time (acks.py)."""
        acks = self.numbering.acks
        if acks is not None and self._control is not None:
            ack = acks.due(self._epoch, consumed_through(self.stub), now)
            if ack is not None:
                self._outbox.append(encode(ack))

    def _flush(self) -> None:
        control = self._control
        while self._outbox and control is not None and control.credit > 0:
            message = self._outbox.popleft()
            delivery = control.send(message)
            asked = self._asking.pop(message.id, ())
            if asked:
                delivery.seqrepair_asked = asked

    def stats(self) -> SubscriberReport:
        """The stub's counters merged into the adapter's report."""
        return self.report.update(self.stub.stats)

    def query_capabilities(self) -> None:
        """Ask the component for its capabilities; the answer lands in :attr:`capabilities`."""
        self._request(encode(CapabilitiesRequest()))
