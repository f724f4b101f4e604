"""The gateway's bound per proven principal on requests waiting for the component's outcome
(gateway/requests.py, WIRE.md "Requests through a gateway"), over real processes: a
redis-server, ``seqrepair serve``, ``seqrepair gateway`` authenticating its clients by SCRAM,
and clients over loopback.

A request waits at the gateway from its forwarding to the component's outcome; the component
answers at once, so the test pauses it (SIGSTOP) while the clients send, and lets it go on
(SIGCONT) to have what waited answered. Alice opens three connections, each far under its own
bound (256): before, her requests filled the gateway's whole table and bob's were rejected
``amqp:resource-limit-exceeded``; now her connections share her bound and bob's requests are
forwarded and answered."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, ProtonException
from proton.utils import BlockingConnection

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.technical import CapabilitiesRequest
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS, LINK_PREFIX

from .conftest import ComponentProcess, counters_of
from .limits import LIMIT, gateway
from .principals import MISSING, amqp_identity, client_security, serve_args

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

ALICE, BOB = "alice@example.com", "bob@example.com"
WAITING = 6
"""``--max-waiting-requests``: the gateway's table, in all."""
_IDS = itertools.count(1)


class Client:
    """One client connection as ``who``: a ``$seqrepair`` sender and the ``$link/NAME``
    receiver its CAPABILITIES requests are answered on."""

    def __init__(self, url: str, who: str) -> None:
        self.name = f"{who.split('@')[0]}-{next(_IDS)}"
        self.conn = BlockingConnection(url, timeout=15, **amqp_identity(who))
        self.answers = self.conn.create_receiver(LINK_PREFIX + self.name, name=self.name,
                                                 credit=10)
        self.control = self.conn.create_sender(CONTROL_ADDRESS)
        self.conn.wait(lambda: self.control.link.credit > 0, msg="requests credit")
        self.conn.container.timeout = 0.02  # a turn of :func:`_pump` (waits set their own)
        self.sent: list[Any] = []

    def ask(self, count: int) -> None:
        """Send ``count`` CAPABILITIES requests unsettled, without waiting for outcomes."""
        for _ in range(count):
            request = encode(CapabilitiesRequest())
            request.id = f"{self.name}:{len(self.sent)}"
            request.reply_to = LINK_PREFIX + self.name
            self.sent.append(self.control.link.send(request))


def _settled(clients: list[Client]) -> list[Any]:
    return [d for c in clients for d in c.sent if d.settled]


def _pump(clients: list[Client], seconds: float,
          until: Callable[[], bool] = lambda: False) -> bool:
    """Process the clients' events in turn for at most ``seconds`` or until ``until()``."""
    deadline = time.monotonic() + seconds
    while not until() and time.monotonic() < deadline:
        for client in clients:
            client.conn.container.process()
    return until()


@contextlib.contextmanager
def _paused(comp: ComponentProcess) -> Iterator[None]:
    """The component stopped (SIGSTOP): what the gateway forwards waits for its outcome."""
    assert comp.proc is not None
    os.kill(comp.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(comp.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize(("per_principal", "bob_served"), [(4, True), (100, False)],
                         ids=["principal-bound", "global-bound-only"])
def test_one_principal_with_many_connections_does_not_refuse_another_principals_requests(
    component: Callable[..., ComponentProcess], tmp_path: Path, per_principal: int,
    bob_served: bool,
) -> None:
    """``--max-waiting-requests 6``. With ``--max-waiting-requests-per-principal 4``: alice
    sends 3 requests on each of 3 connections while the component is paused; 4 are forwarded
    and wait, 5 are rejected naming her bound, whichever connection they came on; bob's 2
    requests through the same gateway are forwarded, and once the component goes on all that
    waited is accepted and bob has his 2 answers. With a per-principal bound above the
    gateway's (100, what the gateway did before it had one): alice fills the table and bob's
    requests are rejected ``--max-waiting-requests``. Fails on the code before (the gateway
    had no ``--max-waiting-requests*`` options; bob's requests were refused as in the second
    case once alice filled the 4096 places)."""
    comp = component("--heartbeat", "0.2")
    auth = serve_args(tmp_path, ALICE, BOB)
    with gateway(comp.url, tmp_path, "--max-waiting-requests", str(WAITING),
                 "--max-waiting-requests-per-principal", str(per_principal),
                 security=auth) as (listen, proc):
        # the gateway connected upstream, its requests link attached
        assert query_capabilities(listen, timeout=15, security=client_security(BOB)).limits
        alice = [Client(listen, ALICE) for _ in range(3)]
        bob = Client(listen, BOB)
        everyone = pump = [*alice, bob]
        try:
            with _paused(comp):
                for client in alice:
                    client.ask(3)
                held = min(per_principal, WAITING)
                assert _pump(pump, 5, lambda: len(_settled(alice)) >= 9 - held)
                _pump(pump, 0.5)  # a request wrongly refused would be settled now
                refused = _settled(alice)
                assert len(refused) == 9 - held
                for delivery in refused:
                    condition = delivery.remote.condition
                    assert delivery.remote_state == Delivery.REJECTED
                    assert condition.name == LIMIT
                    if bob_served:
                        assert (f"more than {per_principal} requests of principal "
                                f"'{ALICE}'") in condition.description
                        assert "--max-waiting-requests-per-principal" in (
                            condition.description)
                    else:
                        assert "(--max-waiting-requests)" in condition.description
                bob.ask(2)
                _pump(pump, 0.5, lambda: len(_settled([bob])) >= 2)
                if bob_served:
                    assert _settled([bob]) == []  # forwarded: waiting with alice's 4
                else:
                    assert [d.remote_state for d in _settled([bob])] == [Delivery.REJECTED] * 2
                    assert all("(--max-waiting-requests)" in d.remote.condition.description
                               for d in bob.sent)
            if bob_served:
                assert _pump(pump, 15, lambda: len(_settled(everyone)) == 9 + 2)
                answered = [d for d in _settled(everyone)
                            if d.remote_state == Delivery.ACCEPTED]
                assert len(answered) == held + 2
                assert all(d.remote_state == Delivery.ACCEPTED for d in bob.sent)
                answers = [bob.answers.receive(timeout=15) for _ in range(2)]
                assert sorted(str(a.correlation_id) for a in answers) == [
                    f"{bob.name}:0", f"{bob.name}:1"]
        finally:
            for client in everyone:
                # a failure above may have left the gateway closing them: the failure tells
                with contextlib.suppress(ProtonException):
                    client.conn.close()
    # stopped by SIGTERM: its counters in its log, as the component's
    assert proc.returncode == 0
    counters = gateway_stop_counters(tmp_path / "gateway.log")
    if bob_served:
        assert counters["requests_refused_per_principal"] == 9 - held
        assert counters["requests_refused_in_all"] == 0
        # alice's 4 and bob's 2, and bob's CAPABILITIES request before
        assert counters["request_outcomes"] == held + 2 + 1
    else:
        assert counters["requests_refused_per_principal"] == 0
        assert counters["requests_refused_in_all"] == 9 - held + 2
    assert counters["upstream_connections"] == 1
    assert counters["requests_refused_per_connection"] == 0


def gateway_stop_counters(log: Path) -> dict[str, int]:
    """The counters of the ``gateway stopped`` line of a gateway's log (there must be one)."""
    stopped = [line for line in log.read_text().splitlines() if "gateway stopped" in line]
    assert len(stopped) == 1, log.read_text()[-3000:]
    return counters_of(stopped[0])
