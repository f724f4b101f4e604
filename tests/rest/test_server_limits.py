"""What a client can hold of the RestServer: a capped number of connections, each request
bounded in time as a whole. Real sockets over loopback."""

from __future__ import annotations

import http.client
import json
import math
import select
import socket
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from polling import wait_for

from seqrepair.core.errors import InvalidConfigError
from seqrepair.rest.api import SubscriptionApi
from seqrepair.rest.server import RestServer

from .conftest import new_manager
from .test_server import exchange, rest_threads

HEAD = b"GET /subscriptions HTTP/1.1\r\nHost: x\r\n"
POST_HEAD = (b"POST /subscriptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 1000\r\n\r\n")


def serving(**settings: Any) -> RestServer:
    return RestServer(SubscriptionApi(new_manager()), **settings)


def held(server: RestServer) -> http.client.HTTPConnection:
    """A connection that was answered once and is kept alive (it holds a slot)."""
    connection = http.client.HTTPConnection(*server.address, timeout=10)
    connection.request("GET", "/subscriptions")
    response = connection.getresponse()
    assert (response.status, response.read()) == (200, b"[]")
    return connection


def only_the_accepting_thread_left() -> bool:
    return rest_threads() == ["seqrepair-rest"]


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends before it closes (a reset after it ends the reading)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def trickle(server: RestServer, head: bytes, sent: list[bytes], every: float = 0.2,
            limit: float = 20.0) -> bytes:
    """Send ``head``, then one byte every ``every`` seconds (each appended to ``sent``) until
    the server answers or closes; what it sent. Fails if it lets the client go on for
    ``limit`` seconds."""
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(head)
        given_up = time.monotonic() + limit
        while not select.select([sock], [], [], every)[0]:
            assert time.monotonic() < given_up, f"still reading after {limit} s"
            try:
                sock.sendall(b"a")
            except OSError:  # closed under us: what it answered is still to read
                break
            sent.append(b"a")
        return read_to_end(sock)


def assert_json_error(answer: bytes, status: int, code: str) -> bytes:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert b"\r\nConnection: close" in head
    assert json.loads(body)["error"] == code
    return head


def test_a_connection_over_the_cap_is_answered_503_and_closed_while_the_others_are_served(
) -> None:
    with serving(max_connections=2) as server:
        first, second = held(server), held(server)
        status, headers, body = exchange(server, "GET", "/subscriptions")
        assert (status, body["error"], headers["Retry-After"]) == (503, "unavailable", "1")
        assert headers["Connection"] == "close"
        with socket.create_connection(server.address, timeout=10) as silent:
            assert_json_error(read_to_end(silent), 503, "unavailable")
        for connection in (first, second):  # the held ones were not disturbed
            connection.request("GET", "/subscriptions")
            assert connection.getresponse().status == 200
            connection.close()
        assert wait_for(only_the_accepting_thread_left)
        again = [held(server), held(server)]
        assert exchange(server, "GET", "/subscriptions")[0] == 503
        for connection in again:
            connection.close()


def close(connection: http.client.HTTPConnection) -> None:
    connection.close()


def reset(connection: http.client.HTTPConnection) -> None:
    assert connection.sock is not None
    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def send_half_a_request(connection: http.client.HTTPConnection) -> None:
    assert connection.sock is not None
    connection.sock.sendall(HEAD)  # the server times it out (408), the client goes on idle


def stay_silent(connection: http.client.HTTPConnection) -> None:
    """The server times the kept-alive connection out."""


@pytest.mark.parametrize("end", [close, reset, send_half_a_request, stay_silent])
def test_every_way_a_connection_ends_gives_its_slot_back(
    end: Callable[[http.client.HTTPConnection], None],
) -> None:
    with serving(max_connections=2, request_timeout=0.5) as server:
        for _ in range(3):
            connections = [held(server), held(server)]
            for connection in connections:
                end(connection)
            assert wait_for(only_the_accepting_thread_left)
            for connection in connections:
                connection.close()
        for connection in [held(server), held(server)]:  # N ended, N more served
            connection.close()


def test_a_client_trickling_its_headers_is_cut_off_and_others_are_served_meanwhile() -> None:
    with serving(request_timeout=1) as server, ThreadPoolExecutor(1) as pool:
        sent: list[bytes] = []
        slowloris = pool.submit(trickle, server, HEAD + b"X-Pad: ", sent)
        assert wait_for(lambda: len(sent) >= 2)
        assert exchange(server, "GET", "/subscriptions")[0] == 200
        answer = slowloris.result(timeout=30)
        head = assert_json_error(answer, 408, "request-timeout")
        assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert wait_for(only_the_accepting_thread_left)


def test_a_client_trickling_the_body_is_cut_off() -> None:
    with serving(request_timeout=1) as server:
        sent: list[bytes] = []
        answer = trickle(server, POST_HEAD, sent)
        assert_json_error(answer, 408, "request-timeout")
        assert len(sent) < 1000  # the body was never whole
        assert wait_for(only_the_accepting_thread_left)


def test_the_deadline_runs_from_the_first_byte_of_a_request_not_from_the_connection() -> None:
    # each request has 2 s from its first byte (room for a loaded machine's stalls); the
    # connection lives longer than that in all
    with serving(request_timeout=2) as server, \
            socket.create_connection(server.address, timeout=10) as sock:
        for _ in range(3):  # three requests over one connection, longer than 2 s in all
            time.sleep(0.8)
            for part in (HEAD, b"Accept: application/json\r\n", b"\r\n"):
                sock.sendall(part)
                time.sleep(0.05)
            response = http.client.HTTPResponse(sock)
            response.begin()
            assert (response.status, response.read()) == (200, b"[]")


def test_a_kept_alive_connection_left_idle_is_closed_without_an_answer() -> None:
    with serving(request_timeout=0.3) as server:
        connection = held(server)
        assert connection.sock is not None
        assert connection.sock.recv(1) == b""  # closed by the server, not by our 10 s timeout
        connection.close()


@pytest.mark.parametrize("settings", [
    {"max_connections": 0}, {"max_connections": -1}, {"max_connections": 1.5},
    {"max_connections": True}, {"max_connections": "8"},
    {"request_timeout": 0}, {"request_timeout": -1.0}, {"request_timeout": math.nan},
    {"request_timeout": math.inf}, {"request_timeout": True}, {"request_timeout": "30"},
])
def test_settings_out_of_range_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        serving(**settings)
