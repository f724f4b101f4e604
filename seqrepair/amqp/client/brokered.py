"""Brokered mode: publish and subscribe through a third-party AMQP 1.0 broker (RabbitMQ).

The broker is not our component: it numbers no links, keeps no link context and answers no
gap requests. What survives the trip is each publication's source number, so

* :class:`BrokerPublisher` journals first (the embedded
  :class:`~seqrepair.journal.publisher.Publisher`) and only then hands each publication to a
  proton sender targeting a broker address, **one publication per message**: the
  application-properties of a ``PUBLICATION`` (WIRE.md) and an AMQP map body of fields, which
  any AMQP client and the broker carry untouched (nulls included). Sending to
  ``/exchange/NAME`` with no routing key sets each message's ``subject`` (RabbitMQ's routing key)
  from its topic: ``/weather/wind/LEMD`` -> ``weather.wind.LEMD``.
* :class:`BrokerSubscriber` receives from a broker address (``/queue/NAME``,
  ``/exchange/NAME/KEY``...) and orders by source number with the core's
  :class:`~seqrepair.core.sourcegaps.SourceGapDetector`: it detects gaps per source and
  repairs them from the Redis journal directly, in process (the journal is the repair
  authority): each ``RequestSourceGap`` is answered by the journal's
  :class:`~seqrepair.journal.gapfill.GapFillService` with the subscriber's own entitlement,
  and the replay is fed back to the detector. Deliveries are in per-source order, exactly once.

A subscriber starts after ``start_after`` per source: by default the journal's high-waters
when it is created (it is owed everything published since it subscribed; a source born later
from its first number). A restarted subscriber passes the last numbers it delivered (its
:meth:`BrokerSubscriber.resume_point`, or what its output already holds) and continues
exactly once. Broker deliveries are accepted once handed to the detector: what a crash loses
in flight the journal repairs.

Both take ``security=`` as the direct clients do (:class:`ClientSecurity`): an ``amqps://``
broker URL or a CA turns TLS on and checks the broker's certificate and host name, a client
certificate goes to SASL ``EXTERNAL``, a user and password to whichever of ``PLAIN`` or
``SCRAM-SHA-*`` the broker offers (RabbitMQ offers ``PLAIN`` and ``AMQPLAIN``; proton never
sends ``PLAIN`` in the clear, so it needs TLS).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from proton import Message

from seqrepair.amqp.client.runner import DEFAULT_MAX_QUEUED, PublisherRunner, SubscriberRunner
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.amqp.wire.framing import encode_frame
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.technical import DEFAULT_LINK_BITS
from seqrepair.core.budget import RefusalPolicy
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.events import (
    BufferOverflow,
    Delivered,
    Event,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.messages import GapError, Publication, PublishType, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sourcegaps import SourceGapDetector, SourceGapStats
from seqrepair.journal.errors import JournalError
from seqrepair.journal.gapfill import GapFillService
from seqrepair.journal.publisher import Publisher as JournalPublisher
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

log = get_logger(__name__)

EXCHANGE_PREFIX = "/exchange/"


class BrokerError(AmqpAdapterError):
    """The broker refused a link or a publication, or could not be reached."""

    condition = "amqp:internal-error"


def routing_key(topic: str) -> str:
    """A topic as an AMQP 0-9-1 topic-exchange routing key: ``/a/b/c`` -> ``a.b.c``."""
    return topic.strip("/").replace("/", ".")


def needs_subject(address: str) -> bool:
    """Whether ``address`` is an exchange without a routing key (the subject routes)."""
    return address.startswith(EXCHANGE_PREFIX) and "/" not in address[len(EXCHANGE_PREFIX):]


# ------------------------------------------------------------------------------ publisher


class BrokerPublisher(PublisherRunner[Publication]):
    """Journals a source's publications, then sends each as one message to a broker address.

    ``drop(publication) -> bool`` is a forced-loss hook (tests, demos): a publication it
    returns True for is journaled but never sent, so subscribers must repair it.
    Deliveries stay unsettled until the broker accepts them and are sent again after a
    reconnect (a duplicate is dropped by the subscriber). Reconnects back off as the
    component-mode clients' do: ``reconnect_delay``, doubled per failed attempt up to
    ``max_reconnect_delay``, jittered, and from the start again once the broker has accepted
    the sender link.

    The broker may refuse or end the sender without dropping the connection. RabbitMQ ends the
    link's *session* with ``amqp:not-found`` when the exchange does not exist (at the attach,
    or at the next transfer once it was deleted) and with ``amqp:unauthorized-access`` when
    the user may not write to it (at the first transfer, also after a permission is revoked);
    another broker may detach the link. As the direct :class:`~seqrepair.amqp.client.Publisher`
    does (:class:`~seqrepair.amqp.client.runner.PublisherRunner`): a condition in
    :data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS` stops the publisher, :attr:`error` names
    it and :meth:`flush` (and :meth:`close`) return False at once; the journal still holds
    what was published, for subscribers to repair. Any other detach, end or close (another
    condition, or none) is a lost connection: it reconnects with its backoff and sends the
    unsettled publications again, in order, before anything newer.
    """

    refusal_error = BrokerError

    def __init__(
        self,
        url: str,
        source: str,
        journal: Journal,
        *,
        address: str,
        bits: int = 32,
        batch_size: int = 256,
        max_unsettled: int = 512,
        drop: Callable[[Publication], bool] | None = None,
        reconnect_delay: float = 0.2,
        max_reconnect_delay: float = 5.0,
        idle_timeout: float = 10.0,
        security: ClientSecurity = NO_CLIENT_SECURITY,
    ) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnect_delay=max_reconnect_delay)
        self.url = url
        self.security = security
        self.address = address
        self.bits = bits
        self.max_unsettled = max_unsettled
        self.drop = drop
        self.idle_timeout = idle_timeout
        self._subject = needs_subject(address)
        self.embedded = JournalPublisher(
            source, journal, bits=bits, transport=self._hand_off, batch_size=batch_size
        )
        self.sent = 0
        self.accepted = 0
        self.rejected = 0
        self.dropped = 0
        self.error: BrokerError | None = None
        """Why it stopped by itself: the broker refused or ended the sender with a condition in
        :data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS`; the message starts with the
        condition (``amqp:not-found: NOT_FOUND - no exchange ...``), ``got`` is :attr:`address`."""
        self.log = log.bind(source=source, address=address)

    @property
    def source(self) -> str:
        """The source this publisher numbers."""
        return self.embedded.source

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
        """Stamp and journal one publication, then queue it for the broker; thread-safe."""
        with self._lock:
            pub = self.embedded.publish(topic, fields, ptype, permtoken=permtoken,
                                        timestamp=timestamp)
            self.embedded.flush()
        self._wake()
        return pub

    def publish_many(self, items: Sequence[tuple[Any, ...]]) -> list[Publication]:
        """Several ``(topic, fields, ptype[, permtoken])``: journaled in batches, then sent."""
        with self._lock:
            pubs = [
                self.embedded.publish(item[0], item[1], item[2],
                                      permtoken=item[3] if len(item) > 3 else None)
                for item in items
            ]
            self.embedded.flush()
        self._wake()
        return pubs

    def _thread_name(self) -> str:
        return f"pub-{self.source}"

    def close(self, timeout: float = 30.0) -> bool:
        """Flush, close the connection, stop the thread. False if not everything was accepted."""
        done = super().close(timeout)
        self.embedded.close()
        return done

    # --- hand-off and sending -----------------------------------------------------------

    def _hand_off(self, pub: Publication) -> None:
        """The journal holds ``pub`` (called under the lock): queue it unless dropped."""
        if self.drop is not None and self.drop(pub):
            self.dropped += 1
            return
        self._pending.append(pub)

    def message(self, pub: Publication) -> Message:
        """One publication as one message of the wire format."""
        message = encode_frame(pub, self.bits)
        if self._subject:
            message.subject = routing_key(pub.topic)
        return message

    def _send(self) -> None:
        sender = self._sender
        if sender is None:
            return
        while sender.credit > 0 and len(self._unsettled) < self.max_unsettled:
            with self._lock:
                if not self._pending:
                    return
                pub = self._pending.popleft()
            delivery = sender.send(self.message(pub))
            self._unsettled[delivery] = pub
            self.sent += 1

    # --- proton events ------------------------------------------------------------------

    def _settled(self, event: Any) -> Publication | None:
        pub = self._unsettled.pop(event.delivery, None)
        self._notify()
        return pub

    def on_accepted(self, event: Any) -> None:
        if self._settled(event) is not None:
            self.accepted += 1
        self._send()

    def on_rejected(self, event: Any) -> None:
        pub = self._settled(event)
        cond = event.delivery.remote.condition
        self.rejected += 1
        # the journal holds it: subscribers repair it, nothing is lost
        self.log.warning("broker rejected a publication",
                         source_seq=None if pub is None else pub.source_seq,
                         condition=cond.name if cond else None)
        self._send()

    def on_released(self, event: Any) -> None:
        pub = self._unsettled.pop(event.delivery, None)
        if pub is not None:
            with self._lock:
                self._pending.appendleft(pub)
        self._send()

    on_modified = on_released

    def _requeue_unsettled(self) -> None:
        self._pending.extendleft(reversed(list(self._unsettled.values())))  # in the order sent
        self._unsettled.clear()


# ------------------------------------------------------------------------------ subscriber


@attrs.define
class BrokerSubscriberReport:
    """What a brokered subscriber did: the detector's counters plus the adapter's own."""

    detector: SourceGapStats
    received: int = 0
    undecodable: int = 0
    replays: int = 0
    replayed: int = 0
    journal_errors: int = 0
    connections: int = 0
    disconnections: int = 0

    def as_dict(self) -> dict[str, int]:
        """All counters as one flat dict."""
        out = attrs.asdict(self.detector)
        out.update({k: v for k, v in attrs.asdict(self).items() if k != "detector"})
        return out


class BrokerSubscriber(SubscriberRunner):
    """Receives from a broker address; orders, dedupes and repairs per source from the journal.

    ``topics``/``permtokens`` make the subscriber's :class:`Entitlement`: what the journal may
    replay to it and what it delivers from the broker. A queue bound to part of a source's
    stream needs the same filter here (see :mod:`seqrepair.core.sourcegaps`).

    A lost connection is made again after ``reconnect_delay``, doubled per failed attempt up to
    ``max_reconnect_delay``, jittered, and from the start again once the broker has accepted
    the receiving link; what it missed meanwhile the journal repairs.

    The broker may refuse or end the receiver without dropping the connection: RabbitMQ ends
    the link's *session*, with ``amqp:not-found`` for a queue or exchange that does not exist
    and ``amqp:unauthorized-access`` for one the user may not read; another broker may detach
    the link or close the connection. As the publishers do
    (:class:`~seqrepair.amqp.client.runner.SubscriberRunner`): a condition in
    :data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS` stops the subscriber, :attr:`error` names
    it, :meth:`run` returns and the iterator ends. Any other detach, end or close (another
    condition, or none) is a lost connection: it reconnects with its backoff.

    Deliveries go to ``on_publication``, or (started with :meth:`start` without one) to the
    iterator, where at most ``max_queued`` wait for the reader before the subscriber waits too.
    """

    refusal_error = BrokerError

    def __init__(
        self,
        url: str,
        address: str,
        journal: Journal,
        *,
        start_after: Mapping[str, int] | None = None,
        topics: Sequence[str] = ("/#",),
        permtokens: Sequence[str] = (),
        on_publication: Callable[[Publication], None] | None = None,
        on_event: Callable[[Event], None] | None = None,
        nak_delay: float = 0.05,
        probe_interval: float | None = 1.0,
        retry_interval: float = 1.0,
        max_buffer: int = 100_000,
        credit: int = 500,
        max_queued: int = DEFAULT_MAX_QUEUED,
        idle_timeout: float = 10.0,
        reconnect_delay: float = 0.2,
        max_reconnect_delay: float = 5.0,
        tick: float = 0.02,
        link_name: str | None = None,
        clock: Callable[[], float] = time.time,
        security: ClientSecurity = NO_CLIENT_SECURITY,
    ) -> None:
        super().__init__(credit=credit, reconnect_delay=reconnect_delay,
                         max_reconnect_delay=max_reconnect_delay, max_queued=max_queued)
        self.url = url
        self.security = security
        self.address = address
        self.journal = journal
        self.link_name = link_name or f"brokered-{uuid.uuid4()}"
        self.on_publication = on_publication
        self.on_event = on_event
        self.idle_timeout = idle_timeout
        self.tick = tick
        self.clock = clock
        self.entitlement = Entitlement(topics=tuple(topics), grant=frozenset(permtokens))
        if start_after is None:
            start_after = self._high_waters()
        self.service = GapFillService(journal, policy=RefusalPolicy(
            max_range=1 << 62, budget_capacity=1 << 62, budget_refill_per_second=1e18))
        self.service.attach(self.link_name, self.entitlement, start_after=start_after)
        self.detector = SourceGapDetector(
            start_after=dict(start_after), entitlement=self.entitlement, nak_delay=nak_delay,
            probe_interval=probe_interval, retry_interval=retry_interval,
            max_buffer=max_buffer,
        )
        self.decoder = Decoder(link_bits=DEFAULT_LINK_BITS)
        for source, after in start_after.items():
            self.decoder.unwrapper.seed(source, after)
        self.report = BrokerSubscriberReport(detector=self.detector.stats)
        self.unrecoverable: list[Unrecoverable] = []
        self.error: BrokerError | None = None
        """Why it stopped by itself: the broker refused or ended the receiver with a condition
        in :data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS`; the message starts with the
        condition (``amqp:not-found: NOT_FOUND - no queue ...``), ``got`` is :attr:`address`."""
        self._receiver: Any = None
        self.log = log.bind(link=self.link_name, address=address)

    def _high_waters(self) -> dict[str, int]:
        sources = self.journal.sources()
        return {s: hw for s, (hw, _trimmed) in self.journal.high_waters(sources).items()}

    # --- public API ---------------------------------------------------------------------

    def resume_point(self) -> SourceGapRequest:
        """The last number delivered per source: ``start_after`` for a restarted subscriber."""
        return self.detector.resume_point()

    def stats(self) -> BrokerSubscriberReport:
        """The counters (the detector's are live)."""
        return self.report

    # --- proton events ------------------------------------------------------------------

    def _connect(self) -> None:
        self._conn = self._container.connect(self.security.url(self.url), reconnect=False,
                                             heartbeat=self.idle_timeout,
                                             **self.security.connect_kwargs(self.url))
        self._receiver = self._container.create_receiver(self._conn, self.address,
                                                         name=self.link_name)

    def _on_tick(self) -> None:
        self._perform(self.detector.poll(self.clock()))

    def on_link_opened(self, event: Any) -> None:
        if event.link == self._receiver:
            self.report.connections += 1
            self.log.info("attached to broker", connections=self.report.connections)
            if self._accepted(event.link):
                self.connected.set()

    def _main_links(self) -> dict[str, Any]:
        return {"receiver": self._receiver}

    def _forget_connection(self, conn: Any) -> None:
        self.report.disconnections += 1
        self._receiver = None

    def on_message(self, event: Any) -> None:
        self.report.received += 1
        now = self.clock()
        try:
            decoded = self.decoder.decode(event.message)
        except SeqRepairError as exc:
            self.report.undecodable += 1
            self.log.warning("undecodable message rejected", error=exc.message)
            self.reject(event.delivery)
            return
        for item in decoded:
            if isinstance(item, Publication):
                if item.link_seq is not None:  # not ours to read through a broker
                    item = item.with_link(None)
                self._perform(self.detector.receive(item, now))
            else:
                self.log.info("ignored on a brokered stream", kind=type(item).__name__)
        self.accept(event.delivery)

    # --- performing the detector's events -----------------------------------------------

    def _perform(self, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, Delivered):
                self._deliver(ev.publication)
            elif isinstance(ev, RequestSourceGap):
                self._repair(ev.request)
            elif isinstance(ev, Unrecoverable):
                self.unrecoverable.append(ev)
                self.log.warning("unrecoverable", source=ev.source, after=ev.after,
                                 reason=ev.reason)
            elif isinstance(ev, BufferOverflow):
                self.log.warning("reorder buffer overflow", limit=ev.limit)
            if self.on_event is not None:
                self.on_event(ev)

    def _repair(self, request: SourceGapRequest) -> None:
        """Answer ``request`` from the journal, in process, and feed the answer back."""
        now = self.clock()
        self.report.replays += 1
        try:
            answer = self.service.answer_source_gap(self.link_name, request, now)
            frames: Any = [answer] if isinstance(answer, GapError) else answer
            for frame in frames:
                if isinstance(frame, Publication):
                    self.report.replayed += 1
                self._perform(self.detector.receive(frame, self.clock()))
        except JournalError as exc:
            # the request stays outstanding: the detector retries it after retry_interval
            self.report.journal_errors += 1
            self.log.warning("journal unavailable for repair", error=exc.message)
