"""Authorization holes an audit of issue 25 found, each closed and tried here over the real
component, REST server, gateway and redis-server (WIRE.md "Authorization"):

* a subscription queue's link takes its principal's ``subscribe`` decision (an API-made one
  needs the grant; every queue excludes the denied patterns), and a reload that takes the
  grant back ends the link;
* a source replay's answers name a source the caller may not see exactly as one nobody has;
* one user is one principal, whether or not it names Cyrus's default realm;
* an anonymous client behind a forwarding gateway is anonymous, not the gateway;
* without a policy, a configured queue is attachable only by whom its configuration names;
* ``GET /topics/<t>`` needs ``list-topics`` alone.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import symbol
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.technical import Ack
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS, PROP_ACK, PROP_LINK
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Publication,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
)
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, FreePort, wait_for
from .principals import (
    MISSING,
    amqp_identity,
    client_security,
    password,
    rest_token_file,
    serve_args,
    upstream_args,
)
from .test_authz import POLICY, attach, publish_as, refusal, rest
from .test_gateway_publish import gateway_process
from .test_rest_serve import Rest

pytestmark = [pytest.mark.amqp, pytest.mark.redis]
CEILING = 20.0
"""Seconds a frame the test waits for may take (a loaded 2-core machine): free when it comes."""
SETTLE = 0.5
"""Seconds waited after what was expected came, for anything that must not come."""
needs_scram = pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")

ALICE, BOB, ANON, SPY = "alice@example.com", "bob@example.com", "anonymous", "spy@secret.org"
GUEST, READER, GW = "guest@partner.org", "reader@example.org", "gw@example.net"

HOLES_POLICY = POLICY + """
[[allow]]  # the operator's queue public-all, and no subscribe grant at all
actors = ["guest@partner.org"]
operations = ["attach-queue"]
queues = ["public-*"]

[[deny]]
actors = ["guest@partner.org"]
operations = ["subscribe"]
topics = ["/weather/secret/#"]

[[allow]]  # may list the topics, may read no subscription
actors = ["reader@example.org"]
operations = ["list-topics"]
topics = ["/weather/#"]
"""


@pytest.fixture
def holes(component: Callable[..., ComponentProcess],
          tmp_path: Path) -> tuple[ComponentProcess, int, Path]:
    policy = tmp_path / "policy.toml"
    policy.write_text(HOLES_POLICY)
    rest_port = FreePort()
    tokens = rest_token_file(tmp_path / "tokens", ALICE, BOB, READER)
    comp = component("--heartbeat", "0.2", *serve_args(tmp_path, ALICE, BOB, SPY, GUEST),
                     "--policy", str(policy), "--rest", rest_port,
                     "--rest-token-file", tokens,
                     "--subscription", "public-all=/weather/#")
    return comp, rest_port.number, policy


def _reload(comp: ComponentProcess, policy: Path, text: str) -> None:
    assert comp.proc is not None
    before = comp.log_text().count("access policy reloaded")
    policy.write_text(text)
    os.kill(comp.proc.pid, signal.SIGHUP)
    assert wait_for(lambda: comp.log_text().count("access policy reloaded") > before, 10)


def _received(receiver: Any, seconds: float,
              until: Callable[[list[Any]], bool] | None = None) -> list[Any]:
    """Every frame ``receiver`` gets within ``seconds``; with ``until``, every frame until
    ``until(frames)`` holds (at most :data:`CEILING` s: a loaded machine may take seconds)
    and then ``seconds`` more, for anything that should not come (a leak, a copy)."""
    decoder = Decoder(link_bits=16)
    frames: list[Any] = []
    if until is not None:
        ceiling = time.monotonic() + CEILING
        while not until(frames) and time.monotonic() < ceiling:
            try:
                message = receiver.receive(timeout=max(0.05, ceiling - time.monotonic()))
            except Exception:  # proton's Timeout: nothing came
                break
            frames.extend(decoder.decode(message))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            message = receiver.receive(timeout=max(0.05, end - time.monotonic()))
        except Exception:  # proton's Timeout: nothing more came
            break
        frames.extend(decoder.decode(message))
    return frames


def _answered(frames: list[Any]) -> bool:
    """A replay request's answer is whole (its ReplayComplete or GapError came)."""
    return any(isinstance(f, ReplayComplete | GapError) for f in frames)


def _publications(count: int) -> Callable[[list[Any]], bool]:
    return lambda frames: sum(isinstance(f, Publication) for f in frames) >= count


def _detached(receiver: Any, seconds: float) -> str | None:
    """The condition ``receiver``'s link is detached with within ``seconds`` (None: not)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            receiver.receive(timeout=0.2)
        except LinkDetached as exc:
            return str(exc.condition)
        except Exception:  # proton's Timeout: still attached
            continue
    return None


def _topics_seen(receiver: Any, count: int) -> list[str]:
    """The topics of the publications ``receiver`` gets: ``count`` of them, and any extra
    that comes within :data:`SETTLE` s after them."""
    frames = _received(receiver, SETTLE, until=_publications(count))
    return [f.topic for f in frames if isinstance(f, Publication)]


@needs_scram
def test_a_queue_link_takes_the_subscribe_decision_and_ends_when_it_is_taken_back(
    holes: tuple[ComponentProcess, int, Path],
) -> None:
    comp, port, policy = holes
    assert rest(port, ALICE)("POST", "/subscriptions",
                             {"id": "alice-q", "topic": "/weather/#"})[0] == 201
    outcome = attach(comp.url, "/subscriptions/alice-q", ALICE, "alice-q-link")
    assert isinstance(outcome, tuple), outcome
    receiver, conn = outcome
    try:
        time.sleep(0.3)
        assert publish_as(comp.url, SPY, "/weather/secret/x", 2, "/weather/secret/#",
                          source="feed.secret.1") == [None] * 2
        assert publish_as(comp.url, BOB, "/weather/wind/LEMD", 2,
                          source="feed.bob.1") == [None] * 2
        assert _topics_seen(receiver, 2) == ["/weather/wind/LEMD"] * 2  # secrets excluded
        # alice's subscribe grant taken back: her queue's link ends, never widens
        _reload(comp, policy, HOLES_POLICY + '\n[[deny]]\nactors = ["alice@example.com"]\n'
                                              'operations = ["subscribe"]\n'
                                              'topics = ["/weather/#"]\n')
        assert _detached(receiver, 10) == "amqp:unauthorized-access"
    finally:
        conn.close()
    assert refusal(comp.url, "/subscriptions/alice-q", ALICE) == "amqp:unauthorized-access"
    assert refusal(comp.url, "/weather/#", ALICE) == "amqp:unauthorized-access"
    # another's queue stays not found, as one nobody has
    assert refusal(comp.url, "/subscriptions/alice-q", BOB) == "amqp:not-found"


@needs_scram
def test_a_configured_queue_excludes_what_is_denied_to_whoever_attaches(
    holes: tuple[ComponentProcess, int, Path],
) -> None:
    comp, _, _ = holes
    assert refusal(comp.url, "/weather/#", GUEST) == "amqp:unauthorized-access"  # no grant
    seen: dict[str, list[str]] = {}
    for who in (GUEST, BOB, ANON):
        outcome = attach(comp.url, "/subscriptions/public-all", who)
        if who == ANON:  # attach-queue names nobody anonymous
            assert outcome == "amqp:not-found"
            continue
        assert isinstance(outcome, tuple), (who, outcome)
        receiver, conn = outcome
        try:
            time.sleep(0.3)
            assert publish_as(comp.url, SPY, "/weather/secret/x", 2, "/weather/secret/#",
                              source=f"feed.secret.{who}") == [None] * 2
            assert publish_as(comp.url, BOB, "/weather/rain/LEMD", 1,
                              source=f"feed.rain.{who}") == [None]
            seen[who] = _topics_seen(receiver, 1)
        finally:
            conn.close()
    # neither guest (attach-queue only) nor bob (a subscribe grant) gets the denied secrets
    assert seen == {GUEST: ["/weather/rain/LEMD"], BOB: ["/weather/rain/LEMD"]}


def _ask(sender: Any, receiver: Any, name: str, after: dict[str, int]) -> list[Any]:
    """The answers to a SOURCE-GAP-REQUEST on link ``name`` (publications left out)."""
    request = encode(SourceGapRequest(after=after, request_id=7))
    request.reply_to = f"$link/{name}"
    request.id = f"q-{uuid.uuid4().hex}"
    sender.send(request)
    return [f for f in _received(receiver, SETTLE, until=_answered)
            if isinstance(f, ReplayStarted | ReplayComplete | GapError)]


def _shape(answers: list[Any]) -> list[tuple[str, dict[str, int], str]]:
    return [(type(a).__name__, dict(getattr(a, "through", {}) or {}),
             getattr(a, "reason", "")) for a in answers]


@needs_scram
def test_a_source_replay_answers_a_hidden_source_as_one_nobody_has(
    holes: tuple[ComponentProcess, int, Path], redis_url: str,
) -> None:
    comp, _, _ = holes
    assert publish_as(comp.url, ALICE, "/weather/wind/LEMD", 5, source="feed.wind") == [None] * 5
    conn = BlockingConnection(comp.url, timeout=10, **amqp_identity(BOB))
    try:
        receiver = conn.create_receiver("/weather/#", name="bob-link", credit=100)
        sender = conn.create_sender("$seqrepair")
        # published after bob attached: a source his link would be owed, were it his to see
        assert publish_as(comp.url, SPY, "/weather/secret/x", 7, "/weather/secret/#",
                          source="feed.secret") == [None] * 7
        assert publish_as(comp.url, ALICE, "/weather/wind/LEMD", 1,
                          source="feed.wind") == [None]
        _received(receiver, 1.0)
        honest = _ask(sender, receiver, "bob-link", {"feed.wind": 4})
        assert _shape(honest) == [("ReplayStarted", {"feed.wind": 5}, ""),
                                  ("ReplayComplete", {"feed.wind": 5}, "")]
        hidden = _ask(sender, receiver, "bob-link", {"feed.secret": 0})
        nobodys = _ask(sender, receiver, "bob-link", {"nosuch.src": 0})
        assert _shape(hidden) == [("ReplayStarted", {"feed.secret": 0}, ""),
                                  ("ReplayComplete", {"feed.secret": 0}, "")]
        assert _shape(nobodys) == [("ReplayStarted", {"nosuch.src": 0}, ""),
                                   ("ReplayComplete", {"nosuch.src": 0}, "")]
        trimmed = subprocess.run(
            [sys.executable, "-m", "seqrepair.cli", "journal", "trim", "--redis-url", redis_url,
             "--max-count", "2", "feed.secret"], capture_output=True, text=True, timeout=60)
        assert trimmed.returncode == 0, trimmed.stderr
        # trimmed numbers of a hidden source are not told either
        assert _shape(_ask(sender, receiver, "bob-link", {"feed.secret": 0})) == _shape(hidden)
    finally:
        conn.close()


@pytest.fixture
def realm(component: Callable[..., ComponentProcess],
          tmp_path: Path) -> tuple[ComponentProcess, int]:
    """mallory, a user stored without ``@``, denied ``/open/secret/#``."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[[allow]]\nactors = ["*"]\noperations = ["subscribe", "publish", '
                      '"read-subscription", "create-subscription"]\ntopics = ["/open/#"]\n'
                      '[[deny]]\nactors = ["mallory"]\noperations = ["subscribe", '
                      '"create-subscription"]\ntopics = ["/open/secret/#"]\n')
    rest_port = FreePort()
    comp = component(*serve_args(tmp_path, "mallory"), "--policy", str(policy),
                     "--rest", rest_port)
    return comp, rest_port.number


def _basic(port: int, user: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    auth = base64.b64encode(f"{user}:{password('mallory')}".encode()).decode()
    return Rest(port, authorization=f"Basic {auth}")(method, path, body)


@needs_scram
def test_a_user_in_the_default_realm_is_one_principal_on_both_ports(
    realm: tuple[ComponentProcess, int],
) -> None:
    comp, port = realm
    for user in ("mallory", f"mallory@{socket.gethostname()}"):
        identity = {"user": user, "password": password("mallory"),
                    "allowed_mechs": "SCRAM-SHA-256"}
        conn = BlockingConnection(comp.url, timeout=10, **identity)
        try:
            with pytest.raises(LinkDetached) as refused:
                conn.create_receiver("/open/secret/#", name=uuid.uuid4().hex)
            assert refused.value.condition == "amqp:unauthorized-access", user
        finally:
            conn.close()
        status, made = _basic(port, user, "POST", "/subscriptions", {"topic": "/open/wind/#"})
        assert status == 201, made
        assert made["owner"] == "mallory", user
        assert _basic(port, user, "POST", "/subscriptions",
                      {"topic": "/open/secret/#"})[0] == 403, user
    assert wait_for(lambda: "principal=mallory@" not in comp.log_text()
                    and comp.log_text().count("principal=mallory") >= 2, 5)


@needs_scram
def test_an_anonymous_client_behind_a_forwarding_gateway_is_anonymous(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[allow]]\nactors = ["*@example.com", "gw@example.net"]\n'
        'operations = ["subscribe", "publish"]\ntopics = ["/weather/#"]\n'
        '[[allow]]\nactors = ["gw@example.net"]\noperations = ["act-for"]\n'
        'principals = ["*@example.com"]\n'
        '[[allow]]\nactors = ["anonymous"]\noperations = ["subscribe"]\n'
        'topics = ["/weather/public/#"]\n')
    auth = serve_args(tmp_path, ALICE, GW)
    comp = component("--heartbeat", "0.2", *auth, "--policy", str(policy))
    args = (*auth, *upstream_args(tmp_path, GW), "--forward-principals")
    with gateway_process(comp.url, tmp_path, args) as url:
        # the gateway may subscribe to /weather/#; its anonymous client may not
        assert refusal(url, "/weather/#", ANON) == "amqp:unauthorized-access"
        assert refusal(url, "/weather/#", ALICE) is None
        got: list[str] = []
        sub = Subscriber(url, "/weather/public/#", link_name="anon-edge", heartbeat_interval=0.2,
                         on_publication=lambda p: got.append(p.topic),
                         security=client_security(ANON)).start()
        try:
            assert sub.connected.wait(20), comp.log_text()[-2000:]
            assert publish_as(comp.url, ALICE, "/weather/public/x", 3,
                              source="feed.pub") == [None] * 3
            assert wait_for(lambda: len(got) >= 3, 20), got
            assert sub.error is None
        finally:
            sub.stop()
    assert "principal=anonymous" in comp.log_text()


def test_without_a_policy_a_configured_queue_is_only_for_whom_it_names(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    comp = component(*serve_args(tmp_path, ALICE, BOB),
                     "--subscription", "closed=/#;gold",
                     "--subscription", "open=/#;gold;*",
                     "--subscription", "alices=/#;gold;alice@*")
    cases = [  # principal, queue, refusal
        (ANON, "closed", "amqp:not-found"),
        (ANON, "open", None),
        (ANON, "alices", "amqp:not-found"),
    ]
    if MISSING is None:
        cases += [
            (ALICE, "closed", "amqp:not-found"),  # the same answer as a queue nobody has
            (ALICE, "alices", None),
            (BOB, "alices", "amqp:not-found"),
            (BOB, "open", None),
        ]
    for principal, queue, expected in cases:
        assert refusal(comp.url, f"/subscriptions/{queue}", principal) == expected, (
            principal, queue)
    assert refusal(comp.url, "/subscriptions/none-such", ANON) == "amqp:not-found"


def test_a_topic_lists_the_readable_subscriptions_to_whoever_may_list_it(
    holes: tuple[ComponentProcess, int, Path],
) -> None:
    _, port, _ = holes
    assert rest(port, ALICE)("POST", "/subscriptions",
                             {"id": "a-wind", "topic": "/weather/wind/#"})[0] == 201
    reader, alice = rest(port, READER), rest(port, ALICE)
    assert alice("PUT", "/topics/%2Fweather%2Fwind%2FLEMD", {})[0] == 201
    assert reader("GET", "/topics")[0] == 200
    assert reader("GET", "/subscriptions")[0] == 403  # it may read no subscription
    status, info = reader("GET", "/topics/%2Fweather%2Fwind%2FLEMD")
    assert status == 200, info
    assert info["subscriptions"] == []
    status, info = alice("GET", "/topics/%2Fweather%2Fwind%2FLEMD")
    assert (status, info["subscriptions"]) == (200, ["a-wind", "public-all"])


class _Requests(MessagingHandler):
    """Sends ``messages`` on one requests link as ``principal``; records each delivery's
    outcome (``accepted``, or the rejecting condition); pre-settled ones have none."""

    def __init__(self, url: str, principal: str, messages: list[Any],
                 settled: bool = False) -> None:
        super().__init__(auto_settle=True)
        self.url, self.principal, self.messages = url, principal, messages
        self.settled = settled
        self.expected = 0 if settled else len(messages)
        self.outcomes: list[str] = []

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(1.0 if self.settled else 15, self)
        self.conn = event.container.connect(self.url, reconnect=False,
                                            **amqp_identity(self.principal))
        event.container.create_sender(self.conn, CONTROL_ADDRESS,
                                      options=AtMostOnce() if self.settled else None)

    def on_sendable(self, event: Any) -> None:
        while self.messages and event.sender.credit:
            event.sender.send(self.messages.pop(0))

    def _outcome(self, event: Any, outcome: str) -> None:
        self.outcomes.append(outcome)
        if len(self.outcomes) == self.expected:
            self.timer.cancel()
            event.connection.close()

    def on_accepted(self, event: Any) -> None:
        self._outcome(event, "accepted")

    def on_rejected(self, event: Any) -> None:
        cond = event.delivery.remote.condition
        self._outcome(event, cond.name if cond else "rejected")

    def on_timer_task(self, event: Any) -> None:
        self.conn.close()

    def run(self) -> list[str]:
        Container(self).run()
        return self.outcomes


def _naming(request: Any, link: str) -> Any:
    message = encode(request)
    message.properties = {**(message.properties or {}), PROP_LINK: link}
    message.reply_to = f"$link/{link}"
    message.id = f"r-{uuid.uuid4().hex}"
    return message


@needs_scram
def test_requests_naming_anothers_link_are_answered_as_for_a_link_nobody_has(
    holes: tuple[ComponentProcess, int, Path],
) -> None:
    """bob's GAP-REQUEST and SOURCE-GAP-REQUEST naming alice's link get the answer a link
    nobody has gets; his ACKs naming it are ignored (they would move her window); his
    CAPABILITIES names only what he may see; alice's link goes on untouched."""
    comp, _, _ = holes
    assert publish_as(comp.url, SPY, "/weather/secret/x", 2, "/weather/secret/#",
                      source="feed.secret") == [None] * 2
    outcome = attach(comp.url, "/weather/#", ALICE, "alice-link",
                     properties={PROP_ACK: True})
    assert isinstance(outcome, tuple), outcome
    receiver, conn = outcome
    try:
        epoch = dict(receiver.link.remote_properties or {})[symbol("seqrepair-epoch")]
        answers = {link: _Requests(comp.url, BOB, [
            _naming(GapRequest(1, 5), link),
            _naming(SourceGapRequest(after={"feed.secret": 0}), link),
        ]).run() for link in ("alice-link", "nobody-link")}
        assert answers["alice-link"] == ["amqp:not-found"] * 2
        assert answers["alice-link"] == answers["nobody-link"]
        _Requests(comp.url, BOB, [encode(Ack("alice-link", str(epoch), n, taken={
            "feed.secret": n})) for n in range(1, 4)], settled=True).run()
        assert publish_as(comp.url, ALICE, "/weather/wind/LEMD", 3,
                          source="feed.wind") == [None] * 3
        assert _topics_seen(receiver, 3) == ["/weather/wind/LEMD"] * 3
        assert _detached(receiver, 0.3) is None
        bob = query_capabilities(comp.url, security=client_security(BOB))
        assert set(bob.source_bits) == {"feed.wind"}
    finally:
        conn.close()
    assert comp.stop_counters()["acks_ignored"] == 3


def _start(redis_url: str, folder: Path, listen: FreePort,
           *args: str | FreePort) -> ComponentProcess:
    folder.mkdir()
    return ComponentProcess(redis_url, folder, *args, listen=listen)


def test_insecure_lets_a_non_loopback_listener_start(redis_url: str, tmp_path: Path) -> None:
    refused = _start(redis_url, tmp_path / "refused", FreePort("0.0.0.0:{}"))
    with pytest.raises(RuntimeError):
        refused.start()
    assert "refused unless --insecure" in refused.log_text()
    listen = FreePort("0.0.0.0:{}")
    comp = _start(redis_url, tmp_path / "insecure", listen, "--insecure").start()
    try:  # it listens on every address: loopback among them
        caps = query_capabilities(f"127.0.0.1:{listen.number}", timeout=10)
        assert caps.link_bits > 0
    finally:
        comp.stop()


def test_a_non_loopback_rest_api_without_authentication_or_tls_is_refused(
    redis_url: str, tmp_path: Path,
) -> None:
    rest_port = FreePort("0.0.0.0:{}")
    (tmp_path / "token").write_text("s3cret\n")
    cases: list[tuple[tuple[str | FreePort, ...], str]] = [  # options, what the refusal says
        (("--rest", rest_port), "allows anonymous access"),
        (("--rest", rest_port, "--rest-token-file", str(tmp_path / "token")), "has no TLS"),
    ]
    for n, (args, says) in enumerate(cases):
        comp = _start(redis_url, tmp_path / f"c{n}", FreePort(), *args)
        with pytest.raises(RuntimeError):
            comp.start()
        assert "refused unless --insecure" in comp.log_text()
        assert says in comp.log_text()
    comp = _start(redis_url, tmp_path / "insecure", FreePort(),
                  "--rest", rest_port, "--insecure").start()
    try:
        assert Rest(rest_port.number)("GET", "/topics")[0] == 200
    finally:
        comp.stop()


@needs_scram
def test_after_a_restart_a_journaled_source_is_shown_to_whom_may_see_it_and_replayed(
    holes: tuple[ComponentProcess, int, Path],
) -> None:
    """A source that published before the component restarted is no unknown one to a
    principal that may see it (it would miss its replay), and stays hidden from another."""
    comp, _, _ = holes
    assert publish_as(comp.url, ALICE, "/weather/wind/LEMD", 5, source="feed.wind") == [None] * 5
    assert publish_as(comp.url, SPY, "/weather/secret/x", 3, "/weather/secret/#",
                      source="feed.secret") == [None] * 3
    comp.kill()
    comp.start()
    conn = BlockingConnection(comp.url, timeout=10, **amqp_identity(BOB))
    try:
        receiver = conn.create_receiver("/weather/#", name="bob-after", credit=100)
        props = {str(k): v for k, v in dict(receiver.link.remote_properties or {}).items()}
        assert set(props["seqrepair-start-after"]) == {"feed.wind"}
        sender = conn.create_sender("$seqrepair")
        request = encode(SourceGapRequest(after={"feed.wind": 2, "feed.secret": 0},
                                          request_id=3))
        request.reply_to = "$link/bob-after"
        request.id = "after-restart"
        sender.send(request)
        frames = _received(receiver, SETTLE, until=_answered)
        replayed = [(f.source, f.source_seq) for f in frames if isinstance(f, Publication)]
        assert replayed == [("feed.wind", 3), ("feed.wind", 4), ("feed.wind", 5)]
        complete = [f for f in frames if isinstance(f, ReplayComplete)]
        assert [dict(f.through) for f in complete] == [{"feed.wind": 5, "feed.secret": 0}]
    finally:
        conn.close()


@needs_scram
def test_a_source_whose_known_topics_are_hidden_still_replays_what_the_caller_may_see(
    holes: tuple[ComponentProcess, int, Path],
) -> None:
    """A source the component knows only by a topic bob may not see (after a restart: its
    latest journaled publication's) still replays to bob the publications of it he may see,
    when his request names it: it is no unknown source to him (authz.reveal_named_sources).
    Without the reveal he was answered as for an unknown source and never got them."""
    comp, _, _ = holes
    journal = Journal.from_url(comp.redis_url)
    try:
        journal.register_source("feed.mixed", 16)
        journal.append([Publication("/weather/wind/LEMD", "feed.mixed", n, fields={"n": n})
                        for n in (1, 2, 3)], 16)
        journal.append([Publication("/weather/secret/x", "feed.mixed", n, fields={"n": n})
                        for n in (4, 5)], 16)
        journal.register_source("feed.hidden", 16)
        journal.append([Publication("/weather/secret/y", "feed.hidden", n, fields={"n": n})
                        for n in (1, 2)], 16)
    finally:
        journal.close()
    comp.kill()
    comp.start()
    conn = BlockingConnection(comp.url, timeout=10, **amqp_identity(BOB))
    try:
        receiver = conn.create_receiver("/weather/#", name="bob-mixed", credit=100)
        props = {str(k): v for k, v in dict(receiver.link.remote_properties or {}).items()}
        assert "feed.mixed" not in props["seqrepair-start-after"]  # known by a secret topic
        sender = conn.create_sender("$seqrepair")
        for request_id, after in ((5, 1), (6, 0)):  # the second is answered from memory
            request = encode(SourceGapRequest(after={"feed.mixed": after},
                                              request_id=request_id))
            request.reply_to = "$link/bob-mixed"
            request.id = f"mixed-{request_id}"
            sender.send(request)
            frames = _received(receiver, SETTLE, until=_answered)
            replayed = [(f.topic, f.source_seq) for f in frames if isinstance(f, Publication)]
            assert replayed == [("/weather/wind/LEMD", n) for n in range(after + 1, 4)]
        # a source of nothing bob may see, named, is still answered as an unknown one
        for request_id in (7, 8):  # the second from the range remembered as unseen
            request = encode(SourceGapRequest(after={"feed.hidden": 0}, request_id=request_id))
            request.reply_to = "$link/bob-mixed"
            request.id = f"mixed-{request_id}"
            sender.send(request)
            frames = _received(receiver, SETTLE, until=_answered)
            assert not [f for f in frames if isinstance(f, Publication)]
            complete = [dict(f.through) for f in frames if isinstance(f, ReplayComplete)]
            assert complete == [{"feed.hidden": 0}]
    finally:
        conn.close()
