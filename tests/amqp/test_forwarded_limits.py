"""Limits counted per forwarded principal (WIRE.md "Resource model", "Image requests"): behind
a gateway with ``--forward-principals`` each client is itself for the component's link
admission and image-answer limits, so one client uses up its own allowance, never the
gateway's (every client's) one. Real processes: a redis-server, ``seqrepair serve`` with a
policy, ``seqrepair gateway --forward-principals``, clients authenticated by SCRAM."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import Message, ulong
from proton.utils import BlockingConnection

from seqrepair.amqp.client.publisher import Publisher
from seqrepair.amqp.component.images import MAX_IMAGE_ANSWERS
from seqrepair.amqp.wire.vocabulary import PROP_ON_BEHALF_OF
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .principals import (
    GATEWAY_ACTS_FOR_EXAMPLE_COM,
    MISSING,
    WEATHER_FOR_EXAMPLE_COM,
    amqp_identity,
    client_security,
    policy_args,
    serve_args,
    upstream_args,
)
from .test_authz import _Properties, attach
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

ALICE, BOB, GW = "alice@example.com", "bob@example.com", "gw@example.net"
MESSAGE_TYPE = "message-type"

POLICY = WEATHER_FOR_EXAMPLE_COM + GATEWAY_ACTS_FOR_EXAMPLE_COM


def _gateway_args(tmp_path: Path, auth: tuple[str, ...]) -> tuple[str, ...]:
    return (*auth, *upstream_args(tmp_path, GW), "--forward-principals")


def _policy(tmp_path: Path) -> str:
    return policy_args(tmp_path, POLICY)[1]


def test_link_admission_counts_a_forwarded_client_as_itself(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    """``--max-links-per-principal 3``: alice behind the gateway attaches three links, her
    fourth is refused naming her; bob behind the same gateway still attaches (before, every
    link through the gateway was the gateway's: its own requests link and alice's two made
    three, and both alice's third and bob's first were refused)."""
    auth = serve_args(tmp_path, ALICE, BOB, GW)
    comp = component("--heartbeat", "0.2", *auth, "--policy", _policy(tmp_path),
                     "--max-links-per-principal", "3")
    held = []
    with gateway_process(comp.url, tmp_path, _gateway_args(tmp_path, auth)) as url:
        try:
            outcomes = []
            for _ in range(4):
                outcome = attach(url, "/weather/#", ALICE)
                if isinstance(outcome, tuple):
                    held.append(outcome[1])
                    outcomes.append(None)
                else:
                    outcomes.append(outcome.name if hasattr(outcome, "name") else outcome)
            bob = attach(url, "/weather/#", BOB)
            if isinstance(bob, tuple):
                held.append(bob[1])
        finally:
            for conn in held:
                conn.close()
    assert outcomes == [None, None, None, "amqp:resource-limit-exceeded"], outcomes
    assert isinstance(bob, tuple), bob
    refused = [ln for ln in comp.log_text().splitlines() if "link refused" in ln]
    assert len(refused) == 1, refused
    assert "principal 'alice@example.com' holds 3 links" in refused[0], refused


def test_image_answers_count_per_forwarded_principal(
    component: Callable[..., ComponentProcess], tmp_path: Path, redis_url: str,
) -> None:
    """Alice behind the gateway asks for images and reads nothing (no credit): four answers
    run for her, her fifth request is refused; bob, behind the same gateway (so on the same
    upstream connection), still gets his answers run (before, the gateway's connection had
    its four answers running and bob's were refused)."""
    auth = serve_args(tmp_path, ALICE, BOB, GW)
    comp = component("--heartbeat", "0.2", *auth, "--policy", _policy(tmp_path))
    with Journal.from_url(redis_url) as journal, Publisher(
            comp.url, "feed.img", journal=journal, security=client_security(ALICE)) as pub:
        pub.publish_many([("/weather/wind/LEMD", {"n": i}, "update", None) for i in range(20)])
        assert pub.flush(30)
    conns = []
    with gateway_process(comp.url, tmp_path, _gateway_args(tmp_path, auth)) as url:
        try:
            for who, asks in ((ALICE, MAX_IMAGE_ANSWERS + 1), (BOB, 2)):
                conn = BlockingConnection(url, timeout=10, **amqp_identity(who))
                conns.append(conn)
                link = f"{who.split('@')[0]}-{uuid.uuid4().hex[:8]}"
                conn.create_receiver("/weather/#", name=link, credit=0)
                sender = conn.create_sender("$seqrepair")
                for i in range(asks):
                    sender.send(Message(body={"patterns": ["/#"]}, id=i,
                                        reply_to=f"$link/{link}",
                                        properties={MESSAGE_TYPE: "SNAPSHOT", "link": link}),
                                error_states=[])
                time.sleep(0.5)
            assert wait_for(lambda: comp.log_text().count("image request") >= 6, 20), (
                comp.log_text()[-3000:])
            time.sleep(0.5)
        finally:
            for conn in conns:
                conn.close()
    log = comp.log_text()
    asked = re.findall(r"image request.*principal=(\S+)", log)
    assert asked.count(ALICE) == MAX_IMAGE_ANSWERS, asked
    assert asked.count(BOB) == 2, asked  # not refused for alice's answers
    stopped = comp.stopped_lines()[0]
    assert "images_refused=1" in stopped, stopped


def _flood(url: str, who: str, requests: list[Message], receive: int
           ) -> tuple[BlockingConnection, list[Any]]:
    """As ``who``, a data link on /weather/# (no credit but for the answers expected) and
    ``requests`` sent on ``$seqrepair`` (outcomes not waited for): the connection, and the
    first ``receive`` messages other than heartbeats on the data link."""
    conn = BlockingConnection(url, timeout=10, **amqp_identity(who))
    link = f"{who.split('@')[0]}-{uuid.uuid4().hex[:8]}"
    receiver = conn.create_receiver("/weather/#", name=link, credit=0)
    sender = conn.create_sender("$seqrepair")
    for message in requests:
        message.reply_to = f"$link/{link}"
        message.properties = {**(message.properties or {}), "link": link}
        sender.send(message, error_states=[])
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while len(got) < receive and time.monotonic() < deadline:
        receiver.flow(1)
        message = receiver.receive(timeout=10)
        if (message.properties or {}).get(MESSAGE_TYPE) != "HEARTBEAT":  # idle link's
            got.append(message)
    return conn, got


def test_the_request_rate_counts_per_forwarded_principal(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    """``--request-rate 0.01 --request-burst 5``: alice behind the gateway sends 30 requests,
    25 are refused naming her; bob, behind the same gateway (the same upstream connection),
    then has his three answered (before, alice had used up the gateway connection's bucket:
    bob's were refused ``request rate exceeded``)."""
    auth = serve_args(tmp_path, ALICE, BOB, GW)
    comp = component("--heartbeat", "0.2", *auth, "--policy", _policy(tmp_path),
                     "--request-rate", "0.01", "--request-burst", "5")

    def capabilities() -> Message:
        return Message(id=uuid.uuid4().hex, properties={MESSAGE_TYPE: "CAPABILITIES"})

    conns = []
    with gateway_process(comp.url, tmp_path, _gateway_args(tmp_path, auth)) as url:
        try:
            conn, _ = _flood(url, ALICE, [capabilities() for _ in range(30)], 0)
            conns.append(conn)
            assert wait_for(lambda: comp.log_text().count("request rate exceeded") >= 25, 20), (
                comp.log_text()[-3000:])
            conn, answers = _flood(url, BOB, [capabilities() for _ in range(3)], 3)
            conns.append(conn)
        finally:
            for conn in conns:
                conn.close()
    assert len(answers) == 3
    assert all((m.properties or {}).get(MESSAGE_TYPE) == "CAPABILITIES" for m in answers), [
        m.properties for m in answers]
    refused = [ln for ln in comp.log_text().splitlines() if "request rate exceeded" in ln]
    assert len(refused) == 25, refused
    assert all(f"for principal '{ALICE}'" in ln for ln in refused), refused


def test_source_replays_count_per_forwarded_principal(
    component: Callable[..., ComponentProcess], tmp_path: Path, redis_url: str,
) -> None:
    """``--max-replays-per-connection 2``: on the gateway principal's one connection acting
    for alice and bob (``seqrepair-on-behalf-of``, as ``seqrepair gateway
    --forward-principals`` sends them; a gateway process would read the replays off for its
    clients, and they would not stay running), alice asks for three replays on links that
    read nothing (no credit: they stay running): her third is refused naming her; bob's still
    runs (before, the connection had alice's two running and bob's was refused)."""
    auth = serve_args(tmp_path, ALICE, BOB, GW)
    comp = component("--heartbeat", "0.2", *auth, "--policy", _policy(tmp_path),
                     "--max-replays-per-connection", "2")
    with Journal.from_url(redis_url) as journal, Publisher(
            comp.url, "feed.r", journal=journal, security=client_security(ALICE)) as pub:
        pub.publish_many([("/weather/wind/LEMD", {"n": i}, "update", None)
                          for i in range(5000)])
        assert pub.flush(60)
    conn = BlockingConnection(comp.url, timeout=10, **amqp_identity(GW))
    try:
        sender = conn.create_sender("$seqrepair")
        for who in (ALICE, ALICE, ALICE, BOB):
            link = f"{who.split('@')[0]}-{uuid.uuid4().hex[:8]}"
            receiver = conn.create_receiver("/weather/#", name=link, credit=0,
                                 options=_Properties({PROP_ON_BEHALF_OF: who}))
            sender.send(Message(id=uuid.uuid4().hex, reply_to=f"$link/{link}",
                                properties={MESSAGE_TYPE: "SOURCE-GAP-REQUEST", "link": link,
                                            str(PROP_ON_BEHALF_OF): who},
                                body={"feed.r": ulong(0)}), error_states=[])
        started = None  # bob's replay's first answer (an idle link's heartbeats aside)
        while started is None or (started.properties or {}).get(MESSAGE_TYPE) == "HEARTBEAT":
            receiver.flow(1)
            started = receiver.receive(timeout=10)
        assert wait_for(lambda: "source replays already run" in comp.log_text(), 20), (
            comp.log_text()[-3000:])
    finally:
        conn.close()
    refused = [ln for ln in comp.log_text().splitlines() if "source replays already run" in ln]
    assert len(refused) == 1, refused
    assert f"for principal '{ALICE}' on this connection" in refused[0], refused
    assert (started.properties or {}).get(MESSAGE_TYPE) == "REPLAY-STARTED", started
