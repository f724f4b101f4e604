"""A refused attach says so in the attach itself (AMQP 1.0 §2.6.3: a null source from a
sender, a null target from a receiver, then the detach), over real processes.

Seen (CI, once in thousands of runs): behind a forwarding gateway, a client whose attach the
component refused was answered with an *open* link. The component's attach and detach had
left in two writes (another link's transfers on the gateway's connection were written at once
between them), and the gateway took the attach, which carried a source, for an acceptance.
Now the component nulls its terminus on every refusal, and a gateway that meets a null one
waits for the detach before it answers its client.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Condition, ConnectionException, Endpoint, Message, Terminus
from proton.handlers import EndpointStateHandler, MessagingHandler
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.gateway.relaylinks import HoldingEndpoints
from seqrepair.amqp.wire.reactor import listening_address, make_container
from seqrepair.amqp.wire.refusal import attach_refused

from .conftest import ComponentProcess, wait_for
from .principals import (
    MISSING,
    WEATHER_FOR_EXAMPLE_COM,
    amqp_identity,
    policy_args,
    serve_args,
)
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]
needs_scram = pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")

ALICE, BOB = "alice@example.com", "bob@example.com"
POLICY = WEATHER_FOR_EXAMPLE_COM + """
[[deny]]
actors = ["bob@example.com"]
operations = ["subscribe"]
topics = ["/weather/secret/#"]

[[deny]]
actors = ["bob@example.com"]
operations = ["publish"]
topics = ["/weather/#"]
"""
DELAY = 0.5
"""How long the stalling upstream waits between its attach and its detach."""
HOLD = 2
"""The gateway's ``--hold-timeout``: more than :data:`DELAY`."""


def _refusal(attach: Callable[[BlockingConnection], Any], url: str,
             principal: str | None = None) -> LinkDetached:
    conn = BlockingConnection(url, timeout=10,
                              **(amqp_identity(principal) if principal else {}))
    try:
        with pytest.raises(LinkDetached) as caught:
            attach(conn)
        return caught.value
    finally:
        conn.close()


@needs_scram
def test_the_components_refusals_carry_a_null_terminus(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    comp = component(*serve_args(tmp_path, ALICE, BOB), *policy_args(tmp_path, POLICY))
    # refused once the address was read (the exclusion is the principal's)
    excluded = _refusal(lambda c: c.create_receiver("/weather/secret/#"), comp.url, BOB)
    assert excluded.condition == "amqp:unauthorized-access"
    assert excluded.link.remote_source.type == Terminus.UNSPECIFIED
    assert attach_refused(excluded.link)
    # a publisher's link: its target is the null one
    publishing = _refusal(lambda c: c.create_sender("/weather/x"), comp.url, BOB)
    assert publishing.condition == "amqp:unauthorized-access"
    assert publishing.link.remote_target.type == Terminus.UNSPECIFIED
    assert attach_refused(publishing.link)
    # what is taken names its terminus
    conn = BlockingConnection(comp.url, timeout=10, **amqp_identity(ALICE))
    try:
        receiver = conn.create_receiver("/weather/secret/#")
        assert receiver.link.remote_source.address == "/weather/secret/#"
        sender = conn.create_sender("/weather/x")
        assert sender.link.remote_target.address == "/weather/x"
        assert not attach_refused(receiver.link)
        assert not attach_refused(sender.link)
    finally:
        conn.close()


class _StallingUpstream(MessagingHandler):  # type: ignore[misc]
    """A component stand-in that takes every attach, except those whose address names
    ``refused`` (attached with a null terminus, detached :data:`DELAY` later: two writes) or
    ``silent`` (never answered)."""

    def __init__(self) -> None:
        super().__init__(auto_accept=True)
        # the gateway's endpoint handler: a link marked held in on_link_opening is not attached
        self.handlers = [HoldingEndpoints(False, weakref.proxy(self))
                         if isinstance(h, EndpointStateHandler) else h for h in self.handlers]
        self.url = ""
        self.listening = threading.Event()
        self.refused: list[str] = []

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.url = listening_address(event.container.listen("127.0.0.1:0"), "")
        self.listening.set()

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        address = _address(link)
        if address and "silent" in address:
            link.seqrepair_held = True  # never answered
            return
        if address and "refused" in address:
            (link.source if link.is_sender else link.target).type = Terminus.UNSPECIFIED
            self.refused.append(address)
            self.container.schedule(DELAY, _Detach(link))
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)


def _address(link: Any) -> str | None:
    return (link.remote_source if link.is_sender else link.remote_target).address  # type: ignore[no-any-return]


class _Detach:
    def __init__(self, link: Any) -> None:
        self.link = link

    def on_timer_task(self, _event: Any) -> None:
        self.link.condition = Condition("amqp:unauthorized-access", "not yours")
        self.link.close()


@pytest.fixture
def stalling(tmp_path: Path) -> Iterator[tuple[_StallingUpstream, str]]:
    """The stalling upstream and a ``seqrepair gateway`` in front of it."""
    upstream = _StallingUpstream()
    container = make_container(upstream)
    runner = threading.Thread(target=container.run, daemon=True)
    runner.start()
    try:
        assert upstream.listening.wait(10)
        with gateway_process(upstream.url, tmp_path,
                             ("--allow-anonymous", "--hold-timeout", str(HOLD))) as url:
            yield upstream, url
    finally:
        container.stop()
        runner.join(10)
        assert not runner.is_alive()


def _attach(kind: str, word: str) -> Callable[[BlockingConnection], Any]:
    return {
        "subscriber": lambda c: c.create_receiver(f"/{word}/#"),
        "publisher": lambda c: c.create_sender(f"/{word}/x"),
        "contributions owner": lambda c: c.create_receiver(f"$contributions/{word}.feed"),
    }[kind]


KINDS = ["subscriber", "publisher", "contributions owner"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_gateway_waits_for_the_detach_of_an_attach_with_a_null_terminus(
    stalling: tuple[_StallingUpstream, str], kind: str,
) -> None:
    upstream, url = stalling
    refused = _refusal(_attach(kind, "refused"), url)
    assert refused.condition == "amqp:unauthorized-access"
    assert len(upstream.refused) == 1  # it went upstream, and its refusal came back
    # and an attach the upstream takes is still answered at once
    conn = BlockingConnection(url, timeout=10)
    try:
        receiver = conn.create_receiver("/weather/#")
        assert receiver.link.remote_source.address == "/weather/#"
    finally:
        conn.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_gateway_ends_an_attach_the_upstream_never_answers_after_the_hold_timeout(
    stalling: tuple[_StallingUpstream, str], kind: str, tmp_path: Path,
) -> None:
    """Before, only a subscriber's held attach had a deadline: a publisher's or an owner's
    waited for as long as the component did not answer."""
    _, url = stalling
    answered = BlockingConnection(url, timeout=10)  # its links were answered: they stay
    conn = BlockingConnection(url, timeout=10)
    try:
        sender = answered.create_sender("/weather/x")
        receiver = answered.create_receiver("/weather/#")
        began = time.monotonic()
        # the connection closed amqp:connection:forced (proton's client sees its transport end)
        with pytest.raises((ConnectionException, LinkDetached)):
            _attach(kind, "silent")(conn)
        waited = time.monotonic() - began
        time.sleep(1)  # the gateway's next looks at what it holds
        sender.send(Message(body={"n": 1}), timeout=10)  # settled: the link still carries
        assert receiver.link.state & Endpoint.LOCAL_ACTIVE
        assert not answered.conn.state & Endpoint.REMOTE_CLOSED
    finally:
        conn.close()
        answered.close()
    assert HOLD <= waited < 10  # the hold timeout (checked every tick), not the client's own
    log = (tmp_path / "gateway.log").read_text()
    assert f"did not answer within {HOLD} s; reconnect" in log


VANISHING_CLIENT = """
import sys, threading
from proton.utils import BlockingConnection
conn = BlockingConnection(sys.argv[1], timeout=30)
threading.Thread(target=conn.create_sender, args=("/silent/x",), daemon=True).start()
print("attaching", flush=True)
threading.Event().wait()
"""


def test_a_client_that_vanishes_while_held_is_forgotten_at_once(
    stalling: tuple[_StallingUpstream, str], tmp_path: Path,
) -> None:
    """Its held link goes with its connection (as a held subscriber's relay does), not
    kept until the hold timeout and then its dead connection 'closed' with a reason."""
    _, url = stalling
    client = subprocess.Popen([sys.executable, "-c", VANISHING_CLIENT, url],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "attaching"
        log = tmp_path / "gateway.log"
        assert wait_for(lambda: "/silent/x" in log.read_text(), 10)  # held, attached upstream
    finally:
        client.kill()
        client.wait(10)
    time.sleep(HOLD + 1.5)  # past the hold timeout, and a tick
    text = log.read_text()
    assert "did not answer within" not in text, text[-2000:]
