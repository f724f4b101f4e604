"""``seqrepair serve --rest``: subscriptions made over HTTP, used over AMQP, kept across a crash.

Real parts only: ``seqrepair serve`` as a process with its REST API on loopback, a real
redis-server, publisher and subscriber over proton, HTTP through ``http.client``.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, FreePort, _env, free_port, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

RAIN = {"topic": "/weather/#", "filters": [
    {"dialect": "basic", "type": "prefix", "property": "subject", "value": "/weather/rain/"}]}


class Rest:
    """A JSON client of the REST API at ``port`` (optionally with a bearer token, or any
    ``Authorization`` header: a Basic one, a wrong one)."""

    def __init__(self, port: int, token: str | None = None,
                 authorization: str | None = None) -> None:
        self.port = port
        self.token = token
        self.authorization = authorization

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Accept": "application/json"}
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        elif self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read()
        finally:
            conn.close()
        return response.status, json.loads(text) if text else None


def rows(first: int, n: int) -> list[tuple[str, dict[str, Any], str, None]]:
    topics = ("/weather/rain/LEMD", "/weather/wind/LEMD", "/weather/rain/LFPG")
    return [(topics[i % 3], {"n": i}, "update", None) for i in range(first, first + n)]


def test_a_subscription_made_over_http_delivers_over_amqp_and_survives_a_component_crash(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    rest_port = FreePort()
    comp = component("--heartbeat", "0.2", "--rest", rest_port)
    port = rest_port.number
    rest = Rest(port)
    status, made = rest("POST", "/subscriptions", RAIN)
    assert status == 201, made
    queue = made["queue"]
    assert queue == f"/subscriptions/{made['id']}"

    got: list[int] = []
    published: list[tuple[str, dict[str, Any], str, None]] = []
    with Subscriber(comp.url, queue, link_name="rain", heartbeat_interval=0.2,
                    on_publication=lambda p: got.append(p.source_seq)) as sub, \
         Publisher(comp.url, "feed.r", journal=Journal.from_url(redis_url)) as publisher:
        assert sub.connected.wait(20)
        for _ in range(2):
            batch = rows(len(published), 300)
            published.extend(batch)
            publisher.publish_many(batch)
            assert publisher.flush(30)
            if comp.starts == 1:
                comp.kill()  # the subscription must come back with the component
                comp.start()
        wanted = [i + 1 for i, row in enumerate(published) if row[0].startswith("/weather/rain/")]
        assert wait_for(lambda: len(got) >= len(wanted), 60)
        time.sleep(0.5)
    assert got == wanted, sub.stats()
    assert sub.error is None
    assert rest("GET", f"/subscriptions/{made['id']}") == (200, made)


def test_get_topics_lists_the_published_topics_and_still_does_after_a_crash(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    rest_port = FreePort()
    comp = component("--rest", rest_port, "--topic", "/flight/LEMD",
                     "--subscription", "ops=/weather/wind/*;;*")  # anyone may see it
    port = rest_port.number
    rest = Rest(port)
    syntax = {"wordSeparator": "/", "singleWordWildcard": "*", "multiWordWildcard": "#"}
    assert rest("GET", "/topics") == (200, {"type": "Tree", "patternMatching": syntax,
                                            "topics": ["/flight/LEMD"]})
    status, made = rest("POST", "/subscriptions", RAIN)
    assert status == 201

    with Publisher(comp.url, "feed.t", journal=Journal.from_url(redis_url)) as publisher:
        publisher.publish_many(rows(0, 30))
        assert publisher.flush(30)
    published = ["/weather/rain/LEMD", "/weather/rain/LFPG", "/weather/wind/LEMD"]
    listed = {"type": "Tree", "patternMatching": syntax,
              "topics": ["/flight/LEMD", *published]}
    assert rest("GET", "/topics/") == (200, listed)

    client = redis.Redis.from_url(redis_url)
    try:  # stored in the background: wait for it, then crash
        assert wait_for(lambda: client.smembers("seqrepair:topics") == {
            topic.encode() for topic in published})
    finally:
        client.close()
    comp.kill()
    comp.start()
    assert rest("GET", "/topics") == (200, listed)
    assert rest("GET", "/topics?pattern=%2Fweather%2Frain%2F%2A") == (200, dict(
        listed, topics=["/weather/rain/LEMD", "/weather/rain/LFPG"]))
    assert rest("GET", "/topics/%2Fweather%2Fwind%2FLEMD") == (200, {
        "topic": "/weather/wind/LEMD", "declared": False, "configured": False,
        "published": True, "subscriptions": ["ops"]})
    assert rest("GET", "/topics//weather/rain/LFPG") == (200, {
        "topic": "/weather/rain/LFPG", "declared": False, "configured": False,
        "published": True, "subscriptions": [made["id"]]})
    status, error = rest("GET", "/topics//weather/wind/LFPG")
    assert (status, error["error"]) == (404, "notfound")
    status, error = rest("GET", "/topics?pattern=weather")
    assert (status, error["error"]) == (400, "invalid")
    assert rest("POST", "/topics", {"topic": "/x"})[0] == 405


def test_bad_requests_change_nothing_and_a_token_is_required_when_configured(
    component: Callable[..., ComponentProcess], tmp_path: Path
) -> None:
    rest_port = FreePort()
    (tmp_path / "token").write_text("s3cret\n")
    component("--rest", rest_port, "--rest-token-file", str(tmp_path / "token"),
              "--subscription", "ops=/#;;*")  # anyone may see it
    port = rest_port.number
    assert Rest(port)("GET", "/subscriptions")[0] == 401
    assert Rest(port, "wrong")("GET", "/subscriptions")[0] == 401
    rest = Rest(port, "s3cret")
    status, listed = rest("GET", "/subscriptions")
    assert status == 200
    assert [(s["id"], s["configured"]) for s in listed] == [("ops", True)]

    bad_filter = dict(RAIN, filters=[{"dialect": "sql", "expression": "1=1"}])
    status, error = rest("POST", "/subscriptions", bad_filter)
    assert (status, error["error"]) == (400, "invalid")
    assert "dialect" in error["message"]
    status, error = rest("PUT", "/subscriptions/ops", {"topic": "/weather/#"})
    assert (status, error["error"]) == (409, "conflict")
    assert rest("DELETE", "/subscriptions/nope")[0] == 404
    assert rest("GET", "/subscriptions") == (200, listed)


def test_the_rest_connection_cap_and_timeout_are_set_on_the_command_line(
    component: Callable[..., ComponentProcess]
) -> None:
    rest_port = FreePort()
    component("--rest", rest_port, "--rest-max-connections", "1",
              "--rest-timeout", "2")
    port = rest_port.number
    with socket.create_connection(("127.0.0.1", port), timeout=10) as held:
        held.sendall(b"GET /subscriptions HTTP/1.1\r\nHost: x\r\n")  # never finished
        status, error = Rest(port)("GET", "/subscriptions")
        assert (status, error["error"]) == (503, "unavailable")
        answer = held.recv(65536)  # the 408, once 2 s are up
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert wait_for(lambda: Rest(port)("GET", "/subscriptions")[0] == 200, 10)


def test_a_rest_port_taken_by_another_process_is_a_clear_error(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "seqrepair.cli", "serve", "--url", f"127.0.0.1:{free_port()}",
             "--redis-url", redis_url, "--rest", f"127.0.0.1:{port}", "--allow-anonymous"],
            env=_env(), capture_output=True, timeout=60, check=False,
        )
    assert done.returncode == 1
    err = done.stderr.decode().strip().splitlines()
    assert err[-1].startswith("seqrepair serve: --rest:"), err
    assert "Traceback" not in done.stderr.decode()


def test_a_rest_port_taken_between_its_draw_and_the_bind_is_drawn_again(
    component: Callable[..., ComponentProcess],
) -> None:
    """The tests' ``FreePort`` (conftest): a port found free, then taken by another process
    before the component bound it, is drawn again and the component started again on it,
    as its AMQP port always was (before: ``--rest 127.0.0.1:PORT`` from ``free_port()`` was
    tried three times as it was, and the test failed on a port someone else took)."""
    rest_port = FreePort()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", rest_port.number))
        taken.listen()
        comp = component("--rest", rest_port)
        assert rest_port.number != taken.getsockname()[1]
    assert Rest(rest_port.number)("GET", "/topics")[0] == 200
    assert comp.starts == 1
    assert "Address already in use" in (comp.tmp / f"{comp.files}-1.log").read_text()
