"""Brokered mode against a real RabbitMQ (rabbitmq_amqp1_0) and a real redis-server.

The broker is started once per session by the ``rabbitmq`` fixture (installed with apt-get
when missing and the tests run as root; skipped with the reason otherwise).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from proton import Message, ulong
from proton.utils import BlockingConnection

from seqrepair.amqp.client.brokered import BrokerPublisher, BrokerSubscriber, routing_key
from seqrepair.amqp.client.subscribecmd import resume_after
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import encode_frame
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.journal import Journal

from .conftest import RabbitBroker, _env, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def queue_address() -> str:
    return f"/queue/seqrepair-{uuid.uuid4().hex[:12]}"


def by_source(pubs: list[Publication]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in pubs:
        out.setdefault(p.source, []).append(p.source_seq)
    return out


# ------------------------------------------------------------------------------ the broker


def test_broker_carries_application_properties_and_map_bodies_with_nulls(
    rabbitmq: RabbitBroker,
) -> None:
    pub = Publication("/weather/wind/LEMD", "feed.a", 70000, PublishType.CORRECTION,
                      {"speed": 12, "gust": None, "dir": "NW", "ratio": 0.5,
                       "list": [1, None, "x"], "nested": {"k": None}},
                      permtoken="6747", timestamp=1562075995.25)
    message = encode_frame(pub, 16)  # 70000 travels as its 16-bit wire value
    props: dict[Any, Any] = dict(message.properties or {})
    props["plain-null"] = None
    message.properties = props  # type: ignore[assignment]  # proton types it as None
    address = queue_address()
    conn = BlockingConnection(rabbitmq.url, timeout=10)
    try:
        receiver = conn.create_receiver(address)
        conn.create_sender(address).send(message)
        got: Message = receiver.receive(timeout=10)
        receiver.accept()
    finally:
        conn.close()
    assert got.properties == props
    assert type(got.properties["source_seq"]) is ulong
    assert got.properties["plain-null"] is None
    assert got.body == dict(pub.fields)
    assert "gust" in got.body
    assert got.body["gust"] is None
    decoder = Decoder()
    decoder.unwrapper.seed("feed.a", 69999)
    [decoded] = decoder.decode(got)
    assert decoded == pub


def test_routing_key_of_a_topic() -> None:
    assert routing_key("/weather/wind/LEMD") == "weather.wind.LEMD"


# ------------------------------------------------------------------------------ end to end


def dropper(every: int, tails: dict[str, int]) -> Any:
    """Drop every ``every``-th number and each source's last publication (a lost tail)."""
    def drop(pub: Publication) -> bool:
        return pub.source_seq % every == 0 or pub.source_seq == tails.get(pub.source)
    return drop


def test_brokered_publishers_with_loss_reach_the_subscriber_once_in_order(
    rabbitmq: RabbitBroker, journal: Journal
) -> None:
    address = queue_address()
    n = 600
    got: list[Publication] = []
    sub = BrokerSubscriber(rabbitmq.url, address, journal, on_publication=got.append,
                           probe_interval=0.5).start()
    try:
        assert sub.connected.wait(10), "subscriber did not attach to the broker"
        tails = {"feed.a": n, "feed.b": n}
        pubs = [BrokerPublisher(rabbitmq.url, src, journal, address=address,
                                drop=dropper(13, tails)).start() for src in tails]
        for first in range(0, n, 50):
            for p in pubs:
                p.publish_many([(f"/t/{p.source}/{i % 3}", {"i": i, "none": None}, "update")
                                for i in range(first, first + 50)])
        for p in pubs:
            assert p.close(20)
            assert p.dropped == n // 13 + 1
            assert p.accepted == n - p.dropped
        assert wait_for(lambda: len(got) >= 2 * n, 30), sub.stats().as_dict()
        time.sleep(0.3)  # anything more would be a duplicate
    finally:
        sub.stop()
    assert by_source(got) == {"feed.a": list(range(1, n + 1)), "feed.b": list(range(1, n + 1))}
    assert got[0].fields == {"i": 0, "none": None}
    stats = sub.stats()
    assert stats.detector.repaired >= 2 * (n // 13 + 1)
    assert stats.replays >= 1
    assert not sub.unrecoverable


def test_filtered_exchange_binding_delivers_only_the_entitled_part(
    rabbitmq: RabbitBroker, journal: Journal
) -> None:
    """A queue bound to part of a source's topics: holes are not losses (see sourcegaps)."""
    got: list[Publication] = []
    sub = BrokerSubscriber(rabbitmq.url, "/exchange/amq.topic/t.a.#", journal,
                           topics=["/t/a/#"], on_publication=got.append,
                           probe_interval=0.5).start()
    try:
        assert sub.connected.wait(10)
        pub = BrokerPublisher(rabbitmq.url, "feed.f", journal, address="/exchange/amq.topic",
                              drop=lambda p: p.source_seq % 7 == 0).start()
        items = [(f"/t/{'ab'[i % 3 == 0]}/x", {"i": i}, "update") for i in range(300)]
        pub.publish_many(items)
        assert pub.close(20)
        expected = [i + 1 for i in range(300) if i % 3 != 0]
        assert wait_for(lambda: len(got) >= len(expected), 30), sub.stats().as_dict()
        time.sleep(0.3)
    finally:
        sub.stop()
    assert [p.source_seq for p in got] == expected
    assert all(p.topic == "/t/a/x" for p in got)
    assert sub.stats().detector.covered > 0


# ------------------------------------------------------------------------------ kill, restart


def _subscriber_cmd(rabbitmq: RabbitBroker, redis_url: str, address: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "subscribe",
            "--broker", rabbitmq.url,
            "--address", address, "--redis-url", redis_url, "--output", str(out),
            "--resume", "--heartbeat", "0.3"]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_subscriber_killed_mid_stream_resumes_exactly_once_from_the_journal(
    rabbitmq: RabbitBroker, redis_url: str, journal: Journal, tmp_path: Path
) -> None:
    address = queue_address()
    out = tmp_path / "delivered.jsonl"
    n = 1500
    logs = [open(tmp_path / f"sub-{i}.log", "wb") for i in range(2)]  # noqa: SIM115
    first = subprocess.Popen(_subscriber_cmd(rabbitmq, redis_url, address, out), env=_env(),
                             stdout=logs[0], stderr=subprocess.STDOUT)
    second: subprocess.Popen[bytes] | None = None
    # subscribed (and its start point taken) before anything is published
    assert wait_for(lambda: b"attached to broker" in (tmp_path / "sub-0.log").read_bytes(), 30)
    publisher = BrokerPublisher(rabbitmq.url, "feed.k", journal, address=address,
                                drop=lambda p: p.source_seq % 11 == 0).start()
    done = threading.Event()

    def publish() -> None:
        for start in range(0, n, 25):
            publisher.publish_many([("/k/x", {"i": i}, "update") for i in range(start, start + 25)])
            time.sleep(0.01)
        done.set()

    try:
        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        assert wait_for(lambda: _lines(out) >= 200, 30), (tmp_path / "sub-0.log").read_text()
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_at = _lines(out)
        assert killed_at < n, "the kill came too late to test anything"
        second = subprocess.Popen(_subscriber_cmd(rabbitmq, redis_url, address, out),
                                  env=_env(), stdout=logs[1], stderr=subprocess.STDOUT)
        assert done.wait(60)
        assert publisher.close(20)
        assert wait_for(lambda: _lines(out) >= n, 40), (
            _lines(out), (tmp_path / "sub-1.log").read_text())
        time.sleep(0.5)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(10)
        for fh in logs:
            fh.close()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["source_seq"] for r in records] == list(range(1, n + 1))
    assert {r["source"] for r in records} == {"feed.k"}
    assert resume_after(out) == {"feed.k": n}


def test_cli_publish_through_the_broker_with_forced_loss(
    rabbitmq: RabbitBroker, redis_url: str, journal: Journal
) -> None:
    address = queue_address()
    got: list[Publication] = []
    sub = BrokerSubscriber(rabbitmq.url, address, journal, on_publication=got.append,
                           probe_interval=0.3).start()
    try:
        assert sub.connected.wait(10)
        result = subprocess.run(
            [sys.executable, "-m", "seqrepair.cli", "publish", "--broker", rabbitmq.url,
             "--address", address, "--redis-url", redis_url, "--source", "feed.cli",
             "--count", "300", "--batch", "20", "--drop-rate", "0.1", "--drop-seed", "7"],
            env=_env(), capture_output=True, timeout=60, check=False,
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        report = json.loads(result.stdout.decode().strip().splitlines()[-1])
        assert report["published"] == 300
        assert report["dropped"] > 0
        assert report["accepted"] == 300 - report["dropped"]
        assert wait_for(lambda: len(got) >= 300, 20), sub.stats().as_dict()
        time.sleep(0.3)
    finally:
        sub.stop()
    assert [p.source_seq for p in got] == list(range(1, 301))
    assert [p.fields["n"] for p in got] == list(range(300))
