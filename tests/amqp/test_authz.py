"""Authorization over the real component and the real REST server (WIRE.md "Authorization").

One ``seqrepair serve`` process with a policy file, its REST API and a private redis-server;
each operation is tried as the owner (alice), another principal (bob) and an anonymous client,
and each answer is the exact one the policy and the owner-only rule give. Principals come from
:mod:`tests.amqp.principals`: SCRAM users on AMQP (the AMQP tests need proton built against
Cyrus SASL), bearer tokens on REST.
"""

from __future__ import annotations

import base64
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.wire.codec import encode
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, FreePort, wait_for
from .principals import (
    MISSING,
    amqp_identity,
    client_security,
    password,
    rest_token,
    rest_token_file,
    serve_args,
)
from .test_rest_serve import Rest

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

ALICE, BOB, ANON, OPS, SPY, CAROL = (
    "alice@example.com", "bob@example.com", "anonymous", "ops@example.com", "spy@secret.org",
    "carol@example.org")
CONFIGURED_TOPIC = "/weather/configured/LEMD"
needs_scram = pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")

POLICY = """
# who may do what (seqrepair serve --policy)
[[allow]]
actors = ["*@example.com"]
operations = ["publish", "subscribe", "read-subscription",
              "create-subscription", "change-subscription", "delete-subscription",
              "list-topics"]
topics = ["/weather/#"]

[[allow]]
actors = ["alice@example.com"]
operations = ["create-topic", "delete-topic"]
topics = ["/weather/#"]

[[allow]]
actors = ["ops@example.com"]
operations = ["admin"]

[[allow]]
actors = ["spy@secret.org"]
operations = ["publish"]
topics = ["/weather/secret/#"]

[[allow]]
actors = ["*@example.com"]
operations = ["attach-queue"]
queues = ["public-*"]

[[deny]]  # the administrator is not named: a deny would hold for it too
actors = ["alice@example.com", "bob@example.com", "anonymous"]
operations = ["subscribe", "publish", "list-topics"]
topics = ["/weather/secret/#"]
"""


@pytest.fixture
def served(component: Callable[..., ComponentProcess],
           tmp_path: Path) -> Iterator[tuple[ComponentProcess, int, Path]]:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    rest_port = FreePort()
    tokens = rest_token_file(tmp_path / "tokens", ALICE, BOB, OPS)
    comp = component("--heartbeat", "0.2", *serve_args(tmp_path, ALICE, BOB, OPS, SPY, CAROL),
                     "--policy", str(policy), "--rest",
                     rest_port, "--rest-token-file", tokens,
                     "--subscription", "public-wind=/weather/wind/#",
                     "--subscription", "private-rain=/weather/rain/#",
                     "--topic", CONFIGURED_TOPIC)
    port = rest_port.number
    return comp, port, policy


def rest(port: int, principal: str) -> Rest:
    """The REST API as ``principal`` (anonymous: no token)."""
    return Rest(port, None if principal == ANON else rest_token(principal))


class _Properties(LinkOption):
    """Attach link properties (``seqrepair-resume``...)."""

    def __init__(self, properties: dict[Any, Any]) -> None:
        self.properties = properties

    def apply(self, link: Any) -> None:
        link.properties = self.properties


def attach(url: str, address: str, principal: str, name: str | None = None,
           properties: dict[Any, Any] | None = None) -> Any:
    """A receiving link on ``address`` as ``principal``: the receiver (and its connection)
    or the condition that refused it."""
    conn = BlockingConnection(url, timeout=10, **amqp_identity(principal))
    try:
        receiver = conn.create_receiver(address, name=name or uuid.uuid4().hex, credit=10,
                                        options=_Properties(properties) if properties else None)
    except LinkDetached as exc:
        conn.close()
        return exc.condition
    return receiver, conn


def refusal(url: str, address: str, principal: str, name: str | None = None) -> str | None:
    """The condition ``address``'s attach as ``principal`` is refused with (None: taken)."""
    outcome = attach(url, address, principal, name)
    if isinstance(outcome, tuple):
        outcome[1].close()
        return None
    return outcome


class _Outcomes(MessagingHandler):
    """Publishes ``n`` plain PUBLICATION messages on one link as ``principal`` (the source is
    then its container id) and records each delivery's outcome, or the link's refusal."""

    def __init__(self, url: str, principal: str, target: str | None, topic: str, n: int,
                 source: str | None = None):
        super().__init__(auto_settle=True)
        self.source = source
        self.url, self.principal, self.target, self.topic, self.n = (
            url, principal, target, topic, n)
        self.sent = 0
        self.outcomes: list[str | None] = []
        self.refused: str | None = None

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(15, self)
        self.conn = event.container.connect(self.url, reconnect=False,
                                            **amqp_identity(self.principal))
        event.container.create_sender(self.conn, self.target)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.n:
            if self.source is not None:  # numbered: the component learns the source's width
                event.sender.send(encode(Publication(self.topic, self.source, self.sent + 1,
                                                     fields={"n": self.sent})))
                self.sent += 1
                continue
            event.sender.send(Message(
                address=self.topic if self.target is None else None,
                properties={"message-type": "PUBLICATION", "topic": self.topic},
                body={"n": self.sent}))
            self.sent += 1

    def _done(self, event: Any) -> None:
        if len(self.outcomes) >= self.n:
            self.timer.cancel()
            event.connection.close()

    def on_accepted(self, event: Any) -> None:
        self.outcomes.append(None)
        self._done(event)

    def on_rejected(self, event: Any) -> None:
        condition = event.delivery.remote.condition
        self.outcomes.append(condition.name if condition else "rejected")
        self._done(event)

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        self.refused = condition.name if condition else "detached"
        self.timer.cancel()
        event.connection.close()

    def on_timer_task(self, event: Any) -> None:
        self.conn.close()

    def run(self) -> _Outcomes:
        Container(self).run()
        return self


def publish_as(url: str, principal: str, topic: str, n: int = 1,
               target: str | None = "/weather/#",
               source: str | None = None) -> list[str | None] | str:
    """The outcome of each of ``n`` publications (None: accepted), or the link's refusal;
    their source is ``source`` (numbered by the test) or else the principal's container id."""
    done = _Outcomes(url, principal, target, topic, n, source).run()
    return done.refused if done.refused is not None else done.outcomes


def publish_outcome(url: str, target: str | None, topic: str, principal: str) -> str | None:
    """One publication's outcome: None when accepted, else the refusing condition."""
    outcome = publish_as(url, principal, topic, 1, target)
    return outcome if isinstance(outcome, str) else outcome[0]


def test_the_rest_operations_per_principal(
    served: tuple[ComponentProcess, int, Path],
) -> None:
    _, port, _ = served
    alice, bob, anon, ops = (rest(port, p) for p in (ALICE, BOB, ANON, OPS))
    status, created = alice("POST", "/subscriptions", {"id": "alice-wind",
                                                       "topic": "/weather/wind/#"})
    assert status == 201
    assert created["owner"] == ALICE
    item = "/subscriptions/alice-wind"
    retopic = {"topic": "/weather/rain/#"}
    pause = {**created, "subscription_status": "PAUSED"}
    station, secret = "/topics/%2Fweather%2Fstation%2FA", "/topics/%2Fweather%2Fsecret%2Fknown"
    assert ops("PUT", secret, {})[0] == 201  # a topic alice may not list, that exists
    table: list[tuple[Rest, str, str, Any, int]] = [
        # caller, method, path, body, status
        (anon, "GET", "/subscriptions", None, 401),
        (anon, "GET", item, None, 401),
        (anon, "PUT", item, retopic, 401),
        (anon, "DELETE", item, None, 401),
        (anon, "POST", "/subscriptions", {"topic": "/weather/#"}, 401),
        (anon, "GET", "/topics", None, 401),
        (bob, "GET", item, None, 404),
        (bob, "PUT", item, retopic, 404),
        (bob, "PUT", item, pause, 404),
        (bob, "DELETE", item, None, 404),
        # a conflict would tell bob the id exists: it is created under an id of the server's
        (bob, "POST", "/subscriptions", {"id": "alice-wind", "topic": "/weather/#"}, 201),
        (alice, "POST", "/subscriptions", {"id": "alice-wind", "topic": "/weather/#"}, 409),
        (bob, "POST", "/subscriptions", {"topic": "/#"}, 403),  # wider than its grant
        (bob, "POST", "/subscriptions", {"topic": "/weather/secret/#"}, 403),
        (alice, "PUT", item, {"topic": "/sports/#"}, 403),
        (alice, "GET", item, None, 200),
        (alice, "PUT", item, pause, 200),
        (alice, "PUT", item, retopic, 200),
        (ops, "GET", item, None, 200),  # an administrator sees every subscription
        # declaring and deleting topics (create-topic, delete-topic: alice on /weather/#)
        (anon, "PUT", station, {}, 401),
        (anon, "DELETE", station, None, 401),
        (bob, "PUT", station, {}, 403),  # may list it, may not create it
        (alice, "PUT", station, {}, 201),
        (alice, "PUT", station, {}, 200),  # listed already
        (bob, "PUT", station, {}, 403),
        (alice, "PUT", "/topics/%2Fsports%2FA", {}, 403),  # outside its grant
        (alice, "PUT", "/topics/%2Fweather%2F%23", {}, 400),  # a wildcard
        (alice, "PUT", "/topics/weather", {}, 400),
        (alice, "PUT", secret, {}, 403),  # may not list it: as for one nobody has
        (alice, "PUT", "/topics/%2Fweather%2Fsecret%2Fnone", {}, 403),
        (bob, "DELETE", station, None, 403),  # may list it, may not delete it
        (alice, "DELETE", secret, None, 404),  # may not list it
        (alice, "DELETE", "/topics/%2Fweather%2Fnone", None, 404),
        (alice, "DELETE", "/topics/%2Fweather%2Fconfigured%2FLEMD", None, 409),  # serve --topic
        (alice, "GET", station, None, 200),
        (alice, "DELETE", station, None, 200),
        (alice, "GET", station, None, 404),
        (alice, "DELETE", station, None, 404),
        (ops, "PUT", "/topics/%2Fsports%2FA", {}, 201),  # an administrator: anything
        (ops, "DELETE", "/topics/%2Fsports%2FA", None, 200),
        (ops, "DELETE", secret, None, 200),
    ]
    for caller, method, path, body, expected in table:
        status, answer = caller(method, path, body)
        assert status == expected, (caller.token, method, path, body, answer)
        if status == 404:  # the same answer as for an id (a topic) nobody has
            assert answer["error"] == "notfound"
            nobodys = ("/topics/%2Fweather%2Fnone-such" if path.startswith("/topics")
                       else "/subscriptions/none-such")
            assert caller(method, nobodys, body)[0] == 404
        if status == 403:
            assert answer["error"] == "forbidden"
        if status in (400, 409):
            assert answer["error"] == ("invalid" if status == 400 else "conflict")
    # a PUT alice may not list: the same text whether the topic exists or not
    known = alice("PUT", "/topics/%2Fweather%2Fsecret%2Fagain", {})[1]
    ops("PUT", "/topics/%2Fweather%2Fsecret%2Fagain", {})
    assert alice("PUT", "/topics/%2Fweather%2Fsecret%2Fagain", {})[1] == known
    # the lists: only the caller's own (and the configured queues it may attach to)
    assert [s["id"] for s in alice("GET", "/subscriptions")[1]] == ["alice-wind", "public-wind"]
    bobs = [s["id"] for s in bob("GET", "/subscriptions")[1] if s["id"] != "public-wind"]
    assert len(bobs) == 1  # the one made under an id of the server's
    assert bobs[0] != "alice-wind"
    assert {s["id"] for s in ops("GET", "/subscriptions")[1]} == {
        "alice-wind", "public-wind", "private-rain", bobs[0]}
    assert alice("GET", item)[1]["topic"] == "/weather/rain/#"  # bob's PUTs changed nothing
    assert alice("GET", item)[1]["subscription_status"] == "ACTIVE"
    assert bob("DELETE", item)[0] == 404
    assert alice("DELETE", item)[0] == 200
    assert alice("GET", item)[0] == 404


@needs_scram
def test_the_amqp_operations_per_principal(
    served: tuple[ComponentProcess, int, Path],
) -> None:
    comp, port, _ = served
    assert rest(port, ALICE)("POST", "/subscriptions",
                             {"id": "alice-q", "topic": "/weather/#"})[0] == 201
    url = comp.url
    table: list[tuple[str, str, str | None]] = [
        # principal, address, refusal condition (None: attached)
        (ALICE, "/weather/#", None),
        (BOB, "/weather/wind/*", None),
        (ANON, "/weather/#", "amqp:unauthorized-access"),
        (ALICE, "/#", "amqp:unauthorized-access"),
        (ALICE, "/weather/secret/#", "amqp:unauthorized-access"),
        (ALICE, "/subscriptions/alice-q", None),
        (OPS, "/subscriptions/alice-q", None),
        # another's queue: exactly as a queue nobody has, so ids do not leak
        (BOB, "/subscriptions/alice-q", "amqp:not-found"),
        (ANON, "/subscriptions/alice-q", "amqp:not-found"),
        (BOB, "/subscriptions/none-such", "amqp:not-found"),
        # the operator's queues: whoever the policy's attach-queue names
        (BOB, "/subscriptions/public-wind", None),
        (BOB, "/subscriptions/private-rain", "amqp:not-found"),
        (ANON, "/subscriptions/public-wind", "amqp:not-found"),
        (OPS, "/subscriptions/private-rain", None),
    ]
    for principal, address, expected in table:
        assert refusal(url, address, principal) == expected, (principal, address)
    publishes: list[tuple[str, str | None, str, str | None]] = [
        # principal, link target, topic, outcome (None: accepted)
        (ALICE, "/weather/#", "/weather/wind/LEMD", None),
        (ALICE, None, "/weather/wind/LEMD", None),
        (ALICE, "/weather/#", "/weather/secret/x", "amqp:unauthorized-access"),
        (ALICE, "/sports/#", "/sports/x", "amqp:unauthorized-access"),
        (ANON, None, "/weather/wind/LEMD", "amqp:unauthorized-access"),
        (SPY, "/weather/secret/x", "/weather/secret/x", None),
        (SPY, None, "/weather/wind/LEMD", "amqp:unauthorized-access"),
    ]
    for principal, target, topic, expected in publishes:
        assert publish_outcome(url, target, topic, principal) == expected, (principal, topic)


@needs_scram
def test_another_principal_cannot_take_a_link_name_and_the_owner_keeps_its_link(
    served: tuple[ComponentProcess, int, Path], redis_url: str,
) -> None:
    comp, _, _ = served
    got: list[int] = []
    owner = Subscriber(comp.url, "/weather/#", link_name="alice-link", heartbeat_interval=0.2,
                       on_publication=lambda p: got.append(p.source_seq),
                       security=client_security(ALICE)).start()
    try:
        assert owner.connected.wait(20)
        assert refusal(comp.url, "/weather/#", BOB, "alice-link") == "amqp:unauthorized-access"
        assert publish_as(comp.url, ALICE, "/weather/wind/LEMD", 50) == [None] * 50
        assert wait_for(lambda: len(got) >= 50, 30), (len(got), comp.log_text()[-2000:])
        assert got == list(range(1, 51))
        assert owner.error is None
        assert owner.stats().connections == 1  # never kicked off
        assert "amqp:link:stolen" not in comp.log_text()
    finally:
        owner.stop()


@needs_scram
def test_a_link_name_stays_its_principals_while_its_context_is_kept(
    served: tuple[ComponentProcess, int, Path], redis_url: str,
) -> None:
    """After the owner's link detached, its kept context is not another principal's to take:
    the owner reconnecting finds it (the same epoch), never bob's attach in its place."""
    comp, _, _ = served
    outcome = attach(comp.url, "/weather/#", ALICE, "alice-kept")
    assert isinstance(outcome, tuple), outcome
    receiver, conn = outcome
    epoch = dict(receiver.link.remote_properties or {})[symbol("seqrepair-epoch")]
    conn.close()  # detached: the component keeps the context (--context-retention)
    assert refusal(comp.url, "/weather/#", BOB, "alice-kept") == "amqp:unauthorized-access"
    outcome = attach(comp.url, "/weather/#", ALICE, "alice-kept",
                     properties={symbol("seqrepair-resume"): True})
    assert isinstance(outcome, tuple), outcome
    receiver, conn = outcome
    try:
        assert dict(receiver.link.remote_properties or {})[symbol("seqrepair-epoch")] == epoch
    finally:
        conn.close()


@needs_scram
def test_the_attach_reply_and_capabilities_name_only_sources_the_caller_may_see(
    served: tuple[ComponentProcess, int, Path], redis_url: str,
) -> None:
    comp, port, _ = served
    assert publish_as(comp.url, ALICE, "/weather/wind/LEMD", 5, source="feed.wind") == [None] * 5
    assert publish_as(comp.url, SPY, "/weather/secret/x", 5, "/weather/secret/#",
                      source="feed.secret") == [None] * 5
    outcome = attach(comp.url, "/weather/#", BOB)
    assert isinstance(outcome, tuple), outcome
    receiver, conn = outcome
    try:
        props = {str(k): v for k, v in dict(receiver.link.remote_properties or {}).items()}
        assert set(props["seqrepair-start-after"]) == {"feed.wind"}
    finally:
        conn.close()
    outcome = attach(comp.url, "/subscriptions/private-rain", OPS)  # the admin: every source
    assert isinstance(outcome, tuple), outcome
    receiver, conn = outcome
    try:
        props = {str(k): v for k, v in dict(receiver.link.remote_properties or {}).items()}
        assert set(props["seqrepair-start-after"]) == {"feed.wind", "feed.secret"}
    finally:
        conn.close()
    seen_by = {who: query_capabilities(comp.url, security=client_security(who)).source_bits
               for who in (BOB, OPS)}
    assert set(seen_by[BOB]) == {"feed.wind"}
    assert "feed.secret" in seen_by[OPS]
    # and /topics/<t> lists neither the secret topic nor another's subscription ids
    alice, bob = rest(port, ALICE), rest(port, BOB)
    assert alice("POST", "/subscriptions", {"id": "a-wind", "topic": "/weather/wind/#"})[0] == 201
    status, info = bob("GET", "/topics/%2Fweather%2Fwind%2FLEMD")
    assert status == 200
    assert info["subscriptions"] == ["public-wind"]  # the operator's queue bob may attach to
    status, info = alice("GET", "/topics/%2Fweather%2Fwind%2FLEMD")
    assert status == 200
    assert info["subscriptions"] == ["a-wind", "public-wind"]
    assert bob("GET", "/topics/%2Fweather%2Fsecret%2Fx")[0] == 404
    assert bob("GET", "/topics/%2Fweather%2Fnever")[0] == 404
    assert "/weather/secret/x" not in bob("GET", "/topics")[1]["topics"]
    assert "/weather/wind/LEMD" in bob("GET", "/topics")[1]["topics"]
    assert "/weather/secret/x" in rest(port, OPS)("GET", "/topics")[1]["topics"]


@needs_scram
def test_a_policy_reload_on_sighup_takes_effect_and_a_bad_file_keeps_the_old_one(
    served: tuple[ComponentProcess, int, Path],
) -> None:
    comp, port, policy = served
    assert comp.proc is not None
    assert refusal(comp.url, "/weather/#", CAROL) == "amqp:unauthorized-access"
    policy.write_text(POLICY + f'\n[[allow]]\nactors = ["{CAROL}"]\n'
                      'operations = ["subscribe", "list-topics"]\n')
    os.kill(comp.proc.pid, signal.SIGHUP)
    assert wait_for(lambda: "access policy reloaded" in comp.log_text(), 10)
    assert refusal(comp.url, "/weather/#", CAROL) is None
    carol = Subscriber(comp.url, "/weather/#", link_name="carol", heartbeat_interval=0.2,
                       security=client_security(CAROL)).start()
    try:
        assert carol.connected.wait(20)
        policy.write_text("[[allow]\nbroken")
        os.kill(comp.proc.pid, signal.SIGHUP)
        assert wait_for(lambda: "access policy not reloaded" in comp.log_text(), 10)
        # the old one stays
        assert refusal(comp.url, "/weather/#", CAROL) is None
        assert rest(port, ALICE)("GET", "/subscriptions")[0] == 200
        time.sleep(0.5)
        assert carol.error is None
        policy.write_text(POLICY)  # carol's grant taken back: her attached link ends
        os.kill(comp.proc.pid, signal.SIGHUP)
        assert carol._thread is not None
        carol._thread.join(20)
        assert not carol._thread.is_alive()
        assert str(carol.error).startswith("amqp:unauthorized-access"), carol.error
    finally:
        carol.stop()
    assert refusal(comp.url, "/weather/#", CAROL) == "amqp:unauthorized-access"
    assert comp.proc.poll() is None


def test_a_bad_policy_file_refuses_to_start_with_one_line(
    redis_url: str, tmp_path: Path,
) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text('[[allow]]\nactors = ["*"]\noperations = ["fly"]\n')
    comp = ComponentProcess(redis_url, tmp_path, "--policy", str(bad))
    with pytest.raises(RuntimeError) as info:
        comp.start()
    text = comp.log_text().strip()
    assert "unknown operation 'fly'" in text
    assert "Traceback" not in text
    assert "component exited" in str(info.value)
    missing = ComponentProcess(redis_url, tmp_path, "--policy", str(tmp_path / "nope.toml"))
    with pytest.raises(RuntimeError):
        missing.start()
    assert "nope.toml" in missing.log_text()


@needs_scram
def test_every_rest_operation_refuses_a_wrong_password_or_token_and_changes_nothing(
    served: tuple[ComponentProcess, int, Path],
) -> None:
    """Each REST operation, asked with alice's name and a wrong password (HTTP Basic), a name
    nobody has, or a bearer token nobody holds, is 401; nothing changes."""
    _, port, _ = served
    alice = rest(port, ALICE)
    assert alice("POST", "/subscriptions", {"id": "door-wind", "topic": "/weather/wind/#"})[0] \
        == 201
    before = alice("GET", "/subscriptions/door-wind")[1]

    def basic(user: str, secret: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()

    callers = {
        "wrong password": Rest(port, authorization=basic(ALICE, password(ALICE) + "x")),
        "unknown user": Rest(port, authorization=basic("nobody@example.com", password(ALICE))),
        "unknown token": Rest(port, authorization="Bearer " + uuid.uuid4().hex),
    }
    item, station = "/subscriptions/door-wind", "/topics/%2Fweather%2Fstation%2FB"
    operations: list[tuple[str, str, Any]] = [
        ("GET", "/subscriptions", None),
        ("POST", "/subscriptions", {"topic": "/weather/#"}),
        ("GET", item, None),
        ("PUT", item, {"topic": "/weather/rain/#"}),
        ("PUT", item, {**before, "subscription_status": "PAUSED"}),
        ("DELETE", item, None),
        ("GET", "/topics", None),
        ("GET", station, None),
        ("PUT", station, {}),
        ("DELETE", station, None),
    ]
    # the control row: the right password gets in
    assert Rest(port, authorization=basic(ALICE, password(ALICE)))("GET", item)[0] == 200
    for why, caller in callers.items():
        for method, path, body in operations:
            status, answer = caller(method, path, body)
            assert status == 401, (why, method, path, answer)
    assert alice("GET", item)[1] == before  # nothing changed
    assert [s["id"] for s in alice("GET", "/subscriptions")[1]] == ["door-wind", "public-wind"]
    assert alice("GET", station)[0] == 404  # never declared
