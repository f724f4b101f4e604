"""A client link's place at a gateway (``--max-links-per-connection``) is given back however
the link ends, not only when a plain detach closes it: proton reports a detach that carries an
error, in answer to one the gateway sent first, as an error only (no "closed"), and it reports
nothing of the links of a session the client ended. Either way the place stayed taken until
the connection ended (the review of the gateway's link limits). Real processes: a
redis-server, ``seqrepair serve`` and ``seqrepair gateway --max-links-per-connection 2``; the
client is a proton event loop that attaches, ends and attaches again on one connection."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import Condition, Endpoint
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption

from seqrepair.amqp.wire.vocabulary import PROP_PATH

from .conftest import ComponentProcess
from .limits import LIMIT, gateway

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


class _Properties(LinkOption):
    def __init__(self, properties: dict[Any, Any]) -> None:
        self.properties = properties

    def apply(self, link: Any) -> None:
        link.properties = self.properties


class _Client(MessagingHandler):
    """Runs ``first`` (attaches) on one connection, then ``then`` after a pause, then one more
    attach named ``after``; records what each link was answered."""

    def __init__(self, url: str, first: Callable[[Any, Any], None],
                 then: Callable[[Any], None]) -> None:
        super().__init__()
        self.url, self.first, self.then = url, first, then
        self.opened: list[str] = []
        self.errors: dict[str, tuple[str, str]] = {}
        self.phase = 0

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url)
        self.first(event.container, self.conn)
        event.container.schedule(2.0, self)

    def on_link_opened(self, event: Any) -> None:
        if event.link.remote_source.address is not None:  # not a refusal's null source
            self.opened.append(event.link.name)

    def on_link_error(self, event: Any) -> None:
        cond = event.link.remote_condition
        self.errors[event.link.name] = (cond.name, cond.description or "")
        if not event.link.state & Endpoint.LOCAL_CLOSED:
            # a hostile answer: the detach that answers the gateway's carries an error too
            event.link.condition = Condition("amqp:internal-error", "answered with an error")
            event.link.close()

    def on_timer_task(self, event: Any) -> None:
        self.phase += 1
        if self.phase == 1:
            self.then(self.conn)
            event.container.schedule(1.0, self)
        elif self.phase == 2:
            event.container.create_receiver(self.conn, "/weather/#", name="after")
            event.container.schedule(2.0, self)
        else:
            self.conn.close()


def _run(component: Callable[..., ComponentProcess], tmp_path: Path,
         first: Callable[[Any, Any], None], then: Callable[[Any], None]) -> _Client:
    comp = component()
    with gateway(comp.url, tmp_path, "--max-links-per-connection", "2") as (listen, _proc):
        client = _Client(listen, first, then)
        Container(client).run()
    return client


def test_a_place_comes_back_when_a_detach_of_the_gateways_is_answered_with_an_error(
    component: Callable[..., ComponentProcess], tmp_path: Path
) -> None:
    """Two attaches with a malformed ``seqrepair-path`` are refused by the gateway itself
    (taken first, then detached); the client answers each detach with an error. Its next
    attach on that connection is taken: the two places came back."""

    def attach_bad(container: Any, conn: Any) -> None:
        for n in range(2):
            container.create_receiver(conn, "/weather/#", name=f"bad-{n}",
                                      options=_Properties({PROP_PATH: 5}))

    client = _run(component, tmp_path, attach_bad, lambda conn: None)
    assert set(client.errors) == {"bad-0", "bad-1"}, client.errors
    assert all(name == "amqp:invalid-field" for name, _ in client.errors.values()), client.errors
    assert "after" in client.opened, (client.opened, client.errors)


def test_the_places_of_a_sessions_links_come_back_when_the_client_ends_the_session(
    component: Callable[..., ComponentProcess], tmp_path: Path
) -> None:
    """Two links taken on a session that the client then ends without detaching them: a
    third attach on a new session of the same connection is taken, and before the session
    ended a third was refused for the limit."""
    session: list[Any] = []

    def attach_two_and_one_more(container: Any, conn: Any) -> None:
        ssn = conn.session()
        ssn.open()
        session.append(ssn)
        for n in range(3):
            receiver = ssn.receiver(f"s-{n}")
            receiver.source.address = "/weather/#"
            receiver.open()

    client = _run(component, tmp_path, attach_two_and_one_more, lambda conn: session[0].close())
    assert client.opened[:2] == ["s-0", "s-1"], client.opened
    assert client.errors["s-2"][0] == LIMIT, client.errors
    assert "--max-links-per-connection" in client.errors["s-2"][1], client.errors
    assert "after" in client.opened, (client.opened, client.errors)


def test_a_held_publisher_link_whose_session_ended_does_not_close_its_connection() -> None:
    """A publisher's link held for the component's answer, its session then ended: released,
    its connection is not closed for it at the hold timeout (one still held is)."""
    from types import SimpleNamespace

    from proton import Connection

    from seqrepair.amqp.gateway.publish import PublishRelays

    relays = PublishRelays(SimpleNamespace(stats={}))
    conns = []
    for released in (True, False):
        conn = Connection()
        link = conn.session().sender(f"publisher-{released}")
        relays.hold(link)
        if released:
            relays.release(link)
        conns.append(conn)
    relays.expire(time.monotonic() + 60.0, 30.0)  # held since hold(): monotonic time
    assert not conns[0].state & Endpoint.LOCAL_CLOSED
    assert conns[1].state & Endpoint.LOCAL_CLOSED
