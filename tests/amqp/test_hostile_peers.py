"""Another connection cannot disturb a publisher's source (issue 22 §4), on real processes.

A real redis-server, ``seqrepair serve`` and ``seqrepair publish --redis-url`` (a journaling
publisher of an 8- or 32-bit source); between two runs of the publisher a second, raw proton
connection sends three PUBLICATIONs of the same source to ``$seqrepair`` (each wire number a
quarter of the space ahead of the last: before the fix they moved the component's unwrapping
of that source, and the publisher's next run was refused ``amqp:precondition-failed``), and a
``PUBLICATIONS`` whose ``count`` disagrees with its entries to a topic address. Both are
refused with their conditions, the publisher's second run is accepted, the journal holds
exactly its publications and a subscriber gets them once, in order.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message, symbol, ulong
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ROOT, ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCE = "feed.honest"


def publish(url: str, redis_url: str, bits: int, count: int) -> tuple[int, str]:
    """``seqrepair publish`` of ``count`` generated publications; (exit code, output)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "seqrepair.cli", "publish", "--url", url, "--source", SOURCE,
         "--bits", str(bits), "--redis-url", redis_url, "--count", str(count), "--rate", "0",
         "--timeout", "20"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def outcome(sender: object, message: Message) -> tuple[object, str | None]:
    delivery = sender.send(message, error_states=[])  # type: ignore[attr-defined]
    cond = delivery.remote.condition
    return delivery.remote_state, None if cond is None else cond.name


def disposition(conn: BlockingConnection, link: Any, tag: bytes,
                data: bytes) -> tuple[object, str | None]:
    """Send ``data`` (encoded sections) as one transfer on ``link``; its disposition."""
    dlv = link.delivery(tag)
    link.send(data)
    link.advance()
    conn.wait(lambda: dlv.remote_state != 0, msg="no disposition")
    cond = dlv.remote.condition
    return dlv.remote_state, None if cond is None else cond.name


@dataclass
class HonestRound:
    """What :func:`honest_round` saw: the honest publisher's runs before and after the
    hostile connection (exit code, output), what the hostile part returned, what the
    subscriber got, the source numbers the journal holds, the stranger's high water and the
    component's log."""

    first: tuple[int, str]
    hostile: Any
    second: tuple[int, str]
    got: list[Publication]
    held: list[int]
    strangers: int
    log: str


def honest_round(redis_url: str, tmp_path: Path, bits: int,
                 hostile: Callable[[BlockingConnection], Any]) -> HonestRound:
    """A component and a subscriber of ``/load/#``; ``seqrepair publish`` of 5, then
    ``hostile`` on a second, raw connection, then 5 more; waits for 10 delivered (and a while
    for a duplicate or a stranger)."""
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2").start()
    got: list[Publication] = []
    try:
        with Subscriber(comp.url, "/load/#", on_publication=got.append,
                        heartbeat_interval=0.2, link_name="watcher") as sub:
            assert sub.connected.wait(20)
            time.sleep(0.3)
            first = publish(comp.url, redis_url, bits, 5)
            conn = BlockingConnection(comp.url, timeout=20)
            try:
                done = hostile(conn)
            finally:
                conn.close()
            second = publish(comp.url, redis_url, bits, 5)
            wait_for(lambda: len(got) >= 10, 30)
            time.sleep(0.5)  # a duplicate or a stranger would come now
        with Journal.from_url(redis_url) as journal:
            held = [p.source_seq for p in journal.read_range(SOURCE, 1, 100)]
            strangers = journal.high_water("stranger")
    finally:
        comp.stop()
    return HonestRound(first, done, second, got, held, strangers, comp.log_text())


@pytest.mark.parametrize("bits", [8, 32])
def test_publications_sent_to_seqrepair_by_another_connection_change_nothing(
    bits: int, redis_url: str, tmp_path: Path
) -> None:
    def hostile(conn: BlockingConnection) -> tuple[list[Any], tuple[object, str | None]]:
        control = conn.create_sender("$seqrepair")
        quarter = 1 << (bits - 2)
        refused = [
            outcome(control, Message(
                properties={"message-type": "PUBLICATION", "source": SOURCE,
                            "source_seq": ulong(5 + k * quarter), "source_bits": bits,
                            "topic": "/load/a"},
                body={"x": k}))
            for k in (1, 2, 3)
        ]
        topic = conn.create_sender("/load/a")
        entries = [{"source": "stranger", "source_seq": ulong(n), "source_bits": bits,
                    "topic": "/load/a", "fields": {"n": n}} for n in (1, 2, 3)]
        miscounted = outcome(topic, Message(
            properties={"message-type": "PUBLICATIONS", "count": ulong(2)},
            body=entries))
        return refused, miscounted

    seen = honest_round(redis_url, tmp_path, bits, hostile)
    refused, miscounted = seen.hostile
    log = seen.log[-3000:]
    assert seen.first[0] == 0, seen.first
    assert refused == [(Delivery.REJECTED, "amqp:not-implemented")] * 3
    assert miscounted == (Delivery.REJECTED, "amqp:decode-error")
    assert seen.second[0] == 0, (seen.second, log)
    assert seen.held == list(range(1, 11))
    assert seen.strangers == 0
    assert [(p.source, p.source_seq) for p in seen.got] == [(SOURCE, n) for n in range(1, 11)]


class _Props(LinkOption):
    def __init__(self, props: dict[symbol, Any]) -> None:
        self.props = props

    def apply(self, link: Any) -> None:
        link.properties = self.props


BAD_ATTACHES = [
    {symbol("seqrepair-permtokens"): 5},  # not iterable: a TypeError ended the component
    {symbol("seqrepair-permtokens"): [1, 2]},
    {symbol("seqrepair-start-after"): {5: "x"}},
    {symbol("seqrepair-resume"): True, symbol("seqrepair-start-after"): {"a": -1}},
    {symbol("seqrepair-resume"): True, symbol("seqrepair-epoch"): [1]},
    {symbol("seqrepair-batch"): "yes", symbol("seqrepair-ack"): 7},
]


@pytest.mark.parametrize("via", ["component", "gateway"])
def test_subscriber_attaches_with_bad_properties_refuse_that_link_only(
    via: str, redis_url: str, tmp_path: Path
) -> None:
    """Link properties of any type: the attach is refused (or taken), the component and a
    gateway in front of it serve on."""
    from .test_gateway_publish import gateway_process

    comp = ComponentProcess(redis_url, tmp_path).start()
    outcomes = []
    try:
        with contextlib.ExitStack() as front:
            url = comp.url if via == "component" else front.enter_context(
                gateway_process(comp.url, tmp_path))
            for n, props in enumerate(BAD_ATTACHES):
                conn = BlockingConnection(url, timeout=20)
                try:
                    conn.create_receiver("/load/#", name=f"bad-{n}", options=_Props(props))
                    outcomes.append("attached")
                except LinkDetached as exc:
                    outcomes.append(str(exc.condition))
                finally:
                    conn.close()
            alive = comp.proc is not None and comp.proc.poll() is None
            caps = query_capabilities(url if via == "component" else comp.url, timeout=10)
    finally:
        comp.stop()
    assert alive, comp.log_text()[-3000:]
    assert caps.link_bits == 16
    assert outcomes[:2] == ["amqp:invalid-field"] * 2, outcomes
    assert "attach failed" not in comp.log_text()  # no internal error either


def _frame(body: bytes) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, 0, 0) + body


def _list(*items: bytes) -> bytes:
    payload = b"".join(items)
    return b"\xc0" + bytes([len(payload) + 1, len(items)]) + payload


def _str8(raw: bytes) -> bytes:
    return b"\xa1" + bytes([len(raw)]) + raw


NOT_UTF8 = b"\xff\xfe-x"
OPEN_BAD_CONTAINER = _frame(b"\x00\x53\x10" + _list(_str8(NOT_UTF8)))
BAD_LINK_NAME = (
    _frame(b"\x00\x53\x10" + _list(_str8(b"raw-peer")))
    + _frame(b"\x00\x53\x11" + _list(b"\x40", b"\x43", b"\x70\x00\x00\x01\x00",
                                       b"\x70\x00\x00\x01\x00"))
    + _frame(b"\x00\x53\x12" + _list(_str8(NOT_UTF8), b"\x43", b"\x42", b"\x40", b"\x40",
                                      b"\x40", b"\x00\x53\x29" + _list(_str8(b"/load/a"))))
)


@pytest.mark.parametrize("via", ["component", "gateway"])
def test_strings_a_peer_sends_that_are_not_utf8_end_its_connection_only(
    via: str, redis_url: str, tmp_path: Path
) -> None:
    """A container id or a link name that is not UTF-8 (proton decodes them when they are
    first read: the exception ended the component, or the gateway, for every peer)."""
    from .test_gateway_publish import gateway_process

    comp = ComponentProcess(redis_url, tmp_path).start()
    try:
        with contextlib.ExitStack() as front:
            url = comp.url if via == "component" else front.enter_context(
                gateway_process(comp.url, tmp_path))
            host, port = url.split(":")
            for frames in (OPEN_BAD_CONTAINER, BAD_LINK_NAME):
                with socket.create_connection((host, int(port)), timeout=10) as peer:
                    peer.sendall(b"AMQP\x00\x01\x00\x00" + frames)
                    peer.settimeout(5)
                    with contextlib.suppress(OSError):
                        while peer.recv(4096):  # until the other side closes
                            pass
            caps = query_capabilities(url if via == "component" else comp.url, timeout=10)
            done = publish(url, redis_url, 32, 3)  # an honest publisher is served on
            alive = comp.proc is not None and comp.proc.poll() is None
    finally:
        comp.stop()
    assert alive, comp.log_text()[-3000:]
    assert caps.link_bits == 16
    assert done[0] == 0, done[1][-2000:]
    log = comp.log_text() if via == "component" else (tmp_path / "gateway.log").read_text()
    assert "event failed" in log  # contained, not unnoticed


def test_a_publishing_links_malformed_bodies_are_decode_errors_beside_a_publisher(
    redis_url: str, tmp_path: Path
) -> None:
    """A publishing link's list bodies go to the one-pass reader (its ``lazy_body``): a
    ``PUBLICATIONS`` whose list32 body ends before its count made that reader raise out of the
    ingest (``amqp:internal-error``, a traceback logged), and a batch followed by a second
    amqp-value body was journaled (the usual read takes the last body: not a list). Both are
    refused ``amqp:decode-error`` now, nothing of the stranger's journaled; the honest
    publisher's runs before and after them are taken whole, once, in order."""
    from seqrepair.amqp.wire.framing import encode_frames
    from seqrepair.amqp.wire.rawamqp import encode_value

    def hostile(conn: BlockingConnection) -> tuple[object, object]:
        link = conn.create_sender("/load/a").link
        data = (b"\x00\x53\x74" + encode_value({"message-type": "PUBLICATIONS"})
                + b"\x00\x53\x77" + b"\xd0\x00\x00\x00\x00")
        cut = disposition(conn, link, b"cut", data)
        # a batch of a stranger's, then a second amqp-value body (null): refused
        stranger = [Publication("/load/a", "stranger", n, fields={"n": n}) for n in (1, 2)]
        two = encode_frames(stranger, 8).encode() + b"\x00\x53\x77\x40"
        return cut, disposition(conn, link, b"two", two)

    seen = honest_round(redis_url, tmp_path, 8, hostile)
    cut, two_bodies = seen.hostile
    log = seen.log
    assert seen.first[0] == 0, seen.first
    assert cut == (Delivery.REJECTED, "amqp:decode-error"), log[-3000:]
    assert two_bodies == (Delivery.REJECTED, "amqp:decode-error"), log[-3000:]
    assert seen.strangers == 0
    assert "internal error" not in log
    assert "message failed" not in log
    assert seen.second[0] == 0, (seen.second, log[-3000:])
    assert seen.held == list(range(1, 11))
    assert [(p.source, p.source_seq) for p in seen.got] == [(SOURCE, n) for n in range(1, 11)]


def test_run_shaped_transfers_with_one_entry_off_are_refused_beside_a_publisher(
    redis_url: str, tmp_path: Path
) -> None:
    """Transfers of 40 entries laid out alike (what the run reader, ``wire/entryrun.py``,
    reads at once inside the ingest's trial), each with one entry made bad in bytes the run's
    regular expression takes as values: a wildcard topic of the same length, a wire number 0,
    a width of 1, a publish type of no name, a time that is NaN. Each is refused whole with a
    condition, nothing of the stranger's journaled, and the honest publisher's runs before and
    after are taken whole, once, in order."""
    from seqrepair.amqp.wire.framing import encode_batch, encode_entry

    def run_with(bad_at: int, old: bytes, new: bytes, stamp: float | None = None) -> bytes:
        entries = [encode_entry(Publication("/load/a", "stranger", n, fields={"n": n},
                                            timestamp=stamp), lambda _s: 8)
                   for n in range(1, 41)]
        assert entries[bad_at].count(old) == 1
        entries[bad_at] = entries[bad_at].replace(old, new)
        return encode_batch(entries, first_link_seq=None, retransmit=False).encode()

    nan = struct.pack(">d", float("nan"))
    wildcard = run_with(30, b"\xa1\x07/load/a", b"\xa1\x07/load/#")
    late_nan = run_with(39, b"\x82" + struct.pack(">d", 2.5), b"\x82" + nan, stamp=2.5)
    # each layout sent twice first: a layout is learnt when seen again (entrylayout.py), so
    # the later transfers of it are read as runs
    crafted = [
        wildcard, wildcard,
        run_with(20, b"\x53\x15\x55\x08", b"\x53\x00\x55\x08"),  # wire 21 -> 0
        run_with(20, b"\x53\x15\x55\x08", b"\x53\x15\x55\x01"),  # 8 bits -> 1
        run_with(12, b"\xa1\x06update", b"\xa1\x06updatf"),
        late_nan, late_nan,
    ]

    def hostile(conn: BlockingConnection) -> list[tuple[object, str | None]]:
        link = conn.create_sender("/load/a").link
        return [disposition(conn, link, b"run%d" % k, data) for k, data in enumerate(crafted)]

    seen = honest_round(redis_url, tmp_path, 8, hostile)
    log = seen.log
    assert seen.first[0] == 0, seen.first
    for state, condition in seen.hostile:
        assert state == Delivery.REJECTED, log[-3000:]
        assert condition is not None, log[-3000:]
        assert condition.startswith("amqp:"), condition
    assert seen.strangers == 0
    assert "internal error" not in log
    assert seen.second[0] == 0, (seen.second, log[-3000:])
    assert seen.held == list(range(1, 11))
    assert [(p.source, p.source_seq) for p in seen.got] == [(SOURCE, n) for n in range(1, 11)]
