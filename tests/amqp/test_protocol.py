"""The component against plain proton clients that know nothing of seqrepair, and bad input.

One component process serves every test in this module; each test checks that it still serves
(a fresh plain round trip) after the abuse.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from proton import Delivery, Message, symbol, ulong
from proton.handlers import MessagingHandler
from proton.reactor import Container

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.wire.errors import ConnectionFailedError
from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.core.messages import Publication
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, free_port

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentProcess]:
    tmp = tmp_path_factory.mktemp("proto")
    with EmbeddedRedis() as redis:
        comp = ComponentProcess(redis.url, Path(tmp), "--heartbeat", "0.2",
                                "--request-rate", "20", "--request-burst", "20",
                                "--max-gap-range", "1000").start()
        yield comp
        comp.stop()


class Session(MessagingHandler):
    """A scripted plain-proton client: attach, send, collect, stop when ``done`` says so."""

    def __init__(self, url: str, *, receive: str | None = None, send: str | None = None,
                 messages: list[Message] = (), want: int = 0, reply_link: str | None = None,
                 accept_incoming: bool = False,
                 until: Callable[[list[Message]], bool] | None = None) -> None:
        super().__init__(prefetch=50)
        self.url = url
        self.receive_from = receive
        self.send_to = send
        self.to_send = list(messages)
        self.want = want
        self.until = until
        self.reply_link = reply_link
        self.received: list[Message] = []
        self.incoming: list[tuple[str, Message]] = []
        self.arrived_on: list[str] = []  # the name of the link each message came on
        self.outcomes: list[tuple[Any, Any]] = []
        self.link_errors: list[Any] = []
        self.conn: Any = None
        self.attached = threading.Event()  # the component answered the receiver's attach

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(15, self)
        self.conn = event.container.connect(self.url, reconnect=False)
        if self.receive_from:
            event.container.create_receiver(self.conn, self.receive_from, name=self.reply_link)
        if self.send_to:
            event.container.create_sender(self.conn, self.send_to)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None:
            self.attached.set()

    def on_timer_task(self, event: Any) -> None:
        self._close()

    def _close(self) -> None:
        self.conn.close()
        self.timer.cancel()

    def on_sendable(self, event: Any) -> None:
        while self.to_send and event.sender.credit:
            event.sender.send(self.to_send.pop(0))

    def on_settled(self, event: Any) -> None:
        cond = event.delivery.remote.condition
        self.outcomes.append((event.delivery.remote_state, cond.name if cond else None))
        self._check()

    def on_message(self, event: Any) -> None:
        address = event.receiver.source.address if event.receiver else None
        self.received.append(event.message)
        self.incoming.append((address, event.message))
        self.arrived_on.append(event.link.name)
        self._check()

    def on_link_error(self, event: Any) -> None:
        cond = event.link.remote_condition
        self.link_errors.append(cond.name if cond else None)
        self._close()

    def _check(self) -> None:
        sent_all = not self.to_send and len(self.outcomes) >= self._n_sent()
        if sent_all and len(self.received) >= self.want and (
            self.until is None or self.until(self.received)
        ):
            self._close()

    def _n_sent(self) -> int:
        return self._total

    def run(self) -> Session:
        self._total = len(self.to_send)
        Container(self).run()
        return self


def plain_publication(topic: str, body: Any) -> Message:
    return Message(body=body, address=topic)


def served(url: str) -> bool:
    """A plain publish is still accepted."""
    s = Session(url, send="/health/check", messages=[Message(body={"ok": True})]).run()
    return s.outcomes == [(Delivery.ACCEPTED, None)]


def test_plain_client_publishes_and_reads_publications_and_heartbeats(
    server: ComponentProcess,
) -> None:
    def heartbeat_after_the_publications(received: list[Message]) -> bool:
        kinds = [m.properties["message-type"] for m in received]
        return kinds.count("PUBLICATION") == 3 and kinds[-1] == "HEARTBEAT"

    reader = Session(server.url, receive="/plain/#", until=heartbeat_after_the_publications)
    t = threading.Thread(target=reader.run)
    t.start()
    assert reader.attached.wait(15)  # what is published before its attach is not its own
    writer = Session(server.url, send="/plain/x",
                     messages=[Message(body={"speed": i, "gust": None}) for i in range(3)]).run()
    t.join(20)
    assert writer.outcomes == [(Delivery.ACCEPTED, None)] * 3
    pubs = [m for m in reader.received if m.properties["message-type"] == "PUBLICATION"]
    assert [m.body for m in pubs] == [{"speed": i, "gust": None} for i in range(3)]
    assert all(m.properties["topic"] == "/plain/x" for m in pubs)
    # the link went idle after the publications: a heartbeat (0.2 s here) took the next number
    heartbeat = reader.received[-1]
    assert heartbeat.properties["message-type"] == "HEARTBEAT"
    assert isinstance(heartbeat.properties["timestamp"], int | float)
    link_seqs = [int(m.properties["link_seq"]) for m in reader.received]
    assert link_seqs == list(range(1, len(link_seqs) + 1))


@pytest.mark.parametrize(
    ("props", "body", "condition"),
    [
        ({"message-type": "PUBLICATION", "source": "x", "source_seq": ulong(9),
          "source_bits": 3}, {}, "amqp:invalid-field"),
        ({"message-type": "PUBLICATION", "source": "x", "source_seq": ulong(1),
          "ptype": "explode"}, {}, "amqp:decode-error"),
        ({"message-type": "PUBLICATION"}, [1, 2, 3], "amqp:decode-error"),
        ({"message-type": "PUBLICATION", "source": "x", "source_seq": ulong(1),
          "topic": "/bad/a b"}, {}, "amqp:decode-error"),  # not a topic of the topic tree
        ({"message-type": "PUBLICATION", "source": "x", "source_seq": ulong(1),
          "topic": "bad"}, {}, "amqp:decode-error"),
        ({"message-type": "WHAT"}, None, "amqp:not-implemented"),
        ({"message-type": "GAP-REQUEST", "link_from": ulong(1), "link_to": ulong(2)}, None,
         "amqp:not-implemented"),
    ],
)
def test_malformed_publications_are_rejected_and_the_server_keeps_serving(
    server: ComponentProcess, props: dict, body: Any, condition: str
) -> None:
    msg = Message(body=body, properties=props)
    s = Session(server.url, send="/bad/topic",
                messages=[msg, Message(body={"after": "bad"})]).run()
    assert s.outcomes[0] == (Delivery.REJECTED, condition)
    assert s.outcomes[1] == (Delivery.ACCEPTED, None)  # same link, still served
    assert served(server.url)


class RawBytes:
    """A transfer of arbitrary bytes (what a broken or hostile peer may send)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def send(self, sender: Any, tag: str | None = None) -> Any:
        delivery = sender.delivery(tag or sender.delivery_tag())
        sender.stream(self.data)
        sender.advance()
        return delivery


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff",  # not a section
        b"\x00\x53\x77\xa1\x05ab",  # a string cut short
        b"\x00\x53\x77\xa1\x02\xff\xfe",  # a string that is not UTF-8 (proton raises)
        b"\x00\x53\x77\x40\xff",  # bytes after the last section
        b"\x00\x53\x77\xc0\x03\x01\xff\xff",  # an unknown type code inside a list
    ],
)
def test_bytes_that_are_not_amqp_are_rejected_and_the_server_keeps_serving(
    server: ComponentProcess, data: bytes
) -> None:
    s = Session(server.url, send="/bad/raw",
                messages=[RawBytes(data), Message(body={"after": "bad"})]).run()  # type: ignore[list-item]
    assert s.outcomes[0] == (Delivery.REJECTED, "amqp:decode-error")
    assert s.outcomes[1] == (Delivery.ACCEPTED, None)
    assert served(server.url)


def test_topic_outside_the_link_address_is_rejected(server: ComponentProcess) -> None:
    msg = Message(body={}, properties={"message-type": "PUBLICATION", "topic": "/other/t",
                                       "source": "s", "source_seq": ulong(1)})
    s = Session(server.url, send="/mine/#", messages=[msg]).run()
    assert s.outcomes == [(Delivery.REJECTED, "amqp:decode-error")]


def test_every_topic_is_checked_on_a_link_that_has_seen_valid_ones(
    server: ComponentProcess,
) -> None:
    # the link remembers topics it has checked: that must never let another one through
    msgs = [Message(body={"i": 1}, address="/mine/a"), Message(body={"i": 2}, address="/other/t"),
            Message(body={"i": 3}, address="/mine/a"), Message(body={"i": 4}, address="/mine//x"),
            Message(body={"i": 5}, address="/mine/*"), Message(body={"i": 6}, address="/mine/b")]
    s = Session(server.url, send="/mine/#", messages=msgs).run()
    # (settlements may arrive out of order) the three valid ones accepted, numbered without
    # holes: a rejected one must not have consumed a number the journal then misses
    assert sorted(s.outcomes, key=str) == sorted(
        [(Delivery.ACCEPTED, None)] * 3
        # outside; an empty word and a wildcard in a topic: no publication carries such a topic
        + [(Delivery.REJECTED, "amqp:decode-error")] * 3,
        key=str,
    )


@pytest.mark.parametrize(("receive", "send"), [("/subscriptions/nope", None), (None, "$nope"),
                                               ("/bad//pattern", None)])
def test_unknown_addresses_are_refused(server: ComponentProcess, receive: str | None,
                                       send: str | None) -> None:
    s = Session(server.url, receive=receive, send=send,
                messages=[Message(body={})] if send else []).run()
    assert s.link_errors == ["amqp:not-found"]
    assert served(server.url)


def _request(kind: str, link: str, **props: Any) -> Message:
    return Message(properties={"message-type": kind, "link": link, **props},
                   reply_to=f"$link/{link}", id=uuid.uuid4().hex)


class Requester(Session):
    """Attaches a data link, then sends requests about it on $seqrepair once it is open."""

    def __init__(self, url: str, requests: list[Message], want: int,
                 annotations: dict | None = None) -> None:
        self.name = "req-" + uuid.uuid4().hex[:8]
        super().__init__(url, receive="/req/#", want=want, reply_link=self.name)
        self.requests = requests
        self.annotations = annotations

    def on_link_opened(self, event: Any) -> None:
        if event.link.is_receiver and event.link.name == self.name:
            sender = event.container.create_sender(self.conn, "$seqrepair")
            self._sender = sender
        elif event.link.is_sender and event.link.target.address == "$seqrepair":
            caps = event.link.remote_target.capabilities
            caps.rewind()
            caps.next()
            found = caps.get_object()
            self.remote_caps = list(getattr(found, "elements", None) or [found])
            for msg in self.requests:
                msg.properties = {**msg.properties, "link": self.name}
                msg.reply_to = f"$link/{self.name}"
                if self.annotations:
                    msg.instructions = self.annotations
                event.sender.send(msg) if hasattr(event, "sender") and event.sender else \
                    event.link.send(msg)
            self._total = len(self.requests)


def test_capabilities_and_absurd_gap_range(server: ComponentProcess) -> None:
    reqs = [_request("CAPABILITIES", "x"),
            _request("GAP-REQUEST", "x", link_from=ulong(1), link_to=ulong(60_000))]
    s = Requester(server.url, reqs, want=2)
    s._total = 2
    s.run()
    answers = {m.properties["message-type"]: m for m in s.received
               if m.properties["message-type"] in ("CAPABILITIES", "GAP-ERROR")}
    caps = answers["CAPABILITIES"].body
    assert caps["link_bits"] == 16
    assert caps["max_gap_range"] == 1000
    assert "image" in caps["publish_types"]
    assert caps["heartbeat_interval"] == 0.2
    assert caps["limits"]["max-pending"] == 20_000
    assert caps["limits"]["request-rate"] == 20.0
    err = answers["GAP-ERROR"]
    assert err.properties["reason"] == "refused"
    assert err.correlation_id == reqs[1].id
    assert symbol("response-address-supported") in s.remote_caps


def test_out_of_space_request_is_rejected(server: ComponentProcess) -> None:
    reqs = [_request("GAP-REQUEST", "x", link_from=ulong(1), link_to=ulong(70_000))]
    s = Requester(server.url, reqs, want=0)
    s._total = 1
    s.run()
    assert s.outcomes == [(Delivery.REJECTED, "amqp:invalid-field")]
    assert served(server.url)


def test_request_flood_is_limited_and_server_keeps_serving(server: ComponentProcess) -> None:
    reqs = [_request("CAPABILITIES", "x") for _ in range(60)]
    s = Requester(server.url, reqs, want=0)
    s._total = 60
    s.run()
    states = [c for _, c in s.outcomes]
    assert states.count("amqp:resource-limit-exceeded") >= 20
    assert states.count(None) >= 10
    assert served(server.url)


def test_response_annotations_route_the_answer_to_the_target_with_the_cookie(
    server: ComponentProcess,
) -> None:
    cookie = b"\x01gateway-cookie"
    req = _request("CAPABILITIES", "x")
    s = Requester(server.url, [req], want=1, annotations={
        symbol("response-link-target-address"): "gw/responses",
        symbol("response-address-cookie"): cookie,
    })
    s._total = 1
    s.run()
    [(_address, answer)] = [(a, m) for a, m in s.incoming
                           if m.properties["message-type"] == "CAPABILITIES"]
    assert answer.instructions[symbol("address-cookie")] == cookie
    assert answer.correlation_id == req.id


COOKIE = symbol("response-address-cookie")
TARGET = symbol("response-link-target-address")


def _annotated(kind: str, annotations: dict[Any, Any], **props: Any) -> Message:
    message = _request(kind, "x", **props)
    message.instructions = annotations
    return message


def test_a_cookie_without_a_target_is_echoed_on_the_answer_to_reply_to(
    server: ComponentProcess,
) -> None:
    req = _annotated("CAPABILITIES", {COOKIE: b"B-cookie"})
    s = Requester(server.url, [req], want=1)
    s.run()
    [(link, answer)] = [(n, m) for n, m in zip(s.arrived_on, s.received, strict=True)
                        if m.properties["message-type"] == "CAPABILITIES"]
    assert link == s.name  # the data link reply-to names
    assert answer.instructions[symbol("address-cookie")] == b"B-cookie"


def test_a_target_without_a_cookie_gets_the_answer_to_a_gap_request(
    server: ComponentProcess,
) -> None:
    req = _annotated("GAP-REQUEST", {TARGET: "gw/plain"}, link_from=ulong(1),
                     link_to=ulong(60_000))
    s = Requester(server.url, [req], want=1)
    s.run()
    assert s.outcomes == [(Delivery.ACCEPTED, None)]
    [(link, answer)] = list(zip(s.arrived_on, s.received, strict=True))
    assert link != s.name  # the component's link to gw/plain
    assert answer.properties["reason"] == "refused"  # a range beyond the component's bound
    assert not answer.instructions


def test_answers_to_one_target_share_one_link_each_with_its_own_cookie(
    server: ComponentProcess,
) -> None:
    reqs = [_annotated("CAPABILITIES", {TARGET: "gw/many", COOKIE: b"c%d" % i})
            for i in range(10)]
    s = Requester(server.url, reqs, want=10)
    s.run()
    assert len(set(s.arrived_on)) == 1
    by_id = {m.correlation_id: m.instructions[symbol("address-cookie")] for m in s.received}
    assert by_id == {req.id: b"c%d" % i for i, req in enumerate(reqs)}


def test_response_targets_per_connection_are_bounded(server: ComponentProcess) -> None:
    reqs = [_annotated("CAPABILITIES", {TARGET: f"gw/t{i}"}) for i in range(18)]
    s = Requester(server.url, reqs, want=16)
    s.run()
    conditions = [c for _, c in s.outcomes]
    assert conditions.count(None) == 16
    assert conditions.count("amqp:resource-limit-exceeded") == 2
    assert len(set(s.arrived_on)) == 16
    assert served(server.url)


def test_a_batch_of_more_publications_than_the_component_takes_is_rejected(
    server: ComponentProcess,
) -> None:
    pubs = [Publication("/big/a", "feed.big", n, "update", {"n": n}) for n in range(1, 4098)]
    s = Session(server.url, send="/big/a", messages=[encode_frames(pubs, 32)]).run()
    assert s.outcomes == [(Delivery.REJECTED, "amqp:link:message-size-exceeded")]
    s = Session(server.url, send="/big/a", messages=[encode_frames(pubs[:4096], 32)]).run()
    assert s.outcomes == [(Delivery.ACCEPTED, None)]
    assert served(server.url)


def test_a_source_query_before_subscribing_answers_what_the_component_offers(
    server: ComponentProcess,
) -> None:
    caps = query_capabilities(server.url, timeout=10)
    assert caps.link_bits == 16
    assert caps.heartbeat_interval == 0.2
    assert caps.max_gap_range == 1000
    assert set(caps.publish_types) >= {"update", "correction", "image", "drop", "snapshot"}
    assert caps.response_annotations
    # the command line prints the same answer for people and scripts
    out = subprocess.run(
        [sys.executable, "-m", "seqrepair.cli", "capabilities", "--url", server.url],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert json.loads(out) == json.loads(json.dumps(attrs.asdict(caps)))
    assert served(server.url)


def test_a_source_query_to_nobody_is_a_clear_connection_error() -> None:
    with pytest.raises(ConnectionFailedError, match=r"127\.0\.0\.1"):
        query_capabilities(f"127.0.0.1:{free_port()}", timeout=5)


class Greeting(MessagingHandler):
    """Opens a connection, notes what the component's open frame says, and closes it."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.offered: list[Any] = []
        self.idle_timeout: float | None = None

    def on_start(self, event: Any) -> None:
        event.container.connect(self.url, reconnect=False)

    def on_connection_remote_open(self, event: Any) -> None:
        self.offered = list(event.connection.remote_offered_capabilities or [])
        self.idle_timeout = event.transport.remote_idle_timeout
        event.connection.close()


def test_every_connection_is_offered_response_annotations_and_an_idle_timeout(
    server: ComponentProcess,
) -> None:
    greeting = Greeting(server.url)
    Container(greeting).run()
    assert symbol("RESPONSE_ANNOTATIONS_V1_0") in greeting.offered
    # `serve --idle-timeout 10` (the default): a peer silent that long is dropped; proton
    # advertises half of it, the interval a peer's empty frames must keep to
    assert greeting.idle_timeout == 5.0


def test_a_response_annotation_on_a_publish_link_is_refused_as_not_implemented(
    server: ComponentProcess,
) -> None:
    # respann §2.3: only the control link offers response-address-supported
    message = Message(body={"speed": 1})
    message.instructions = {COOKIE: b"where-to"}
    s = Session(server.url, send="/plain/annotated", messages=[message]).run()
    assert s.link_errors == ["amqp:not-implemented"]
    assert served(server.url)
