"""The threaded proton lifecycle shared by our clients (component mode and brokered mode).

Each client is a proton :class:`~proton.handlers.MessagingHandler` that runs its own
:class:`~proton.reactor.Container`, either in the caller's thread (``run``) or in a daemon thread
(``start``), and is told to stop from any thread through an :class:`~proton.reactor.EventInjector`
(an ``ApplicationEvent``). Reconnecting after a lost connection (or a refused or detached link) is
the same everywhere too: forget the connection, schedule ``_reconnect`` after a
:class:`~seqrepair.amqp.wire.backoff.Backoff` delay (``reconnect_delay`` at first, doubled per
failed attempt up to ``max_reconnect_delay``, jittered), connect again unless stopping; the backoff
starts again once the peer has accepted the client's link. A peer that cannot be reached (a
connection refused, a host name that does not resolve) is a failed attempt like any other, logged
once at info through structlog (``reconnecting``, with the transport's error) and kept in
``last_failure``; proton's own handler would print the error on every attempt.

* :class:`SubscriberRunner`: a receiver that polls its repair engine on a timer (``tick``),
  hands deliveries to a callback or, started in a thread without one, to a bounded hand-off
  (``for pub in subscriber``, :mod:`seqrepair.amqp.client.handoff`) and can stop
  itself when ``stop_when()`` turns true.
* :class:`PublisherRunner`: a sender with a pending queue, an unsettled map and a condition
  that :meth:`PublisherRunner.flush` waits on.

Both share what happens when the peer ends what a client's links live in (detaches a link, ends
its session, closes its connection): a condition in :data:`FATAL_CONDITIONS` stops the client
(its ``error`` says why; nothing that waits on it hangs), anything else is a lost connection.

The reconnect step and :data:`FATAL_CONDITIONS` are in :mod:`seqrepair.amqp.client.reconnecting`.
What differs between the modes (what a frame means, how repair is asked for) stays in
:mod:`seqrepair.amqp.client.subscriber` and :mod:`seqrepair.amqp.client.brokered`.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Self, TypeVar

from proton import Handler
from proton.reactor import ApplicationEvent

from seqrepair.amqp.client.handoff import Handoff
from seqrepair.amqp.client.reconnecting import FATAL_CONDITIONS as FATAL_CONDITIONS
from seqrepair.amqp.client.reconnecting import _Reconnecting
from seqrepair.amqp.client.taken import TakenPositions
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.amqp.wire.guard import SkipIO
from seqrepair.amqp.wire.reactor import Injector, make_container
from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.messages import Publication

Unsettled = TypeVar("Unsettled")
"""What a publisher keeps per unsettled delivery (a batch, or one publication)."""

_WAKE = ApplicationEvent("seqrepair_wake")
"""The event that has a publisher's container thread send what is queued (one object for
every wake: it carries nothing)."""

_STOPPED_CHECK = 0.05
"""Seconds between looks at whether a subscriber waited on stopped by itself."""

DEFAULT_MAX_QUEUED = 10_000
"""Deliveries a threaded subscriber holds for its iterator before it waits for the reader."""

class BatchedCredit(Handler):
    """Keeps ``window`` credit on every receiving link, topped up once half of it is used.

    proton's ``FlowController`` (``MessagingHandler(prefetch=...)``) tops credit up after
    every delivery: one flow frame back per transfer, and one flow event and pump at the
    sender for each. Here the receiver grants ``window - credit`` only when credit has
    fallen to half the window, so a flow frame goes every ``window / 2`` transfers.
    """

    def __init__(self, window: int) -> None:
        self.window = window

    def on_link_local_open(self, event: Any) -> None:
        """A link of ours opened: grant the window."""
        self._flow(event.link)

    def on_link_remote_open(self, event: Any) -> None:
        """The peer attached: grant the window."""
        self._flow(event.link)

    def on_link_flow(self, event: Any) -> None:
        """The peer's view of credit changed (drain): top up if due."""
        self._flow(event.link)

    def on_delivery(self, event: Any) -> None:
        """A transfer used credit: top up if due."""
        self._flow(event.link)

    def _flow(self, link: Any) -> None:
        if link.is_receiver:
            credit = link.credit
            if credit <= self.window // 2:
                link.flow(self.window - credit)


class SubscriberRunner(_Reconnecting):
    """A receiving client's lifecycle: run/start/stop, the tick timer, the delivery queue.

    Subclasses set ``address``, ``link_name``, ``tick``, ``on_publication`` and ``log`` before
    running, call :meth:`_accepted` when their receiving link is attached, and implement
    ``_connect`` (open the connection and links), ``_main_links`` (those links by kind),
    ``_forget_connection`` (drop them, count the loss) and ``_on_tick`` (poll the repair engine).

    The peer can end what the subscriber's links live in while the transport stays sound:
    detach a link (a refused attach is an attach and a detach together), end the session
    (RabbitMQ's answer to a queue or exchange that does not exist or may not be read), or close
    the connection with a close frame. As for the publishers: a condition in
    :data:`FATAL_CONDITIONS` stops the subscriber (:attr:`error` says why; :meth:`run` returns,
    the iterator ends); anything else (another condition, or none) is a lost connection: it is
    torn down and made again with the reconnect backoff, and the subscriber's repair (by link
    range after a resumed context, by source after a reset or from the journal) makes up what
    it missed meanwhile.
    """

    link_name: str
    tick: float
    on_publication: Callable[[Publication], None] | None

    def __init__(
        self, *, credit: int, reconnect_delay: float, max_reconnect_delay: float,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnect_delay=max_reconnect_delay,
                         prefetch=0, auto_accept=False)
        handlers: Any = self.handlers  # a list once set (proton types it lazily)
        handlers.append(BatchedCredit(credit))
        self.connected = threading.Event()
        """Set while the receiving link is attached (the peer answered its attach and did not
        refuse it); see :meth:`wait_connected`."""
        self.error: AmqpAdapterError | None = None
        """Why it stopped by itself: the peer refused or ended its link, session or connection
        with a condition in :data:`FATAL_CONDITIONS`; the message starts with the condition
        (``amqp:not-found: ...``), ``got`` is the address subscribed to."""
        self._container = None
        self._conn = None
        self._stopping = False
        self._stop_when: Callable[[], bool] | None = None
        self._injector: Injector | None = None
        self._thread: threading.Thread | None = None
        self.taken = TakenPositions()
        """What the application has taken (see :mod:`seqrepair.amqp.client.taken`): the callback
        returned, or the iterator moved on. A client whose ``acknowledge`` is False leaves it
        to the application (:meth:`acknowledge`)."""
        self.acknowledge_on_return = True
        self._queue: Handoff[Publication] = Handoff(max_queued, self._taken)

    # --- public API ---------------------------------------------------------------------

    def run(self, stop_when: Callable[[], bool] | None = None) -> None:
        """Run in this thread until :meth:`stop` (or ``stop_when()`` turns true)."""
        self._stop_when = stop_when
        injector = self._injector = Injector()
        container = make_container(SkipIO(self))  # I/O events: proton's alone
        container.selectable(injector)
        try:
            container.run()
        except AttributeError:
            # a transport already torn down while stopping; the race that raised this even
            # while running (an expiry after end-of-file) make_container guards against
            if not self._stopping:
                raise
        finally:
            injector.release()

    def start(self) -> Self:
        """Run in a background thread; iterate over the subscriber to read publications."""
        self._thread = threading.Thread(target=self.run, name=self.link_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the connection and end :meth:`run` (safe from any thread)."""
        self._stopping = True
        if self._injector is not None:
            self._injector.trigger(ApplicationEvent("seqrepair_stop"))
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    @property
    def queued(self) -> int:
        """Deliveries waiting for the iterator (at most ``max_queued``)."""
        return len(self._queue)

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until the receiving link is attached (:attr:`connected`): True then, False
        when ``timeout`` seconds pass first or the subscriber was stopped. A subscriber that
        stopped by itself (a refused attach, see :attr:`error`) raises that error at once
        rather than let the caller wait out its timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.connected.wait(_STOPPED_CHECK):
            if self.error is not None:
                raise self.error
            if self._stopping or (deadline is not None and time.monotonic() >= deadline):
                return False
        return True

    def __exit__(self, *exc_info: object) -> None:
        """Leaving ``with``: stop."""
        self.stop()

    def __iter__(self) -> Iterator[Publication]:
        """Publications in delivery order, exactly once, until the subscriber stops.

        For a subscriber started with :meth:`start` and no ``on_publication``: at most
        ``max_queued`` deliveries wait here; past that the subscriber waits for the reader
        (and the component pauses its link and repairs it later), so memory stays bounded.
        The iteration ends once the subscriber stopped and what was queued is read; a delivery
        still waiting for room when :meth:`stop` is called is not handed over.
        """
        if self.on_publication is not None:
            raise InvalidConfigError(
                "this subscriber hands its deliveries to on_publication; iterate over one "
                "made without it", got="on_publication",
            )
        return iter(self._queue)

    # --- lifecycle ----------------------------------------------------------------------

    @abc.abstractmethod
    def _on_tick(self) -> None:
        """Timed work of the subscriber (its stub's poll), every tick."""

    def _schedule(self) -> None:
        self._container.schedule(self.tick, self)

    def on_start(self, event: Any) -> None:
        """The container runs: connect and start the tick timer."""
        self._container = event.container
        self._open()
        self._schedule()

    def on_timer_task(self, event: Any) -> None:
        """Every ``tick``: stop if asked to, else poll (``_on_tick``) and schedule again."""
        if self._stopping:
            return
        if self._stop_when is not None and self._stop_when():
            self._shutdown()
            return
        self._on_tick()
        self._schedule()

    def on_seqrepair_stop(self, event: Any) -> None:
        """:meth:`stop` was called (from any thread)."""
        self._shutdown()

    def _shutdown(self) -> None:
        self._stopping = True
        self._cancel_reconnect()
        if self._conn is not None:
            self._conn.close()
        if self._injector is not None:
            self._injector.close()
        self._queue.close()

    def _fail(self, error: AmqpAdapterError) -> None:
        self.error = error
        self.connected.clear()
        self._shutdown()

    def _lost(self, conn: Any, reason: str) -> None:
        if self._stopping or conn is None or conn != self._conn:
            return  # only the current connection starts (one) reconnect chain
        self._forget_connection(conn)
        self.connected.clear()
        self._conn = None
        self._schedule_reconnect(reason)

    @abc.abstractmethod
    def _forget_connection(self, conn: Any) -> None:
        """``conn``, the current connection, is lost: forget its links, count the loss."""

    def acknowledge(self, taken: Publication | Mapping[str, int]) -> None:
        """Say that the application has taken ``taken`` (a publication, or per source the last
        number) and everything delivered before it: for a subscriber made with
        ``acknowledge=False`` (its application decides, e.g. once its output is flushed).
        Safe from any thread."""
        if isinstance(taken, Publication):
            self.taken.take(taken)
        else:
            self.taken.take_all(taken)

    def _taken(self, publication: Publication) -> None:
        if self.acknowledge_on_return:
            self.taken.take(publication)

    def _deliver(self, publication: Publication) -> None:
        """Hand one delivery to the callback, or when running in a thread without one, to
        the iterator (waiting for room: see :meth:`__iter__`). Taken once the callback
        returns (or the iterator moves on)."""
        if self.on_publication is not None:
            self.on_publication(publication)
            if self.acknowledge_on_return:
                self.taken.take(publication)
        elif self._thread is not None:
            self._queue.put(publication, self._stopped)

    def _stopped(self) -> bool:
        return self._stopping


class PublisherRunner(_Reconnecting, Generic[Unsettled]):
    """A sending client's lifecycle: pending queue, unsettled map, flush/close, reconnect.

    Subclasses set ``url``, ``address``, ``idle_timeout`` and ``log`` and implement ``_send``
    (move pending publications to the sender while it has credit) and ``_requeue_unsettled``
    (put what is unsettled back in front of the pending queue, in the order first sent).

    The peer can end the sender while the transport stays sound: detach the link (a refused
    attach is an attach and a detach together), end the link's session (RabbitMQ's answer to
    an exchange that does not exist or may not be written to, at the attach or at a later
    transfer), or close the connection with a close frame. proton's defaults leave such a
    publisher dead: they close the connection (and no ``on_disconnected`` follows, so nothing
    reconnects) or only the link. Here a condition in :data:`FATAL_CONDITIONS`
    stops the publisher: :attr:`error` is a ``refusal_error`` that starts with the condition,
    and :meth:`flush` returns False at once. Anything else (another condition, or none) is a
    lost connection: it is torn down and made again with the reconnect backoff, and the
    unsettled publications go again, in order, before anything newer.
    """

    url: str
    idle_timeout: float
    max_unsettled: int

    def __init__(self, *, reconnect_delay: float, max_reconnect_delay: float) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnect_delay=max_reconnect_delay,
                         prefetch=0, auto_settle=True)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: deque[Publication] = deque()
        self._unsettled: dict[Any, Unsettled] = {}
        self._in_hand = 0  # taken from _pending, not in _unsettled yet (being sent)
        self.error: AmqpAdapterError | None = None
        """Why it stopped by itself: the peer refused or ended the sender with a condition in
        :data:`FATAL_CONDITIONS` (the message starts with it, ``got`` is the address), or a
        subclass's rule stopped it (the client ``Publisher``: a rejection that says its
        numbering does not continue the journal)."""
        self._container = None
        self._conn = None
        self._sender: Any = None
        self._stopping = False
        self._injector = Injector()
        self._wake_due = False  # a wake is on its way to the container thread (_wake)
        self._thread: threading.Thread | None = None

    # --- public API ---------------------------------------------------------------------

    def _thread_name(self) -> str:
        return "publisher"

    def start(self) -> Self:
        """Run the proton container in a background thread."""
        self._thread = threading.Thread(target=self.run, name=self._thread_name(), daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """Run the proton container in this thread until :meth:`close`."""
        container = make_container(SkipIO(self))  # I/O events: proton's alone
        container.selectable(self._injector)
        try:
            container.run()
        finally:
            self._injector.release()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything handed over so far is accepted (False on timeout or error)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while (self._pending or self._unsettled or self._in_hand) and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.05))
        return self.error is None

    def close(self, timeout: float = 30.0) -> bool:
        """Flush, then close the connection and stop the thread. False if not all accepted."""
        done = self.flush(timeout)
        self._stopping = True
        self._injector.trigger(ApplicationEvent("seqrepair_stop"))
        if self._thread is not None:
            self._thread.join(timeout=5)
        return done

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        """Leaving ``with``: close, after a flush unless the block raised."""
        self.close(timeout=0.0 if exc_type is not None else 30.0)

    # --- sending ------------------------------------------------------------------------

    @abc.abstractmethod
    def _send(self) -> None:
        """Send what is pending, as far as credit allows."""

    @abc.abstractmethod
    def _requeue_unsettled(self) -> None:
        """The connection is lost (called under the lock): put everything unsettled back in
        front of the pending queue, in the order first sent, and forget it as unsettled."""

    def _wake(self) -> None:
        """Have the container thread send what is queued. One wake at a time: while one is
        on its way, publications queued meanwhile go with it (its :meth:`_send` takes all that
        is pending then), so a burst of ``publish()`` calls costs one pipe write and one turn
        of the event loop, not one each; an idle publisher still sends each at once."""
        if self._stopping or self._wake_due:  # a stopped container reads the injector no more
            return
        self._wake_due = True
        self._injector.trigger(_WAKE)

    def _fail(self, error: AmqpAdapterError) -> None:
        """Stop for good (a link error a reconnect cannot cure): :attr:`error` says why, and
        :meth:`flush` returns False at once."""
        self.error = error
        self._stopping = True
        self._cancel_reconnect()
        if self._conn is not None:
            self._conn.close()
        self._injector.close()
        self._notify()

    def _notify(self) -> None:
        """Wake :meth:`flush` if what it waits for may have come (nothing pending or unsettled,
        or an error). Only this thread empties the queues, so the check without the lock is
        exact here; the waiter re-checks under the lock anyway, and every 50 ms."""
        if (self._pending or self._unsettled) and self.error is None:
            return  # not yet: no need to take the lock the publishing thread holds
        with self._idle:
            self._idle.notify_all()

    # --- proton events ------------------------------------------------------------------

    def on_start(self, event: Any) -> None:
        """The container runs: connect."""
        self._container = event.container
        self._open()

    def _connect(self) -> None:
        self._conn = self._container.connect(self.security.url(self.url), reconnect=False,
                                             heartbeat=self.idle_timeout,
                                             **self.security.connect_kwargs(self.url))
        self._sender = self._container.create_sender(self._conn, self.address)

    def on_link_opened(self, event: Any) -> None:
        """The peer answered the attach of a link: the sender's means the client is back."""
        if event.link == self._sender:
            self._accepted(event.link)

    def on_seqrepair_wake(self, event: Any) -> None:
        """Something was queued (from any thread): send it, and all queued with it. Until
        :meth:`_send` is done the wake counts as still due, so ``publish()`` calls meanwhile
        write no wake of their own (each would hand the interpreter to this thread); what they
        queued after :meth:`_send` looked is seen here and brings one more turn."""
        self._send()
        self._wake_due = False
        if self._pending and self._may_send():
            self._wake()

    def _may_send(self) -> bool:
        """Whether :meth:`_send` would send now if anything were pending (else the event
        that lifts what stops it, credit or an outcome, sends)."""
        sender = self._sender
        return sender is not None and sender.credit > 0 and (
            len(self._unsettled) < self.max_unsettled
        )

    def on_seqrepair_stop(self, event: Any) -> None:
        """:meth:`close` was called: close the connection, end the container."""
        self._stopping = True
        self._cancel_reconnect()
        if self._conn is not None:
            self._conn.close()
        self._injector.close()

    def on_sendable(self, event: Any) -> None:
        """The sender has credit: send."""
        self._send()

    def _lost(self, conn: Any, reason: str) -> None:
        if self._stopping or conn is None or conn != self._conn:
            return  # only the current connection starts (one) reconnect chain
        self._conn = None
        self._sender = None
        with self._lock:  # everything unsettled goes again, in order, before anything newer
            self._requeue_unsettled()
        self._schedule_reconnect(reason)

    def _main_links(self) -> dict[str, Any]:
        return {"sender": self._sender}
