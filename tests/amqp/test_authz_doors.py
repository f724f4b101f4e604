"""Every operation at the door (issue 25, "Tests"): each AMQP operation tried by a client that
proves nobody (a wrong password, an unknown user, an expired certificate, one of an unknown
CA) over real TLS and SASL, and each request naming another principal's link, with the exact
answer. Real parts: ``openssl`` certificates, a Cyrus credentials file, ``seqrepair serve`` as
a process with a policy file, a private redis-server.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container

from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.security import ClientSecurity, optional_client_cert_supported
from seqrepair.amqp.wire.technical import Ack, CapabilitiesRequest
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS, PROP_LINK
from seqrepair.core.messages import GapRequest, Publication, SourceGapRequest

from .conftest import ComponentProcess
from .pki import PASSWORDS, Pki, scram_missing, tls_url
from .test_authz import POLICY

MISSING = scram_missing()
pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

DOOR_POLICY = POLICY + """
[[allow]]  # the principals of the door's credentials file
actors = ["alice", "bob"]
operations = ["publish", "subscribe"]
topics = ["/weather/#"]
[[allow]]
actors = ["alice", "bob"]
operations = ["attach-queue"]
queues = ["public-*"]
"""

OPERATIONS: dict[str, tuple[str, str | None, Callable[[], Any] | None]] = {
    # name: (link kind, address, the message a sender sends)
    "subscribe": ("receive", "/weather/#", None),
    "attach-queue": ("receive", "/subscriptions/public-wind", None),
    "publish": ("send", "/weather/#", lambda: encode(Publication(
        "/weather/wind/LEMD", "feed.door", 1, fields={"n": 1}))),
    "capabilities": ("send", CONTROL_ADDRESS, lambda: _addressed(CapabilitiesRequest())),
    "gap-request": ("send", CONTROL_ADDRESS, lambda: _addressed(GapRequest(1, 5))),
    "source-gap-request": ("send", CONTROL_ADDRESS,
                           lambda: _addressed(SourceGapRequest(after={"feed.wind": 0}))),
    "ack": ("send", CONTROL_ADDRESS, lambda: encode(Ack("alice-link", "e", 1))),
}


def _addressed(request: Any, link: str = "alice-link") -> Any:
    message = encode(request)
    message.properties = {**(message.properties or {}), PROP_LINK: link}
    message.reply_to = f"$link/{link}"
    message.id = f"r-{uuid.uuid4().hex}"
    return message


class _Attempt(MessagingHandler):
    """One operation as a client would pipeline it: connect, attach, send at once; records
    every sign that anything got through (``attached``, ``accepted``, a message) and how the
    connection ended."""

    def __init__(self, url: str, security: ClientSecurity, operation: str) -> None:
        super().__init__()
        self.url, self.security, self.operation = security.url(url), security, operation
        self.events: list[str] = []
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(10, self)
        self.conn = event.container.connect(self.url, reconnect=False,
                                            **self.security.connect_kwargs(self.url))
        kind, address, _ = OPERATIONS[self.operation]
        if kind == "receive":
            event.container.create_receiver(self.conn, address, name=f"door-{uuid.uuid4().hex}")
        else:
            event.container.create_sender(self.conn, address, options=AtMostOnce()
                                          if self.operation == "ack" else None)

    def on_link_opened(self, event: Any) -> None:
        self.events.append("attached")

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(OPERATIONS[self.operation][2]())  # type: ignore[misc]
            if self.operation == "ack":  # pre-settled: no answer comes
                self.timer.cancel()
                self.timer = event.container.schedule(0.5, self)

    def _done(self, event: Any, what: str) -> None:
        self.events.append(what)
        self.timer.cancel()
        event.connection.close()

    def on_message(self, event: Any) -> None:
        self._done(event, "message")

    def on_accepted(self, event: Any) -> None:
        self._done(event, "accepted")

    def on_rejected(self, event: Any) -> None:
        cond = event.delivery.remote.condition
        self._done(event, f"rejected {cond.name if cond else ''}")

    def on_transport_error(self, event: Any) -> None:
        cond = event.transport.condition
        self.events.append(f"refused {cond.name}: {cond.description}" if cond else "refused")
        self.timer.cancel()

    def on_timer_task(self, event: Any) -> None:
        self.events.append("closed" if self.sent and self.operation == "ack" else "timeout")
        self.conn.close()

    def run(self) -> list[str]:
        Container(self).run()
        return self.events


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"), with_credentials=True)


@pytest.fixture(scope="module")
def door(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentProcess]:
    """TLS with an optional client certificate, SCRAM, anonymous allowed, the policy."""
    if not optional_client_cert_supported():
        pytest.skip("proton lacks SSLDomain.VERIFY_PEER_IF_PRESENT (bin/setup builds it)")
    from seqrepair.journal.server import EmbeddedRedis
    folder = tmp_path_factory.mktemp("door")
    (folder / "policy.toml").write_text(DOOR_POLICY)
    with EmbeddedRedis() as server:
        comp = ComponentProcess(
            server.url, folder, "--heartbeat", "0.2", "--tls-cert", pki.pem("server"),
            "--tls-key", pki.key("server"), "--tls-ca", pki.pem("ca"),
            "--client-cert", "optional", "--credentials", pki.credentials,
            "--allow-anonymous", "--policy", str(folder / "policy.toml"),
            "--subscription", "public-wind=/weather/wind/#").start()
        try:
            yield comp
        finally:
            comp.stop()


def _who(pki: Pki, who: str) -> ClientSecurity:
    ca = pki.pem("ca")
    return {
        "wrong-password": ClientSecurity(ca=ca, user="alice",
                                         password="not-" + PASSWORDS["alice"]),
        "unknown-user": ClientSecurity(ca=ca, user="carol", password="whatever-1"),
        "expired-cert": pki.client("expired-alice"),
        "unknown-ca-cert": pki.client("foreign-alice"),
        "right-password": ClientSecurity(ca=ca, user="alice", password=PASSWORDS["alice"]),
    }[who]


def _principals(comp: ComponentProcess) -> int:
    return len(re.findall(r"principal=", comp.log_text()))


SASL_REFUSED, TLS_REFUSED = "amqp:unauthorized-access", "SSL Failure"
DOOR = [(who, op, refused) for who, refused in (
    ("wrong-password", SASL_REFUSED), ("unknown-user", SASL_REFUSED),
    ("expired-cert", TLS_REFUSED), ("unknown-ca-cert", TLS_REFUSED)) for op in OPERATIONS]


@pytest.mark.parametrize(("who", "operation", "refused"), DOOR,
                         ids=[f"{c[0]}-{c[1]}" for c in DOOR])
def test_every_operation_by_one_who_proves_nobody_is_refused_at_the_door(
    who: str, operation: str, refused: str, door: ComponentProcess, pki: Pki,
) -> None:
    before = _principals(door)
    events = _Attempt(tls_url(door.url), _who(pki, who), operation).run()
    assert len(events) == 1, events  # nothing attached, accepted or delivered first
    assert events[0].startswith("refused"), events
    assert refused in events[0], events
    time.sleep(0.1)
    assert _principals(door) == before  # no connection of anyone's was opened


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_the_same_operations_with_the_right_password_get_through(
    operation: str, door: ComponentProcess, pki: Pki,
) -> None:
    """The table's control: the same attempt proving alice is let in and the operation
    reaches the component (a request naming a link alice has not attached is rejected
    ``amqp:not-found``, as for anyone)."""
    events = _Attempt(tls_url(door.url), _who(pki, "right-password"), operation).run()
    expected = {"subscribe": "message", "attach-queue": "message", "publish": "accepted",
                "ack": "closed"}.get(operation, "rejected amqp:not-found")
    assert events == ["attached", expected], events
