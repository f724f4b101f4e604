"""The control address ``$seqrepair``: what the component answers there.

A requests link attaches with target :data:`~seqrepair.amqp.wire.vocabulary.CONTROL_ADDRESS`
and is offered ``response-address-supported`` (:func:`open_control`). On it come ACKs
(:mod:`.ackdispatch`: never charged to the request allowance, never answered) and requests
(:func:`on_request`): CAPABILITIES (:func:`capabilities`, only the sources the asking principal
may learn of), GAP-REQUEST (answered from the link context) and SOURCE-GAP-REQUEST (a replay
from the journal, :func:`answer_gap`). Answers go where the request says (:mod:`.routing`:
``reply-to`` or the response annotations, respann §2.3), served in repair turns
(:mod:`.fairness`).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from proton import Data, Delivery, Message

from seqrepair.amqp.component.ackdispatch import receive_ack
from seqrepair.amqp.component.authz import (
    effective_principal,
    reveal_named_sources,
    visible_sources,
)
from seqrepair.amqp.component.fairness import check_replay_room
from seqrepair.amqp.component.grants import principal_of
from seqrepair.amqp.component.images import answer_image
from seqrepair.amqp.component.links import ResponseRoute, SubscriberLink
from seqrepair.amqp.component.ratelimit import request_allowance
from seqrepair.amqp.component.replaywire import JournaledEntries
from seqrepair.amqp.component.routing import route_for
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.errors import (
    RequestFloodError,
    UnknownAddressError,
    UnknownMessageTypeError,
)
from seqrepair.amqp.wire.respann import RESPONSE_ADDRESS_SUPPORTED
from seqrepair.amqp.wire.security import ANONYMOUS
from seqrepair.amqp.wire.technical import (
    DEFAULT_SOURCE_BITS,
    Ack,
    Capabilities,
    CapabilitiesRequest,
)
from seqrepair.amqp.wire.vocabulary import LINK_PREFIX, PROP_LINK, is_ack, plain_properties
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    PublishType,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.snapshot import ImageRequest

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component


def open_control(receiver: Any) -> None:
    """Attach a requests link: it takes response annotations (``response-address-supported``)."""
    receiver.kind = "control"
    caps = receiver.target.capabilities
    caps.put_array(False, Data.SYMBOL)
    caps.enter()
    caps.put_symbol(RESPONSE_ADDRESS_SUPPORTED)
    caps.exit()


def capabilities(component: Component, principal: str | None = None) -> Capabilities:
    """The answer to a source query (XEP-0040 §4); only the sources ``principal`` may learn
    of (None: every source)."""
    config = component.config
    bits = dict(component.decoder.unwrapper.bits)
    return Capabilities(
        link_bits=config.link_bits,
        source_bits=bits if principal is None else visible_sources(component, principal, bits),
        default_source_bits=DEFAULT_SOURCE_BITS,
        heartbeat_interval=config.heartbeat_interval,
        max_gap_range=config.max_gap_range,
        retention=config.journal_retention,
        publish_types=tuple(t.value for t in PublishType),
        max_batch=config.max_batch,
        response_annotations=True,
        retention_count=config.journal_retention_count,
        max_publish_batch=config.max_publish_batch,
        limits=config.limits(),
    )


def on_ack(component: Component, receiver: Any, delivery: Delivery, message: Message) -> None:
    """An ACK (:mod:`.ackdispatch`): not charged to the request allowance, never answered."""
    stats = component.stats
    # a forwarding gateway's clients share its connection: an ACK naming another principal's
    # link is ignored like one from another connection (it would move that link's position)
    principal = effective_principal(component, receiver.connection,
                                    plain_properties(dict(message.properties or {})))
    for ack in component.decoder.decode(message):
        if not isinstance(ack, Ack):
            raise UnknownMessageTypeError("an ACK message holds one ACK", got=ack)
        if component.principals.get(ack.link, principal) != principal:
            stats["acks_ignored"] = stats.get("acks_ignored", 0) + 1
            continue
        link = receive_ack(ack, receiver.connection, component.links, component.positions, stats)
        if link is not None:
            component._pump_link(link, component.clock())
            stats["window_peak"] = max(stats["window_peak"], link.stats["window_peak"])
    component.accept(delivery)


def on_request(
    component: Component, receiver: Any, delivery: Delivery, message: Message
) -> None:
    """A message on a requests link: an ACK, or requests answered over their route."""
    if is_ack(message):
        on_ack(component, receiver, delivery, message)
        return
    conn = receiver.connection
    now = component.clock()
    raw = message.properties
    # properties that are no map are the decoder's to refuse (amqp:decode-error), below
    props: dict[Any, Any] = dict(raw) if isinstance(raw, dict) else {}
    try:
        principal = effective_principal(component, conn, plain_properties(props))
    except Exception:
        conn.bucket.take(now)  # a claim not honoured still costs its connection
        raise
    if not request_allowance(component, conn, principal, now):
        raise RequestFloodError(
            "request rate exceeded; slow down" if principal == principal_of(conn) else
            f"request rate exceeded for principal {principal!r}; slow down",
            got=component.stats["requests"])
    component.stats["requests"] += 1
    requests = component.decoder.decode_request(message)  # never a publication: no source state
    route, cookie = route_for(  # where the answers go (respann §2.3)
        component.routes, conn, message, component.container,
        lambda sender, target: ResponseRoute(
            Entitlement.everything(), component.config.max_batch, component.outgoing_bits,
            sender=sender, target=target))
    route.check_room()
    correlation = message.id
    name = props.get(PROP_LINK) or _link_name(message.reply_to)
    for request in requests:
        if isinstance(request, CapabilitiesRequest):
            route.respond(encode(component.capabilities(principal)), correlation, cookie)
        elif isinstance(request, GapRequest | SourceGapRequest | ImageRequest):
            link = component.links.get(str(name)) if name else None
            if (
                link is None
                or (route.target is None and link.route is not route)
                # answers routed elsewhere only for the principal that attached the link
                or component.principals.get(link.name) != principal
            ):
                raise UnknownAddressError(f"no link {name!r} on this connection", got=name)
            if isinstance(request, ImageRequest):  # SNAPSHOT (images.py)
                answer_image(component, link, route, request, correlation, cookie)
            else:
                answer_gap(component, link, route, request, correlation, cookie)
        else:
            raise UnknownMessageTypeError(
                f"{type(request).__name__} is not a request", got=type(request).__name__
            )
    component.accept(delivery)
    if route.sender is not None:
        component._pump_sender(route.sender)


def answer_gap(
    component: Component,
    link: SubscriberLink,
    route: ResponseRoute,
    request: GapRequest | SourceGapRequest,
    correlation: Any,
    cookie: bytes | None,
) -> None:
    """Answer one gap request of ``link`` over ``route``: a resend from its context, a replay
    from the journal, or a GAP-ERROR saying why not."""
    config = component.config
    now = component.clock()
    if isinstance(request, GapRequest):
        resend = component.gapfill.resend_gap(link.name, request, now)
        if isinstance(resend, GapError):
            link.log.info("gap request not answered", reason=resend.reason,
                          detail=resend.detail)
            route.respond(encode(resend), correlation, cookie)
        elif len(resend):
            route.start_resend(link.fresh(resend), correlation, cookie)
        return
    if len(request.after) > config.max_request_sources:
        route.respond(
            encode(GapError("refused", request,
                            f"more than {config.max_request_sources} sources")),
            correlation,
            cookie,
        )
        return
    live = route.live_replay(link.name, request)
    if live is not None:
        # "still going?": the replay of an earlier attempt of this request runs; it goes on
        # where it is (restarting it would send again all that is on its way)
        component.stats["replays_continued"] += 1
        route.respond(encode(ReplayStarted(request, live.through, continued=True,
                                           more=live.more)), correlation, cookie)
        return
    ended = route.ended_replay(link.name, request)
    if ended is not None:
        # it asked while the end of that replay was on its way: nothing is sent again
        component.stats["replays_continued"] += 1
        if isinstance(ended, ReplayComplete):  # a GAP-ERROR that ended it is sent alone
            route.respond(encode(ReplayStarted(request, ended.through, continued=True,
                                               more=ended.more)), correlation, cookie)
        route.respond(encode(ended), correlation, cookie)
        return
    if route.follows_short(link.name, request):
        # pipelined on a replay that ended short before it came: asked again after what
        # that replay sent, which this one's publications would pass (responses._reached)
        link.log.info("source request following a replay ended short: not answered")
        return
    # a repeat is answered above: what it asks after is only what had not arrived yet of
    # an answer on its way, so it takes nothing back
    carry_through = _not_taken(link, request)
    if carry_through:
        link.log.info("source request below what replays gave: carried through what the "
                      "link passed over", carry_through=carry_through)
    # asked before the replay in progress ended, for what follows it: answered after it
    following = route.follows(link.name, request)
    principal = component.principals.get(link.name, ANONYMOUS)
    if link.name not in route.replays:  # a new replay (one for the same link replaces it)
        # counted for the link's principal: a forwarding gateway's client is itself
        check_replay_room(component.routes.values(), route, config, component.stats,
                          principal, component.principals)
    # what the component fans out next goes to this link too: the replay stops there
    # the sources the link's principal may not learn of are answered as unknown ones
    # a named source it is owed publications of is no unknown one (authz.py)
    shown = reveal_named_sources(component, principal, request.after)
    replay = component.gapfill.answer_source_gap(
        link.name, request, now, carried_after=component.ingest.ingested,
        carry_through=carry_through,
        # a relay's: what its journal lacks comes from upstream, its links shared by principal
        fetcher=None if component.fetcher is None else partial(
            component.fetcher, principal=principal),
        visible=lambda sources: shown.union(
            visible_sources(component, principal, dict.fromkeys(sources))),
        # batch entries straight from the journal's text (replaywire.py), when batching
        encoder=JournaledEntries(route.source_bits) if route.batch and route.max_batch > 1
        else None,
        # what it fanned out lately, sent as encoded then (journal/recent.py)
        recent=component.recent if component.recent.max_bytes else None,
    )
    if isinstance(replay, GapError):
        link.log.info("source request not answered", reason=replay.reason,
                      detail=replay.detail)
        if following:  # its answer comes after the replay it follows, as a replay would
            route.start_replay(link.name, (replay,), correlation, cookie, request=request,
                               queue=True)
        else:
            route.respond(encode(replay), correlation, cookie)
        return
    component.ingest.owe(replay.owed_to_link)
    if following:
        component.stats["replays_queued"] += 1
    # answered at once: the subscriber knows the replay runs and waits for a real silence
    route.respond(encode(ReplayStarted(request, replay.through, more=replay.more)),
                  correlation, cookie)
    route.start_replay(link.name, replay.steps(config.replay_page), correlation, cookie,
                       request=request, through=replay.through,
                       parked=lambda: replay.parked, more=replay.more, queue=following)


def _not_taken(link: SubscriberLink, request: SourceGapRequest) -> dict[str, int]:
    """What ``request`` (a source request of ``link``) shows its subscriber did not take of
    what the link's replays gave it (:attr:`ResponseRoute.given`): per source it asks after a
    number below that, it lacks some (an answer it dropped as stray, once its view of the
    link broke). Those numbers are given no more, so the link sends them live again. Not
    asked of a repeat that a replay running or ended answers (:func:`answer_gap`): it asks
    after less only because that answer is still on its way.

    Returned: per source whose ``after`` is below the highest number the link ever passed
    over as given (:attr:`~.links.SubscriberLink.skipped_top`), that number: the replay for
    ``request`` carries through it, whatever the link numbered past its cover point. Read
    from what the link passed over, not from ``given``: a take-back lowers ``given`` at once,
    and the request that took it back may get no replay of its own (refused by the budget,
    replaced by a newer request, cut at ``max_gap_range``), so the next request, below the
    skipped numbers still, must carry through them too: nothing the link passed over is
    left to nobody, and a replay that carries more sends only duplicates the stub drops."""
    given = link.route.given.get(link.name)
    if given:
        for source, seq in list(given.items()):
            after = request.after.get(source, 0)
            if after < seq:
                given[source] = after
    carry: dict[str, int] = {}
    for source, skipped in link.skipped_top.items():
        if skipped > request.after.get(source, 0):
            carry[source] = skipped
    return carry


def _link_name(reply_to: Any) -> str | None:
    if isinstance(reply_to, str) and reply_to.startswith(LINK_PREFIX):
        return reply_to[len(LINK_PREFIX) :]
    return None
