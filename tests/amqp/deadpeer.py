"""A dead-but-alive subscriber: it attaches, grants much credit, then never reads its socket.

Proton's engine is driven by hand over a plain socket (no reactor, which would always read):
the handshake and the attach are read until the link is open, then the peer only writes (its
empty frames keep the connection alive against the component's idle timeout) and leaves
everything the component sends in the kernel's buffers and, past them, the component's.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from proton import Connection, Endpoint, Transport


class DeadPeer:
    """One connection, one receiving link on ``address`` named ``name`` with ``credit``."""

    def __init__(self, url: str, address: str, name: str, *, credit: int = 10_000_000,
                 container: str = "dead-peer") -> None:
        host, port = url.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        # a small receive buffer: the kernel holds less of what the component could not keep
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.conn = Connection()
        self.conn.container = container
        self.transport = Transport()
        self.transport.idle_timeout = 2.0
        self.transport.bind(self.conn)
        self.conn.open()
        session = self.conn.session()
        session.open()
        self.receiver: Any = session.receiver(name)
        self.receiver.source.address = address
        self.receiver.target.address = name
        self.receiver.open()
        self.receiver.flow(credit)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        while (pending := self.transport.pending()) > 0:
            sent = self.sock.send(self.transport.peek(pending))
            self.transport.pop(sent)

    def open(self, timeout: float = 10.0) -> DeadPeer:
        """Read until the link is attached (or refused), then stop reading for good."""
        deadline = time.monotonic() + timeout
        while not self.receiver.state & Endpoint.REMOTE_ACTIVE:
            if self.receiver.state & Endpoint.REMOTE_CLOSED or time.monotonic() > deadline:
                raise RuntimeError(f"attach not answered: {self.receiver.remote_condition}")
            self._write()
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("component closed the connection")
            self.transport.push(data)
        self._write()
        self._thread = threading.Thread(target=self._keep_alive, daemon=True)
        self._thread.start()
        return self

    def _keep_alive(self) -> None:
        """Empty frames now and then (the component's idle timeout), nothing ever read."""
        self.sock.setblocking(True)
        while not self._stop.wait(0.5):
            self.transport.tick(time.monotonic())
            try:
                self.sock.sendall(b"\x00\x00\x00\x08\x02\x00\x00\x00")  # an empty AMQP frame
            except OSError:
                return

    def close(self) -> None:
        """Drop the connection (as a crashed peer does: no close frame)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sock.close()
