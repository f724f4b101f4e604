"""Attaching a subscriber link: the addresses and attach properties a subscriber names
(WIRE.md, Attach), and how the component opens a subscriber's receiving link on them.

:func:`open_subscriber` decides the link's entitlement (the principal's grant, narrowed by
``seqrepair-permtokens``, or a subscription queue's), resumes the :class:`SubscriberLink` of
that name when the attach asks to and may (same entitlement, same context, same ACK mode) or
starts a new link context (at 0, reset, when the subscriber had one we no longer hold or a
durable position), and answers with the attach reply properties. A reply-only link
(``$link/...``, ``$reply``) gets a response route and nothing else. Importable from
:mod:`seqrepair.amqp.component.component` as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proton import Link, ulong

from seqrepair.amqp.component.ackdispatch import attach_reply
from seqrepair.amqp.component.authz import (
    check_link_name,
    effective_principal,
    queue_exclusions,
    subscribe_exclusions,
    visible_sources,
)
from seqrepair.amqp.component.durable import durable_user
from seqrepair.amqp.component.links import (
    ResponseRoute,
    SubscriberLink,
    close_stolen,
    start_map,
    tokens,
)
from seqrepair.amqp.component.subqueues import entitlement_for
from seqrepair.amqp.wire.errors import InvalidLinkPropertyError, UnknownAddressError
from seqrepair.amqp.wire.vocabulary import (
    LINK_PREFIX,
    PROP_ACK,
    PROP_BATCH,
    PROP_DENY,
    PROP_DURABLE,
    PROP_EPOCH,
    PROP_GRANTS,
    PROP_RESUME,
    PROP_SELECTION,
    PROP_START,
    SUBSCRIPTION_PREFIX,
    plain_properties,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.core.topics import TopicPattern
from seqrepair.core.window import LinkWindow

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component



def open_subscriber(component: Component, sender: Any) -> None:
    """Open the subscriber link ``sender`` attached (a refusal raises an
    :class:`~seqrepair.amqp.wire.errors.AmqpAdapterError`)."""
    # frames go pre-settled (at most once): the link numbers and repair make delivery
    # reliable, and nobody would act on a disposition; an unsettled delivery would stay
    # in proton's memory on both ends for the life of the link
    sender.snd_settle_mode = Link.SND_SETTLED
    address = sender.remote_source.address
    sender.source.address = address
    if not address:
        raise UnknownAddressError("a subscriber link needs a source address", got=address)
    if address.startswith(LINK_PREFIX) or address == "$reply":
        # a reply-only link: answers to capability queries of a client without data link
        sender.route = ResponseRoute(
            Entitlement.everything(), component.config.max_batch, component.outgoing_bits,
            sender=sender,
        )
        component.routes[(sender.connection.seqrepair_id, LINK_PREFIX + sender.name)] = (
            sender.route
        )
        return
    props = plain_properties(sender.remote_properties)
    principal = effective_principal(component, sender.connection, props)
    sub = None
    if address.startswith(SUBSCRIPTION_PREFIX):
        sub = component.subscriptions.find(address[len(SUBSCRIPTION_PREFIX) :])
        # the same refusal whether it does not exist or is not the principal's (authz.py)
        exclude = queue_exclusions(component, principal, address, sub)
        assert sub is not None
        entitlement = entitlement_for(sub, component.config.grants, principal, exclude)
    else:
        patterns = selection(address, props.get(str(PROP_SELECTION)))
        exclude = ()  # each pattern checked before the link exists; excluded ones gathered
        for pattern in patterns:
            exclude += subscribe_exclusions(component, principal, str(pattern))
        # the server's grant for this principal; the link property may only narrow it
        claimed = props.get(str(PROP_GRANTS))
        entitlement = component.config.grants.entitlement(
            principal, patterns, None if claimed is None else tokens(claimed), exclude=exclude,
            denied=tokens(props.get(str(PROP_DENY)), str(PROP_DENY)),
        )
    name = sender.name
    check_link_name(component, name, principal)  # a link name is never taken over
    resume = bool(props.get(str(PROP_RESUME), False))
    epoch = props.get(str(PROP_EPOCH))
    acks = props.get(str(PROP_ACK)) is True
    durable = component.durables.durable_for(props, name, None if sub is None else sub.id,
                                        durable_user(principal))
    position = None if durable is None else component.durables.start(durable)
    link = component.links.get(name)
    restarted = False  # a new context of a durable, after its stored position
    if (
        link is not None
        and resume
        and link.entitlement == entitlement
        # a durable link resumes only the context it names (a new process has none)
        and (epoch == link.epoch or (epoch is None and durable is None))
        and (link.window is not None) == acks
    ):
        close_stolen(link, sender)
        link.attach(sender)
        link.log.info("link resumed", epoch=link.epoch)
    else:
        if link is not None:
            close_stolen(link, sender)
        # a subscriber that had a context keeps the start it was given then: sources it
        # has delivered nothing of are replayed from there, not from the high-water now
        start = props.get(str(PROP_START)) if resume else None
        if start is None and position is not None:
            start = position  # a durable's new context starts after its position
        link = SubscriberLink(
            name=name,
            address=address,
            entitlement=entitlement,
            sequencer=LinkSequencer(
                component.config.link_bits, component.config.heartbeat_interval
            ),
            context=component.gapfill.attach(
                name, entitlement, start_after=None if start is None else start_map(start)
            ).context,
            batch=bool(props.get(str(PROP_BATCH), False)),
            max_batch=component.config.max_batch,
            max_pending=component.config.max_pending,
            source_bits=component.outgoing_bits,
            drop=component._drop,
            lossless=component._lossless,
            window=LinkWindow(component.config.link_bits, component.window_size) if acks else None,
            totals=component.stats,
        )
        if resume or position is not None:
            # the subscriber had a context we no longer hold (or a durable position): start
            # at 0 (reset) so it repairs by source (XEP-0040 §2.4 example 4)
            link.reset()
            restarted = position is not None
        link.attach(sender)
        component.links[name] = link
        link.log.info("link attached", reset=link.reset_pending, durable=durable,
                      epoch=link.epoch, batch=link.batch, principal=principal,
                      grants=sorted(entitlement.grant), deny=sorted(entitlement.deny))
    # the attach reply names the context, so the subscriber learns of a reset even if the
    # reset frame is lost
    sender.properties = {
        PROP_EPOCH: link.epoch,
        PROP_START: {k: ulong(v) for k, v in visible_sources(
            component, principal, component.gapfill.link(name).start_after).items()},
        PROP_DURABLE: restarted,
        **attach_reply(component.config, link.window),
    }
    component.durables.attached(name, durable)
    if sub is not None and sub.paused:
        link.hold(component.clock(), "subscription paused")
    component.principals[name] = principal
    sender.subscriber = name
    component.routes[(sender.connection.seqrepair_id, LINK_PREFIX + name)] = link.route


def selection(address: str, value: Any) -> tuple[TopicPattern, ...]:
    """A subscriber link's topic patterns: its source ``address``, or the link property
    ``seqrepair-selection`` (``value``) naming several, the address among them (a bad pattern
    is invalid-field before any access decision)."""
    first = TopicPattern(address)
    if value is None:
        return (first,)
    texts = tokens_of_selection(value)
    patterns = tuple(dict.fromkeys(TopicPattern(text) for text in texts))
    if first not in patterns or len(patterns) > MAX_SELECTION:
        raise InvalidLinkPropertyError(
            f"seqrepair-selection must name the link's address {address!r} among at most "
            f"{MAX_SELECTION} topic patterns", expected=address, got=repr(value)[:100],
        )
    return patterns


MAX_SELECTION = 256
"""The most topic patterns one subscriber link's ``seqrepair-selection`` may name."""


def tokens_of_selection(value: Any) -> list[str]:
    """``seqrepair-selection`` as pattern texts: a comma-separated string or a list of them."""
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list | tuple) and all(isinstance(t, str) for t in value):
        return [str(t) for t in value]
    raise InvalidLinkPropertyError(
        "seqrepair-selection must be a comma-separated string of topic patterns",
        expected="string", got=repr(value)[:100],
    )
