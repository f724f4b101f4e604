"""The subscription API over real HTTP/1.1 on loopback (RestServer), driven by http.client."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from polling import wait_for

from seqrepair.rest.api import SubscriptionApi
from seqrepair.rest.server import RestServer

from .conftest import JSON, new_manager

WIND = json.dumps({"topic": "/weather/wind/*"}).encode()


def rest_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("seqrepair-rest")]


@pytest.fixture
def server() -> Iterator[RestServer]:
    with RestServer(SubscriptionApi(new_manager(), max_body=1024)) as running:
        yield running
    assert rest_threads() == []


def exchange(server: RestServer, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, http.client.HTTPMessage, Any]:
    """One request on a new connection: status, headers and the body read as JSON (None when
    it is empty)."""
    connection = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        connection.request(method, path, body, headers or (JSON if body is not None else {}))
        response = connection.getresponse()
        raw = response.read()
        return response.status, response.headers, json.loads(raw) if raw else None
    finally:
        connection.close()


def raw_exchange(server: RestServer, request: bytes) -> bytes:
    """Send bytes as they are; everything the server answers before it closes."""
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def test_create_list_get_pause_and_delete_over_http(server: RestServer) -> None:
    status, headers, created = exchange(server, "POST", "/subscriptions", WIND)
    assert (status, headers["Location"]) == (201, "/subscriptions/sub-1")
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert exchange(server, "GET", "/subscriptions/")[::2] == (200, [created])
    assert exchange(server, "GET", "/subscriptions/sub-1")[::2] == (200, created)
    paused = json.dumps({**created, "subscription_status": "PAUSED"}).encode()
    status, _, shown = exchange(server, "PUT", "/subscriptions/sub-1", paused)
    assert (status, shown["subscription_status"]) == (200, "PAUSED")
    assert exchange(server, "DELETE", "/subscriptions/sub-1")[::2] == (200, shown)
    assert exchange(server, "GET", "/subscriptions")[::2] == (200, [])


def test_errors_over_the_wire_keep_their_status_code_and_headers(server: RestServer) -> None:
    status, _, body = exchange(server, "GET", "/subscriptions/nope")
    assert (status, body["error"]) == (404, "notfound")
    status, headers, body = exchange(server, "DELETE", "/subscriptions")
    assert (status, body["error"], headers["Allow"]) == (
        405, "method-not-allowed", "GET, HEAD, POST, OPTIONS")
    status, _, body = exchange(server, "POST", "/subscriptions", WIND,
                               {"Content-Type": "text/plain"})
    assert (status, body["error"]) == (415, "unsupported-media-type")
    status, _, body = exchange(server, "POST", "/subscriptions", b"{" * 2000, JSON)
    assert (status, body["error"]) == (413, "payload-too-large")
    status, headers, body = exchange(server, "OPTIONS", "/subscriptions/x")
    assert (status, headers["Allow"], body) == (204, "GET, HEAD, PUT, DELETE, OPTIONS", None)


def test_a_body_over_the_limit_is_not_read_and_the_connection_closes(
    server: RestServer,
) -> None:
    answer = raw_exchange(server, b"POST /subscriptions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 999999\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"\r\nConnection: close\r\n" in answer


@pytest.mark.parametrize(("request_bytes", "status", "code"), [
    (b"POST /subscriptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n",
     411, "length-required"),
    (b"POST /subscriptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411, "length-required"),
    (b"POST /subscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "invalid"),
    (b"POST /subscriptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
     b"Content-Length: 0000000000000000000000000000002\r\nConnection: close\r\n\r\n{}",
     400, "invalid"),
    (b"POST /subscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
     b"Content-Length: 3\r\n\r\n{}", 400, "invalid"),
    (b"BREW /subscriptions HTTP/1.1\r\nHost: x\r\n\r\n", 501, "not-implemented"),
    (b"GET\r\n\r\n", 400, "invalid"),
])
def test_what_the_adapter_refuses_itself_is_answered_in_json_and_closes(
    server: RestServer, request_bytes: bytes, status: int, code: str
) -> None:
    head, _, body = raw_exchange(server, request_bytes).partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"\r\nConnection: close" in head
    assert json.loads(body)["error"] == code


def test_a_client_that_resets_the_connection_is_logged_not_printed(
    server: RestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with structlog.testing.capture_logs() as logs:
        sock = socket.create_connection(server.address, timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # SO_LINGER 0: a reset, not a polite close
        assert wait_for(lambda: any(log["event"] == "http client went away" for log in logs))
    assert capsys.readouterr().err == ""


def test_two_requests_share_one_kept_alive_connection(server: RestServer) -> None:
    connection = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        connection.request("POST", "/subscriptions", WIND, JSON)
        first = connection.getresponse()
        assert (first.status, first.getheader("Connection")) == (201, None)
        first.read()
        sock = connection.sock
        connection.request("GET", "/subscriptions/sub-1")
        second = connection.getresponse()
        assert (second.status, json.loads(second.read())["id"]) == (200, "sub-1")
        assert connection.sock is sock is not None
    finally:
        connection.close()


def test_head_answers_the_get_headers_without_a_body(server: RestServer) -> None:
    connection = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        connection.request("GET", "/subscriptions")
        get = connection.getresponse()
        get_length, _ = get.getheader("Content-Length"), get.read()
        connection.request("HEAD", "/subscriptions")
        head = connection.getresponse()
        assert (head.status, head.getheader("Content-Length"), head.read()) == (
            200, get_length, b"")
        connection.request("GET", "/subscriptions")  # the connection is still in step
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def test_a_silent_client_is_timed_out() -> None:
    with RestServer(SubscriptionApi(new_manager()), request_timeout=0.2) as server, \
            socket.create_connection(server.address, timeout=10) as sock:
        assert sock.recv(1) == b""  # closed by the server, not by our 10 s timeout


def test_requests_are_logged_through_structlog(server: RestServer) -> None:
    with structlog.testing.capture_logs() as logs:
        exchange(server, "GET", "/subscriptions/nope")
    assert {"event": "http request", "method": "GET", "path": "/subscriptions/nope",
            "status": 404, "client": "127.0.0.1", "log_level": "info"} in logs


def test_concurrent_clients_each_get_their_own_subscription(server: RestServer) -> None:
    statuses: list[int] = []

    def client() -> None:
        statuses.extend(exchange(server, "POST", "/subscriptions", WIND)[0] for _ in range(10))

    clients = [threading.Thread(target=client) for _ in range(8)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    listed = exchange(server, "GET", "/subscriptions")[2]
    assert (statuses, len({sub["id"] for sub in listed})) == ([201] * 80, 80)


def test_stop_ends_open_connections_and_leaves_no_thread() -> None:
    server = RestServer(SubscriptionApi(new_manager()), request_timeout=60).start()
    assert server.url == f"http://127.0.0.1:{server.address[1]}"
    idle = http.client.HTTPConnection(*server.address, timeout=10)
    idle.request("GET", "/subscriptions")
    idle.getresponse().read()  # kept alive: its thread waits for the next request
    assert len(rest_threads()) == 2
    started = time.monotonic()
    server.stop()
    assert rest_threads() == []
    assert time.monotonic() - started < 30  # it ended the idle connection, not waited it out
    server.stop()  # idempotent
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(server.address, timeout=10)
    idle.close()
    with pytest.raises(RuntimeError):
        server.start()
