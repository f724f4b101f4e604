"""The pure part of a gateway's request rewriting (respann §2.3, §2.5): what a request becomes
upstream, and how an answer finds its way back. :mod:`seqrepair.amqp.gateway.gateway` is the proton
adapter around it (and re-exports these names)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs
from proton import symbol

from seqrepair.amqp.gateway.relays import upstream_name
from seqrepair.amqp.wire.respann import ADDRESS_COOKIE, RESPONSE_COOKIE, RESPONSE_TARGET
from seqrepair.amqp.wire.vocabulary import LINK_PREFIX

RESPONSES_ADDRESS = "$gateway/responses"
"""The target, at the gateway, of the link the component sends annotated requests' answers on."""


@attrs.frozen
class Addressing:
    """The parts of a request or response that name addresses or other messages."""

    message_id: Any = None
    reply_to: str | None = None
    correlation_id: Any = None
    link: str | None = None
    """The ``link`` application property: the data link a request is about."""


@attrs.frozen
class PendingReply:
    """What the gateway remembers of a rewritten request, to invert the rewriting."""

    original_id: Any
    original_reply_to: str | None
    original_link: str | None


def downstream_link(request: Addressing) -> str | None:
    """The downstream link a request is about: its ``link`` property, else its ``reply-to``
    (``$link/NAME``); None when it names none."""
    if request.link is None and request.reply_to and request.reply_to.startswith(LINK_PREFIX):
        return request.reply_to[len(LINK_PREFIX) :]
    return request.link


def rewrite_request(
    request: Addressing, *, new_id: Any, gateway: str
) -> tuple[Addressing, PendingReply]:
    """The request to send upstream, and what to remember to route its answers back.

    The downstream link a request is about is named by its ``link`` property or else by its
    ``reply-to`` (``$link/NAME``); both are rewritten to the upstream link of that name. A
    request naming no link keeps a null ``reply-to`` and ``link``.
    """
    link = downstream_link(request)
    upstream = None if link is None else upstream_name(gateway, link)
    rewritten = Addressing(
        message_id=new_id,
        reply_to=None if upstream is None else LINK_PREFIX + upstream,
        correlation_id=request.correlation_id,
        link=upstream,
    )
    return rewritten, PendingReply(request.message_id, request.reply_to, request.link)


def annotate_request(
    request: Addressing, *, gateway: str
) -> tuple[Addressing, dict[symbol, Any]] | None:
    """The request to send upstream with response annotations, and the annotations; None when
    it names no downstream link (it is rewritten then, see :func:`rewrite_request`).

    Only the ``link`` property changes, to the upstream link; the answers go to
    :data:`RESPONSES_ADDRESS` and carry the downstream link's name back as their cookie.
    """
    link = downstream_link(request)
    if not link:
        return None
    annotations = {RESPONSE_TARGET: RESPONSES_ADDRESS, RESPONSE_COOKIE: link.encode()}
    return attrs.evolve(request, link=upstream_name(gateway, link)), annotations


def answer_route(annotations: Mapping[Any, Any] | None) -> str | None:
    """The downstream link an answer to an annotated request goes to: its ``address-cookie``
    (None when it carries none, or one this gateway cannot have made)."""
    cookie = (annotations or {}).get(ADDRESS_COOKIE)
    if not isinstance(cookie, bytes | bytearray | memoryview):
        return None
    try:
        return bytes(cookie).decode()
    except UnicodeDecodeError:
        return None


def restore_response(
    response: Addressing, pending: Mapping[Any, PendingReply]
) -> tuple[Addressing, str | None] | None:
    """The response as the downstream requester must see it, and where it goes (the original
    ``reply-to``); None when ``response`` answers no request this gateway rewrote."""
    if response.correlation_id is None:
        return None
    reply = pending.get(response.correlation_id)
    if reply is None:
        return None
    restored = attrs.evolve(response, correlation_id=reply.original_id)
    return restored, reply.original_reply_to


@attrs.define
class ReplyTable(Mapping[Any, PendingReply]):
    """The rewritten requests whose answers may still come, oldest forgotten first.

    One request can have many answers (a source replay), so an entry stays until it is pushed
    out by ``capacity`` newer ones: memory stays bounded whatever peers do.
    """

    capacity: int = 10_000
    _entries: OrderedDict[Any, PendingReply] = attrs.field(factory=OrderedDict)

    def remember(self, new_id: Any, reply: PendingReply) -> None:
        """Keep ``reply`` under the rewritten message id ``new_id``."""
        self._entries[new_id] = reply
        self._entries.move_to_end(new_id)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def __getitem__(self, key: Any) -> PendingReply:
        return self._entries[key]

    def __iter__(self) -> Any:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
