"""The component in a thread of the test, so a test can act on its links as it would itself."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from proton import Condition, Endpoint
from proton.reactor import ApplicationEvent

from seqrepair.amqp.component.component import Component, ComponentConfig
from seqrepair.amqp.component.requests import answer_gap
from seqrepair.amqp.wire.reactor import Injector, make_container
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER
from seqrepair.core.messages import GapRequest
from seqrepair.journal.journal import Journal
from seqrepair.rest.manager import SubscriptionManager


class HereComponent(Component):
    """The component in a thread of the test; :meth:`call` runs code in that thread, where
    its links live."""

    def __init__(
        self, redis_url: str, *, subscriptions: SubscriptionManager | None = None,
        **settings: Any,
    ) -> None:
        # port 0: the listener takes a port the system chooses as it binds, so nothing can
        # take it first; here_url names it once started
        self.here_url = "127.0.0.1:0"
        self.here_ready = threading.Event()
        settings.setdefault("security", ANONYMOUS_LISTENER)
        config = ComponentConfig(url=self.here_url, heartbeat_interval=0.2, **settings)
        super().__init__(config, Journal.from_url(redis_url),
                         on_ready=self._here_listening, subscriptions=subscriptions)
        self._here_injector = Injector()
        self._here_calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._here_thread = threading.Thread(target=self._here_run, name="component",
                                             daemon=True)

    def _here_listening(self, url: str) -> None:
        self.here_url = url
        self.here_ready.set()

    def _here_run(self) -> None:
        try:
            make_container(self).run()
        finally:
            self._here_injector.release()

    def start(self) -> HereComponent:
        self._here_thread.start()
        assert self.here_ready.wait(20)
        return self

    def on_start(self, event: Any) -> None:
        event.container.selectable(self._here_injector)
        super().on_start(event)

    def on_here_call(self, event: Any) -> None:
        while True:
            try:
                fn, result = self._here_calls.get_nowait()
            except queue.Empty:
                return
            try:
                result.set_result(fn())
            except BaseException as exc:
                result.set_exception(exc)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the component's thread and return what it returns."""
        result: Future[Any] = Future()
        self._here_calls.put((fn, result))
        self._here_injector.trigger(ApplicationEvent("here_call"))
        return result.result(timeout=10)

    def shut(self) -> None:
        def end() -> None:
            self.stop()
            self._here_injector.close()
            self.container.stop()

        if self._here_thread.is_alive():
            self.call(end)
            self._here_thread.join(10)
        assert not self._here_thread.is_alive()

    # --- detaching, as the component does when it ends a link ---------------------------

    def detach_data(self, name: str, condition: str | None) -> None:
        """Detach the data link ``name`` (its context is kept for resumption)."""

        def detach() -> None:
            link = self.links[name]
            sender = link.sender
            assert sender is not None
            assert sender.state & Endpoint.LOCAL_ACTIVE
            link.detach(self.clock())
            _close(sender, condition)

        self.call(detach)

    def detach_control(self, name: str, condition: str | None) -> None:
        """Detach the control link on the connection of the data link ``name``."""

        def detach() -> None:
            sender = self.links[name].sender
            assert sender is not None
            controls = [
                link for link in _links(sender.connection)
                if link.is_receiver and getattr(link, "kind", None) == "control"
            ]
            assert len(controls) == 1
            _close(controls[0], condition)

        self.call(detach)

    def ask(self, name: str, requests: list[GapRequest]) -> None:
        """Answer ``requests`` on the data link ``name`` as if its subscriber had sent them
        in one GAP-REQUEST."""

        def answer() -> None:
            link = self.links[name]
            link.route.check_room()
            for request in requests:
                answer_gap(self, link, link.route, request, None, None)
            self._pump_sender(link.sender)

        self.call(answer)

    def set_drop_rate(self, rate: float) -> None:
        """Lose this share of the frames to subscribers from now on (repaired on request)."""

        def set_rate() -> None:
            self.config.drop_rate = rate

        self.call(set_rate)


def _links(conn: Any) -> Iterator[Any]:
    link = conn.link_head(Endpoint.LOCAL_ACTIVE)
    while link is not None:
        yield link
        link = link.next(Endpoint.LOCAL_ACTIVE)


def _close(link: Any, condition: str | None) -> None:
    if condition is not None:
        link.condition = Condition(condition, "detached by the test")
    link.close()


def end_endpoint(link: Any, endpoint: str, condition: str | None) -> None:
    """As a peer would: detach ``link`` (``endpoint`` ``"link"``), end its ``"session"`` or
    close its ``"connection"``, with ``condition`` (None: without one). Call it in the
    component's thread."""
    ended = {"link": link, "session": link.session, "connection": link.connection}[endpoint]
    if condition is not None:
        ended.condition = Condition(condition, "ended by the test")
    ended.close()
