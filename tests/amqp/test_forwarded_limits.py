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

import pytest
from proton import Message
from proton.utils import BlockingConnection

from seqrepair.amqp.client.publisher import Publisher
from seqrepair.amqp.component.images import MAX_IMAGE_ANSWERS
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .principals import MISSING, amqp_identity, client_security, password, serve_args
from .test_authz import attach
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

ALICE, BOB, GW = "alice@example.com", "bob@example.com", "gw@example.net"
MESSAGE_TYPE = "message-type"

POLICY = """
[[allow]]
actors = ["*@example.com"]
operations = ["publish", "subscribe"]
topics = ["/weather/#"]

[[allow]]
actors = ["gw@example.net"]
operations = ["act-for"]
principals = ["*@example.com"]
"""


def _gateway_args(tmp_path: Path, auth: tuple[str, ...]) -> tuple[str, ...]:
    secret = tmp_path / "gw-password"
    secret.write_text(password(GW))
    return (*auth, "--upstream-user", GW, "--upstream-password-file", str(secret),
            "--upstream-sasl-mechs", "SCRAM-SHA-256", "--forward-principals")


def _policy(tmp_path: Path) -> str:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    return str(policy)


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
    comp.stop()
    stopped = next(ln for ln in comp.log_text().splitlines() if "component stopped" in ln)
    assert "images_refused=1" in stopped, stopped
