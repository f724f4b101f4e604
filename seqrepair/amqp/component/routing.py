"""Where the component sends the answers to a request (respann §2.3): the route of the data
link its ``reply-to`` names, or a link the component attaches to the request's
``response-link-target-address`` (one per target, at most :data:`MAX_RESPONSE_TARGETS` per
connection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proton import Message
from proton.reactor import AtMostOnce

from seqrepair.amqp.component.links import ResponseRoute
from seqrepair.amqp.wire.errors import MalformedMessageError, RequestFloodError, UnknownAddressError
from seqrepair.amqp.wire.respann import RESPONSE_COOKIE, RESPONSE_TARGET

MAX_RESPONSE_TARGETS = 16
"""How many ``response-link-target-address`` links the component attaches per connection."""


def route_for(
    routes: dict[tuple[int, str], ResponseRoute],
    conn: Any,
    message: Message,
    container: Any,
    make_route: Callable[[Any, str], ResponseRoute],
) -> tuple[ResponseRoute, bytes | None]:
    """Where the answers to ``message`` (received on ``conn``) go, and the cookie they carry.
    ``make_route(sender, target)`` makes the route of a new response target."""
    annotations: dict[Any, Any] = dict(message.instructions or {})
    target = annotations.get(RESPONSE_TARGET)
    cookie = annotations.get(RESPONSE_COOKIE)
    if isinstance(cookie, memoryview | bytearray):
        cookie = bytes(cookie)
    if cookie is not None and not isinstance(cookie, bytes):
        raise MalformedMessageError("response-address-cookie must be binary", got=cookie)
    if target is None:
        reply_to = message.reply_to
        route = routes.get((conn.seqrepair_id, str(reply_to)))
        if route is None:
            raise UnknownAddressError(
                f"reply-to {reply_to!r} names no link of this connection", got=reply_to
            )
        return route, cookie
    if not isinstance(target, str) or not target:
        raise MalformedMessageError(
            "response-link-target-address must be a non-empty string", got=target
        )
    key = (conn.seqrepair_id, "\0" + target)
    route = routes.get(key)
    if route is None:
        targets = sum(
            1 for (conn_id, _), r in routes.items()
            if conn_id == conn.seqrepair_id and r.target is not None
        )
        if targets >= MAX_RESPONSE_TARGETS:
            raise RequestFloodError(
                f"answers already go to {targets} response targets on this connection",
                got=target,
            )
        sender = container.create_sender(conn, target=target, options=AtMostOnce())
        route = make_route(sender, target)
        sender.route = route
        routes[key] = route
    return route, cookie
