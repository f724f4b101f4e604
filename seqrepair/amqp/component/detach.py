"""Links and connections ending: what the component forgets, and what it keeps.

A subscriber link that detaches, or whose connection ends, keeps its link context for
``context_retention`` seconds (a resumed attach takes it up again, :mod:`.attach`), then it
expires (:func:`expire_context`). A link ends for good when its subscription queue goes
(:mod:`.subqueues`) or the access policy no longer lets its principal have it
(:func:`end_revoked`, :func:`.authz.revoked`): its context, durable positions and response
routes go with it (:func:`end_links`). A link over its byte bound for too long is detached with
its connection (:func:`detach_for_memory`, :mod:`.memory`). A publishing link that ends tells
ingest (:meth:`.ingest.Ingest.publisher_gone`); a response target the peer closed drops its
route (:func:`forget`, :func:`forget_connection`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proton import Condition

from seqrepair.amqp.component.authz import revoked
from seqrepair.amqp.component.links import SubscriberLink

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component


def forget(component: Component, endpoint: Any) -> None:
    """A link ended: a publisher's, a response target's, or a subscriber's (context kept)."""
    component.gate.detach(endpoint)
    if endpoint.is_receiver:
        component.ingest.publisher_gone(endpoint)
        return
    route = getattr(endpoint, "route", None)
    if route is not None and route.target is not None:  # the peer closed a response target
        conn_id: int = endpoint.connection.seqrepair_id
        component.routes.pop((conn_id, "\0" + route.target), None)
        component.repairs.discard(route)
        return
    name = getattr(endpoint, "subscriber", None)
    link = component.links.get(name) if name is not None else None
    if link is not None and link.sender == endpoint:
        # its replays end: what went out on this connection may not have arrived, so one
        # continued on the next could skip it (the stub asks again for its remainder)
        link.route.drop_replay(link.name)
        for route in component.routes.values():
            route.drop_replay(link.name)
        link.detach(component.clock())
        component.durables.flush()
        link.log.info("subscriber detached; context kept",
                      retention=component.config.context_retention)


def forget_connection(component: Component, conn: Any) -> None:
    """Detach every subscriber link of ``conn`` (contexts kept, then expired) and drop its
    response routes; idempotent."""
    if conn is None:
        return
    component.gate.forget(conn)
    for link in list(component.links.values()):
        if link.sender is not None and link.sender.connection == conn:
            forget(component, link.sender)
    routes = component.routes
    for key in [k for k in routes if k[0] == getattr(conn, "seqrepair_id", None)]:
        component.repairs.discard(routes.pop(key))
    endpoint = conn.link_head(0)
    while endpoint is not None:  # publishing links end with their connection too
        if endpoint.is_receiver:
            component.ingest.publisher_gone(endpoint)
        endpoint = endpoint.next(0)


def expire_context(component: Component, name: str, link: SubscriberLink, now: float) -> None:
    """Forget the context of detached link ``name`` once ``context_retention`` has passed."""
    if link.detached_at is None or now - link.detached_at <= component.config.context_retention:
        return
    del component.links[name]
    component.principals.pop(name, None)  # the name is free for anyone again
    component.gapfill.detach(name)
    component.durables.forget_link(name)
    component.principals.pop(name, None)  # else one entry per name ever attached
    link.log.info("link context expired")


def detach_for_memory(component: Component, link: SubscriberLink) -> None:
    """Detach a link over its byte bound for too long (:mod:`.memory`), and drop its
    connection: its peer does not read, and proton frees what it queued only with the
    transport."""
    sender = link.sender
    if sender is None:
        return
    text = (f"more than the bytes allowed sent and not taken by the peer for "
            f"{component.config.memory_grace} s")
    conn = sender.connection
    link.log.warning("link detached: peer does not read", unsent=link.route.unsent.bytes,
                     connection=getattr(conn, "seqrepair_id", None),
                     container=conn.remote_container)
    forget(component, sender)
    sender.condition = Condition("amqp:resource-limit-exceeded", text)
    sender.close()
    conn.condition = Condition("amqp:resource-limit-exceeded", text)
    conn.close()
    transport = conn.transport
    if transport is not None:
        transport.close_tail()
        transport.close_head()


def end_revoked(component: Component) -> None:
    """End the links the access policy, just reloaded, no longer allows."""
    now = component.clock()
    ended = []
    for link, condition, description in revoked(component):
        sender = link.sender
        link.detach(now)
        if sender is not None:
            sender.subscriber = None
            sender.condition = Condition(condition, description[:500])
            sender.close()
        link.log.info("link ended by the access policy", condition=condition)
        ended.append(link)
    end_links(component, ended)


def end_links(component: Component, ended: Sequence[SubscriberLink]) -> None:
    """Forget links that ended for good: their contexts, positions and routes."""
    routes = component.routes
    for link in ended:
        del component.links[link.name]
        component.gapfill.detach(link.name)
        component.durables.forget_link(link.name)
        component.principals.pop(link.name, None)
        for key in [k for k in routes if routes[k] is link.route]:
            del routes[key]
