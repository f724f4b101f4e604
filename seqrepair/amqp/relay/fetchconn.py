"""One upstream connection for all of a relay's fetches (:mod:`.fetch`, :mod:`.imagefetch`).

Each fetch of what the relay's journal lacks, and each image request it cannot answer, is one
receiving link upstream (``relay.<name>.fetch.<tag>``, on the asking link's selection and
grant). They all live on one :class:`FetchConnection`: made at the relay's first fetch,
authenticated as the relay (its ``--upstream-*`` security), its container id
``relay.<name>.fetch.<tag>`` (the upstream's ``connection opened`` log names it), and kept for
the next ones: a fetch costs a link attach, not a TCP connection, SASL and TLS handshake and a
client thread each. The fetch slots (how many fetch links at once, shared fairly by principal)
stay :class:`~seqrepair.amqp.relay.fetch.UpstreamFetches`'s; this module only carries links.

The connection reconnects with the client's backoff when it drops (``reconnect_delay``,
doubled per failed attempt up to ``max_reconnect_delay``); the links that were running attach
again on the new connection and ask again from where their answer had got to (a range fetch
after the last number it took, an image request anew), so a fetch in progress is retried.
While they are not attached, :attr:`FetchLink.connected` is clear, and the fetch slots end a
fetch that stays so past their connect timeout with an error that says so (never a hang). A
link the upstream refuses or ends with a condition in
:data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS` (its selection, the relay's path) ends
its fetch alone (:attr:`FetchLink.error`); another condition attaches it again after a delay.
A connection refused for good (its authentication, a fatal condition on the connection) fails
every link on it and stops; the relay's next fetch makes a new one.

A fetch's request goes unsettled, and the upstream's outcome is heard: rejected with a
condition that passes (:data:`~seqrepair.core.stubrepair.TEMPORARY_REJECTIONS`: the replay
room of the relay's principal, the request allowance, the upstream's journal out of reach), it
is asked again after the link's backoff (the fetch's idle timeout still ends it if the
rejections last); rejected otherwise, the fetch ends at once with the condition and its
description as its error (answered as numbers the upstream lacks: named). Sent pre-settled,
a rejection went unheard and the fetch waited its whole idle timeout for an answer that would
not come.

Everything on the connection runs in its own thread; :meth:`FetchConnection.attach` and
:meth:`FetchLink.stop` are safe from any thread (the relay's event loop).
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Any

from proton import Endpoint, symbol
from proton.reactor import ApplicationEvent

from seqrepair.amqp.client.runner import FATAL_CONDITIONS, SubscriberRunner
from seqrepair.amqp.wire.backoff import Backoff
from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.errors import AmqpAdapterError, OversizedMessageError
from seqrepair.amqp.wire.framing import Outgoing
from seqrepair.amqp.wire.hops import hop_refusal
from seqrepair.amqp.wire.rawamqp import read_raw
from seqrepair.amqp.wire.refusal import attach_refused
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.sizelimit import DEFAULT_MAX_RECEIVED, LinkProperties, limit_size
from seqrepair.amqp.wire.vocabulary import (
    CONTROL_ADDRESS,
    LINK_PREFIX,
    PROP_ACK,
    PROP_BATCH,
    PROP_DURABLE,
    PROP_LINK,
    PROP_RESUME,
)
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.stubrepair import TEMPORARY_REJECTIONS
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.relay.fetchconn")

OPTIONS = ("reconnect_delay", "max_reconnect_delay", "idle_timeout", "credit",
           "max_message_size")
"""The upstream subscriber options (``RelayComponent(subscriber_options=...)``) a fetch
connection takes too."""

_CHANGED = ApplicationEvent("seqrepair_fetch_links")


class FetchLink:
    """One fetch's link on a :class:`FetchConnection`: what the fetch slots watch
    (:attr:`connected`, :attr:`error`) and end (:meth:`stop`). ``fetch``: an
    :class:`~seqrepair.amqp.relay.fetch.UpstreamFetch` or an
    :class:`~seqrepair.amqp.relay.imagefetch.UpstreamImage`: it makes the requests
    (``ask()``) and takes the frames (``take(frame)``, True when it must ask again)."""

    def __init__(self, connection: FetchConnection, fetch: Any, name: str, address: str,
                 properties: dict[Any, Any]) -> None:
        self.connection = connection
        self.fetch = fetch
        self.name = name
        self.address = address
        self.properties = properties
        self.connected = threading.Event()
        """Set while the link is attached upstream (cleared when its connection drops)."""
        self.error: AmqpAdapterError | None = None
        """Why the upstream refused or ended this link for good (its fetch ends)."""
        self.stopped = False
        self.receiver: Any = None
        # its answers carry no link numbers; live frames on it (ignored) may have any width
        self.decoder = Decoder(link_bits=64)
        self.backoff = Backoff(initial=connection.reconnect_delay,
                               maximum=max(connection.reconnect_delay,
                                           connection.max_reconnect_delay))

    def start(self) -> FetchLink:
        """Attach it (on the connection's thread)."""
        self.connection.change(self, add=True)
        return self

    def stop(self) -> None:
        """Detach it: its fetch is over (or cancelled). Returns at once."""
        self.stopped = True
        self.connected.clear()
        self.connection.change(self, add=False)


class FetchConnection(SubscriberRunner):
    """A relay's one upstream connection for its fetch links (see the module)."""

    def __init__(self, url: str, *, name: str, security: ClientSecurity = NO_CLIENT_SECURITY,
                 credit: int = 200, reconnect_delay: float = 0.2,
                 max_reconnect_delay: float = 5.0, idle_timeout: float = 10.0,
                 tick: float = 0.5, max_message_size: int = DEFAULT_MAX_RECEIVED,
                 stats: dict[str, int] | None = None) -> None:
        super().__init__(credit=credit, reconnect_delay=reconnect_delay,
                         max_reconnect_delay=max_reconnect_delay)
        self.max_message_size = max_message_size
        read_raw(self)
        limit_size(self, self._oversized)
        self.url = url
        self.address = url  # what its errors name
        self.security = security
        self.link_name = name  # its thread's name and its connection's container id
        self.idle_timeout = idle_timeout
        self.tick = tick
        self.on_publication = None
        self.stats = stats if stats is not None else {}
        self.stats.setdefault("fetch_connections", 0)
        self.log = log.bind(connection=name, upstream=url)
        self.links: dict[str, FetchLink] = {}  # the connection thread's
        self._changes: deque[tuple[FetchLink, bool]] = deque()
        self._control: Any = None
        self._outbox: deque[tuple[Outgoing, FetchLink]] = deque()
        self._ids = itertools.count(1)

    @property
    def usable(self) -> bool:
        """Whether new links may go on it (it has not stopped)."""
        return not self._stopping and self.error is None

    def attach(self, fetch: Any, name: str, address: str, properties: dict[Any, Any]
               ) -> FetchLink:
        """A link for ``fetch`` named ``name`` on ``address`` with attach ``properties``
        (not attached until :meth:`FetchLink.start`)."""
        return FetchLink(self, fetch, name, address, properties)

    def change(self, link: FetchLink, *, add: bool) -> None:
        """Attach (``add``) or detach ``link``, from any thread."""
        self._changes.append((link, add))
        injector = self._injector
        if injector is not None:
            injector.trigger(_CHANGED)
        elif self._stopping and add:  # a connection that stopped takes no link
            link.error = self.error or AmqpAdapterError(
                "the relay's upstream fetch connection stopped", got=self.url)

    def drop_connection(self) -> None:
        """Tear the connection down abruptly (tests: a lost connection); it reconnects."""
        if self._injector is not None:
            self._injector.trigger(ApplicationEvent("seqrepair_drop"))

    def on_seqrepair_drop(self, event: Any) -> None:
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.close_tail()
            self._conn.transport.close_head()

    # --- the connection ---------------------------------------------------------------

    def _connect(self) -> None:
        self._conn = self._container.connect(
            self.security.url(self.url), reconnect=False, heartbeat=self.idle_timeout,
            container_id=self.link_name, desired_capabilities=["RESPONSE_ANNOTATIONS_V1_0"],
            **self.security.connect_kwargs(self.url),
        )
        # unsettled: a rejected request is heard (on_rejected), not waited on till the timeout
        self._control = self._container.create_sender(self._conn, CONTROL_ADDRESS)
        for link in self.links.values():
            self._attach(link)

    def _attach(self, link: FetchLink) -> None:
        if self._conn is None or link.stopped:
            return  # attached once connected
        props: dict[symbol, Any] = {**link.properties, PROP_BATCH: True, PROP_RESUME: False,
                                    PROP_ACK: False, PROP_DURABLE: False}
        link.receiver = self._container.create_receiver(
            self._conn, link.address, name=link.name,
            options=LinkProperties(props, self.max_message_size))

    def on_start(self, event: Any) -> None:
        super().on_start(event)
        self.on_seqrepair_fetch_links(event)  # links asked for before the thread ran

    def on_seqrepair_fetch_links(self, event: Any) -> None:
        """Links to attach or detach (:meth:`change`)."""
        while self._changes:
            link, add = self._changes.popleft()
            if add and not link.stopped:
                self.links[link.name] = link
                self._attach(link)
            elif not add:
                self._detach(link)
        self._flush()

    def _detach(self, link: FetchLink) -> None:
        self.links.pop(link.name, None)
        link.connected.clear()
        receiver, link.receiver = link.receiver, None
        if receiver is not None and not receiver.state & Endpoint.LOCAL_CLOSED:
            receiver.close()

    def _by_receiver(self, receiver: Any) -> FetchLink | None:
        link = self.links.get(receiver.name)
        return link if link is not None and link.receiver == receiver else None

    def on_connection_opened(self, event: Any) -> None:
        if event.connection != self._conn:
            event.connection.close()  # given up on while it was being made
            return
        self.stats["fetch_connections"] += 1
        self.log.info("fetch connection opened", connections=self.stats["fetch_connections"],
                      links=len(self.links))

    def on_link_opened(self, event: Any) -> None:
        link = self._by_receiver(event.link)
        if link is None or attach_refused(event.link):
            self._flush()  # a refusal: its detach (on_link_error) says why
            return
        if self._accepted(event.link):
            self.connected.set()
            link.backoff.reset()
            link.connected.set()
            self._ask(link)
        self._flush()

    def _ask(self, link: FetchLink) -> None:
        """Send ``link``'s fetch its request (again: after where its answer got to)."""
        fetch = link.fetch
        if fetch.done:
            return
        message: Any = encode(fetch.ask())
        message.id = next(self._ids)
        message.reply_to = LINK_PREFIX + link.name
        message.properties = {**(message.properties or {}), PROP_LINK: link.name}
        self._outbox.append((message, link))

    def on_sendable(self, event: Any) -> None:
        self._flush()

    def _flush(self) -> None:
        control = self._control
        while self._outbox and control is not None and control.credit > 0:
            message, link = self._outbox.popleft()
            delivery = control.send(message)
            delivery.seqrepair_fetch = (link, link.fetch.asked)

    def on_rejected(self, event: Any) -> None:
        """The upstream rejected a fetch's request: asked again after the link's backoff when
        the condition passes, else the fetch ends with it (see the module)."""
        link, asked = getattr(event.delivery, "seqrepair_fetch", None) or (None, None)
        if link is None or link.stopped or link.fetch.done or link.fetch.asked is not asked:
            return  # its fetch is over, or asked again since
        cond = event.delivery.remote.condition
        name = cond.name if cond else None
        text = f"{name}: {(cond.description if cond else None) or 'rejected'}"
        self.stats["fetch_requests_rejected"] = self.stats.get("fetch_requests_rejected", 0) + 1
        if name not in TEMPORARY_REJECTIONS:
            self.log.warning("fetch request rejected upstream", link=link.name, condition=name)
            link.fetch.finish(error=f"the upstream rejected the fetch's request: {text}")
            return
        delay = link.backoff.next_delay(self._rng) or self.reconnect_delay
        self.log.info("fetch request rejected upstream: asking again", link=link.name,
                      condition=name, delay=round(delay, 3))
        self._container.schedule(delay, _Reask(self, link, asked))

    def on_message(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.settled:
            delivery.settle()
        else:
            self.accept(delivery)
        link = self._by_receiver(event.link)
        if link is None or link.stopped:
            return
        fetch = link.fetch
        items = getattr(event.message, "items", None)
        # what it may hold: a batch's entries as they came, else the message's body
        fetch.bytes += (sum(map(len, items)) if items else
                        256 + len(repr(getattr(event.message, "body", ""))))
        try:
            frames = link.decoder.decode(event.message)
        except SeqRepairError as exc:
            self.log.warning("undecodable message dropped", link=link.name, error=exc.message)
            return
        again = False
        for frame in frames:
            again = bool(fetch.take(frame)) or again
        if again:
            self._ask(link)
        self._flush()

    # --- links and connections ended by the peer ----------------------------------------

    def on_link_error(self, event: Any) -> None:
        if not self._link_ended(event.link, event.link.remote_condition):
            super().on_link_error(event)

    def on_link_closing(self, event: Any) -> None:
        if not self._link_ended(event.link, None):
            super().on_link_closing(event)

    def _link_ended(self, receiver: Any, cond: Any) -> bool:
        """The upstream detached (or refused) a fetch link: fatal ends its fetch alone, else
        it attaches again after its backoff. False: not a fetch link of ours."""
        link = self._by_receiver(receiver)
        if link is None:
            return False  # the control link (a lost connection), or one already detached
        link.connected.clear()
        link.receiver = None
        if not receiver.state & Endpoint.LOCAL_CLOSED:
            receiver.close()
        if self._stopping or link.stopped:
            return True
        name = cond.name if cond else None
        text = f"{name}: {(cond.description if cond else None) or ''}"
        if name in FATAL_CONDITIONS:
            self.log.warning("fetch link refused upstream", link=link.name, condition=name)
            link.error = hop_refusal(name, text, link.address) or AmqpAdapterError(
                text, got=link.address)
            self.links.pop(link.name, None)
            return True
        delay = link.backoff.next_delay(self._rng) or self.reconnect_delay
        self.log.info("fetch link detached upstream: attaching it again", link=link.name,
                      condition=name, delay=round(delay, 3))
        self._container.schedule(delay, _Reattach(self, link))
        return True

    def _main_links(self) -> dict[str, Any]:
        return {"control": self._control}

    def _forget_connection(self, conn: Any) -> None:
        self._outbox.clear()
        self._control = None
        for link in self.links.values():
            link.connected.clear()
            link.receiver = None  # attached again on the next connection

    def _fail(self, error: AmqpAdapterError) -> None:
        """Refused for good (its authentication, a fatal condition on the connection): every
        link on it ends with ``error``; the relay's next fetch makes a new connection."""
        for link in list(self.links.values()):
            link.error = error
        while self._changes:
            link, add = self._changes.popleft()
            if add:
                link.error = error
        super()._fail(error)

    def _oversized(self, link: Any, size: int, limit: int) -> None:
        fetch_link = self._by_receiver(link)
        if fetch_link is None:
            return
        fetch_link.error = OversizedMessageError(
            f"{OversizedMessageError.condition}: the upstream sent a message of at least "
            f"{size} bytes; a fetch link takes at most {limit}", expected=limit, got=size)
        self._detach(fetch_link)

    def _on_tick(self) -> None:
        conn = self._conn
        bound = conn is not None and getattr(conn, "seqrepair_bound", False)
        if bound and (conn.transport is None or conn.transport.closed):
            self._lost(conn, "transport closed")
        self._flush()

    def on_connection_bound(self, event: Any) -> None:
        event.connection.seqrepair_bound = True

    def _shutdown(self) -> None:
        super()._shutdown()
        for link in self.links.values():
            link.connected.clear()


class _Reask:
    """A timer: ask ``link``'s fetch again unless it ended, asked since, or is detached."""

    def __init__(self, connection: FetchConnection, link: FetchLink, asked: Any) -> None:
        self.connection = connection
        self.link = link
        self.asked = asked

    def on_timer_task(self, event: Any) -> None:
        conn, link = self.connection, self.link
        if conn._stopping or link.stopped or link.fetch.asked is not self.asked:
            return
        if link.receiver is not None and link.connected.is_set():
            conn._ask(link)  # else it asks again when it attaches
            conn._flush()


class _Reattach:
    """A timer: attach ``link`` again unless it stopped or its connection is not there."""

    def __init__(self, connection: FetchConnection, link: FetchLink) -> None:
        self.connection = connection
        self.link = link

    def on_timer_task(self, event: Any) -> None:
        conn, link = self.connection, self.link
        if not conn._stopping and not link.stopped and link.receiver is None and (
                conn.links.get(link.name) is link):
            conn._attach(link)
