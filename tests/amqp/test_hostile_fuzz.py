"""A hostile client fuzzes every address while an honest pair runs (issue 22 §4).

Real processes: a redis-server, ``seqrepair serve``, an honest ``seqrepair publish`` journaling
an 8-bit source (``feed.honest``, the narrowest space makes a moved unwrapping show soonest) and
an honest ``seqrepair subscribe`` of its topics. Meanwhile a second, raw proton connection
attaches subscriber links with link properties of any kind and sends
what hypothesis draws: random message types and properties of any type (huge numbers, lists,
maps, binary), bad bodies, mutated honest ``PUBLICATIONS`` (fields flipped, entries dropped,
``count`` wrong), bytes flipped in an encoded message, GAP-REQUEST / SOURCE-GAP-REQUEST / ACK
naming the honest subscriber's link (with its ``reply-to``, or response annotations), to
``$seqrepair``, to topic addresses and the anonymous target, to ``/subscriptions/x`` and
``$link/...``.

What must hold: every hostile delivery is settled (the component answers), a link frame sent to
``$seqrepair`` is refused ``amqp:not-implemented``, a ``PUBLICATIONS`` whose ``count`` is wrong
is refused; the honest subscriber gets every honest publication exactly once, in order; the
component is still up and serving afterwards (a second honest run goes through), no hostile
message made it fail internally, and the sources it reports are only sources the journal holds.

Sources are not authenticated: a peer may publish under any source name, and a valid next
number under the honest source's name would be journaled as that source's (the honest
publisher would then be refused its own number). That is impersonation, not a disturbance of
state by a refused message, so the hostile peer uses other source names on publishing links;
on ``$seqrepair`` it uses the honest source's name freely.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import ConnectionException, Delivery, Message, symbol, ulong
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached, SendException

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, _env, wait_for
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

HONEST = "feed.honest"
IMPOSTOR = "hostile.impostor"
SUB_LINK = "honest-sub"
FIRST_RUN, SECOND_RUN = 1500, 100
TYPES = ["PUBLICATION", "PUBLICATIONS", "HEARTBEAT", "GAP-REQUEST", "SOURCE-GAP-REQUEST",
         "CAPABILITIES", "ACK", "GAP-ERROR", "REPLAY-COMPLETE", "SUBSCRIPTION", "NOPE", ""]
LINK_FRAMES = {"PUBLICATION", "PUBLICATIONS", "HEARTBEAT"}
PROPS = ["source", "source_seq", "source_bits", "topic", "ptype", "link_seq", "count", "link",
         "link_from", "link_to", "request_id", "link_through", "link_epoch", "retransmit",
         "timestamp", "permtoken"]
ADDRESSES = ["$seqrepair", "/load/a", "/load/#", None, "/subscriptions/x", "$link/honest-sub"]
"""Where the hostile peer sends (None: the anonymous target). Its publications that are valid
go to ``/load/...`` topics, which the honest subscriber (of ``/honest/#``) does not see: it stops
after a count of deliveries."""

huge = st.sampled_from([ulong(2**64 - 1), ulong(2**63), -(2**63), 2**63 - 1, 0, -1])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**64 - 1).map(ulong), huge, st.floats(allow_nan=True), st.text(max_size=12),
    st.binary(max_size=12), st.sampled_from([HONEST, IMPOSTOR, "/load/a", "/",
                                             "/a/#", "update", "image"]).map(str),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=10)


def honest_like(source: str, first: int, n: int) -> Message:
    """A PUBLICATIONS as the client ``Publisher`` sends it: positional entries, 8-bit numbers."""
    entries = [["update", time.time(), source, ulong((first + i - 1) % 255 + 1), 8,
                "/load/a", {"n": first + i}, None] for i in range(n)]
    return Message(properties={"message-type": "PUBLICATIONS", "count": ulong(n)},
                   body=entries)


@st.composite
def random_messages(draw: st.DrawFn) -> tuple[str, Message]:
    props: dict[str, Any] = {"message-type": draw(st.sampled_from(TYPES) | st.text(max_size=8))}
    for key in draw(st.lists(st.sampled_from(PROPS), max_size=6, unique=True)):
        props[key] = draw(values)
    return "random", Message(properties=props, body=draw(values))


@st.composite
def mutated_batches(draw: st.DrawFn) -> tuple[str, Message]:
    n = draw(st.integers(1, 5))
    message = honest_like(draw(st.sampled_from([HONEST, IMPOSTOR])), draw(st.integers(1, 600)), n)
    kind = draw(st.sampled_from(["count", "element", "drop", "property", "type"]))
    if kind == "count":
        message.properties["count"] = draw(st.integers(0, 2**64 - 1).filter(
            lambda c: c != n).map(ulong) | st.sampled_from([-1, "2", True, 2.0]))
    elif kind == "element":
        entry = draw(st.sampled_from(message.body))
        entry[draw(st.integers(0, 7))] = draw(values)
    elif kind == "drop":
        entry = draw(st.sampled_from(message.body))
        del entry[draw(st.integers(0, 7))]
    elif kind == "property":
        message.properties[draw(st.sampled_from(PROPS))] = draw(values)
    else:
        message.properties["message-type"] = draw(st.sampled_from(TYPES))
    return "mutated-" + kind, message


@st.composite
def other_links(draw: st.DrawFn) -> tuple[str, Message]:
    """Requests and ACKs naming the honest subscriber's link."""
    kind = draw(st.sampled_from(["GAP-REQUEST", "SOURCE-GAP-REQUEST", "ACK"]))
    props: dict[str, Any] = {"message-type": kind, "link": SUB_LINK}
    body: Any = None
    if kind == "GAP-REQUEST":
        props["link_from"] = ulong(draw(st.integers(1, 65535)))
        props["link_to"] = ulong(draw(st.integers(1, 65535)))
    elif kind == "SOURCE-GAP-REQUEST":
        body = {HONEST: ulong(draw(st.integers(0, 2**64 - 1)))}
    else:
        props["link_epoch"] = draw(st.text(max_size=8) | st.sampled_from(["0", "1"]))
        props["link_through"] = ulong(draw(st.integers(0, 65535)))
        body = {HONEST: ulong(draw(st.integers(0, 2**64 - 1)))}
    message = Message(properties=props, body=body, id=draw(st.integers(1, 10**6)),
                      reply_to=draw(st.sampled_from([f"$link/{SUB_LINK}", None, "$link/x"])))
    if draw(st.booleans()):
        message.instructions = {
            symbol("x-opt-response-link-target-address"): draw(st.text(max_size=8)),
            symbol("x-opt-response-address-cookie"): draw(st.binary(max_size=8)),
        }
    return "other-link-" + kind, message


@st.composite
def honest_numbers(draw: st.DrawFn) -> tuple[str, Message]:
    """A PUBLICATION of the honest source, any 8-bit number: sent to ``$seqrepair`` (always),
    where the component used to unwrap it, moving the source up to half its space each time."""
    return "honest-number", Message(
        properties={"message-type": "PUBLICATION", "source": HONEST,
                    "source_seq": ulong(draw(st.integers(1, 255))), "source_bits": 8,
                    "topic": "/honest/a"},
        body={"n": -1})


messages = st.one_of(random_messages(), mutated_batches(), other_links(), honest_numbers())
hostile_sends = st.lists(
    st.tuples(st.sampled_from(ADDRESSES), messages, st.none() | st.integers(0, 10**6)),
    min_size=1, max_size=6,
)
LINK_PROPS = ["seqrepair-batch", "seqrepair-resume", "seqrepair-epoch", "seqrepair-start-after",
              "seqrepair-permtokens", "seqrepair-ack", "other"]
hostile_attaches = st.lists(st.tuples(
    st.sampled_from(["/load/#", "/honest/#", "/subscriptions/x", "$reply", "$link/x", "/bad[",
                     "", "$seqrepair"]) | st.text(max_size=8),
    st.dictionaries(st.sampled_from(LINK_PROPS).map(symbol), values, max_size=4),
), max_size=2)
"""Subscriber attaches with link properties of any kind (under names of their own: a link name
is its identity for resumption, and any connection that names a link takes it over, by design:
see the module's documentation)."""


def impostor_only(message: Message) -> Message:
    """``message`` with the honest source's name replaced (see the module's documentation)."""
    def swap(value: Any) -> Any:
        if isinstance(value, str) and value == HONEST:
            return IMPOSTOR
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {swap(k): swap(v) for k, v in value.items()}
        return value
    message.properties = swap(message.properties)
    message.body = swap(message.body)
    return message


class _Props(LinkOption):
    def __init__(self, props: dict[Any, Any]) -> None:
        self.props = props

    def apply(self, link: Any) -> None:
        link.properties = self.props


class Hostile:
    """The raw proton connection; every send waits for the component's outcome."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: BlockingConnection | None = None
        self.senders: dict[str | None, Any] = {}
        self.outcomes: dict[str, int] = {}
        self.tags = 0

    def _sender(self, address: str | None) -> Any:
        if self.conn is None:
            self.conn = BlockingConnection(self.url, timeout=20, container_id="hostile-fuzzer")
            self.senders = {}
        if address not in self.senders:  # a new name each time: a refused one may linger
            self.tags += 1
            self.senders[address] = self.conn.create_sender(address, name=f"h{self.tags}")
        return self.senders[address]

    def send(self, address: str | None, message: Message, flip: int | None) -> Any:
        """The delivery, settled; None when it was not sent (proton cannot encode what was
        drawn) or the link or connection was refused or closed."""
        if address is None:
            message.address = "/load/" + str(flip or 0)
        try:
            encoded = message.encode()
        except Exception:  # an integer or type proton cannot put on the wire: not sent
            self.outcomes["unencodable"] = self.outcomes.get("unencodable", 0) + 1
            return None
        try:
            sender = self._sender(address)
            if flip is None:
                return sender.send(message, error_states=[])
            raw = bytearray(encoded)
            raw[flip % len(raw)] ^= 1 + flip % 255
            self.tags += 1
            link = sender.link
            delivery = link.delivery(str(self.tags).encode())
            link.send(bytes(raw))
            link.advance()
            assert self.conn is not None
            self.conn.wait(lambda: bool(delivery.settled or delivery.remote_state),
                           msg="a flipped message's outcome")
            return delivery
        except (LinkDetached, ConnectionException, SendException) as exc:
            self.outcomes[type(exc).__name__] = self.outcomes.get(type(exc).__name__, 0) + 1
            self.senders.pop(address, None)
            if not isinstance(exc, LinkDetached):
                self.close()
            return None

    def attach(self, source: str, props: dict[Any, Any]) -> None:
        """A subscriber link with ``props`` (taken or refused), detached again at once."""
        try:
            self._sender("$seqrepair")  # connected
            assert self.conn is not None
            self.tags += 1
            receiver = self.conn.create_receiver(source, name=f"h{self.tags}",
                                                 options=_Props(props), credit=0)
            receiver.close()
            self.outcomes["attached"] = self.outcomes.get("attached", 0) + 1
        except (LinkDetached, ConnectionException, SendException) as exc:
            self.outcomes["attach " + type(exc).__name__] = self.outcomes.get(
                "attach " + type(exc).__name__, 0) + 1
            if not isinstance(exc, LinkDetached):
                self.close()
        except Exception as exc:  # proton could not encode the properties drawn: not sent
            if "encode" not in repr(exc).lower() and not isinstance(exc, (TypeError, KeyError,
                                                                           OverflowError)):
                raise
            self.close()

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None


def cli(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "seqrepair.cli", *args], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def honest_lines(out: Path) -> list[int]:
    if not out.exists():
        return []
    numbers = []
    for line in out.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("source") == HONEST:
                numbers.append(record["source_seq"])
    return numbers


@contextlib.contextmanager
def honest_system(tmp_path: Path) -> Iterator[tuple[ComponentProcess, str, Path]]:
    with EmbeddedRedis(appendfsync="always") as redis:
        comp = ComponentProcess(redis.url, tmp_path, "--heartbeat", "0.2").start()
        try:
            yield comp, redis.url, tmp_path / "honest.jsonl"
        finally:
            comp.stop()


@pytest.mark.parametrize("via", ["component", "gateway"])
def test_a_hostile_client_disturbs_no_honest_pair(via: str, tmp_path: Path) -> None:
    """``via``: where the hostile peer connects, and the honest second run publishes (the
    honest subscriber and first run always go to the component)."""
    with honest_system(tmp_path) as (comp, redis_url, out), contextlib.ExitStack() as front:
        url = comp.url if via == "component" else front.enter_context(
            gateway_process(comp.url, tmp_path))
        ready = tmp_path / "sub-ready"
        subscriber = cli("subscribe", "--url", comp.url, "--address", "/honest/#",
                         "--link-name", SUB_LINK, "--heartbeat", "0.2", "--output", str(out),
                         "--ready-file", str(ready), "--count", str(FIRST_RUN + SECOND_RUN))
        publishers: list[subprocess.Popen[str]] = []
        hostile = Hostile(url)
        refused_frames: list[Any] = []
        try:
            assert wait_for(lambda: ready.exists() or subscriber.poll() is not None, 60)
            publishers.append(cli("publish", "--url", comp.url, "--source", HONEST, "--bits", "8",
                                  "--redis-url", redis_url, "--count", str(FIRST_RUN),
                                  "--rate", "200", "--batch", "16", "--topics",
                                  "/honest/a,/honest/b", "--timeout", "60"))

            @settings(max_examples=500, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(hostile_sends, hostile_attaches)
            def fuzz(sends: list[tuple[str | None, tuple[str, Message], int | None]],
                     attaches: list[tuple[str, dict[Any, Any]]]) -> None:
                for source, props in attaches:
                    hostile.attach(source, props)
                for address, (kind, message), flip in sends:
                    if kind == "honest-number":
                        address = "$seqrepair"
                    if address != "$seqrepair":
                        message = impostor_only(message)
                    delivery = hostile.send(address, message, flip)
                    if delivery is None:
                        continue
                    state = delivery.remote_state
                    hostile.outcomes[str(state)] = hostile.outcomes.get(str(state), 0) + 1
                    assert delivery.settled or delivery.remote_state in (
                        Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED,
                        Delivery.MODIFIED), (kind, address)
                    mtype = (message.properties or {}).get("message-type")
                    if address == "$seqrepair" and flip is None and mtype in LINK_FRAMES:
                        cond = delivery.remote.condition
                        refused_frames.append((delivery.remote_state,
                                               None if cond is None else cond.name))
                    if kind == "mutated-count" and flip is None and address != "$seqrepair":
                        assert delivery.remote_state == Delivery.REJECTED, message.properties

            started = time.monotonic()
            fuzz()
            hostile.close()
            print("hostile outcomes", hostile.outcomes, "fuzzed for",
                  round(time.monotonic() - started, 1), "s; the first honest run",
                  "still going" if publishers[0].poll() is None else "done")
            first = publishers[0]
            first.wait(90)
            assert first.returncode == 0, first.stderr.read()[-3000:]
            publishers.append(cli("publish", "--url", url, "--source", HONEST, "--bits", "8",
                                  "--redis-url", redis_url, "--count", str(SECOND_RUN),
                                  "--rate", "0", "--topics", "/honest/b", "--timeout", "30"))
            second = publishers[1]
            second.wait(60)
            assert second.returncode == 0, second.stderr.read()[-3000:]
            total = FIRST_RUN + SECOND_RUN
            subscriber.wait(60)  # it stops after `total` deliveries
            assert subscriber.returncode == 0, subscriber.stderr.read()[-3000:]
            caps = query_capabilities(comp.url, timeout=10)
            alive = comp.proc is not None and comp.proc.poll() is None
        finally:
            hostile.close()
            for proc in [*publishers, subscriber]:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
        with Journal.from_url(redis_url) as journal:
            held = journal.high_water(HONEST)
            unheld = [s for s in caps.source_bits if journal.high_water(s) == 0]
    log = comp.log_text()
    assert alive
    assert held == total
    assert honest_lines(out) == list(range(1, total + 1))  # once each, in order
    assert refused_frames
    assert set(refused_frames) == {(Delivery.REJECTED, "amqp:not-implemented")}
    assert unheld == []  # no source the component reports came from a refused message
    assert "message failed" not in log, log[log.find("message failed") - 200:][:3000]
    assert "attach failed" not in log, log[log.find("attach failed") - 200:][:3000]
    if via == "gateway":  # it answered every message itself or with the component's outcome
        gateway_log = (tmp_path / "gateway.log").read_text()
        assert "Traceback" not in gateway_log, gateway_log[-3000:]
