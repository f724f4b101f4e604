"""The pubsub component (``seqrepair serve``): an AMQP 1.0 listener over proton's Container.

Addresses (WIRE.md has the full table):

* a publisher attaches a *sending* link whose target is a topic (``/weather/wind/LEMD``) or a
  pattern it may publish under (``/weather/#``); or the anonymous target, with each message's
  ``to`` naming its topic (:mod:`.publishing`);
* a subscriber attaches a *receiving* link whose source is a topic pattern (``/weather/#``) or
  a subscription queue (``/subscriptions/ID``, :mod:`.subqueues`); the AMQP link name is the
  link's identity for resumption (the attach, resumed or a new link context: :mod:`.attach`);
* requests (GAP-REQUEST, SOURCE-GAP-REQUEST, CAPABILITIES) go to ``$seqrepair``, which offers
  ``response-address-supported``; answers go to ``reply-to`` (``$link/NAME``, a subscriber's
  own link) with the request's ``message-id`` as ``correlation-id``, or, when the request
  carries response annotations, over a link to ``response-link-target-address`` with the
  ``address-cookie`` echoed (:mod:`.requests`).

This module is the event loop: the proton events, connections and attaches (gate and
admission), the timer (heartbeats, memory guard) and the sending pumps; it dispatches a link's
messages to :mod:`.publishing` or :mod:`.requests`, and what ends to :mod:`.detach`.

A subscriber's permission tokens are the component's decision
(:mod:`seqrepair.amqp.component.grants`): the grant of the connection's principal, which the link
property ``seqrepair-permtokens`` may narrow but never widen; live delivery and repair use that one
entitlement.

Every publication is journaled before fan-out (:mod:`.ingest`). Bad input is rejected with an
AMQP error condition on that delivery or link only; every other connection keeps being served.
A message past ``max_message_size`` is refused as its bytes arrive, its link detached
(:mod:`.sizelimit`).
A message the journal could not take for now is released where a resend is safe
(:mod:`.holdback`); what an append whose answer was lost did journal goes out on the timer
(:meth:`.ingest.Ingest.poll`).
"""

from __future__ import annotations

import functools
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

import attrs
from proton import Condition, Delivery, Endpoint
from proton.handlers import MessagingHandler

from seqrepair.amqp.component.attach import open_subscriber
from seqrepair.amqp.component.authz import acting_for
from seqrepair.amqp.component.config import Bucket
from seqrepair.amqp.component.config import ComponentConfig as ComponentConfig
from seqrepair.amqp.component.contributions import Contributions
from seqrepair.amqp.component.detach import (
    detach_for_memory,
    end_links,
    end_revoked,
    expire_context,
    forget,
    forget_connection,
)
from seqrepair.amqp.component.durable import Durables
from seqrepair.amqp.component.fairness import RepairTurns, TurnBudget
from seqrepair.amqp.component.images import ImageFetcher
from seqrepair.amqp.component.ingest import Ingest
from seqrepair.amqp.component.journalfeed import journal_feed
from seqrepair.amqp.component.journalport import RedisJournalPort
from seqrepair.amqp.component.links import ResponseRoute, SubscriberLink
from seqrepair.amqp.component.memory import MemoryGuard
from seqrepair.amqp.component.publishing import fan_out, on_publish, open_publisher, oversized
from seqrepair.amqp.component.replaywire import entry_matches
from seqrepair.amqp.component.requests import capabilities, on_request, open_control
from seqrepair.amqp.component.routing import MAX_RESPONSE_TARGETS as MAX_RESPONSE_TARGETS
from seqrepair.amqp.component.sourcelimits import SourceLimits
from seqrepair.amqp.component.sourceviews import SourceViews
from seqrepair.amqp.component.subqueues import SubscriptionChanges, apply_change
from seqrepair.amqp.wire.admission import Admission
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.errors import (
    AmqpAdapterError,
    NotImplementedAnnotationError,
    condition_info,
    link_refusal,
)
from seqrepair.amqp.wire.gate import Gate
from seqrepair.amqp.wire.guard import Guarded
from seqrepair.amqp.wire.hops import Hops, default_hop_id
from seqrepair.amqp.wire.rawamqp import read_raw
from seqrepair.amqp.wire.reactor import (
    Call,
    accept_in_batches,
    listening_address,
    make_container,
    write_now,
)
from seqrepair.amqp.wire.refusal import null_terminus
from seqrepair.amqp.wire.respann import RESPONSE_ANNOTATIONS, RESPONSE_COOKIE
from seqrepair.amqp.wire.security import principal_of
from seqrepair.amqp.wire.sizelimit import limit_size
from seqrepair.amqp.wire.technical import ABSOLUTE_SOURCE_BITS, Capabilities
from seqrepair.amqp.wire.vocabulary import (
    CONTRIBUTE_PREFIX,
    CONTRIBUTIONS_PREFIX,
    CONTROL_ADDRESS,
)
from seqrepair.core.budget import RefusalPolicy
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import (
    Heartbeat,
    Publication,
)
from seqrepair.core.subscriptions import Subscription as Subscription
from seqrepair.core.window import window_size
from seqrepair.journal.errors import JournalResponseError, JournalUnavailableError
from seqrepair.journal.gapfill import GapFillService
from seqrepair.journal.journal import Journal
from seqrepair.journal.lacking import Fetcher
from seqrepair.journal.recent import RecentEntries
from seqrepair.logs import get_logger
from seqrepair.rest.catalog import SharedCatalog
from seqrepair.rest.manager import SubscriptionManager

log = get_logger("seqrepair.amqp.component")


class Component(MessagingHandler):
    """The proton handler of the pubsub component. ``make_container(Component(...)).run()``.

    ``subscriptions``: the subscription manager to serve ``/subscriptions/<id>`` from (it
    holds the configured ones too); by default one holding ``config.subscriptions``.
    ``topics``: the catalog that learns the topic of every publication fanned out (what the
    REST API lists under ``/topics``); by default one of its own, in memory.
    """

    def __init__(
        self,
        config: ComponentConfig,
        journal: Journal,
        *,
        clock: Callable[[], float] = time.time,
        on_ready: Callable[[str], None] | None = None,
        subscriptions: SubscriptionManager | None = None,
        topics: SharedCatalog | None = None,
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        read_raw(self)
        limit_size(self, functools.partial(oversized, self))
        config.security.check(config.url)  # InvalidConfigError: it would let in whom it must not
        self.config = config
        self.listening = config.url  # host:port bound (the chosen port when url names port 0)
        self.listen_error: str | None = None
        """Why it could not listen (its address taken...): it stopped at once then."""
        self.clock = clock
        self._stop_requested = False
        self.on_ready = on_ready
        self.decoder = Decoder(
            link_bits=config.link_bits, max_publications=config.max_publish_batch
        )
        self.stats = {"ingested": 0, "duplicates": 0, "rejected": 0, "released": 0, "requests": 0,
                      "trimmed_unsent": 0, "oversized": 0, "acks": 0, "acks_ignored": 0,
                      "window_peak": 0, "replays_refused": 0, "replays_continued": 0,
                      "replays_queued": 0, "tail_probes": 0, "tail_probes_replaced": 0,
                      "tail_probes_dropped": 0, "answers_waiting_peak": 0}
        # connections and links held against the count limits (admission.py); its counters
        # (refused, timed out, peaks) are among the stop counters
        self.admission = Admission(config.count_limits(), self.stats)
        self.gate = Gate(self.admission, clock)
        self.ingest = Ingest(
            RedisJournalPort(journal, bits_of=self.decoder.unwrapper.bits,
                             feed=journal_feed(journal)), self.decoder,
            functools.partial(fan_out, self), self.stats, clock=clock, topics=topics,
        )
        self.topics = self.ingest.topics
        self.gapfill = GapFillService(
            journal,
            policy=RefusalPolicy(max_range=config.max_gap_range),
            link_bits=config.link_bits,
            context_capacity=config.context_capacity,
            page_size=config.replay_page,
            context_bytes=config.link_context_bytes,
        )
        self.recent = RecentEntries(config.replay_cache_bytes, entry_matches, self.stats)
        """What was fanned out lately, encoded: sent from here by source replays."""
        self.fetcher: Fetcher | None = None
        """A relay's: asks its upstream for what its journal lacks (journal/lacking.py)."""
        self.image_fetcher: ImageFetcher | None = None
        """A relay's: answers image requests its journal cannot from upstream (images.py)."""
        self.memory = MemoryGuard(config, self.stats)
        # the attach paths it takes: no loop through it, no chain over max_hops (hops.py)
        self.hops = Hops(config.hop_id or default_hop_id("serve", config.url), config.max_hops)
        self.links: dict[str, SubscriberLink] = {}
        self._unpumped: dict[int, SubscriberLink] = {}  # offered to since the last pump
        self.principals: dict[str, str] = {}
        self.source_views = SourceViews()  # who may learn of a source (authz.py)
        # (principal, source) a source replay's scan showed, or found nothing in (authz.py)
        self.revealed_sources: set[tuple[str, str]] = set()
        self.unseen_ranges: dict[tuple[str, str], tuple[int, int]] = {}
        self.routes: dict[tuple[int, str], ResponseRoute] = {}
        self._conn_ids = itertools.count(1)
        # routes whose answers must be read, served a step each per repair turn (fairness.py)
        self.repairs = RepairTurns(
            TurnBudget(config.repair_turn, time.monotonic), self.stats,
            schedule=lambda fn: self.container.schedule(0, Call(fn)), pump=self._pump_sender,
            ahead=max(1, config.link_unsent_bytes // 4),
            later=lambda delay, fn: self.container.schedule(delay, Call(fn)))
        self._rng = random.Random(config.drop_seed)
        self.acceptor: Any = None
        self.container: Any = None
        self.subscriptions = subscriptions or SubscriptionManager(configured=[
            attrs.evolve(sub, configured=True) for sub in config.subscriptions.values()
        ])
        self._changes = SubscriptionChanges(self.subscriptions)
        # what ACKs say the applications took: durable positions (durable.py)
        self.positions = self.durables = Durables.of(getattr(journal, "client", None), self.ingest)
        # contributions and the source names the policy reserves (contributions.py)
        self.contributions = Contributions(self)
        # new sources, and their topics' classes, bounded before they are journaled
        self.ingest.limits = SourceLimits(
            views=self.source_views, policy=self.subscriptions.policy,
            journaled=self._journal_holds,
            stats=self.stats, max_sources=config.max_sources,
            max_sources_per_principal=config.max_sources_per_principal,
            brought_by=self._journal_brought_by())

    # --- helpers ------------------------------------------------------------------------

    def _journal_brought_by(self) -> dict[str, str]:
        """Per journaled source, the principal that brought it (earlier runs' counts)."""
        read = getattr(self.ingest.journal, "brought_by", None)
        return read() if read is not None else {}

    def _journal_holds(self, source: str) -> bool:
        """Whether the journal holds anything of ``source`` (asked of a new source a limit
        would refuse): what the journal port learns of one it does not keep is forgotten, so
        asking of ever new names grows nothing."""
        port = self.ingest.journal
        try:
            return port.high_water(source) > 0
        finally:
            if source not in self.ingest.ingested:
                port.forget(source)

    @property
    def ingested(self) -> dict[str, int]:
        """Per source, the last number fanned out."""
        return self.ingest.ingested

    @staticmethod
    def outgoing_bits(source: str) -> int:
        """The width source numbers are sent to subscribers in: 64, the absolute number.

        A filtered subscriber sees a source's numbers with holes of any size; in the
        publisher's narrower space a hole over half of it would unwrap backwards.
        """
        return ABSOLUTE_SOURCE_BITS

    def _drop(self, frame: Publication | Heartbeat) -> bool:
        """Fault injection: lose this frame on its way out (tests and demo only)."""
        if frame.link_seq == 0 and self.config.drop_reset_frames:
            return True
        return self.config.drop_rate > 0 and self._rng.random() < self.config.drop_rate

    def _lossless(self) -> bool:
        """Whether :meth:`_drop` drops nothing but (maybe) frames numbered 0."""
        return not self.config.drop_rate > 0

    @property
    def window_size(self) -> int:
        """The window of a link that acknowledges: half the link space, at most the frames a
        link context keeps (a number the subscriber may still ask for is still held)."""
        return window_size(self.config.link_bits, self.config.context_capacity)

    def capabilities(self, principal: str | None = None) -> Capabilities:
        """The answer to a source query (XEP-0040 §4); only the sources ``principal`` may
        learn of (None: every source). :func:`.requests.capabilities`."""
        return capabilities(self, principal)

    @staticmethod
    def _reject(delivery: Delivery, error: SeqRepairError) -> None:
        # Redis out of reach, or failing over, is the component's failure, not the message's:
        # a subscriber asks a request rejected so again (stubrepair.TEMPORARY_REJECTIONS)
        passing = isinstance(error, JournalUnavailableError | JournalResponseError)
        default = "amqp:internal-error" if passing else "amqp:invalid-field"
        condition = getattr(error, "condition", default)
        info = condition_info(error.expected, error.got)
        delivery.local.condition = Condition(condition, error.message[:500], info)
        delivery.update(Delivery.REJECTED)
        delivery.settle()

    @staticmethod
    def _refuse_link(link: Any, error: AmqpAdapterError) -> None:
        # the attach says "refused" itself (its detach follows in on_link_opened, and another
        # link's write_now may send the attach alone)
        null_terminus(link)
        link.refusal = error
        log.warning("link refused", link=link.name, condition=error.condition, error=error.message)

    # --- container events ---------------------------------------------------------------

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.config.security.prepare()
        try:
            self.acceptor = event.container.listen(self.config.url,
                                                   ssl_domain=self.config.security.ssl_domain())
        except OSError as exc:  # its address taken, or not this host's: nothing to serve
            self.listen_error = f"cannot listen on {self.config.url}: {exc.strerror or exc}"
            log.error("cannot listen", url=self.config.url, error=str(exc))
            event.container.stop()
            return
        # a burst of connects is taken at once, as many as may be held, not left waiting; a
        # failed accept (out of descriptors) pauses the listener, never ends the loop
        accept_in_batches(self.acceptor, room=self.gate.room, stats=self.stats, log=log)
        self.listening = listening_address(self.acceptor, self.config.url)
        if self.config.hop_id is None:  # the address bound (a port 0 chosen) says more
            self.hops = Hops(default_hop_id("serve", self.listening), self.config.max_hops)
        log.info("component listening", url=self.listening)
        self._changes.start(event.container)
        self._schedule_tick()
        if self.on_ready is not None:
            self.on_ready(self.listening)

    def _schedule_tick(self) -> None:
        self.container.schedule(min(0.1, self.config.heartbeat_interval / 4), self)

    def on_timer_task(self, event: Any) -> None:
        if self._stop_requested:
            self.stop()
            self.container.stop()  # run() returns once the events already due are handled
            return
        now = self.clock()
        self.gate.tick(now)  # the open deadline; sockets of connections closed by the gate
        self.ingest.poll(now)  # what the journal took unanswered goes out (backs off)
        self.ingest.journal.listen()  # announcements do not pile up between transfers
        self.durables.flush()  # positions taken since the last tick, one pipeline
        self.contributions.poll(now)  # contributions their owner did not answer in time
        for name, link in list(self.links.items()):
            if link.sender is None:
                expire_context(self, name, link, now)
                continue
            link.heartbeat(now)
            link.probe_tail()
            waiting = len(link.route.responses)  # bounded: requests refused, one probe
            if waiting > self.stats["answers_waiting_peak"]:
                self.stats["answers_waiting_peak"] = waiting
            self._pump_link(link, now)
            if link.stats["window_peak"] > self.stats["window_peak"]:
                self.stats["window_peak"] = link.stats["window_peak"]
        for route in list(self.routes.values()):  # those that waited for their peer (fairness)
            self.repairs.want(route)
        for link in self.memory.check(self.links, self.principals, now):
            detach_for_memory(self, link)
        self._schedule_tick()

    def on_connection_bound(self, event: Any) -> None:
        event.transport.idle_timeout = self.config.idle_timeout
        self.config.security.configure(event.transport)
        conn = event.connection
        conn.seqrepair_id = next(self._conn_ids)
        conn.seqrepair_tls = self.config.security.tls  # see Gate.close
        self.gate.bound(conn)  # counted, or refused (seqrepair/amqp/wire/gate.py)

    def on_connection_opened(self, event: Any) -> None:
        self.gate.opened(event.connection)  # closed now if it was refused

    def on_connection_opening(self, event: Any) -> None:
        conn = event.connection
        if not self.gate.opening(conn):  # refused: closed once proton has opened it
            return
        conn.offered_capabilities = [RESPONSE_ANNOTATIONS]
        conn.bucket = Bucket(
            self.config.request_rate, self.config.request_burst, self.config.request_burst,
            self.clock(),
        )
        log.info("connection opened", connection=conn.seqrepair_id,
                 container=conn.remote_container, principal=principal_of(conn))

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        refusal = self.gate.attach(link, acting_for(self, link))
        if refusal is not None:
            self._refuse_link(link, refusal)
            return
        try:
            self.hops.check(link.remote_properties)  # a loop or too many hops: refused
            if link.is_sender:
                self._open_subscriber(link)
            else:
                self._open_receiver(link)
        except AmqpAdapterError as exc:
            self._refuse_link(link, exc)
        except Exception as exc:  # a bad attach refuses that link, never ends the component
            self._refuse_link(link, link_refusal(exc, link.name))

    def on_link_opened(self, event: Any) -> None:
        link = event.link
        refusal = getattr(link, "refusal", None)
        if refusal is not None:
            link.condition = refusal.amqp_condition()
            link.close()
            return
        if link.is_receiver:
            window = (
                self.config.request_window
                if link.kind == "control"
                else self.config.publish_window
            )
            link.flow(window)
        else:
            self._pump_sender(link)

    def on_sendable(self, event: Any) -> None:
        self._pump_sender(event.sender)

    def _pump_sender(self, sender: Any) -> None:
        """Send what is ready on ``sender`` (a link's live frames, answers already read); what
        must be read first waits for a repair turn."""
        route = getattr(sender, "route", None)
        if route is not None:
            route.send_ready()
            self._pump_later(route)
            return
        name = getattr(sender, "subscriber", None)
        link = self.links.get(name) if name is not None else None
        if link is not None and link.sender == sender:
            self._pump_link(link, self.clock())

    def _pump_link(self, link: SubscriberLink, now: float) -> None:
        link.pump(now)
        if not link.route.busy():  # live frames only: leave now, not after the round
            write_now(getattr(link.sender, "connection", None))
        self._pump_later(link.route)

    def pump_soon(self, link: SubscriberLink) -> None:
        """Send what was offered to ``link`` once the events at hand are handled
        (:meth:`on_reactor_quiesced`): publications that came in one read, from one publisher
        or several, go out together, a transfer per link, not one per message received. An
        idle component handles one message per read and sends it at once; only a busy one,
        with several waiting, batches. Without a running container (a test's), at once."""
        if self.container is None:
            self._pump_link(link, self.clock())
        else:
            self._unpumped[id(link)] = link

    def on_reactor_quiesced(self, event: Any) -> None:
        """No events left to handle: send what fan-out offered since the last pump, before
        proton's I/O handler waits on the sockets (it does not when this made new events:
        those are handled first, the writes among them)."""
        self.pump_offered()

    def pump_offered(self) -> None:
        """Send what fan-out offered since the last pump (:meth:`pump_soon`) now: called when
        the events at hand are handled, and by a publishing link with no further delivery
        queued (:func:`.publishing.on_publish`): an idle component then sends without first
        handling the rest of the read's events (the accept, the flow: proton's Python event
        dispatch, a few hundred microseconds on a busy machine)."""
        if not self._unpumped:
            return
        links, self._unpumped = self._unpumped, {}
        now = self.clock()
        for link in links.values():
            self._pump_link(link, now)

    def _pump_later(self, route: ResponseRoute) -> None:
        """Give ``route`` a step in the repair turns if answers wait there that must be read
        (:mod:`.fairness`)."""
        self.repairs.want(route)

    def on_link_closing(self, event: Any) -> None:
        self.contributions.link_gone(event.link)
        forget(self, event.link)

    def on_link_closed(self, event: Any) -> None:
        self.contributions.link_gone(event.link)
        forget(self, event.link)

    # an owner's answer to a contribution (the only links the component sends unsettled on)
    def on_accepted(self, event: Any) -> None:
        self.contributions.on_owner_outcome(event.delivery)

    on_rejected = on_released = on_modified = on_accepted

    # a connection ends: the peer closes it (proton says closing/closed, not disconnected) or
    # it is lost; on_transport_closed comes last whatever the path (on_disconnected a subset)
    def on_connection_closing(self, event: Any) -> None:
        self.contributions.connection_gone(event.connection)
        forget_connection(self, event.connection)

    def on_connection_closed(self, event: Any) -> None:
        self.contributions.connection_gone(event.connection)
        forget_connection(self, event.connection)

    def on_transport_closed(self, event: Any) -> None:
        self.contributions.connection_gone(event.connection)
        forget_connection(self, event.connection)

    # --- attaching ----------------------------------------------------------------------

    def _open_subscriber(self, sender: Any) -> None:
        address = sender.remote_source.address
        if address and address.startswith(CONTRIBUTIONS_PREFIX):
            self.contributions.open_owner(sender, address)
            return
        open_subscriber(self, sender)

    def _open_receiver(self, receiver: Any) -> None:
        address = receiver.remote_target.address
        receiver.target.address = address
        receiver.max_message_size = self.config.max_message_size  # advertised and enforced
        if address == CONTROL_ADDRESS:
            open_control(receiver)
        elif address and address.startswith(CONTRIBUTE_PREFIX):
            self.contributions.open_contributor(receiver, address)
        else:
            open_publisher(self, receiver, address)

    # --- messages -----------------------------------------------------------------------

    def on_message(self, event: Any) -> None:
        receiver = event.receiver
        delivery = event.delivery
        message = event.message
        try:
            if (
                message.instructions
                and RESPONSE_COOKIE in message.instructions
                and receiver.kind != "control"
            ):
                # respann §2.3: the target did not offer response-address-supported
                receiver.condition = Condition(
                    NotImplementedAnnotationError.condition,
                    "response annotations sent to a target without response-address-supported",
                )
                receiver.close()
                return
            if receiver.kind == "control":
                on_request(self, receiver, delivery, message)
            elif receiver.kind == "contribute":
                self.contributions.on_contribution(receiver, delivery, message)
            else:
                on_publish(self, receiver, delivery, message)
        except SeqRepairError as exc:
            self.stats["rejected"] += 1
            log.warning("message rejected", link=receiver.name,
                        condition=getattr(exc, "condition", "amqp:invalid-field"),
                        error=exc.message)
            self._reject(delivery, exc)
        except Exception as exc:  # the component must outlive any one bad message
            self.stats["rejected"] += 1
            log.exception("message failed", link=receiver.name)
            self._reject(delivery, AmqpAdapterError(f"internal error: {exc!r}"))
        finally:
            if receiver.state & Endpoint.LOCAL_ACTIVE:
                window = (
                    self.config.request_window
                    if receiver.kind == "control"
                    else self.config.publish_window
                )
                if receiver.credit < window // 2:
                    receiver.flow(window - receiver.credit)

    # --- running ------------------------------------------------------------------------

    def on_seqrepair_subscription(self, event: Any) -> None:
        """A subscription changed (:mod:`.subqueues`): act on the links of its queue (a
        resumed one sends its frame 0 on the next tick)."""
        previous, current = event.subject
        if current is None and previous is not None:
            self.durables.forget_queue(previous.id)
        end_links(self, apply_change(self.links, previous, current, self.clock()))

    def policy_changed(self, policy: Any = None) -> None:
        """The access policy was reloaded (any thread): re-check the attached links in the
        event loop (:func:`.authz.revoked`)."""
        self._changes.inject("seqrepair_policy")

    def on_seqrepair_policy(self, event: Any) -> None:
        self.revealed_sources.clear()  # decided under the old policy
        self.unseen_ranges.clear()
        end_revoked(self)
        self.contributions.revoked()

    def request_stop(self) -> None:
        """Stop at the next tick (at most 0.1 s away): close the listener and end the
        container's run. Safe from a signal handler: it only sets a flag (raising there, as
        ``sys.exit`` does, can land in a finalizer, where Python ignores it)."""
        self._stop_requested = True

    def stop(self) -> None:
        """Close the listener (the container then ends when its connections do). Each link's
        counters and window go to the log first: what a stalled subscriber's link did is
        known afterwards only from there."""
        for name, link in self.links.items():
            window = link.window
            log.info("link stats at stop", link=name, is_paused=link.paused, held=link.held,
                     pending=len(link.pending), attached=link.sender is not None,
                     window=None if window is None else
                     {"acked": window.acked_through, "outstanding": window.outstanding},
                     **link.stats)
        self._changes.stop()
        if self.acceptor is not None:
            self.acceptor.close()


def serve(config: ComponentConfig, journal: Journal,
          on_ready: Callable[[str], None] | None = None) -> None:
    """Run the component until the process is stopped."""
    component = Component(config, journal, on_ready=on_ready)
    make_container(Guarded(component, component.stats)).run()
