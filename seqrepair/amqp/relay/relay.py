"""A fractal relay (XEP-0040 §1, §2.3; APEX §2.6): a component that is a durable subscriber
of another and re-serves what it gets.

:class:`RelayComponent` is a :class:`~seqrepair.amqp.component.component.Component` (the same
event loop, links, gap fill, source replay, heartbeats, durable positions, limits) whose
publications come from one upstream :class:`~seqrepair.amqp.client.subscriber.Subscriber`
instead of publishers:

* the upstream subscriber is durable (its link name ``relay.<name>``): the upstream component
  keeps its position, and the relay acknowledges a publication only once its **own** journal
  holds it, so a relay killed at any moment (``kill -9``) resumes after what it journaled,
  and what it had received but not journaled comes again;
* it journals with the origin's source numbers: the feed is filtered (the relay's selection),
  so a source's numbers skip; the skipped ranges are journaled as *not selected*
  (:mod:`seqrepair.journal.selection`), never as loss, and a source replay passes over them
  as over numbers its subscriber is not entitled to;
* its subscribers get their own link numbers, gap fill and source replay from the relay's
  journal; the relay goes upstream only for what it lacks itself (its own stub repairs its
  upstream link from the upstream component);
* its selection (:mod:`.selection`) is the union of ``--subscribe`` and, with ``--aggregate``,
  of its subscribers' patterns: one upstream link, switched to a wider selection when a
  subscriber needs one (its attach is refused until then: :class:`NotCarriedYetError`) and to
  a narrower one when no subscriber needs a pattern any more.

Deliveries cross from the upstream subscriber's thread to the component's event loop through
:class:`Handover` (bounded: a relay whose journal is slow slows its upstream link, which the
upstream component then pauses and repairs later).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from seqrepair.amqp.component.attach import selection
from seqrepair.amqp.component.authz import effective_principal, subscribe_exclusions
from seqrepair.amqp.component.component import Component, ComponentConfig
from seqrepair.amqp.component.journalport import NotJournaledError
from seqrepair.amqp.component.links import tokens
from seqrepair.amqp.relay.selection import Selection, SelectionTable, upstream_properties
from seqrepair.amqp.relay.upstream import UpstreamSubscriber
from seqrepair.amqp.wire.errors import AmqpAdapterError, UnknownAddressError
from seqrepair.amqp.wire.hops import Hops, default_hop_id
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.vocabulary import (
    CONTROL_ADDRESS,
    PROP_GRANTS,
    PROP_SELECTION,
    plain_properties,
)
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.relay")

HANDOVER_LIMIT = 20_000
"""Publications received upstream and not yet journaled that the relay holds at most."""

MAX_WAITING = 256
"""Subscriber selections a relay widens for at once (more wait for the next switch)."""

RETRY = 0.2
"""Seconds before publications the journal did not take are offered to it again."""


class NotCarriedYetError(AmqpAdapterError):
    """A subscriber's patterns are not carried by the relay's upstream link yet; the relay is
    switching it to a selection that carries them: attach again shortly (a client does so by
    itself)."""

    condition = "amqp:precondition-failed"


Relayed = tuple[Publication, bytes]
"""A publication from upstream and the entry bytes it came in (or ``upstream.NO_ENTRY``)."""


class Handover:
    """Publications from the upstream subscriber's thread to the component's event loop,
    at most ``limit`` at once (the offering thread waits for room)."""

    def __init__(self, wake: Callable[[], None], limit: int = HANDOVER_LIMIT) -> None:
        self._wake = wake
        self._limit = limit
        self._items: deque[Relayed] = deque()
        self._cond = threading.Condition()
        self._woken = False
        self.closed = False

    def offer(self, publication: Publication, entry: bytes) -> None:
        """Queue ``publication`` (the subscriber's thread); wake the event loop once."""
        with self._cond:
            while len(self._items) >= self._limit and not self.closed:
                self._cond.wait(0.1)
            self._items.append((publication, entry))
            wake = not self._woken
            self._woken = True
        if wake:
            self._wake()

    def take(self) -> list[Relayed]:
        """Everything queued (the event loop)."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
            self._woken = False
            self._cond.notify_all()
        return items

    def give_back(self, items: list[Relayed]) -> None:
        """``items`` (taken, not journaled) go first again."""
        with self._cond:
            self._items.extendleft(reversed(items))

    def __len__(self) -> int:
        return len(self._items)


class RelayComponent(Component):
    """A component fed by one upstream subscription (see the module).

    ``upstream``: the upstream component's ``host:port``; ``name``: the relay's name (its
    upstream link is ``relay.<name>``, where its durable position is kept); ``table``: the
    selection bookkeeping; ``security``: how to authenticate upstream; ``subscriber_options``:
    more keyword arguments of the upstream :class:`Subscriber`.
    """

    def __init__(self, config: ComponentConfig, journal: Journal, *, upstream: str, name: str,
                 table: SelectionTable, security: ClientSecurity = NO_CLIENT_SECURITY,
                 subscriber_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(config, journal, **kwargs)
        self.upstream_url = upstream
        self.relay_name = name
        self.table = table
        self.security = security
        self.subscriber_options = dict(subscriber_options or {})
        self.handover = Handover(lambda: self._changes.inject("seqrepair_relayed"))
        self.upstream: UpstreamSubscriber | None = None
        self.waiting: set[Selection] = set()  # of subscribers refused until carried
        self._switching: Selection | None = None  # the selection being switched to
        self._retry_at: float | None = None
        self.error: SeqRepairError | None = None
        """Why the relay stopped by itself (its journal refused what came from upstream)."""
        self.ingest.journal.not_selected = table.current.marker_text()
        if config.hop_id is None:  # named as a relay on the paths (hops.py), not as serve
            self.hops = Hops(default_hop_id(f"relay.{name}", config.url), config.max_hops)
        for key in ("relayed", "relay_switches", "relay_refused"):
            self.stats[key] = 0

    @property
    def link_name(self) -> str:
        """The upstream link's name (the relay's durable there)."""
        return f"relay.{self.relay_name}"

    # --- the upstream subscriber ------------------------------------------------------------

    def _subscriber(self, selection: Selection) -> UpstreamSubscriber:
        def offer(publication: Publication) -> None:
            self.handover.offer(publication, subscriber.entry_of(publication))

        subscriber = UpstreamSubscriber(
            self.upstream_url, str(selection.patterns[0]), link_name=self.link_name,
            on_publication=offer, durable=True, ack=True, acknowledge=False,
            security=self.security,
            link_properties=self.hops.upstream_properties(upstream_properties(selection)),
            **self.subscriber_options,
        )
        return subscriber

    def on_start(self, event: Any) -> None:
        super().on_start(event)
        if self.table.current.patterns:  # else: no upstream link until a subscriber needs one
            self.upstream = self._subscriber(self.table.current).start()
        log.info("relay upstream selection", upstream=self.upstream_url, link=self.link_name,
                 **self.table.current.describe())

    def on_seqrepair_relayed(self, event: Any) -> None:
        """Journal and fan out what came from upstream; acknowledge it there once held."""
        if self.error is not None:
            return
        taken = self.handover.take()
        if not taken:
            return
        pubs = [pub for pub, _entry in taken]
        try:
            self.ingest.relayed(pubs, [entry for _pub, entry in taken])
        except NotJournaledError as exc:
            kept = set(self.ingest.journal.journaled(pubs))
            rest = [item for i, item in enumerate(taken) if i not in kept]
            self.handover.give_back(rest)
            self._retry_at = self.clock() + RETRY
            log.warning("relayed publications not journaled yet: offered again",
                        count=len(rest), error=exc.message)
            pubs = [pubs[i] for i in sorted(kept)]
        except SeqRepairError as exc:  # the relay's journal holds these numbers differently
            # going on would journal what follows past them, the skip as "not selected":
            # a loss nobody is told of. The relay stops instead, and says why.
            self.stats["relay_refused"] += len(pubs)
            self.error = exc
            log.error("relayed publications refused by the relay's journal (it holds other "
                      "publications under these numbers: another origin?); the relay stops",
                      count=len(pubs), error=exc.message,
                      first={p.source: p.source_seq for p in pubs[:1]})
            self.handover.closed = True
            self.request_stop()
            return
        self.stats["relayed"] += len(pubs)
        held: dict[str, int] = {}
        for pub in pubs:
            held[pub.source] = max(held.get(pub.source, 0), pub.source_seq)
        if held and self.upstream is not None:
            self.upstream.acknowledge(held)

    def on_timer_task(self, event: Any) -> None:
        if not self._stop_requested:
            now = self.clock()
            if self._retry_at is not None and now >= self._retry_at:
                self._retry_at = None
                self.on_seqrepair_relayed(event)
            self._follow_subscribers(now)
        super().on_timer_task(event)

    # --- the selection ------------------------------------------------------------------

    def attached_selections(self) -> dict[str, Selection]:
        """The selections of the subscriber links, by link name: those attached, and those
        detached whose context the relay still keeps (``--context-retention``): live
        publications are still queued for them, and one that resumes its context would see
        no gap where its topics stopped coming."""
        return {name: Selection.of_link(link.entitlement.topics, link.entitlement.grant)
                for name, link in self.links.items()}

    def _follow_subscribers(self, now: float) -> None:
        if self._switching is not None:
            return
        wanted = self.table.next_selection(self.attached_selections(), self.waiting, now)
        if wanted is not None:
            self._switch(wanted)

    def _switch(self, wanted: Selection) -> None:
        """Move the upstream link to ``wanted``: stop the old subscriber (off the event loop:
        it joins its thread), then, in the loop, journal what it delivered and start the new
        one, after the relay's position upstream (what it journaled and acknowledged)."""
        self._switching = wanted  # the selection stays the old one until the new link starts
        self.stats["relay_switches"] += 1
        old, self.upstream = self.upstream, None
        log.info("relay switching its upstream selection",
                 previous=self.table.current.describe(), **wanted.describe())

        def stop_old() -> None:
            if old is not None:  # its last ACKs may be lost: what comes again is skipped
                old.stop()
            self._changes.inject("seqrepair_relay_switch", subject=(old, wanted))

        threading.Thread(target=stop_old, name="relay-switch", daemon=True).start()

    def on_seqrepair_relay_switch(self, event: Any) -> None:
        _old, wanted = event.subject
        self.on_seqrepair_relayed(event)  # what the old one delivered: journaled first
        if self.handover and self._retry_at is not None:  # the journal is away: try later
            self.container.schedule(RETRY, _Later(lambda: self.on_seqrepair_relay_switch(event)))
            return
        self.ingest.journal.not_selected = wanted.marker_text()
        self.upstream = self._subscriber(wanted).start() if wanted.patterns else None
        self.table.current = wanted  # journaled from here on under it: subscribers may attach
        self.waiting = {w for w in self.waiting if not self.table.carries(w)}
        self._switching = None
        log.info("relay upstream selection", upstream=self.upstream_url, link=self.link_name,
                 **wanted.describe())

    # --- subscribers and publishers ---------------------------------------------------

    def _open_subscriber(self, sender: Any) -> None:
        address = sender.remote_source.address
        if address and address.startswith("/") and not address.startswith("/subscriptions/"):
            props = plain_properties(sender.remote_properties)
            patterns = selection(address, props.get(str(PROP_SELECTION)))
            principal = effective_principal(self, sender.connection, props)
            for pattern in patterns:  # only what the policy lets it see may widen upstream
                subscribe_exclusions(self, principal, str(pattern))
            claimed = props.get(str(PROP_GRANTS))
            grant = self.config.grants.entitlement(
                principal, patterns, None if claimed is None else tokens(claimed)).grant
            wanted = Selection.of_link(patterns, grant)
            if not self.table.may_carry(patterns):
                raise UnknownAddressError(
                    f"this relay carries {', '.join(map(str, self.table.standing))}, not "
                    f"{address!r}", expected=",".join(map(str, self.table.standing)),
                    got=address,
                )
            switching = self._switching
            if not self.table.carries(wanted) or (
                    switching is not None and not switching.covers(wanted)):
                # not carried, or carried only until the switch under way narrows it away:
                # attached now, its topics would stop coming without a gap to tell it
                if len(self.waiting) < MAX_WAITING:
                    self.waiting.add(wanted)
                raise NotCarriedYetError(
                    f"the relay is widening its upstream subscription to carry {address!r}: "
                    "attach again shortly", got=address,
                )
        super()._open_subscriber(sender)

    def _open_receiver(self, receiver: Any) -> None:
        address = receiver.remote_target.address
        if address != CONTROL_ADDRESS:
            raise UnknownAddressError(
                "a relay takes no publications: publish to its origin", got=address,
            )
        super()._open_receiver(receiver)

    def stop(self) -> None:
        super().stop()
        self.handover.closed = True
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            threading.Thread(target=upstream.stop, daemon=True).start()


class _Later:
    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        self.fn()

