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
  upstream link from the upstream component; what its journal lacks for one subscriber, it
  fetches upstream for that subscriber alone: :mod:`.fetch`);
* its selection (:mod:`.selection`) is the union of ``--subscribe`` and, with ``--aggregate``,
  of its subscribers' patterns: one upstream link, switched to a wider selection when a
  subscriber needs one (its attach is refused until then: :class:`NotCarriedYetError`) and to
  a narrower one when no subscriber needs a pattern any more;
* its upstream attach's ``seqrepair-path`` carries every identity behind it (its subscriber
  links' paths, :mod:`.paths`) and then its own, so a loop of relays is refused like a loop of
  gateways; it attaches again (the same switch) when those identities change, and a refusal
  for the path ends the subscriber links that brought it, or, with none, cuts the relay off.

Deliveries cross from the upstream subscriber's thread to the component's event loop through
:class:`Handover` (bounded: a relay whose journal is slow slows its upstream link, which the
upstream component then pauses and repairs later); the event loop hands them to the
:class:`~.journaler.Journaler`, whose thread appends them while the loop fans out what was
journaled before, and fans each batch out (and acknowledges it upstream) once journaled.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from proton import Condition

from seqrepair.amqp.component.attach import selection
from seqrepair.amqp.component.authz import effective_principal, subscribe_exclusions
from seqrepair.amqp.component.component import Component, ComponentConfig
from seqrepair.amqp.component.detach import forget
from seqrepair.amqp.component.links import tokens
from seqrepair.amqp.relay.fetch import UpstreamFetch, UpstreamFetches
from seqrepair.amqp.relay.fetchconn import OPTIONS, FetchConnection, FetchLink
from seqrepair.amqp.relay.imagefetch import UpstreamImage, relay_image_answer
from seqrepair.amqp.relay.journaler import Journaler, bare
from seqrepair.amqp.relay.paths import RelayPaths, union_path
from seqrepair.amqp.relay.selection import Selection, SelectionTable, upstream_properties
from seqrepair.amqp.relay.upstream import UpstreamSubscriber
from seqrepair.amqp.wire.errors import (
    AmqpAdapterError,
    RequestFloodError,
    UnknownAddressError,
)
from seqrepair.amqp.wire.hops import (
    DESCRIPTION_LIMIT,
    LOOP_CONDITION,
    MAX_CARRIED,
    PROP_PATH,
    HopError,
    HopLimitError,
    Hops,
    Path,
    Route,
    default_hop_id,
    describe_path,
    read_route,
)
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.vocabulary import (
    CONTROL_ADDRESS,
    PROP_DENY,
    PROP_GRANTS,
    PROP_SELECTION,
    plain_properties,
)
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.events import Unrecoverable
from seqrepair.core.messages import Publication
from seqrepair.core.policy import Operation
from seqrepair.journal.journal import Journal
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.relay")

HANDOVER_LIMIT = 20_000
"""Publications received upstream and not yet journaled that the relay holds at most."""

MAX_WAITING = 256
"""Subscriber selections a relay widens for at once; past it (or past
:data:`MAX_WAITING_IDENTITIES`) an attach that would wait is refused
``amqp:resource-limit-exceeded`` (:class:`WaitingFullError`)."""
MAX_WAITING_IDENTITIES = 4 * MAX_CARRIED
"""Hop identities the waiting selections' paths hold at most, all together."""

RETRY = 0.2
"""Seconds before a switch of the upstream selection looks again whether what the old
subscription delivered is journaled (it waits for that)."""

class NotCarriedYetError(AmqpAdapterError):
    """A subscriber's patterns are not carried by the relay's upstream link yet; the relay is
    switching it to a selection that carries them: attach again shortly (a client does so by
    itself)."""

    condition = "amqp:precondition-failed"


class WaitingFullError(RequestFloodError):
    """The relay is widening its upstream link for as many selections, or as many hop
    identities behind them, as it holds (:data:`MAX_WAITING`, :data:`MAX_WAITING_IDENTITIES`):
    attach again once its switch is done."""


Relayed = tuple[list[Publication], list[bytes]]
"""Publications from upstream and, by index, the entry bytes each came in (or
``upstream.NO_ENTRY``)."""


class Handover:
    """Publications from the upstream subscriber's thread to the component's event loop,
    at most ``limit`` at once (the offering thread waits for room). Held as the runs they
    were offered in: nothing is done per publication on either side but the lists' copies."""

    def __init__(self, wake: Callable[[], None], limit: int = HANDOVER_LIMIT) -> None:
        self._wake = wake
        self._limit = limit
        self._runs: deque[Relayed] = deque()
        self._count = 0
        self._cond = threading.Condition()
        self._woken = False
        self.closed = False

    def offer(self, publication: Publication, entry: bytes) -> None:
        """Queue ``publication`` (the subscriber's thread); wake the event loop once."""
        self.offer_run([publication], [entry])

    def offer_run(self, publications: list[Publication], entries: list[bytes]) -> None:
        """Queue ``publications`` (a run delivered in order, ``entries`` by index) at once:
        one lock and at most one wake-up for the run."""
        if len(entries) != len(publications):
            raise ValueError(f"{len(publications)} publications, {len(entries)} entries")
        with self._cond:
            while self._count >= self._limit and not self.closed:
                self._cond.wait(0.1)
            self._runs.append((publications, entries))
            self._count += len(publications)
            wake = not self._woken
            self._woken = True
        if wake:
            self._wake()

    def take(self) -> Relayed:
        """Everything queued (the event loop), in order."""
        with self._cond:
            runs = list(self._runs)
            self._runs.clear()
            self._count = 0
            self._woken = False
            self._cond.notify_all()
        if len(runs) == 1:
            return runs[0]
        pubs: list[Publication] = []
        entries: list[bytes] = []
        for run_pubs, run_entries in runs:
            pubs.extend(run_pubs)
            entries.extend(run_entries)
        return pubs, entries

    def give_back(self, publications: list[Publication], entries: list[bytes]) -> None:
        """``publications`` (taken, not journaled; ``entries`` by index) go first again."""
        if not publications:
            return
        with self._cond:
            self._runs.appendleft((publications, entries))
            self._count += len(publications)

    def __len__(self) -> int:
        return self._count


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
        self.waiting: dict[Selection, Route] = {}  # of subscribers refused until carried
        self.paths = RelayPaths()  # the identities behind the relay, what refusals taught it
        self.upstream_path: Path = ()  # the path the upstream link attached with
        self._reattach = False  # attach upstream again now: a refusal dropped paths
        self._behind: Path = ()  # the identities the switch under way attaches with
        self._behind_hops = 0  # and the hops of the deepest route behind them
        # the routes of attaches that waited for the switch under way (or made): carried
        # upstream before they attach, and to blame if they make that attach too deep
        self._carried_waiting: list[Route] = []
        self._switching: Selection | None = None  # the selection being switched to
        self.error: SeqRepairError | None = None
        """Why the relay stopped by itself (its journal refused what came from upstream)."""
        self._marker = table.current.marker_text()  # what skipped numbers are journaled as
        self._after: dict[str, int] = {}  # where the upstream subscription started
        self.ingest.journal.not_selected = self._marker
        # its appends run in a thread of their own, fanned out once done (journaler.py)
        self.journaler = Journaler(self.ingest.journal,
                                   lambda: self._changes.inject("seqrepair_journaled"))
        if config.hop_id is None:  # named as a relay on the paths (hops.py), not as serve
            self.hops = Hops(default_hop_id(f"relay.{name}", config.url), config.max_hops)
        for key in ("relayed", "relay_switches", "relay_refused", "upstream_attaches",
                    "hop_refusals", "resets_for_upstream_loss", "relay_waiting_refused"):
            self.stats[key] = 0
        self.ingest.on_lost_journaled = self._lost_upstream
        # what its journal lacks for a subscriber comes from upstream, for it alone (fetch.py)
        self.fetch_connection: FetchConnection | None = None  # made at the first fetch
        self.fetches = UpstreamFetches(self._fetch_link, self.clock, self.stats)
        self.fetcher = self.fetches
        # and image requests its journal cannot answer for the link that asks (imagefetch.py)
        self.image_fetcher = partial(relay_image_answer, journal, self.fetches.enqueue,
                                     config.replay_page)

    @property
    def link_name(self) -> str:
        """The upstream link's name (the relay's durable there)."""
        return f"relay.{self.relay_name}"

    # --- the upstream subscriber ------------------------------------------------------------

    def _subscriber(self, selection: Selection, properties: dict[Any, Any]
                    ) -> UpstreamSubscriber:
        def offer(publication: Publication) -> None:
            self.handover.offer(publication, subscriber.entry_of(publication))

        def lost(event: Unrecoverable) -> None:
            self.ingest.journal.note_lost(event.source, event.after, event.items)

        subscriber = UpstreamSubscriber(
            self.upstream_url, str(selection.patterns[0]), link_name=self.link_name,
            on_publication=offer, on_run=self.handover.offer_run, on_lost=lost, durable=True,
            ack=True, acknowledge=False,
            security=self.security, link_properties=properties, **self.subscriber_options,
        )
        return subscriber

    def _fetch_link(self, fetch: UpstreamFetch | UpstreamImage, tag: str) -> FetchLink:
        """The upstream link of ``fetch`` on the relay's fetch connection: the asking link's
        selection and grant, the path the relay's upstream link has (identities behind it,
        then its own)."""
        selection = Selection.of_link(fetch.entitlement.topics, fetch.entitlement.grant)
        properties = self.hops.upstream_properties(upstream_properties(
            selection, self.paths.current[-(MAX_CARRIED - 1):], self.paths.current_hops))
        if fetch.entitlement.deny:  # the link's deny exceptions: an image's frames carry no
            # permission token, so the relay could not take out what they would let through
            properties[PROP_DENY] = ",".join(sorted(fetch.entitlement.deny))
        return self._fetch_connection().attach(
            fetch, f"{self.link_name}.fetch.{tag}", str(selection.patterns[0]), properties)

    def _fetch_connection(self) -> FetchConnection:
        """The one upstream connection the fetch links share: made at the first fetch, made
        again only once it stopped for good (refused: :mod:`.fetchconn`)."""
        conn = self.fetch_connection
        if conn is None or not conn.usable:
            options = {k: v for k, v in self.subscriber_options.items() if k in OPTIONS}
            conn = self.fetch_connection = FetchConnection(
                self.upstream_url, name=f"{self.link_name}.fetch.{uuid.uuid4().hex[:8]}",
                security=self.security, stats=self.stats, **options).start()
        return conn

    def _start_upstream(self, selection: Selection, behind: Path, hops: int = 0) -> None:
        """Attach upstream for ``selection`` (none without patterns), the identities
        ``behind`` the relay then its own on the path, ``hops`` the deepest route behind it;
        a path this relay may not send (over its own ``--max-hops``) is refused here as
        upstream would. What the upstream link (and the fetch links) carry changes only once
        the path passed that check."""
        self.upstream = None
        if not selection.patterns:
            self.paths.current, self.paths.current_hops = behind, hops
            return
        try:
            # at most MAX_CARRIED identities go on the path (the first left out): the hops
            # still count every route, so a loop through those left out ends at the limit
            properties = self.hops.upstream_properties(
                upstream_properties(selection, behind[-(MAX_CARRIED - 1):], hops))
        except HopError as exc:
            self._hop_refused(exc, (*behind, self.hops.identity))
            return
        self.paths.current, self.paths.current_hops = behind, hops
        self.upstream_path = tuple(properties[PROP_PATH])
        self.stats["upstream_attaches"] += 1
        log.info("attaching upstream", link=self.link_name, upstream=self.upstream_url,
                 path=describe_path(self.upstream_path))
        self.upstream = self._subscriber(selection, properties).start()

    def on_start(self, event: Any) -> None:
        super().on_start(event)
        if self.listen_error is not None:
            return
        log.info("relay hop", hop_id=self.hops.identity, max_hops=self.hops.max_hops)
        self._start_upstream(self.table.current, ())  # no link without patterns
        log.info("relay upstream selection", upstream=self.upstream_url, link=self.link_name,
                 **self.table.current.describe())

    def _lost_upstream(self, sources: set[str]) -> None:
        """Numbers of ``sources`` were lost upstream and are journaled as such: every link's
        context restarts (a reset, kept contexts too), so each subscriber repairs by source
        from what it delivered and the replay tells it of the loss (``GAP-ERROR trimmed``)
        before anything after the loss reaches it; live, it would pass over the numbers
        unknowing (a filtered feed's source numbers have holes anyway)."""
        for link in self.links.values():  # each told its new context (its ACKs name it)
            link.restart("restarted: numbers were lost upstream")
        self.stats["resets_for_upstream_loss"] += 1
        log.warning("numbers lost upstream: every link restarts its context, so its "
                    "subscriber learns of the loss by source", sources=sorted(sources)[:20],
                    links=len(self.links))

    def on_seqrepair_relayed(self, event: Any) -> None:
        """Hand what came from upstream to the journaler (:mod:`.journaler`), under the
        selection it is journaled under, while it holds less than :data:`HANDOVER_LIMIT`
        (else the handover fills and the upstream subscriber waits)."""
        if self.error is not None or self.journaler.closed:
            return
        if self.journaler.pending >= HANDOVER_LIMIT:
            return  # taken when a batch is done (on_seqrepair_journaled)
        pubs, entries = self.handover.take()
        if not pubs:
            return
        rising = self.ingest.relayed_rising(pubs)
        if rising:  # the usual batch: bare, nothing of it went out (no pass for either)
            pubs = list(pubs)
        else:
            pubs = bare(pubs)
            try:  # what went out already is checked against the journal before anything after
                unsent = self.ingest.relayed_unsent(pubs)
            except SeqRepairError as exc:
                self._refused_by_journal(pubs, exc)
                return
            if unsent is not None:  # those that went out are journaled: acknowledged again
                fresh = set(unsent)
                self._acknowledge([p for i, p in enumerate(pubs) if i not in fresh])
                pubs, entries = [pubs[i] for i in unsent], [entries[i] for i in unsent]
                if not pubs:
                    return
        if self.upstream is not None:  # what it journals first of a source follows this
            self._after = self.upstream.started_after()
        self.journaler.submit(pubs, entries, self._marker, self._after, rising)

    def on_seqrepair_journaled(self, event: Any) -> None:
        """Fan out what the journal now holds, in order, and acknowledge it upstream."""
        for job in self.journaler.take_done():
            if job.error is not None:
                self._refused_by_journal(job.pubs, job.error)
                return
            if self.error is not None:
                return
            try:
                self.ingest.relayed_journaled(job.pubs, job.entries, job.rising)
            except SeqRepairError as exc:  # a copy the journal holds differently
                self._refused_by_journal(job.pubs, exc)
                return
            self.stats["relayed"] += len(job.pubs)
            self._acknowledge(job.pubs, job.rising)
        if self.handover:
            self.on_seqrepair_relayed(event)  # what waited for room

    def _acknowledge(self, pubs: list[Publication], rising: bool = False) -> None:
        """Tell upstream the journal holds ``pubs`` (their durable position moves);
        ``rising``: they are one source's, in increasing order."""
        # each source's numbers come in order: its last one is its highest (were one lower,
        # less would be acknowledged, never more than the journal holds)
        if rising and pubs:
            held = {pubs[-1].source: pubs[-1].source_seq}
        else:
            held = {pub.source: pub.source_seq for pub in pubs}
        if held and self.upstream is not None:
            self.upstream.acknowledge(held)

    def _refused_by_journal(self, pubs: list[Publication], exc: SeqRepairError) -> None:
        """The relay's journal holds these numbers differently: going on would journal what
        follows past them, the skip as "not selected": a loss nobody is told of. The relay
        stops instead, and says why."""
        self.stats["relay_refused"] += len(pubs)
        self.error = exc
        log.error("relayed publications refused by the relay's journal (it holds other "
                  "publications under these numbers: another origin?); the relay stops",
                  count=len(pubs), error=exc.message,
                  first={p.source: p.source_seq for p in pubs[:1]})
        self.handover.closed = True
        self.journaler.stop()
        self.request_stop()

    def on_timer_task(self, event: Any) -> None:
        if not self._stop_requested:
            now = self.clock()
            if self.handover:  # a wake-up missed, or room made meanwhile
                self.on_seqrepair_relayed(event)
            self._check_upstream()
            self._follow_subscribers(now)
            self.fetches.poll()
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
        if self.paths.cut_off is not None:
            if not self.paths.cut_ended(now):
                return
            log.warning("relay no longer cut off: attaching upstream again to see whether "
                        "the loop (or the chain too long) is still there",
                        hop_id=self.hops.identity)
            self._reattach = True
        behind = self.paths.behind(self.links, (p for p, _h in self.waiting.values()))
        hops = self.paths.depth(h for _p, h in self.waiting.values())
        wanted = self.table.next_selection(self.attached_selections(), self.waiting, now)
        if wanted is None and self.table.current.patterns and (
                self._reattach or self.paths.changed(behind, now, self.table.linger, hops)):
            wanted = self.table.current  # the same selection, other identities behind
        self._reattach = False
        if wanted is not None:
            self._switch(wanted, behind, hops)

    def _switch(self, wanted: Selection, behind: Path = (), hops: int = 0) -> None:
        """Move the upstream link to ``wanted``: stop the old subscriber (off the event loop:
        it joins its thread), then, in the loop, journal what it delivered and start the new
        one, after the relay's position upstream (what it journaled and acknowledged)."""
        self._switching = wanted  # the selection stays the old one until the new link starts
        self._behind = behind
        self._behind_hops = hops
        self._carried_waiting = list(self.waiting.values())
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
        if self.handover or self.journaler.pending:  # not journaled yet: look again later
            self.container.schedule(RETRY, _Later(lambda: self.on_seqrepair_relay_switch(event)))
            return
        self._marker = wanted.marker_text()
        self._start_upstream(wanted, self._behind, self._behind_hops)
        self.table.current = wanted  # journaled from here on under it: subscribers may attach
        self.waiting = {w: p for w, p in self.waiting.items() if not self.table.carries(w)}
        self._switching = None
        log.info("relay upstream selection", upstream=self.upstream_url, link=self.link_name,
                 **wanted.describe())

    # --- the path of the upstream link (paths.py) -------------------------------------------

    def _check_upstream(self) -> None:
        """The upstream link refused (or ended) for its path: handled once, never retried
        as it was."""
        upstream = self.upstream
        if upstream is None or not isinstance(upstream.error, HopError):
            return
        self.upstream = None
        threading.Thread(target=upstream.stop, name="relay-refused", daemon=True).start()
        self._hop_refused(upstream.error, self.upstream_path)

    def _hop_refused(self, error: HopError, path: Path) -> None:
        """The upstream attach with ``path`` was refused with ``error`` (a loop, the hop
        limit): end the subscriber links that brought identities onto it and attach again
        without them; with none, the relay is cut off."""
        self.stats["hop_refusals"] += 1
        own = self.hops.identity
        detail = error.message
        if detail.startswith(f"{error.condition}: "):  # as the client words it
            detail = detail[len(error.condition) + 2:]
        text = f"{detail} (refused upstream of relay {own})"
        if len(text) > DESCRIPTION_LIMIT:
            text = text[: DESCRIPTION_LIMIT - 3] + "..."
        refusal = type(error)(text, path=path, expected=error.expected, got=error.got)
        offenders = self.paths.offenders(self.links)
        identities = union_path([tuple(h for h in path if h != own),
                                 *(self.paths.links[n] for n in offenders),
                                 *(p for p, _h in self.waiting.values() if p)])
        until = self.paths.breaker.trip(self.clock())
        lasts = round(until - self.clock(), 1)
        if not identities:  # nothing of its subscribers' on it: it is in the loop itself
            self.paths.cut(refusal, until)
            log.error("relay upstream refused for its path: the relay is cut off, its "
                      "subscribers are refused; it tries again after the cut-off",
                      condition=error.condition, path=describe_path(path), error=text,
                      subscribers=len(self.links), seconds=lasts)
            self.waiting.clear()
            # the path refused holds nothing of any link's: told as it was refused
            self._end_links(list(self.links), refusal, as_refused=True)
            return
        others: list[str] = []  # ended on another link's account: they may come back
        if error.condition == LOOP_CONDITION:  # they would bring the loop back
            # the identity found twice (named by the refusal) is the loop: only the links that
            # brought it, and it alone, are to blame (a made-up path holding an identity
            # upstream would otherwise end and bar every link behind this relay)
            looping = tuple(h for h in identities if f"relay loop: {h} is twice" in detail)
            if looping:
                offenders = [n for n in offenders
                             if any(h in self.paths.links[n] for h in looping)]
                identities = looping
            else:  # none of theirs is the loop: ended (it goes again), never barred
                others = offenders
                theirs = {h for n in offenders for h in self.paths.links[n]}
                identities = tuple(h for h in identities if h not in theirs)
            self.paths.bar(identities, refusal, until)
            barred: list[Any] = list(identities)
            self.waiting = {w: r for w, r in self.waiting.items() if not r[0]}
        else:  # too many hops: the deepest routes would be again, shallower ones may come
            # deepest over the attached links and those waiting: a waiting attacher's claimed
            # hops must never end a shallower attached link
            waiting = [*self.waiting.values(), *self._carried_waiting]
            most = max([0, *(self.paths.hops.get(n, 0) for n in offenders),
                        *(h for _p, h in waiting)])
            offenders = [n for n in offenders if self.paths.hops.get(n, 0) == most]
            dropped = list(dict.fromkeys(p for p, h in waiting if h == most and p))
            self._carried_waiting = [r for r in self._carried_waiting if r[1] != most]
            barred = [self.paths.links[n] for n in offenders] + dropped
            self.paths.bar_paths(barred, refusal, until)
            self.waiting = {w: r for w, r in self.waiting.items() if r[1] != most}
        log.error("relay upstream refused for its path: ending the subscriber links that "
                  "brought it, attaching again without them", condition=error.condition,
                  path=describe_path(path), error=text, links=offenders, barred=barred,
                  seconds=lasts)
        own_fault = [n for n in offenders if n not in others]
        self._end_links(own_fault, refusal)
        self._end_links(others, refusal, retriable=True)
        self._reattach = True

    def _end_links(self, names: list[str], refusal: HopError, *, retriable: bool = False,
                   as_refused: bool = False) -> None:
        """Detach subscriber links ``names`` with ``refusal``'s condition (``retriable``:
        ``amqp:link:detach-forced`` instead, a link ended for a path another link brought, so
        its client attaches again). Each is told only of its own path, never another link's
        identities (``as_refused``: the refusal's own text, a path with nobody's on it). Their
        contexts (and durable positions) are kept as for any detach, their paths are not:
        they no longer count on the upstream path unless they attach again."""
        own = self.hops.identity
        kind = "relay loop" if refusal.condition == LOOP_CONDITION else "hop limit exceeded"
        for name in names:
            link = self.links.get(name)
            sender = None if link is None else link.sender
            if link is not None and sender is not None:
                condition = "amqp:link:detach-forced" if retriable else refusal.condition
                link.log.warning("link detached: the relay's upstream attach was refused for "
                                 "its path", condition=condition)
                if as_refused:
                    text = refusal.message
                elif retriable:
                    text = (f"the upstream attach of relay {own} was refused ({kind}) for a "
                            "path another link brought: attach again")
                else:  # the refusal, without the identities only other links brought
                    mine = set(self.paths.links.get(name, ()))
                    others = {h for n, p in self.paths.links.items() if n != name for h in p}
                    others |= {h for p, _h in self.waiting.values() for h in p}
                    text = _hide(refusal.message, others - mine)
                sender.condition = Condition(condition, text[:500])
                forget(self, sender)
                sender.close()
        self.paths.forget(names)

    # --- subscribers and publishers ---------------------------------------------------

    def _open_subscriber(self, sender: Any) -> None:
        # a route this relay could not carry upstream (its hops plus this one past its own
        # --max-hops, or a loop) is that link's alone to be refused: taken, it would make the
        # relay's upstream attach too deep and end other links
        self.hops.extend_route(sender.remote_properties)
        path, hops = read_route(sender.remote_properties)
        refusal = self.paths.refusal(path, self.clock())
        if refusal is not None:  # cut off, or through a hop barred for a loop, for a while
            raise type(refusal)(refusal.message, path=refusal.path,
                                expected=refusal.expected, got=refusal.got)
        self._open_data_subscriber(sender, (path, hops))
        if sender.name in self.links:
            self.paths.attached(sender.name, path, hops)

    def _open_data_subscriber(self, sender: Any, route: Route) -> None:
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
                raise self._not_carried(principal, address)
            switching = self._switching
            if not self.table.carries(wanted) or (
                    switching is not None and not switching.covers(wanted)):
                # not carried, or carried only until the switch under way narrows it away:
                # attached now, its topics would stop coming without a gap to tell it
                self._wait(wanted, route, address)
                raise NotCarriedYetError(
                    f"the relay is widening its upstream subscription to carry {address!r}: "
                    "attach again shortly", got=address,
                )
        super()._open_subscriber(sender)

    def _not_carried(self, principal: str, address: str) -> UnknownAddressError:
        """The refusal of a subscriber (``principal``) outside ``--subscribe``: it names only
        the patterns the relay carries that ``principal`` may subscribe to (the access policy:
        a refusal tells no one of topics it may not see)."""
        policy = self.subscriptions.policy()
        visible = [str(p) for p in self.table.standing
                   if policy.decide(principal, Operation.SUBSCRIBE, str(p))]
        carried = f"carries {', '.join(visible)}, not" if visible else "does not carry"
        return UnknownAddressError(f"this relay {carried} {address!r}",
                                   expected=",".join(visible) or None, got=address)

    def _wait(self, wanted: Selection, route: Route, address: str) -> None:
        """Hold ``route`` (the path of an attach refused until ``wanted`` is carried) for the
        next switch; past :data:`MAX_WAITING` selections or :data:`MAX_WAITING_IDENTITIES`
        identities waiting, :class:`WaitingFullError` refuses the attach instead."""
        path, hops = route
        if hops + 1 > self.hops.max_hops:  # as at attach: the upstream route would be too deep
            raise HopLimitError(
                f"hop limit exceeded: this attach would cross {hops + 1} hops, more than "
                f"{self.hops.max_hops} (at {self.hops.identity})",
                path=path, expected=self.hops.max_hops, got=hops + 1)
        old_path, old_hops = self.waiting.get(wanted, ((), 0))
        joined = union_path([old_path, path])
        held = sum(len(p) for p, _h in self.waiting.values()) - len(old_path) + len(joined)
        if ((wanted not in self.waiting and len(self.waiting) >= MAX_WAITING)
                or held > MAX_WAITING_IDENTITIES):
            self.stats["relay_waiting_refused"] += 1
            raise WaitingFullError(
                f"the relay is already widening its upstream subscription for "
                f"{len(self.waiting)} selections ({MAX_WAITING} at most) and "
                f"{held - len(joined) + len(old_path)} hop identities behind them "
                f"({MAX_WAITING_IDENTITIES} at most): attach {address!r} again once it is done",
                expected=MAX_WAITING, got=len(self.waiting))
        self.waiting[wanted] = (joined, max(old_hops, hops))

    def _open_receiver(self, receiver: Any) -> None:
        address = receiver.remote_target.address
        if address != CONTROL_ADDRESS:
            raise UnknownAddressError(
                "a relay takes no publications: publish to its origin", got=address,
            )
        super()._open_receiver(receiver)

    def stop(self) -> None:
        super().stop()
        self.fetches.stop()
        self.journaler.stop()
        fetching, self.fetch_connection = self.fetch_connection, None
        if fetching is not None:
            threading.Thread(target=fetching.stop, name="relay-fetch-stop", daemon=True).start()
        self.handover.closed = True
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            threading.Thread(target=upstream.stop, daemon=True).start()


_PATH_TEXT = re.compile(r"[^\s:(),'\"]+(?: -> [^\s:(),'\"]+)+")


def _hide(text: str, hidden: set[str]) -> str:
    """``text`` with the identities ``hidden`` left out of every path it describes."""
    if not hidden:
        return text
    return _PATH_TEXT.sub(lambda m: " -> ".join(
        h for h in m.group(0).split(" -> ") if h not in hidden) or "(others)", text)


class _Later:
    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        self.fn()

