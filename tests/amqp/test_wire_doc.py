"""WIRE.md read as a client author would read it, held against the code and a real component.

The first half parses WIRE.md's tables (message types, application properties with their AMQP
types, bodies, attach properties, errors, GAP-ERROR reasons) and checks them against the codec's
constants and what it writes: nothing documented that the code does not do, nothing the code
does that is not documented. The second half builds messages from the documented shapes only,
sends them to a ``seqrepair serve`` process over loopback and checks that every answer has the
documented properties, with the documented types.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Delivery, Message, Timeout, char, symbol, ubyte, ulong
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

from seqrepair.amqp.wire import errors as errors_module
from seqrepair.amqp.wire import vocabulary
from seqrepair.amqp.wire.codec import Decoder, encode, encode_gap_requests
from seqrepair.amqp.wire.framing import encode_frame, encode_frames, tail_probe
from seqrepair.amqp.wire.technical import (
    Ack,
    Capabilities,
    CapabilitiesRequest,
    MessageType,
    SubscriptionState,
)
from seqrepair.core.errors import InvalidTopicPatternError
from seqrepair.core.messages import (
    GAP_ERROR_REASONS,
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
)
from seqrepair.core.snapshot import ImageComplete, ImageFrame, ImageRequest, image_publication
from seqrepair.core.topics import TopicPattern, validate_topic
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ROOT, ComponentProcess

WIRE = (ROOT / "seqrepair" / "amqp" / "WIRE.md").read_text()

# --------------------------------------------------------------------------------------------
# reading the document


def tables(text: str) -> list[tuple[tuple[str, ...], list[list[str]]]]:
    """Every markdown table of ``text``: its header cells and its rows of cells."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.fullmatch(r"\|( *-+ *\|)+", lines[i + 1].strip()):
            header = tuple(_cells(lines[i]))
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append((header, rows))
        else:
            i += 1
    return out


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table(header: tuple[str, ...], after: str | None = None) -> list[list[str]]:
    """The rows of the one table with ``header`` (the first one after the text ``after``)."""
    if after is not None:
        assert after in WIRE, f"WIRE.md no longer says {after!r} before its table {header}"
    text = WIRE if after is None else WIRE[WIRE.index(after):]
    found = [rows for head, rows in tables(text) if head == header]
    assert found, f"WIRE.md has no table {header}"
    if after is None:
        assert len(found) == 1, f"WIRE.md has {len(found)} tables {header}"
    return found[0]


def code(cell: str) -> str:
    """The first `code` span of a cell."""
    match = re.search(r"`([^`]+)`", cell)
    assert match, f"no `name` in {cell!r}"
    return match.group(1)


MESSAGE_TYPES = {code(row[0]) for row in table(("message-type", "direction", "purpose"))}
PROPERTIES = {
    (code(row[0]), code(row[1])): (row[2], row[3])
    for row in table(("message-type", "property", "AMQP type", "presence", "meaning"))
}
BODIES = {code(row[0]): row[1] for row in table(("message-type", "body (amqp-value)"))}
ATTACH = {code(row[0]): row[1]
          for row in table(("link property", "AMQP type", "sent by", "meaning"))}
KEYS = ("key", "AMQP type", "meaning")
REPLAY_COMPLETE_BODY = {code(r[0]): r[1] for r in table(KEYS, after="`REPLAY-COMPLETE` body")}
REPLAY_STARTED_BODY = {code(r[0]): r[1] for r in table(KEYS, after="`REPLAY-STARTED` body")}
CAPABILITIES_BODY = {code(r[0]): r[1] for r in table(KEYS, after="`CAPABILITIES` answer body")}
SUBSCRIPTION_BODY = {code(r[0]): r[1] for r in table(KEYS, after="`SUBSCRIPTION` body")}
CONDITIONS = {code(row[0]) for row in table(("condition", "when"))
              if "amqp:" in row[0] or "seqrepair:" in row[0]}
REASONS = {code(row[0]) for row in table(("reason", "answers", "the subscriber"))}


# --------------------------------------------------------------------------------------------
# AMQP types


def amqp_type(value: Any) -> str:
    """The AMQP type proton encodes ``value`` as (and decodes it back to)."""
    for cls, name in ((bool, "boolean"), (ulong, "ulong"), (ubyte, "ubyte"), (symbol, "symbol"),
                      (str, "string"), (int, "long"), (float, "double"), (bytes, "binary"),
                      (dict, "map"), (list, "list")):
        if isinstance(value, cls):
            return name
    if value is None:
        return "null"
    raise AssertionError(f"no AMQP type for {value!r}")


def conforms(value: Any, spec: str) -> bool:
    """Whether ``value`` is of the documented type ``spec`` (``ulong``, ``double or null``,
    ``map string -> ulong``, ``list of string``)."""
    for alternative in spec.split(" or "):
        alternative = alternative.strip()
        if alternative.startswith("map "):
            key, _, item = alternative[4:].partition(" -> ")
            if isinstance(value, dict) and all(
                amqp_type(k) == key.strip() and amqp_type(v) == item.strip()
                for k, v in value.items()
            ):
                return True
        elif alternative.startswith("list of "):
            item = alternative[len("list of "):]
            if isinstance(value, list) and all(amqp_type(v) == item for v in value):
                return True
        elif amqp_type(value) == alternative:
            return True
    return False


def documented_type(cell: str) -> str:
    """The type of a table cell: its text up to a parenthesis or a comment."""
    return cell.split("(")[0].strip()


def test_the_type_reader_of_this_test_tells_types_apart() -> None:
    assert conforms(ulong(3), "ulong")
    assert not conforms(3, "ulong")
    assert conforms(True, "boolean")
    assert not conforms(1, "boolean")
    assert conforms(None, "double or null")
    assert not conforms("1", "double or null")
    assert conforms({"a": ulong(1)}, "map string -> ulong")
    assert not conforms({"a": 1}, "map string -> ulong")
    assert conforms(["x"], "list of string")
    assert not conforms([1], "list of string")


# --------------------------------------------------------------------------------------------
# the document against the code


def _props(message: Any) -> dict[str, Any]:
    return dict(message.properties or {})


PUB = Publication("/w/x", "src", 5, fields={"f": 1}, link_seq=9, permtoken="tok",
                  timestamp=1.5, retransmit=True)
ODD = Publication("/w/x", "src", 6, fields={"c": char("x")}, link_seq=11)
"""A field of a type only proton's codec writes: its batch takes the map form."""
AFTER = SourceGapRequest(after={"src": 4}, request_id=7, link_through=3)


def written() -> dict[str, list[Any]]:
    """Per message-type, messages the code writes, with every optional part it can set."""
    requests = [encode(GapRequest(1, 2)), encode_gap_requests([GapRequest(1, 2), GapRequest(5, 6)]),
                encode(AFTER)]
    snapshot = encode(ImageRequest(topics=["/w/x"], patterns=["/w/#"], request_id=7))
    requests.append(snapshot)
    for message in requests:  # what the client adds to every request (client._request)
        message.properties = {**message.properties, vocabulary.PROP_LINK: "data-link"}
    return {
        "PUBLICATION": [encode_frame(PUB), encode_frame(PUB.with_link(None, retransmit=False)),
                        tail_probe(PUB, "e")],
        "PUBLICATIONS": [encode_frames([PUB, PUB.with_link(10)]),
                         encode_frames([ODD, Heartbeat(12, 3.0, retransmit=True)])],
        "HEARTBEAT": [encode_frame(Heartbeat(3, 2.0, retransmit=True)),
                      tail_probe(Heartbeat(3, 2.0, retransmit=True), "e")],
        "GAP-REQUEST": requests[:2],
        "SOURCE-GAP-REQUEST": requests[2:3],
        "GAP-ERROR": [encode(GapError("context-lost", GapRequest(1, 2), "gone")),
                      encode(GapError("trimmed", AFTER, "cut", {"src": 3}))],
        "REPLAY-COMPLETE": [encode(ReplayComplete({"src": 9}, AFTER, more=True))],
        "REPLAY-STARTED": [encode(ReplayStarted(AFTER, {"src": 9}, continued=True, more=True))],
        "CAPABILITIES": [encode(CapabilitiesRequest()), encode(CAPS)],
        "SUBSCRIPTION": [encode(SubscriptionState("ACTIVE", "/w/#", "l", "/w/#", epoch="e"))],
        "ACK": [encode(Ack("data-link", "e", 7, {"src": 9})), encode(Ack("data-link", "e"))],
        "SNAPSHOT": [snapshot],
        "IMAGE": [encode(ImageFrame(image_publication("/w/x", "src", 9, "image", {"f": 1}, 2.5),
                                    7))],
        "IMAGE-COMPLETE": [encode(ImageComplete({"src": 9}, 7, ("/w/y",)))],
    }


CAPS = Capabilities(link_bits=16, source_bits={"src": 32}, default_source_bits=32,
                    heartbeat_interval=1.0, max_gap_range=10, retention=None,
                    publish_types=("update",), max_batch=4, retention_count=5,
                    max_publish_batch=6)


def test_every_message_type_the_codec_knows_is_documented_and_nothing_else() -> None:
    known = {t.value for t in MessageType}
    assert known == MESSAGE_TYPES
    assert set(BODIES) == known
    assert {mtype for mtype, _ in PROPERTIES} <= known


def test_every_property_the_code_writes_is_documented_with_its_type_and_nothing_else() -> None:
    seen: dict[tuple[str, str], set[str]] = {}
    for mtype, messages in written().items():
        for message in messages:
            props = _props(message)
            assert props.pop("message-type") == mtype
            for name, value in props.items():
                seen.setdefault((mtype, str(name)), set()).add(amqp_type(value))
    assert set(seen) == set(PROPERTIES), "documented properties differ from the written ones"
    for key, types in seen.items():
        spec = documented_type(PROPERTIES[key][0])
        assert types == {spec}, f"{key}: written as {types}, documented as {spec}"


def _read_back(message: Any) -> list[Any]:
    """``message`` as bytes on the wire, read by proton and decoded by the codec."""
    wire = Message()
    wire.decode(message.encode())
    return Decoder(link_bits=16).decode(wire)


def test_everything_documented_that_the_code_writes_it_reads_back() -> None:
    w = written()
    assert _read_back(w["PUBLICATION"][0]) == [PUB]
    assert _read_back(w["PUBLICATIONS"][0]) == [PUB, PUB.with_link(10)]
    assert _read_back(w["HEARTBEAT"][0]) == [Heartbeat(3, 2.0, retransmit=True)]
    # a tail probe reads as the frame it repeats (a reader that does not know the mark)
    assert _read_back(w["PUBLICATION"][2]) == [PUB]
    assert _read_back(w["HEARTBEAT"][1]) == [Heartbeat(3, 2.0, retransmit=True)]
    assert _read_back(w["GAP-REQUEST"][1]) == [GapRequest(1, 2), GapRequest(5, 6)]
    [asked] = _read_back(w["SOURCE-GAP-REQUEST"][0])
    assert (asked.after, asked.request_id, asked.link_through) == ({"src": 4}, 7, 3)
    [trimmed] = _read_back(w["GAP-ERROR"][1])
    assert (trimmed.reason, trimmed.trimmed_through, trimmed.request.request_id) == (
        "trimmed", {"src": 3}, 7)
    [complete] = _read_back(w["REPLAY-COMPLETE"][0])
    assert (complete.through, complete.more, complete.request.request_id) == ({"src": 9}, True, 7)
    [started] = _read_back(w["REPLAY-STARTED"][0])
    assert (started.request.after, started.request.request_id, started.through,
            started.continued, started.more) == ({"src": 4}, 7, {"src": 9}, True, True)
    assert _read_back(w["CAPABILITIES"][1]) == [CAPS]
    [state] = _read_back(w["SUBSCRIPTION"][0])
    assert (state.status, state.epoch) == ("ACTIVE", "e")


def test_the_documented_body_keys_and_types_are_what_the_code_writes() -> None:
    for message, documented in (
        (written()["REPLAY-COMPLETE"][0], REPLAY_COMPLETE_BODY),
        (written()["REPLAY-STARTED"][0], REPLAY_STARTED_BODY),
        (written()["CAPABILITIES"][1], CAPABILITIES_BODY),
        (written()["SUBSCRIPTION"][0], SUBSCRIPTION_BODY),
    ):
        body = message.body
        assert set(body) == set(documented)
        for key, value in body.items():
            assert conforms(value, documented_type(documented[key])), (key, value)


def test_the_documented_attach_properties_are_the_ones_the_component_reads_and_writes() -> None:
    named = {str(value) for name, value in vars(vocabulary).items()
             if name.startswith("PROP_") and isinstance(value, symbol)}
    assert named == set(ATTACH)


SENDING_PARTS = ("wire", "component", "gateway", "relay")
"""The parts that send conditions; the clients' (``client/``, the commands, the demo) name
conditions they read, not ones they send."""


def _raisable_conditions() -> set[str]:
    """Every AMQP condition the component (or a gateway) can send: the string literals its
    modules name (error classes' ``condition``, detach conditions)."""
    conditions = {"amqp:invalid-field"}  # Component._reject's for a core error without one
    for part in SENDING_PARTS:
        for path in (ROOT / "seqrepair" / "amqp" / part).glob("*.py"):
            conditions.update(re.findall(r"\"((?:amqp|seqrepair):[a-z:-]+)\"",
                                         path.read_text()))
    return conditions


def test_every_documented_condition_is_one_the_code_sends_and_every_one_it_sends_is_documented(
) -> None:
    assert _raisable_conditions() == CONDITIONS


def test_the_documented_gap_error_reasons_are_the_codes() -> None:
    assert set(GAP_ERROR_REASONS) == REASONS


# --------------------------------------------------------------------------------------------
# the document against a real component

LINK_BITS = 5  # numbers 1..31: half the space is 15, reached in a few frames


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentProcess]:
    tmp = tmp_path_factory.mktemp("wire")
    with EmbeddedRedis() as redis:
        comp = ComponentProcess(redis.url, Path(tmp), "--link-bits", str(LINK_BITS),
                                "--heartbeat", "0.5", "--max-gap-range", "1000").start()
        yield comp
        comp.stop()


class _Properties(LinkOption):
    def __init__(self, properties: dict[symbol, Any]) -> None:
        self.properties = properties

    def apply(self, link: Any) -> None:
        link.properties = self.properties


class Client:
    """A client written from WIRE.md: plain proton, nothing of seqrepair's client."""

    def __init__(self, url: str, source: str | None = None, **properties: Any) -> None:
        self.conn = BlockingConnection(url, timeout=15)
        self.name = "wire-" + uuid.uuid4().hex[:8]
        self.data: BlockingReceiver = self.conn.create_receiver(
            source or "$reply", credit=500, name=self.name,
            options=_Properties({symbol(k): v for k, v in properties.items()}),
        )
        self.control: BlockingSender = self.conn.create_sender("$seqrepair")
        self.ids = iter(range(1, 1 << 30))

    def request(self, mtype: str, body: Any = None, *, reply_to: str | None = None,
                **props: Any) -> tuple[Any, Any, Message]:
        """Send a request as WIRE.md describes it: the delivery's (outcome, condition) and
        the message."""
        message = Message(
            id=ulong(next(self.ids)), reply_to=reply_to or f"$link/{self.name}", body=body,
            properties={"message-type": mtype, "link": self.name, **props},
        )
        delivery = self.control.link.send(message)
        self.conn.wait(lambda: delivery.remote_state != 0, timeout=15)
        condition = delivery.remote.condition
        found = (delivery.remote_state, None if condition is None else
                 (condition.name, dict(condition.info or {})))
        delivery.settle()
        return found[0], found[1], message

    def receive_until(self, done: Callable[[Message], bool], timeout: float = 10.0
                      ) -> list[Message]:
        """Messages received up to and including the first that ``done`` says ends it."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.data.receive(timeout=max(0.1, deadline - time.monotonic()))
            except Timeout:
                raise AssertionError(f"nothing ended it within {timeout}s: {got}") from None
            got.append(message)
            if done(message):
                return got

    def publish(self, address: str, messages: list[Message]) -> list[Any]:
        sender = self.conn.create_sender(address)
        outcomes = []
        for message in messages:
            delivery = sender.send(message, error_states=[])
            outcomes.append(delivery.remote_state)
        sender.close()
        return outcomes

    def close(self) -> None:
        self.conn.close()


def mtype(message: Message) -> str:
    return str((message.properties or {}).get("message-type"))


def check_properties(message: Message) -> dict[str, Any]:
    """Every application property of ``message`` is documented for its type, with its type;
    every documented "sent" or "required" one is there."""
    props = dict(message.properties or {})
    kind = props.pop("message-type")
    assert amqp_type(kind) == "string"
    for name, value in props.items():
        assert (kind, name) in PROPERTIES, f"{kind} carries undocumented {name}"
        spec = documented_type(PROPERTIES[(kind, name)][0])
        assert conforms(value, spec), f"{kind}.{name} = {value!r} is not {spec}"
    for (documented_kind, name), (_, presence) in PROPERTIES.items():
        if documented_kind == kind and presence.startswith(("sent", "required")):
            assert name in props, f"{kind} lacks {name}, documented as {presence}"
    return props


def publication(source: str, seq: int, topic: str) -> Message:
    """A numbered publication, built from WIRE.md's PUBLICATION table."""
    return Message(
        properties={"message-type": "PUBLICATION", "source": source, "source_seq": ulong(seq),
                    "source_bits": 32, "topic": topic, "ptype": "update",
                    "timestamp": time.time()},
        body={"n": seq, "gone": None},
    )


def test_a_source_query_is_answered_with_the_documented_capabilities(
    server: ComponentProcess,
) -> None:
    client = Client(server.url)  # a reply-only link: source $reply
    try:
        outcome, condition, asked = client.request("CAPABILITIES")
        assert (outcome, condition) == (Delivery.ACCEPTED, None)
        [answer] = client.receive_until(lambda m: mtype(m) == "CAPABILITIES")
        check_properties(answer)
        assert answer.correlation_id == asked.id
        body = answer.body
        assert set(body) == set(CAPABILITIES_BODY)
        for key, value in body.items():
            assert conforms(value, documented_type(CAPABILITIES_BODY[key])), (key, value)
        assert body["link_bits"] == LINK_BITS
    finally:
        client.close()


def test_attach_publications_resends_and_heartbeats_are_as_documented(
    server: ComponentProcess,
) -> None:
    client = Client(server.url, "/wire/one/#")
    try:
        reply = {str(k): v for k, v in dict(client.data.link.remote_properties or {}).items()}
        assert set(reply) == {"seqrepair-epoch", "seqrepair-start-after", "seqrepair-durable",
                              "seqrepair-link-bits", "seqrepair-heartbeat",
                              "seqrepair-max-gap-range"}  # no window: this client does not ack
        for name, value in reply.items():
            assert conforms(value, documented_type(ATTACH[name])), (name, value)
        assert client.publish("/wire/one/a", [publication("wire.one", n, "/wire/one/a")
                                              for n in (1, 2, 3)]) == [Delivery.ACCEPTED] * 3
        got = client.receive_until(
            lambda m: mtype(m) == "PUBLICATION" and m.properties["source_seq"] == 3
        )
        pubs = [m for m in got if mtype(m) == "PUBLICATION"]
        for message in got:
            check_properties(message)
        assert [m.body for m in pubs] == [{"n": n, "gone": None} for n in (1, 2, 3)]
        assert all(m.properties["source_bits"] == 64 for m in pubs)
        assert not any(m.correlation_id for m in got)  # the live stream carries none

        # GAP-REQUEST: the frames again, each marked, with the request's message-id
        first, last = pubs[0].properties["link_seq"], pubs[-1].properties["link_seq"]
        outcome, _, asked = client.request("GAP-REQUEST", link_from=ulong(first),
                                           link_to=ulong(last))
        assert outcome == Delivery.ACCEPTED
        again = client.receive_until(lambda m: m.properties.get("link_seq") == last
                                     and m.correlation_id == asked.id)
        resent = [m for m in again if m.correlation_id == asked.id]
        assert [m.properties["source_seq"] for m in resent] == [1, 2, 3]
        for message in resent:
            assert check_properties(message)["retransmit"] is True

        # a heartbeat resent: marked too, with its original timestamp
        [beat] = [m for m in client.receive_until(lambda m: mtype(m) == "HEARTBEAT")
                  if mtype(m) == "HEARTBEAT"]
        check_properties(beat)
        assert "retransmit" not in beat.properties
        number = beat.properties["link_seq"]
        _, _, asked = client.request("GAP-REQUEST", link_from=number, link_to=number)
        [beat_again] = [m for m in client.receive_until(lambda m: m.correlation_id == asked.id)
                        if m.correlation_id == asked.id]
        assert mtype(beat_again) == "HEARTBEAT"
        assert check_properties(beat_again)["retransmit"] is True
        assert beat_again.properties["timestamp"] == beat.properties["timestamp"]
        assert beat_again.properties["link_seq"] == number
    finally:
        client.close()


def _wire(number: int) -> int:
    top = (1 << LINK_BITS) - 1
    return (number - 1) % top + 1


def test_a_gap_request_more_than_half_the_link_space_back_is_answered_context_lost(
    server: ComponentProcess,
) -> None:
    client = Client(server.url, "/wire/two/#")
    try:
        count = 24  # more than half of 31 frames, so the numbers wrap
        client.publish("/wire/two/a", [publication("wire.two", n, "/wire/two/a")
                                       for n in range(1, count + 1)])
        got = client.receive_until(lambda m: m.properties.get("source_seq") == count)
        newest = got[-1].properties["link_seq"]
        far = _wire(newest - 20)  # 20 behind: more than half (15), so it reads as 11 ahead
        outcome, _, asked = client.request("GAP-REQUEST", link_from=ulong(far),
                                           link_to=ulong(far))
        assert outcome == Delivery.ACCEPTED
        answer = [m for m in client.receive_until(lambda m: m.correlation_id == asked.id)
                  if m.correlation_id == asked.id]
        assert [mtype(m) for m in answer] == ["GAP-ERROR"]
        props = check_properties(answer[0])
        assert props["reason"] == "context-lost"
        assert (props["link_from"], props["link_to"]) == (far, far)
        assert answer[0].body is None

        # within half the space it is resent
        near = _wire(newest - 10)
        _, _, asked = client.request("GAP-REQUEST", link_from=ulong(near), link_to=ulong(near))
        [resent] = [m for m in client.receive_until(lambda m: m.correlation_id == asked.id)
                    if m.correlation_id == asked.id]
        assert resent.properties["link_seq"] == near
        assert resent.properties["retransmit"] is True
    finally:
        client.close()


def test_a_gap_request_body_must_start_with_its_property_range(
    server: ComponentProcess,
) -> None:
    client = Client(server.url, "/wire/three/#")
    try:
        client.publish("/wire/three/a", [publication("wire.three", n, "/wire/three/a")
                                         for n in (1, 2, 3)])
        got = client.receive_until(lambda m: m.properties.get("source_seq") == 3)
        numbers = [m.properties["link_seq"] for m in got if mtype(m) == "PUBLICATION"]
        a, b = numbers[0], numbers[2]
        outcome, condition, _ = client.request(
            "GAP-REQUEST", [[ulong(b), ulong(b)], [ulong(a), ulong(a)]],
            link_from=ulong(a), link_to=ulong(a),
        )
        assert outcome == Delivery.REJECTED
        name, info = condition
        assert name == "amqp:decode-error"
        assert info == {symbol("expected"): [ulong(a), ulong(a)],
                        symbol("got"): [ulong(b), ulong(b)]}
        assert all(isinstance(v, ulong) for v in info[symbol("expected")])

        # the same ranges with the first one in the properties: both answered, in order
        outcome, _, asked = client.request(
            "GAP-REQUEST", [[ulong(a), ulong(a)], [ulong(b), ulong(b)]],
            link_from=ulong(a), link_to=ulong(a),
        )
        assert outcome == Delivery.ACCEPTED
        resent = [m for m in client.receive_until(
            lambda m: m.correlation_id == asked.id and m.properties.get("link_seq") == b)
            if m.correlation_id == asked.id]
        assert [m.properties["link_seq"] for m in resent] == [a, b]
    finally:
        client.close()


def test_a_source_request_replays_the_sources_it_names_and_those_it_does_not(
    server: ComponentProcess,
) -> None:
    client = Client(server.url, "/wire/four/#")
    try:
        start = {str(k): v for k, v in
                 dict(client.data.link.remote_properties)[symbol("seqrepair-start-after")].items()}
        assert "wire.four.a" not in start  # born after the link started: from its first
        for source in ("wire.four.a", "wire.four.b"):
            client.publish("/wire/four/x", [publication(source, n, "/wire/four/x")
                                            for n in (1, 2, 3)])
        client.receive_until(lambda m: m.properties.get("source") == "wire.four.b"
                             and m.properties.get("source_seq") == 3)
        outcome, _, asked = client.request("SOURCE-GAP-REQUEST", {"wire.four.a": ulong(1)},
                                           request_id=ulong(7))
        assert outcome == Delivery.ACCEPTED
        answer = [m for m in client.receive_until(lambda m: mtype(m) == "REPLAY-COMPLETE")
                  if m.correlation_id == asked.id]
        replayed = [(m.properties["source"], m.properties["source_seq"])
                    for m in answer if mtype(m) == "PUBLICATION"]
        # the named source after its number, the other one (not named) from its start
        assert replayed == [("wire.four.a", 2), ("wire.four.a", 3),
                            ("wire.four.b", 1), ("wire.four.b", 2), ("wire.four.b", 3)]
        for message in answer:
            props = check_properties(message)
            if mtype(message) == "PUBLICATION":
                assert "link_seq" not in props
                assert props["retransmit"] is True
                assert "request_id" not in props
        complete = answer[-1]
        assert check_properties(complete)["request_id"] == 7
        assert set(complete.body) <= set(REPLAY_COMPLETE_BODY)
        for key, value in complete.body.items():
            assert conforms(value, documented_type(REPLAY_COMPLETE_BODY[key])), (key, value)
        assert complete.body["after"] == {"wire.four.a": 1}
        assert complete.body["through"] == {"wire.four.a": 3, "wire.four.b": 3}
        assert "more" not in complete.body
    finally:
        client.close()


def test_a_bad_reply_to_rejects_the_request_and_the_requests_link_goes_on(
    server: ComponentProcess,
) -> None:
    client = Client(server.url)
    try:
        outcome, condition, _ = client.request("CAPABILITIES", reply_to="$link/nobody-here")
        assert outcome == Delivery.REJECTED
        name, info = condition
        assert name == "amqp:not-found"
        assert info[symbol("got")] == "$link/nobody-here"
        assert all(amqp_type(v) in ("string", "null") for v in info.values())
        # the same link still carries requests (the errors table: rejected, not detached)
        outcome, _, asked = client.request("CAPABILITIES")
        assert outcome == Delivery.ACCEPTED
        [answer] = client.receive_until(lambda m: mtype(m) == "CAPABILITIES")
        assert answer.correlation_id == asked.id
    finally:
        client.close()


@pytest.mark.parametrize(
    ("mtype_", "props", "body", "condition", "expected", "got"),
    [
        ("GAP-REQUEST", {"link_from": ulong(1), "link_to": ulong(40)}, None,
         "amqp:invalid-field", [ulong(1), ulong(31)], ulong(40)),
        ("GAP-REQUEST", {"link_from": "1", "link_to": ulong(2)}, None,
         "amqp:decode-error", "int", "1"),
        ("NO-SUCH-TYPE", {}, None, "amqp:not-implemented", None, "NO-SUCH-TYPE"),
        ("SOURCE-GAP-REQUEST", {}, None, "amqp:decode-error", "map", None),
    ],
)
def test_a_bad_request_is_rejected_with_typed_info(
    server: ComponentProcess, mtype_: str, props: dict[str, Any], body: Any, condition: str,
    expected: Any, got: Any,
) -> None:
    client = Client(server.url, "/wire/five/#")
    try:
        outcome, found, _ = client.request(mtype_, body, **props)
        assert outcome == Delivery.REJECTED
        name, info = found
        assert name == condition
        assert set(info) == {symbol("expected"), symbol("got")}
        if expected is not None:
            assert info[symbol("expected")] == expected
            assert amqp_type(info[symbol("expected")]) == amqp_type(expected)
        assert info[symbol("got")] == got
        assert amqp_type(info[symbol("got")]) == amqp_type(got)
    finally:
        client.close()


def test_a_source_name_no_journal_can_hold_is_an_invalid_field(
    server: ComponentProcess,
) -> None:
    client = Client(server.url)
    try:
        sender = client.conn.create_sender("/wire/six")
        delivery = sender.link.send(publication("{six}", 1, "/wire/six"))
        client.conn.wait(lambda: delivery.remote_state != 0, timeout=15)
        assert delivery.remote_state == Delivery.REJECTED
        assert delivery.remote.condition.name == "amqp:invalid-field"
    finally:
        client.close()


def test_condition_info_values_are_typed_as_the_errors_section_says() -> None:
    """`info` values: a number is a ulong, a range a list, text a string, never repr text."""
    info = errors_module.condition_info((1, 31), 40)
    assert info == {symbol("expected"): [ulong(1), ulong(31)], symbol("got"): ulong(40)}
    assert isinstance(info[symbol("got")], ulong)
    info = errors_module.condition_info("int", {"a": b"x" * 300, "n": -2, "big": 1 << 70})
    got = info[symbol("got")]
    assert (info[symbol("expected")], got["a"], got["n"], got["big"]) == (
        "int", b"x" * 200, -2, str(1 << 70))
    assert len(errors_module.condition_info(None, list(range(40)))[symbol("got")]) == 16



# --------------------------------------------------------------------------------------------
# the topic grammar as WIRE.md writes it (ABNF), against the code


def _abnf() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """WIRE.md's ABNF of topics and patterns, transcribed rule by rule."""
    section = WIRE[WIRE.index("### Topics and topic patterns"):]
    grammar = section[section.index("```") + 3:]
    grammar = grammar[:grammar.index("```")]
    rules = {line.split("=")[0].strip() for line in grammar.splitlines() if "=" in line}
    assert rules == {"topic", "pattern", "word", "wordchar"}
    wordchar = r"[^/*#\s\x00-\x1f\x7f]"  # the wordchar rule's exclusions
    word = wordchar + "+"
    return re.compile(f"(?:/{word})+"), re.compile(rf"(?:/(?:{word}|\*|#))+")


ALPHABET = ["a", "B", "7", "é", "/", "*", "#", " ", "\t", "\x00", "\x1f", "\x7f", "\u2003",
            "\u00a0", ".", "-", "{"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET), max_size=8).map("".join))
def test_the_documented_topic_grammar_is_the_code_s(text: str) -> None:
    topic_rule, pattern_rule = _abnf()
    try:
        validate_topic(text)
        is_topic = True
    except InvalidTopicPatternError:
        is_topic = False
    try:
        TopicPattern(text)
        is_pattern = True
    except InvalidTopicPatternError:
        is_pattern = False
    assert is_topic == (topic_rule.fullmatch(text) is not None), text
    assert is_pattern == (pattern_rule.fullmatch(text) is not None), text
