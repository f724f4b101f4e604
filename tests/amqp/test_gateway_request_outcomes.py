"""The gateway's requests (gateway/requests.py) settle each client delivery with the
component's outcome of the request it forwarded, in memory: deliveries and links are small
stand-ins for proton's (what :class:`Requests` reads of them), the gateway a namespace.
Over real processes: test_gateway_rejected_real."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from proton import Condition, Delivery, Endpoint, Message

from seqrepair.amqp.gateway import requests as requests_module
from seqrepair.amqp.gateway.requests import Requests, UpstreamLostError
from seqrepair.amqp.wire.errors import RequestFloodError
from seqrepair.amqp.wire.hops import Hops
from seqrepair.core.errors import InvalidConfigError
from seqrepair.logs import get_logger

pytestmark = [pytest.mark.amqp]


class FakeLink:
    def __init__(self) -> None:
        self.state = Endpoint.LOCAL_ACTIVE | Endpoint.REMOTE_ACTIVE
        self.credit_given = 0

    def flow(self, n: int) -> None:
        self.credit_given += n


class FakeDelivery:
    def __init__(self, link: Any, tag: str = "", settled: bool = False) -> None:
        self.link = link
        self.tag = tag
        self.settled = settled
        self.remote_state: int | None = None
        self.remote = SimpleNamespace(condition=None, failed=False, undeliverable=False)
        self.local = SimpleNamespace(condition=None, failed=False, undeliverable=False)
        self.state: int | None = None

    def update(self, state: int) -> None:
        self.state = state

    def settle(self) -> None:
        self.settled = True


class FakeControl(FakeLink):
    seqrepair_requests = True

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[FakeDelivery] = []
        self._tags = itertools.count(1)

    def send(self, message: Message) -> FakeDelivery:
        out = FakeDelivery(self, tag=str(next(self._tags)))
        self.sent.append(out)
        return out


def _requests(**bounds: int) -> tuple[Requests, FakeControl]:
    """A gateway's requests (``bounds``: ``max_awaited``, ``max_awaited_per_principal``) with
    a control link that takes what is sent; its stats are the gateway's."""
    gateway = SimpleNamespace(
        stats={"dropped_requests": 0, "rewritten": 0, "annotated": 0},
        relays=SimpleNamespace(upstream_ready=True, get=lambda name: None),
        hops=Hops("edge"), name="edge", log=get_logger("test"))
    requests = Requests(gateway, capacity=64, annotations=False, **bounds)
    control = FakeControl()
    requests.control = control
    return requests, control


def _request() -> Message:
    return Message(id=7, reply_to="$link/s", properties={
        "message-type": "SOURCE-GAP-REQUEST", "link": "s"}, body={"feed.a": 0})


def test_a_rejection_is_copied_to_the_client_and_its_credit_given_back() -> None:
    requests, control = _requests()
    client_link = FakeLink()
    client = FakeDelivery(client_link)
    assert requests.forward(_request(), client=client) is True
    assert not client.settled
    assert requests.awaited == 1
    assert client_link.credit_given == 0  # not before the outcome
    out = control.sent[0]
    out.remote_state = Delivery.REJECTED
    out.remote.condition = Condition("amqp:resource-limit-exceeded", "replay room", {"got": 2})
    assert requests.outcome(out) is True
    assert client.settled
    assert client.state == Delivery.REJECTED
    cond = client.local.condition
    assert (cond.name, cond.description, cond.info) == (
        "amqp:resource-limit-exceeded", "replay room", {"got": 2})
    assert client_link.credit_given == 1
    assert requests.awaited == 0


def test_an_acceptance_is_copied() -> None:
    requests, control = _requests()
    client = FakeDelivery(FakeLink())
    requests.forward(_request(), client=client)
    control.sent[0].remote_state = Delivery.ACCEPTED
    requests.outcome(control.sent[0])
    assert (client.settled, client.state, client.local.condition) == (
        True, Delivery.ACCEPTED, None)


def test_the_upstream_lost_rejects_what_waits_as_temporary() -> None:
    requests, _control = _requests()
    links = [FakeLink(), FakeLink()]
    clients = [FakeDelivery(link) for link in links]
    for client in clients:
        requests.forward(_request(), client=client)
    requests.upstream_lost()
    for client, link in zip(clients, links, strict=True):
        assert client.settled
        assert client.state == Delivery.REJECTED
        assert client.local.condition.name == "amqp:internal-error"
        assert "upstream lost" in client.local.condition.description
        assert link.credit_given == 1
    assert requests.awaited == 0


def test_a_pre_settled_request_crosses_pre_settled() -> None:
    requests, control = _requests()
    client = FakeDelivery(FakeLink(), settled=True)
    assert requests.forward(_request(), client=client) is False
    assert control.sent[0].settled
    assert requests.awaited == 0


def test_nothing_waits_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requests_module, "MAX_AWAITED", 3)
    requests, control = _requests()
    for _ in range(3):
        requests.forward(_request(), client=FakeDelivery(FakeLink()))
    with pytest.raises(RequestFloodError):
        requests.forward(_request(), client=FakeDelivery(FakeLink()))
    assert len(control.sent) == 3
    assert requests.awaited == 3


def test_a_request_with_the_component_out_of_reach_is_refused_as_temporary() -> None:
    requests, _control = _requests()
    requests.control = None
    with pytest.raises(UpstreamLostError) as refused:
        requests.forward(_request(), client=FakeDelivery(FakeLink()))
    assert refused.value.condition == "amqp:internal-error"


def test_one_client_connection_cannot_fill_the_bound_for_every_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client's links each hold at most their credit (64) waiting, but a client may attach
    as many requests links as it likes: with the bound global only, one connection's 64 links
    filled it and every other client's request was rejected resource-limit-exceeded while the
    component worked through them. Each connection has its share
    (:data:`MAX_AWAITED_PER_CONNECTION`); the global bound stays the last guard. Fails on the
    code before (the other client's request raised RequestFloodError)."""
    monkeypatch.setattr(requests_module, "MAX_AWAITED", 8)
    monkeypatch.setattr(requests_module, "MAX_AWAITED_PER_CONNECTION", 4)
    requests, control = _requests()
    hostile = object()

    def link_of(connection: object) -> FakeLink:
        link = FakeLink()
        link.connection = connection  # type: ignore[attr-defined]
        return link

    for _ in range(4):
        requests.forward(_request(), client=FakeDelivery(link_of(hostile)))
    with pytest.raises(RequestFloodError):  # its share is full, on any of its links
        requests.forward(_request(), client=FakeDelivery(link_of(hostile)))
    other = FakeDelivery(link_of(object()))
    assert requests.forward(_request(), client=other) is True
    assert requests.awaited == 5
    # an outcome frees the hostile connection's share by one
    control.sent[0].remote_state = Delivery.ACCEPTED
    requests.outcome(control.sent[0])
    assert requests.forward(_request(), client=FakeDelivery(link_of(hostile))) is True
    requests.upstream_lost()  # all rejected: the shares are empty again
    requests.control = FakeControl()  # connected again
    for _ in range(4):
        requests.forward(_request(), client=FakeDelivery(link_of(hostile)))


class FakeConnection:
    """A client connection whose transport authenticated ``principal`` (None: nobody, an
    anonymous connection), as :func:`~seqrepair.amqp.wire.security.principal_of` reads it."""

    def __init__(self, principal: str | None) -> None:
        self.transport = SimpleNamespace(user=principal)



def _on(connection: object) -> FakeDelivery:
    link = FakeLink()
    link.connection = connection  # type: ignore[attr-defined]
    return FakeDelivery(link)


def test_one_principal_with_many_connections_cannot_fill_the_bound_for_every_other() -> None:
    """Alice opens three connections, each far under its own bound (256): with only the
    per-connection and global bounds (before) her requests filled the gateway's table (8 here)
    and bob's first request was rejected. Now her connections share her bound (4): her fifth
    is refused naming it, counted, and bob's requests are forwarded; what she claims in a
    message (``seqrepair-on-behalf-of``) names nobody. Fails on the code before (no
    ``max_awaited_per_principal``; with the global bound alone bob's request raised)."""
    requests, control = _requests(max_awaited=8, max_awaited_per_principal=4)
    alice = [FakeConnection("alice@example.com") for _ in range(3)]
    claimed = _request()
    claimed.properties["seqrepair-on-behalf-of"] = "bob@example.com"
    for conn in alice[:2]:
        for _ in range(2):
            assert requests.forward(claimed, client=_on(conn)) is True
    for conn in alice:  # any of her connections, even one with nothing waiting
        with pytest.raises(RequestFloodError, match=r"more than 4 requests of principal "
                           r"'alice@example.com'.*--max-waiting-requests-per-principal"
                           ) as refused:
            requests.forward(_request(), client=_on(conn))
        assert refused.value.condition == "amqp:resource-limit-exceeded"
    assert requests.stats["requests_refused_per_principal"] == 3
    bob = FakeConnection("bob@example.com")
    for _ in range(4):
        assert requests.forward(_request(), client=_on(bob)) is True
    assert requests.awaited == 8
    # the gateway's bound is the last guard: full, it refuses whoever asks
    with pytest.raises(RequestFloodError, match="--max-waiting-requests\\)"):
        requests.forward(_request(), client=_on(FakeConnection("carol@example.com")))
    assert requests.stats["requests_refused_in_all"] == 1
    # an outcome of hers frees a place of hers, on another of her connections too
    control.sent[0].remote_state = Delivery.ACCEPTED
    requests.outcome(control.sent[0])
    assert requests.forward(_request(), client=_on(alice[2])) is True
    assert requests.stats["requests_refused_per_principal"] == 3
    requests.upstream_lost()  # all rejected: every principal's count empty again
    requests.control = FakeControl()
    for _ in range(4):
        requests.forward(_request(), client=_on(alice[2]))


def test_anonymous_connections_share_one_principal_bound() -> None:
    """Anonymous clients (``--allow-anonymous``) are one principal, ``anonymous``: opening
    one more connection gives none of them a fresh allowance."""
    requests, _ = _requests(max_awaited_per_principal=2)
    for _ in range(2):
        requests.forward(_request(), client=_on(FakeConnection(None)))
    with pytest.raises(RequestFloodError, match="principal 'anonymous'"):
        requests.forward(_request(), client=_on(FakeConnection(None)))
    assert requests.forward(_request(), client=_on(FakeConnection("alice@example.com"))) is True


@pytest.mark.parametrize("bound", [0, -1, True, 2.5])
@pytest.mark.parametrize("name", ["max_awaited", "max_awaited_per_principal"])
def test_a_bound_that_bounds_nothing_is_refused(name: str, bound: object) -> None:
    gateway = SimpleNamespace(stats={})
    option = name.replace("awaited", "waiting_requests")
    with pytest.raises(InvalidConfigError, match=f"{option}\\b"):
        Requests(gateway, capacity=64, annotations=False, **{name: bound})  # type: ignore[arg-type]


def test_an_outcome_after_the_clients_transport_went_frees_the_place_of_its_principal() -> None:
    """The principal a waiting request counts for is the one its connection proved when it
    was forwarded, kept with it: once the client's connection is gone its transport is too
    (``principal_of`` would say ``anonymous``), and the outcome that comes later must free
    alice's place, not anonymous's, or alice is locked out for good. Guards the stored
    principal (passes on be5ca4d; fails if the outcome reads ``principal_of`` again)."""
    requests, control = _requests(max_awaited_per_principal=1)
    gone = FakeConnection("alice@example.com")
    assert requests.forward(_request(), client=_on(gone)) is True
    with pytest.raises(RequestFloodError, match=r"'alice@example\.com'"):
        requests.forward(_request(), client=_on(FakeConnection("alice@example.com")))
    anonymous = FakeConnection(None)
    assert requests.forward(_request(), client=_on(anonymous)) is True
    gone.transport = None  # her connection closed before the component answered
    control.sent[0].remote_state = Delivery.ACCEPTED
    requests.outcome(control.sent[0])
    # her place is free (on a new connection), anonymous's still taken
    assert requests.forward(_request(), client=_on(FakeConnection("alice@example.com"))) is True
    with pytest.raises(RequestFloodError, match="'anonymous'"):
        requests.forward(_request(), client=_on(FakeConnection(None)))


def _pump(*transports: Any) -> None:
    """Move the bytes between two in-memory proton transports until neither has any."""
    first, second = transports
    moved = True
    while moved:
        moved = False
        for source, target in ((first, second), (second, first)):
            out = source.peek(1 << 16)
            if out:
                target.push(out)
                source.pop(len(out))
                moved = True


def test_a_delivery_settled_by_its_peer_without_an_outcome_has_one() -> None:
    """Over real proton endpoints (two in-memory transports, no socket): a peer that settles
    a request's delivery without a disposition state gives it no outcome to copy, but the
    delivery is done; :func:`has_outcome` must say so (the client's is then released).
    Before: it read ``delivery.remote_settled``, which proton's Delivery does not have (its
    remote-settled flag is ``settled``; only this file's fakes had the attribute), so it
    raised AttributeError, the guard closed the gateway's connection to the component and
    every client's waiting request was rejected."""
    from proton import Connection, Transport

    from seqrepair.amqp.gateway.publish import has_outcome

    ours, theirs = Connection(), Connection()
    our_end, their_end = Transport(), Transport(Transport.SERVER)
    our_end.bind(ours)
    their_end.bind(theirs)
    ours.open()
    session = ours.session()
    session.open()
    sender = session.sender("requests")
    sender.target.address = "$seqrepair"
    sender.open()
    _pump(our_end, their_end)
    theirs.open()
    theirs.session_head(0).open()
    receiver = theirs.link_head(0)
    receiver.target.copy(receiver.remote_target)
    receiver.open()
    receiver.flow(1)
    _pump(our_end, their_end)
    out = sender.delivery(b"1")
    sender.send(_request().encode())
    sender.advance()
    _pump(our_end, their_end)
    taken = receiver.current
    receiver.recv(taken.pending)
    receiver.advance()
    taken.settle()  # settled, no outcome
    _pump(our_end, their_end)
    assert (out.remote_state, out.settled) == (0, True)
    assert has_outcome(out) is True
