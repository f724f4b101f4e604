"""Publishing through ``seqrepair gateway`` (issue 22 §4): nothing is acknowledged that no
journal holds.

Real processes: a redis-server, ``seqrepair serve``, ``seqrepair gateway`` and ``seqrepair
publish --url <the gateway>``. The gateway used to take a publisher's link as a requests link:
it accepted every publication at once and forwarded it to ``$seqrepair``, where it was refused,
so ``publish`` said ``accepted 5, flushed true`` while the journal stayed empty. Now a publishing
link is carried to the component and each delivery settled with the component's outcome: what
is accepted is journaled and reaches a subscriber; what the component refuses is refused to the
publisher with the component's condition.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from proton import Delivery, Message, ulong
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import (
    ComponentProcess,
    FreePort,
    _die_with_parent,
    _env,
    start_binding,
    wait_for,
)

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


_GATEWAYS = itertools.count(1)


@contextlib.contextmanager
def gateway_process(upstream: str, tmp_path: Path,
                    security: tuple[str, ...] = ("--allow-anonymous",)) -> Iterator[str]:
    """``seqrepair gateway`` in front of ``upstream`` (``security``: its authentication
    options, by default anonymous on loopback); yields its listen address. Its log is
    ``tmp_path / "gateway.log"``. Started again on a new port if the one found free was taken
    before it listened (as :class:`ComponentProcess` does); its ready file is its own."""
    port = FreePort()
    started: list[subprocess.Popen[bytes]] = []
    log = open(tmp_path / "gateway.log", "wb")  # noqa: SIM115

    def start_once() -> bool:
        nonlocal log
        log.close()
        log = open(tmp_path / "gateway.log", "wb")  # noqa: SIM115
        ready = tmp_path / f"gateway-ready-{next(_GATEWAYS)}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "gateway",
             "--listen", str(port), "--upstream", upstream, "--name", "edge", "--ready-file",
             str(ready), *security],
            env=_env(), stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        started.append(proc)
        # a ceiling: a loaded 2-core machine can take long to start it
        assert wait_for(lambda: ready.exists() or proc.poll() is not None, 60), (
            (tmp_path / "gateway.log").read_text())
        return proc.poll() is None

    start_binding(start_once, lambda: (tmp_path / "gateway.log").read_text(), [port],
                  what="gateway")
    proc, listen = started[-1], str(port)
    try:
        yield listen
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
        log.close()


def publish(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "seqrepair.cli", "publish", "--url", url, "--rate", "0",
         "--timeout", "15", *args],
        env=_env(), capture_output=True, text=True, timeout=60,
    )


def summary(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_publications_through_a_gateway_are_journaled_and_delivered_once(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    got: list[Publication] = []
    with gateway_process(comp.url, tmp_path) as gateway, Subscriber(
        gateway, "/load/#", on_publication=got.append, heartbeat_interval=0.2,
        link_name="behind-gateway",
    ) as sub:
        assert sub.connected.wait(20)
        assert wait_for(lambda: sub.stub.stats.heartbeats > 0)
        journaling = publish(gateway, "--source", "feed.j", "--redis-url", redis_url,
                             "--count", "300", "--batch", "64")
        numbering = publish(gateway, "--source", "feed.n", "--count", "5")  # no journal of its own
        assert wait_for(lambda: len(got) >= 305, 30)
        time.sleep(0.5)  # a duplicate would arrive now
    with Journal.from_url(redis_url) as journal:
        held = {source: [p.source_seq for p in journal.read_range(source, 1, 1000)]
                for source in ("feed.j", "feed.n")}
    assert journaling.returncode == 0, journaling.stderr[-2000:]
    assert numbering.returncode == 0, numbering.stderr[-2000:]
    assert summary(journaling)["accepted"] == 300
    assert summary(numbering)["accepted"] == 5
    assert held == {"feed.j": list(range(1, 301)), "feed.n": list(range(1, 6))}
    for source, count in (("feed.j", 300), ("feed.n", 5)):
        assert [p.source_seq for p in got if p.source == source] == list(range(1, count + 1))
    assert len(got) == 305


def test_what_the_component_refuses_is_refused_to_the_publisher_behind_a_gateway(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component()
    with gateway_process(comp.url, tmp_path) as gateway:
        # numbers after 100 of a source the journal does not hold: precondition-failed
        skipping = publish(gateway, "--source", "feed.skip", "--start-after", "100",
                           "--count", "5")
        conn = BlockingConnection(gateway, timeout=20)
        try:
            with pytest.raises(LinkDetached) as refused_link:
                conn.create_sender("$nowhere")
            control = conn.create_sender("$seqrepair")
            as_request = control.send(Message(
                properties={"message-type": "PUBLICATION", "source": "feed.skip",
                            "source_seq": ulong(1), "source_bits": 32, "topic": "/load/a"},
                body={"n": 1}), error_states=[])
            garbled = bytearray(Message(properties={"message-type": "CAPABILITIES"},
                                        reply_to="$link/abcdef").encode())
            garbled[garbled.index(b"abcdef")] = 0xA7  # not UTF-8: proton raises when read
            raw = control.link.delivery(b"garbled")
            control.link.send(bytes(garbled))
            control.link.advance()
            conn.wait(lambda: bool(raw.remote_state), msg="the garbled request's outcome")
            big = conn.create_sender("/load/big")
            with pytest.raises(LinkDetached) as oversized:  # refused as the bytes come
                big.send(Message(body={"blob": b"x" * (2 << 20)}), error_states=[])
            topic = conn.create_sender("/load/a")
            miscounted = topic.send(Message(
                properties={"message-type": "PUBLICATIONS", "count": ulong(5)},
                body=[{"source": "feed.m", "source_seq": ulong(1), "source_bits": 32,
                       "topic": "/load/a", "fields": {}}]), error_states=[])
        finally:
            conn.close()
    with Journal.from_url(redis_url) as journal:
        high = {s: journal.high_water(s) for s in ("feed.skip", "feed.m")}
    assert skipping.returncode != 0
    assert "precondition-failed" in skipping.stderr, skipping.stderr[-2000:]
    assert refused_link.value.condition == "amqp:not-found"  # the component's, relayed
    assert (as_request.remote_state, as_request.remote.condition.name) == (
        Delivery.REJECTED, "amqp:not-implemented")
    assert (raw.remote_state, raw.remote.condition.name) == (
        Delivery.REJECTED, "amqp:decode-error")  # and the gateway lives on: it exits 0 above
    # the component's max-message-size, enforced at the gateway: the link detached with it
    assert oversized.value.condition == "amqp:link:message-size-exceeded"
    assert (miscounted.remote_state, miscounted.remote.condition.name) == (
        Delivery.REJECTED, "amqp:decode-error")
    assert high == {"feed.skip": 0, "feed.m": 0}


def test_publishing_through_a_gateway_survives_a_component_restart_and_journals_each_once(
    redis_url: str, tmp_path: Path
) -> None:
    """kill -9 of the component mid-stream: the gateway closes the publisher's connection
    (``amqp:connection:forced``), the publisher reconnects and sends again what was not settled;
    the journal ends holding every publication once, and each was acknowledged only once held."""
    from seqrepair.amqp.client.subscriber import Publisher

    comp = ComponentProcess(redis_url, tmp_path).start()
    try:
        with gateway_process(comp.url, tmp_path) as gateway, Publisher(
            gateway, "feed.r", journal=Journal.from_url(redis_url), max_batch=32,
            reconnect_delay=0.1, max_reconnect_delay=0.5,
        ) as publisher:
            for i in range(400):
                publisher.publish("/load/a", {"n": i})
                if i == 200:
                    assert wait_for(lambda: publisher.accepted > 0, 20)
                    comp.kill()
                    time.sleep(0.5)
                    comp.start()
                time.sleep(0.002)
            assert publisher.flush(60)
            accepted, rejected = publisher.accepted, publisher.rejected
    finally:
        comp.stop()
    with Journal.from_url(redis_url) as journal:
        held = [p.fields["n"] for p in journal.read_range("feed.r", 1, 1000)]
    gateway_log = (tmp_path / "gateway.log").read_text()
    assert "upstream publishing connection lost" in gateway_log  # the restart was crossed
    assert rejected == 0
    assert accepted >= 400  # resent after the restart: what the journal held is skipped
    assert held == list(range(400))
