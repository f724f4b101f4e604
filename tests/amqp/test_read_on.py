"""A readable socket's transport is given what the socket holds in one select round, up to
``READ_MOST`` (``seqrepair.amqp.wire.reactor.read_socket``), not one read of its capacity:
reading goes on only while a read filled the capacity, and stops at a drained socket, a read
that would block, end-of-file (told to the caller, which ends the selectable as proton's
handler does), an error (logged, the transport's tail closed, as proton does: at whichever
read it comes, since the kernel tells a reset once), a transport that takes no more, and at
the bound. A whole AMQP exchange goes through it everywhere else in ``tests/amqp``."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from seqrepair.amqp.wire.reactor import _EOF, READ_MOST, read_socket

pytestmark = pytest.mark.amqp


class _Transport:
    def __init__(self, capacity: int = 8192, takes: int | None = None) -> None:
        self._capacity = capacity
        self.takes = takes  # pushes until it takes no more (capacity 0), None: always
        self.pushed: list[bytes] = []
        self.tail_closed = False

    def capacity(self) -> int:
        if self.tail_closed:
            return -1
        if self.takes is not None and len(self.pushed) >= self.takes:
            return 0
        return self._capacity

    def push(self, data: bytes) -> None:
        self.pushed.append(data)

    def close_tail(self) -> None:
        self.tail_closed = True


class _Socket:
    """Chunks as the kernel would give them (an end-of-file, ``b""``, stays); then would-block."""

    def __init__(self, chunks: list[bytes | Exception]) -> None:
        self.chunks = chunks
        self.reads = 0

    def recv(self, size: int) -> bytes:
        self.reads += 1
        if not self.chunks:
            raise BlockingIOError(11, "would block")
        chunk = self.chunks.pop(0)
        if isinstance(chunk, Exception):
            raise chunk
        data, rest = chunk[:size], chunk[size:]
        if rest or not chunk:
            self.chunks.insert(0, rest)
        return data


def test_reads_on_while_a_read_fills_the_capacity() -> None:
    transport, sock = _Transport(), _Socket([b"x" * 20000])
    assert read_socket(sock, transport) == 20000
    assert [len(p) for p in transport.pushed] == [8192, 8192, 3616]
    assert sock.reads == 3  # a short read: drained, no read more to learn it


def test_one_read_when_it_does_not_fill_the_capacity() -> None:
    transport, sock = _Transport(), _Socket([b"y" * 100, b"z" * 100])
    assert read_socket(sock, transport) == 100
    assert sock.reads == 1
    assert sock.chunks == [b"z" * 100]  # the next round's


def test_end_of_file() -> None:
    transport, sock = _Transport(), _Socket([b""])
    assert read_socket(sock, transport) == _EOF  # the caller ends it, as proton does
    transport, sock = _Transport(), _Socket([b"a" * 8192, b""])
    assert read_socket(sock, transport) == 8192  # what came first is given first
    assert read_socket(sock, transport) == _EOF  # end-of-file stays: the next round's
    transport, sock = _Transport(), _Socket([b"a" * 8192])
    assert read_socket(sock, transport) == 8192  # then would block: the round's reading ends
    assert not transport.tail_closed


@pytest.mark.parametrize("at", [0, 1])
def test_an_error_closes_the_tail_at_whichever_read(at: int) -> None:
    transport = _Transport()
    sock = _Socket([*[b"a" * 8192] * at, ConnectionResetError(104, "reset")])
    assert read_socket(sock, transport) == 8192 * at
    assert transport.tail_closed
    assert read_socket(sock, transport) == 0  # a closed tail takes nothing


def test_bounded_and_stops_when_the_transport_takes_no_more() -> None:
    transport, sock = _Transport(), _Socket([b"z" * (READ_MOST * 2)])
    assert read_socket(sock, transport) == READ_MOST
    full, sock = _Transport(takes=2), _Socket([b"z" * 50000])
    assert read_socket(sock, full) == 16384
    assert sock.chunks  # left in the socket for a later round


def test_a_reset_after_a_full_read_on_a_real_socket() -> None:
    """The kernel tells ECONNRESET to one recv only (an orderly end after): met within a
    round's reading, it is handled there as proton handles it."""
    listener = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(listener.getsockname())
    ours, _ = listener.accept()
    ours.setblocking(False)
    try:
        peer.sendall(b"x" * 8192)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # a reset
        time.sleep(0.2)
        transport = _Transport()
        assert read_socket(ours, transport) == 8192  # filled: read on, and met the reset
        assert transport.tail_closed
    finally:
        ours.close()
        listener.close()


def test_a_real_socket_pair() -> None:
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    try:
        right.sendall(b"q" * 30000)
        transport = _Transport()
        assert read_socket(left, transport) == 30000
        right.close()
        assert read_socket(left, transport) == _EOF
    finally:
        left.close()
