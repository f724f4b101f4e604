"""The threaded proton lifecycle shared by our clients (component mode and brokered mode).

Each client is a proton :class:`~proton.handlers.MessagingHandler` that runs its own
:class:`~proton.reactor.Container`, either in the caller's thread (``run``) or in a daemon
thread (``start``), and is told to stop from any thread through an
:class:`~proton.reactor.EventInjector` (an ``ApplicationEvent``). Reconnecting after a lost
connection (or a refused or detached link) is the same everywhere too: forget the connection,
schedule ``_reconnect`` after a :class:`~seqrepair.amqp.backoff.Backoff` delay (``reconnect_delay``
at first, doubled per failed attempt up to ``max_reconnect_delay``, jittered), connect again
unless stopping; the backoff starts again once the peer has accepted the client's link.

* :class:`SubscriberRunner`: a receiver that polls its repair engine on a timer (``tick``),
  hands deliveries to a callback and/or a queue (``for pub in subscriber``) and can stop
  itself when ``stop_when()`` turns true.
* :class:`PublisherRunner`: a sender with a pending queue, an unsettled map and a condition
  that :meth:`PublisherRunner.flush` waits on.

What differs between the modes (what a frame means, how repair is asked for) stays in
:mod:`seqrepair.amqp.client` and :mod:`seqrepair.amqp.brokered`.
"""

from __future__ import annotations

import abc
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, Self, TypeVar

from proton import Endpoint, Handler
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

from seqrepair.amqp.backoff import Backoff
from seqrepair.amqp.errors import AmqpAdapterError
from seqrepair.core.messages import Publication

Unsettled = TypeVar("Unsettled")
"""What a publisher keeps per unsettled delivery (a batch, or one publication)."""


class Call:
    """A timer handler that calls a function."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        """Proton's timer fired: call the function."""
        self.fn()


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


class _Reconnecting(MessagingHandler, abc.ABC):
    """The reconnect step both runners share: connect again, after a backoff, unless stopping
    or connected.

    The delay before a reconnect is ``reconnect_delay`` after the first failure, doubled at
    each further failed attempt up to ``max_reconnect_delay`` (never below ``reconnect_delay``),
    each plus up to a quarter of itself at random so that clients a restart disconnected
    together do not come back in step. A failure is a lost connection, a connection that
    could not be made, or a link the peer refused or detached.

    The backoff starts again from ``reconnect_delay`` once the client is *accepted*
    (:meth:`_accepted`): when the peer answers the attach of its main link (a subscriber's
    receiving link, a publisher's sender) and does not detach it at once. An open connection
    is not enough: a component, gateway or broker that takes connections but refuses the
    attach for a reason a reconnect may cure (a resource limit, an upstream that is down)
    answers with an attach and a detach together, and a reset there would bring the client
    back at the first delay, again and again.
    """

    _container: Any
    _conn: Any
    _stopping: bool
    _thread: threading.Thread | None
    log: Any

    def __init__(
        self, *, reconnect_delay: float, max_reconnect_delay: float, **handler: Any
    ) -> None:
        if reconnect_delay <= 0 or max_reconnect_delay <= 0:
            raise ValueError(
                f"reconnect_delay ({reconnect_delay}) and max_reconnect_delay "
                f"({max_reconnect_delay}) must be > 0"
            )
        super().__init__(**handler)
        self.reconnect_delay = reconnect_delay
        """The delay before the first reconnect (jittered); the backoff starts here."""
        self.max_reconnect_delay = max_reconnect_delay
        """The longest delay between reconnects, before jitter."""
        self._reconnect_backoff = Backoff(
            initial=reconnect_delay, maximum=max(reconnect_delay, max_reconnect_delay)
        )
        self._rng = random.Random()

    @abc.abstractmethod
    def _connect(self) -> None:
        """Open the connection and the links of this client."""

    @abc.abstractmethod
    def start(self) -> Self:
        """Run in a background thread."""

    def __enter__(self) -> Self:
        """``with Client(...) as client``: started on entry (unless it runs already)."""
        return self if self._thread is not None else self.start()

    def _schedule_reconnect(self, reason: str) -> None:
        """Count one failed attempt and connect again after the backoff's next delay."""
        backoff = self._reconnect_backoff
        delay = backoff.next_delay(self._rng)
        assert delay is not None  # no max_attempts: it never gives up
        self.log.info("reconnecting", reason=reason, attempt=backoff.attempts,
                      delay=round(delay, 3))
        self._container.schedule(delay, Call(self._reconnect))

    def _accepted(self, link: Any) -> None:
        """The peer answered the attach of ``link``, the client's main link: unless it detached
        it at once too (a refusal, whose detach proton reports next), the client is back and
        the next failure starts the backoff again from ``reconnect_delay``."""
        if link.state & Endpoint.REMOTE_CLOSED:
            return
        backoff = self._reconnect_backoff
        if backoff.attempts:
            self.log.info("reconnected", attempt=backoff.attempts)
        backoff.reset()

    def _reconnect(self) -> None:
        if not self._stopping and self._conn is None:
            self._connect()


class SubscriberRunner(_Reconnecting):
    """A receiving client's lifecycle: run/start/stop, the tick timer, the delivery queue.

    Subclasses set ``link_name``, ``tick``, ``on_publication`` and ``log`` before running, call
    :meth:`_accepted` when their receiving link is attached, and implement ``_connect`` (open
    the connection and links) and ``_on_tick`` (poll the repair engine).
    """

    link_name: str
    tick: float
    on_publication: Callable[[Publication], None] | None

    def __init__(
        self, *, credit: int, reconnect_delay: float, max_reconnect_delay: float
    ) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnect_delay=max_reconnect_delay,
                         prefetch=0, auto_accept=False)
        handlers: Any = self.handlers  # a list once set (proton types it lazily)
        handlers.append(BatchedCredit(credit))
        self.connected = threading.Event()
        self._container = None
        self._conn = None
        self._stopping = False
        self._stop_when: Callable[[], bool] | None = None
        self._injector: EventInjector | None = None
        self._thread: threading.Thread | None = None
        # the C SimpleQueue: a put costs no Python-level lock and condition (one per delivery)
        self._queue: queue.SimpleQueue[Publication | None] = queue.SimpleQueue()

    # --- public API ---------------------------------------------------------------------

    def run(self, stop_when: Callable[[], bool] | None = None) -> None:
        """Run in this thread until :meth:`stop` (or ``stop_when()`` turns true)."""
        self._stop_when = stop_when
        self._injector = EventInjector()
        container = Container(self)
        container.selectable(self._injector)
        try:
            container.run()
        except AttributeError:
            # proton 0.40 can trip over a transport already torn down while stopping
            if not self._stopping:
                raise

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

    def __exit__(self, *exc_info: object) -> None:
        """Leaving ``with``: stop."""
        self.stop()

    def __iter__(self) -> Iterator[Publication]:
        """Publications in delivery order, exactly once, until the subscriber stops."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item

    # --- lifecycle ----------------------------------------------------------------------

    @abc.abstractmethod
    def _on_tick(self) -> None:
        """Timed work of the subscriber (its stub's poll), every tick."""

    def _schedule(self) -> None:
        self._container.schedule(self.tick, self)

    def on_start(self, event: Any) -> None:
        """The container runs: connect and start the tick timer."""
        self._container = event.container
        self._connect()
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
        if self._conn is not None:
            self._conn.close()
        if self._injector is not None:
            self._injector.close()
        self._queue.put(None)

    def _deliver(self, publication: Publication) -> None:
        """Hand one delivery to the callback and, when running in a thread, to the queue."""
        if self.on_publication is not None:
            self.on_publication(publication)
        if self._thread is not None:
            self._queue.put(publication)


class PublisherRunner(_Reconnecting, Generic[Unsettled]):
    """A sending client's lifecycle: pending queue, unsettled map, flush/close, reconnect.

    Subclasses set ``url``, ``address``, ``idle_timeout`` and ``log`` and implement ``_send``
    (move pending publications to the sender while it has credit).
    """

    url: str
    address: str
    idle_timeout: float

    def __init__(self, *, reconnect_delay: float, max_reconnect_delay: float) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnect_delay=max_reconnect_delay,
                         prefetch=0, auto_settle=True)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: deque[Publication] = deque()
        self._unsettled: dict[Any, Unsettled] = {}
        self.error: AmqpAdapterError | None = None
        self._container = None
        self._conn = None
        self._sender: Any = None
        self._stopping = False
        self._injector = EventInjector()
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
        container = Container(self)
        container.selectable(self._injector)
        container.run()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything handed over so far is accepted (False on timeout or error)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while (self._pending or self._unsettled) and self.error is None:
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

    def _wake(self) -> None:
        if not self._stopping:  # a stopped container reads the injector no more
            self._injector.trigger(ApplicationEvent("seqrepair_wake"))

    def _fail(self, error: AmqpAdapterError) -> None:
        """Stop for good (a link error a reconnect cannot cure): :attr:`error` says why, and
        :meth:`flush` returns False at once."""
        self.error = error
        self._stopping = True
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
        self._connect()

    def _connect(self) -> None:
        self._conn = self._container.connect(self.url, reconnect=False,
                                             heartbeat=self.idle_timeout)
        self._sender = self._container.create_sender(self._conn, self.address)

    def on_link_opened(self, event: Any) -> None:
        """The peer answered the attach of a link: the sender's means the client is back."""
        if event.link == self._sender:
            self._accepted(event.link)

    def on_seqrepair_wake(self, event: Any) -> None:
        """Something was queued (from any thread): send it."""
        self._send()

    def on_seqrepair_stop(self, event: Any) -> None:
        """:meth:`close` was called: close the connection, end the container."""
        self._stopping = True
        if self._conn is not None:
            self._conn.close()
        self._injector.close()

    def on_sendable(self, event: Any) -> None:
        """The sender has credit: send."""
        self._send()
