"""A transiting gateway between two address scopes, by message rewriting (respann §2.5).

Subscribers in one address scope attach to the gateway; the gateway attaches the same sources
upstream, at the component, under names of the component's scope (``<gateway>.<link name>``)
and relays the frames. A subscriber's request (GAP-REQUEST, SOURCE-GAP-REQUEST, CAPABILITIES)
names addresses of the subscriber's scope: its ``reply-to`` (``$link/NAME``) and its ``link``
property mean nothing at the component. The gateway therefore forwards a *new* message: the
same bare message except a distinct ``message-id`` and the response addresses rewritten to the
upstream link (:func:`rewrite_request`). Answers come back on that upstream link with the new
id as ``correlation-id``; the gateway applies the inverse (:func:`restore_response`): the
original ``message-id`` as ``correlation-id``, delivered to the original ``reply-to``.

This is what a transiting container does when the next hop does not take response annotations
(respann §2.1, §3 item 3). Forwarding with annotations instead (§2.3, §3 item 2) is not done
here: this gateway always rewrites.

The rewriting itself is pure (:func:`rewrite_request`, :func:`restore_response`,
:class:`ReplyTable`); :class:`Gateway` is the thin proton adapter around it.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, AtMostOnce, Container, EventInjector, LinkOption

log = structlog.get_logger("seqrepair.amqp.gateway")

LINK_PREFIX = "$link/"
CONTROL_ADDRESS = "$seqrepair"
PROP_LINK = "link"


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


def upstream_name(gateway: str, link: str) -> str:
    """The name, in the upstream scope, of a downstream link ``link``."""
    return f"{gateway}.{link}"


def rewrite_request(
    request: Addressing, *, new_id: Any, gateway: str
) -> tuple[Addressing, PendingReply]:
    """The request to send upstream, and what to remember to route its answers back.

    The downstream link a request is about is named by its ``link`` property or else by its
    ``reply-to`` (``$link/NAME``); both are rewritten to the upstream link of that name. A
    request naming no link keeps a null ``reply-to`` and ``link``.
    """
    link = request.link
    if link is None and request.reply_to and request.reply_to.startswith(LINK_PREFIX):
        link = request.reply_to[len(LINK_PREFIX) :]
    upstream = None if link is None else upstream_name(gateway, link)
    rewritten = Addressing(
        message_id=new_id,
        reply_to=None if upstream is None else LINK_PREFIX + upstream,
        correlation_id=request.correlation_id,
        link=upstream,
    )
    return rewritten, PendingReply(request.message_id, request.reply_to, request.link)


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


# --------------------------------------------------------------------------------------------
# the proton adapter


class _Properties(LinkOption):
    def __init__(self, props: Any) -> None:
        self.props = props

    def apply(self, link: Any) -> None:
        if self.props:
            link.properties = self.props


def _addressing(message: Message) -> Addressing:
    props: Mapping[Any, Any] = message.properties or {}
    link = props.get(PROP_LINK)
    return Addressing(message.id, message.reply_to, message.correlation_id,
                      None if link is None else str(link))


class Gateway(MessagingHandler):
    """Relays subscriber links from ``listen`` (downstream scope) to the component at
    ``upstream`` and rewrites requests and their answers across the boundary.

    :meth:`run` in this thread or :meth:`start` in a background one, :meth:`close` from any;
    :attr:`stats` counts rewritten requests, restored answers and relayed messages.
    """

    def __init__(
        self,
        listen: str,
        upstream: str,
        *,
        name: str = "gw",
        capacity: int = 10_000,
        on_ready: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.listen_url = listen
        self.upstream_url = upstream
        self.name = name
        self.on_ready = on_ready
        self.replies = ReplyTable(capacity)
        self._ids = itertools.count(1)
        self._container: Any = None
        self._acceptor: Any = None
        self._upstream: Any = None
        self._control: Any = None
        self._downstream: dict[str, Any] = {}  # downstream link name -> its sender
        self.stats = {"rewritten": 0, "restored": 0, "relayed": 0, "unroutable": 0}
        self.ready = threading.Event()
        self._injector = EventInjector()
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Run the gateway in this thread until :meth:`close`."""
        container = Container(self)
        container.selectable(self._injector)
        container.run()

    def start(self) -> Gateway:
        """Run the gateway in a background thread."""
        self._thread = threading.Thread(target=self.run, name="gateway", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the gateway (safe from any thread)."""
        self._injector.trigger(ApplicationEvent("seqrepair_stop"))
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def on_seqrepair_stop(self, event: Any) -> None:
        self.stop()
        self._injector.close()

    def on_start(self, event: Any) -> None:
        self._container = event.container
        self._acceptor = event.container.listen(self.listen_url)
        self._upstream = event.container.connect(self.upstream_url, reconnect=False)
        self._control = event.container.create_sender(
            self._upstream, CONTROL_ADDRESS, options=AtMostOnce()
        )
        log.info("gateway listening", listen=self.listen_url, upstream=self.upstream_url)
        self.ready.set()
        if self.on_ready is not None:
            self.on_ready(self.listen_url)

    def stop(self) -> None:
        """Close the listener and every connection (from the container's thread)."""
        if self._acceptor is not None:
            self._acceptor.close()
        for sender in list(self._downstream.values()):
            sender.connection.close()
        if self._upstream is not None:
            self._upstream.close()

    # --- attaching ----------------------------------------------------------------------

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.connection == self._upstream:
            return
        if link.is_sender:  # a subscriber's data link: attach the same source upstream
            address = link.remote_source.address
            link.source.address = address
            self._downstream[link.name] = link
            receiver = self._container.create_receiver(
                self._upstream, address, name=upstream_name(self.name, link.name),
                options=_Properties(link.remote_properties),
            )
            receiver.downstream = link.name
            receiver.flow(200)
        else:  # the requests link
            link.target.address = link.remote_target.address
            link.flow(64)

    def on_link_closing(self, event: Any) -> None:
        link = event.link
        if link.connection != self._upstream and link.is_sender:
            self._downstream.pop(link.name, None)

    # --- messages -----------------------------------------------------------------------

    def on_message(self, event: Any) -> None:
        receiver = event.receiver
        if receiver.connection == self._upstream:
            self._from_upstream(receiver, event.message)
            receiver.flow(1)
        else:
            self._request(event.message)
            self.accept(event.delivery)
            receiver.flow(1)

    def _request(self, message: Message) -> None:
        new_id = f"{self.name}:{next(self._ids)}"
        rewritten, pending = rewrite_request(_addressing(message), new_id=new_id,
                                             gateway=self.name)
        self.replies.remember(new_id, pending)
        out = Message(body=message.body, properties=dict(message.properties or {}),
                      id=rewritten.message_id, reply_to=rewritten.reply_to,
                      correlation_id=rewritten.correlation_id)
        if rewritten.link is not None:
            out.properties[PROP_LINK] = rewritten.link  # type: ignore[index]
        self._control.send(out)
        self.stats["rewritten"] += 1

    def _from_upstream(self, receiver: Any, message: Message) -> None:
        destination = getattr(receiver, "downstream", None)
        restored = restore_response(_addressing(message), self.replies)
        if restored is not None:
            addressing, reply_to = restored
            message.correlation_id = addressing.correlation_id
            if reply_to and reply_to.startswith(LINK_PREFIX):
                destination = reply_to[len(LINK_PREFIX) :]
            self.stats["restored"] += 1
        message.instructions = None
        sender = self._downstream.get(destination) if destination else None
        if sender is None:
            self.stats["unroutable"] += 1
            return
        sender.send(message)
        self.stats["relayed"] += 1


__all__ = [
    "Addressing",
    "Gateway",
    "PendingReply",
    "ReplyTable",
    "restore_response",
    "rewrite_request",
    "upstream_name",
]
