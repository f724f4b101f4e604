"""A subscriber that goes away politely: its link context is detached, kept, then expired.

A subscriber may end by closing its connection cleanly (an AMQP close, no detach of its links
first: what :meth:`Subscriber.stop` does), or by detaching its link and then closing. Proton
then reports ``on_connection_closing``, ``on_connection_closed`` and ``on_transport_closed`` to
the component, but no ``on_disconnected`` (the connection is no longer open locally) and, when
the links were not detached, no link callback at all. Whatever the path, the component must
mark the link's context detached (its sender gone), keep it for ``context_retention`` so the
subscriber can resume it, and then expire it; the connection's response routes go with it.

Real parts only: a real redis-server, the component in a thread of the test (so that the test
can read ``component.links``), subscribers over proton on loopback. No timed assertions: every
wait is a generous deadline.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Subscriber

from .conftest import wait_for
from .inthread import HereComponent
from .test_link_contexts import EPOCH, RESUME, attach, first_frame

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def _state(comp: HereComponent, name: str) -> tuple[bool, bool, float | None]:
    """(context held, sender bound, detached_at) of link ``name``, read in the component."""

    def read() -> tuple[bool, bool, float | None]:
        link = comp.links.get(name)
        if link is None:
            return False, False, None
        return True, link.sender is not None, link.detached_at

    result: tuple[bool, bool, float | None] = comp.call(read)
    return result


def _routes(comp: HereComponent) -> int:
    count: int = comp.call(lambda: len(comp.routes))
    return count


def _detached(comp: HereComponent, name: str) -> bool:
    held, bound, detached_at = _state(comp, name)
    return held and not bound and detached_at is not None


def test_a_subscriber_that_stops_has_its_context_detached_then_expired(
    here: Callable[..., HereComponent],
) -> None:
    comp = here(context_retention=1.0)
    sub = Subscriber(comp.here_url, "/weather/#", link_name="polite", heartbeat_interval=0.2)
    sub.start()
    try:
        assert sub.connected.wait(20)
        assert _state(comp, "polite")[:2] == (True, True)
        assert _routes(comp) == 1  # the link's own route ($link/polite)
    finally:
        sub.stop()  # the public way to go: closes the connection cleanly
    assert sub._thread is not None
    assert not sub._thread.is_alive()
    assert wait_for(lambda: _detached(comp, "polite"), 10), _state(comp, "polite")
    assert _routes(comp) == 0  # the closed connection's routes are dropped with it
    # kept for context_retention (1 s), then expired: not pumped forever
    assert wait_for(lambda: not _state(comp, "polite")[0], 20), _state(comp, "polite")


@pytest.mark.parametrize("how", ["connection", "link-then-connection"])
def test_a_politely_closed_link_keeps_a_context_that_a_resume_takes_back(
    here: Callable[..., HereComponent], how: str
) -> None:
    comp = here()  # context_retention 30 s: the context is still held when it comes back
    receiver, conn, epoch = attach(comp.here_url, "polite-resume", {})
    assert first_frame(receiver).link_seq == 1
    if how == "link-then-connection":
        receiver.close()  # a detach, then the close
    conn.close()  # BlockingConnection.close: an AMQP close, without detaching the link
    assert wait_for(lambda: _detached(comp, "polite-resume"), 10), _state(comp, "polite-resume")

    receiver, conn, resumed = attach(comp.here_url, "polite-resume", {RESUME: True, EPOCH: epoch})
    try:
        assert resumed == epoch
        assert first_frame(receiver).link_seq > 1  # the numbering goes on
        assert _state(comp, "polite-resume") == (True, True, None)
    finally:
        conn.close()
    assert wait_for(lambda: _detached(comp, "polite-resume"), 10), _state(comp, "polite-resume")


def test_a_connection_closed_politely_by_a_plain_client_drops_its_routes(
    here: Callable[..., HereComponent],
) -> None:
    comp = here()
    conn = BlockingConnection(comp.here_url, timeout=10)
    conn.create_receiver("$link/lonely", name="lonely")  # a reply-only link: a route
    assert wait_for(lambda: _routes(comp) == 1, 10)
    conn.close()
    assert wait_for(lambda: _routes(comp) == 0, 10), _routes(comp)
