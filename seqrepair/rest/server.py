"""The subscription API over HTTP/1.1, on the standard library's threading HTTP server.

A thin adapter: it frames requests (Content-Length bodies only, at most ``api.max_body``
bytes read), hands each to :meth:`SubscriptionApi.handle <seqrepair.rest.api.SubscriptionApi
.handle>` and writes the :class:`~seqrepair.rest.api.Response` back, keeping the connection
alive when it can. What the standard library refuses itself (a malformed request line, headers
too long, an unknown method) is answered in the API's JSON error form too; nothing goes to
stderr, everything is logged through structlog (``seqrepair.rest``).

Requests over a connection the adapter cannot frame close it after the answer: a POST or PUT
without Content-Length (411), a chunked body (411), a malformed Content-Length (400), a body
over the limit, which is not read (413).

What a client can hold is bounded:

- **Connections**: at most ``max_connections`` are served at once, each by its own thread. The
  accepting thread takes a slot (a bounded semaphore) before it starts a connection's thread,
  and the thread gives it back when the connection ends, however it ends (closed by either
  side, timed out, reset, failed). A connection accepted while every slot is taken gets no
  thread: the accepting thread answers ``503`` (``unavailable``, with ``Retry-After``) and
  closes it at once, writing without blocking (the answer fits in a new socket's send buffer).
- **Time**: a request must arrive whole (request line, headers and body) within
  ``request_timeout`` seconds of its first byte, however the client paces it; a client that
  trickles bytes is answered ``408`` (``request-timeout``) if the answer can still be written,
  and the connection closes. (A timeout per read, the standard library's, is not enough: a
  byte just before each one keeps the thread for good.) Every read on the socket waits only
  for what is left of that deadline: the handler reads through :class:`_DeadlineReader`,
  which sets the socket's timeout to the time remaining before each ``recv``, so one deadline
  covers any number of reads, buffered as before, without a timer thread. Waiting for a
  request's first byte (on a new connection, or kept alive between requests) is bounded by
  ``request_timeout`` too; a connection idle that long is closed without an answer. Each
  write of an answer times out after ``request_timeout`` seconds.

A client that sends nothing, or too slowly, thus holds a connection's slot and thread for
about ``request_timeout`` (twice that if it waits before its first byte, plus at most
``request_timeout`` per write of an answer it does not read). :meth:`RestServer.stop` ends the
connections still open, then waits for their threads.

::

    with RestServer(SubscriptionApi(manager), max_connections=64) as server:
        print(server.url)        # http://127.0.0.1:<port>
"""

from __future__ import annotations

import contextlib
import email.utils
import http.server
import io
import math
import re
import socket
import socketserver
import ssl
import sys
import threading
import time
from http import HTTPStatus
from types import TracebackType
from typing import TYPE_CHECKING, Any

from seqrepair.core.errors import InvalidConfigError
from seqrepair.logs import get_logger
from seqrepair.rest.api import Response, SubscriptionApi, error_response

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = get_logger("seqrepair.rest")

REQUEST_TIMEOUT = 30.0
"""Default seconds for a request to arrive whole, and for a connection to wait for one."""

MAX_CONNECTIONS = 64
"""Default number of connections served at once."""

RETRY_AFTER = 1
"""Seconds a client refused for too many connections is told to wait (``Retry-After``)."""

_DIGITS = re.compile(r"[0-9]+")
_ERROR_CODES = {400: "invalid", 413: "payload-too-large", 503: "unavailable"}
"""The API's error codes for statuses the adapter answers itself; other statuses take their
reason phrase (``411`` -> ``length-required``, ``408`` -> ``request-timeout``)."""


def _error(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    code = _ERROR_CODES.get(status) or HTTPStatus(status).phrase.lower().replace(" ", "-")
    return error_response(status, code, message, headers=headers)


class _Expired(Exception):
    """The request's deadline passed before the bytes it was waiting for arrived.

    Not a TimeoutError on purpose: the standard library's request loop swallows those, and
    this one must reach :meth:`_Handler.handle_one_request` to be answered 408.
    """


class _DeadlineReader(io.RawIOBase):
    """The connection's incoming bytes; each read waits only until ``deadline`` (monotonic
    seconds, which the handler moves on for each request). The handler's buffered ``rfile``
    reads through it."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _Expired
        self._sock.settimeout(remaining)
        try:
            return self._sock.recv_into(buffer)
        except TimeoutError:
            raise _Expired from None


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection: its requests in turn, each answered by the server's API."""

    protocol_version = "HTTP/1.1"
    server_version = "seqrepair"
    sys_version = ""  # the Server header need not name the Python version
    # A request line without a version is answered with a status line and headers too (the
    # standard library would take it for HTTP/0.9 and send a bare body); 0.9 is not served.
    default_request_version = "HTTP/1.1"
    server: _Server
    _reader: _DeadlineReader
    _incoming: io.BufferedReader

    def setup(self) -> None:
        super().setup()
        # the socket's own buffered reader is closed (else the socket's file descriptor would
        # outlive its close) and replaced by one whose reads keep to the request's deadline
        self.rfile.close()
        self._reader = _DeadlineReader(self.connection,
                                       time.monotonic() + self.server.request_timeout)
        self.rfile = self._incoming = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        """Wait for a request's first byte (``request_timeout`` at most), then read, answer
        and write it: the request must arrive whole within ``request_timeout`` of that byte,
        or it is answered 408 and the connection closes."""
        timeout = self.server.request_timeout
        self._reader.deadline = time.monotonic() + timeout
        try:
            if not self._incoming.peek(1):
                self.close_connection = True  # the client closed (or stop() did)
                return
        except _Expired:
            self.close_connection = True
            log.debug("http connection idle, closed", client=self.client_address[0])
            return
        self._reader.deadline = time.monotonic() + timeout
        # a 408 before the request line is read must not describe the previous request
        self.command, self.path, self.request_version = "", "", self.default_request_version
        try:
            super().handle_one_request()
        except _Expired:
            self.close_connection = True
            log.info("http request timed out", client=self.client_address[0], timeout=timeout)
            with contextlib.suppress(OSError):  # gone, or not reading: nothing to tell it
                self._write(_error(408, f"the request did not arrive within {timeout:g} s"))

    def _serve(self) -> None:
        api = self.server.api
        body = self._read_body(api.max_body)
        if body is None:
            return
        response = api.handle(self.command, self.path, self.headers, body)
        self._write(response)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = _serve

    def _read_body(self, limit: int) -> bytes | None:
        """The request's body, or None when the request was answered here already. A body
        left unread (over ``limit``, or unframeable) closes the connection after the answer."""
        if self.headers.get("Transfer-Encoding") is not None:
            self.close_connection = True
            self._write(_error(411, "only Content-Length bodies are taken, not chunked"))
            return None
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or ()}
        if not lengths:
            if self.command in ("POST", "PUT"):
                self.close_connection = True
                self._write(_error(411, f"a {self.command} needs a Content-Length"))
                return None
            return b""
        length = lengths.pop()
        if lengths or not _DIGITS.fullmatch(length):
            self.close_connection = True
            self._write(_error(400, "a malformed Content-Length"))
            return None
        length = length.lstrip("0") or "0"
        if len(length) > len(str(limit)) or int(length) > limit:
            self.close_connection = True  # the API answers 413 (or 401...); the body stays
            return b""
        body = self.rfile.read(int(length))
        if len(body) < int(length):
            self.close_connection = True
            log.info("http client went away", client=self.client_address[0],
                     error=f"{len(body)} of {length} body bytes")
            return None
        return body

    def _write(self, response: Response) -> None:
        self.connection.settimeout(self.server.request_timeout)  # not what a read left
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and response.body:
            self.wfile.write(response.body)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """What the standard library refuses (bad request line, headers too long, an unknown
        method), answered in the API's JSON form; the connection closes after it."""
        self.close_connection = True
        try:
            response = _error(code, message or HTTPStatus(code).phrase)
        except ValueError:  # not a status HTTPStatus knows
            response = error_response(code, "error", message or "error")
        self._write(response)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # path and command are unset when the request line itself was refused
        log.info("http request", method=getattr(self, "command", None),
                 path=str(getattr(self, "path", ""))[:200],
                 status=int(code) if isinstance(code, int) else code,
                 client=self.client_address[0])

    def log_message(self, format: str, *args: Any) -> None:
        log.warning("http " + (format % args)[:500], client=self.client_address[0])


class _Server(http.server.ThreadingHTTPServer):
    """Serves at most ``max_connections`` connections at once, and tracks them and their
    threads, so that :meth:`RestServer.stop` can end them (the standard library lets daemon
    handler threads run on unseen)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], api: SubscriptionApi,
                 request_timeout: float, max_connections: int,
                 tls: ssl.SSLContext | None = None) -> None:
        self.api = api
        self.tls = tls
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.slots = threading.BoundedSemaphore(max_connections)
        self.connections: set[socket.socket] = set()
        self.workers: list[threading.Thread] = []
        self.lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would ask DNS for the host's name (socket.getfqdn), which
        # can take seconds; the name is not used.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        # runs on the accepting thread: a connection gets a thread only with a slot
        if not self.slots.acquire(blocking=False):
            self.refuse(request, client_address, f"over {self.max_connections} connections")
            return
        worker = threading.Thread(target=self.serve_connection,
                                  args=(request, client_address),
                                  name=f"seqrepair-rest {client_address[0]}", daemon=True)
        with self.lock:
            self.workers = [w for w in self.workers if w.is_alive()]
            self.workers.append(worker)
            self.connections.add(request)
        try:
            worker.start()
        except RuntimeError:  # the system would not start one more thread
            with self.lock:
                self.workers.remove(worker)
                self.connections.discard(request)
            self.slots.release()
            self.refuse(request, client_address, "no thread to serve the connection")

    def serve_connection(self, request: Any, client_address: Any) -> None:
        """A connection's thread: (TLS: the handshake, within ``request_timeout``) serve it,
        close it, give its slot back."""
        try:
            if self.tls is not None:
                request = self.handshake(request, client_address)
                if request is None:
                    return
            self.process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handshake(self, request: socket.socket, client_address: Any) -> ssl.SSLSocket | None:
        """``request`` wrapped in TLS (None, closed, when the handshake fails or takes longer
        than ``request_timeout``)."""
        assert self.tls is not None
        request.settimeout(self.request_timeout)
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            log.info("tls handshake failed", client=client_address[0], error=str(exc)[:200])
            with self.lock:
                self.connections.discard(request)
            request.close()
            return None
        with self.lock:  # the wrapped socket took over the descriptor
            self.connections.discard(request)
            self.connections.add(wrapped)
        return wrapped

    def refuse(self, request: socket.socket, client_address: Any, why: str) -> None:
        """Answer 503 (with ``Retry-After``) and close, without blocking the accepting
        thread: nothing is waited for, what cannot be sent at once is not sent."""
        log.warning("http connection refused", client=client_address[0], reason=why,
                    max_connections=self.max_connections)
        response = _error(503, f"the server is busy ({why}); try again later",
                          (("Retry-After", str(RETRY_AFTER)),))
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.send(_wire(response))
            request.shutdown(socket.SHUT_WR)
            # closing with unread bytes (the request, if it has arrived) would send a reset
            # rather than an end, which some clients take in place of the answer
            for _ in range(4):  # what has arrived, not a flood
                if not request.recv(65536):
                    break
        request.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints the traceback to stderr; a client that resets mid-answer is
        # routine, anything else is worth the traceback in the log
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            log.info("http client went away", client=client_address[0], error=repr(error))
        else:
            log.exception("http connection failed", client=client_address[0])

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def end_connections(self) -> list[threading.Thread]:
        """Stop reading on every open connection (a handler waiting for the next request
        sees the end; one mid-request still answers); the threads to wait for."""
        with self.lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):  # already closed by the peer
                    connection.shutdown(socket.SHUT_RD)
            return list(self.workers)


def _wire(response: Response) -> bytes:
    """``response`` as HTTP/1.1 bytes, closing the connection (for a connection that no
    handler serves)."""
    head = [f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}",
            f"Server: {_Handler.server_version}",
            f"Date: {email.utils.formatdate(usegmt=True)}",
            *(f"{name}: {value}" for name, value in response.headers),
            "Connection: close"]
    return "\r\n".join([*head, "", ""]).encode("latin-1") + response.body


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 at least) with this certificate and key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class RestServer:
    """Serves a :class:`~seqrepair.rest.api.SubscriptionApi` on ``host:port`` (port 0: any free
    port) from a daemon thread, one more thread per connection.

    ``request_timeout``: seconds a request may take to arrive whole from its first byte, and
    a connection may wait for a request (a finite number > 0). ``tls``: serve HTTPS with this
    server-side context (:func:`tls_context`); the handshake runs on the connection's thread,
    within ``request_timeout``. ``max_connections``: how many
    connections are served at once; one more is answered 503 and closed (an integer >= 1).
    Either out of range is an InvalidConfigError.
    """

    def __init__(self, api: SubscriptionApi, host: str = "127.0.0.1", port: int = 0, *,
                 request_timeout: float = REQUEST_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS,
                 tls: ssl.SSLContext | None = None) -> None:
        if (isinstance(request_timeout, bool) or not isinstance(request_timeout, int | float)
                or not 0 < request_timeout < math.inf):  # NaN fails too
            raise InvalidConfigError("request_timeout must be a finite number of seconds > 0",
                                     expected="> 0", got=request_timeout)
        if (isinstance(max_connections, bool) or not isinstance(max_connections, int)
                or max_connections < 1):
            raise InvalidConfigError("max_connections must be an integer >= 1",
                                     expected=">= 1", got=max_connections)
        self.api = api
        self.host = host
        self.port = port
        self.request_timeout = float(request_timeout)
        self.max_connections = max_connections
        self.tls = tls
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._address: tuple[str, int] | None = None
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> RestServer:
        """Bind and start serving; return self. A server starts once (OSError when the
        address cannot be bound)."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("a stopped RestServer does not start again")
            if self._server is None:
                self._server = _Server((self.host, self.port), self.api, self.request_timeout,
                                       self.max_connections, self.tls)
                host, port = self._server.server_address[:2]
                self._address = (str(host), int(port))
                self._thread = threading.Thread(
                    target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                    name="seqrepair-rest", daemon=True)
                self._thread.start()
                log.info("rest api serving", url=self.url)
        return self

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port) (also after stop)."""
        if self._address is None:
            raise RuntimeError("the RestServer is not started")
        return self._address

    @property
    def url(self) -> str:
        """``http[s]://host:port`` (brackets around an IPv6 host)."""
        host, port = self.address
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    def stop(self) -> None:
        """Stop accepting, end open connections and wait for every thread (idempotent)."""
        with self._lock:
            server, thread = self._server, self._thread
            self._stopped = True
            self._server = self._thread = None
        if server is None or thread is None:
            return
        server.shutdown()
        thread.join()
        workers = server.end_connections()
        server.server_close()
        for worker in workers:
            # a handler inside the API (a store call) finishes first; its writes time out
            worker.join(self.request_timeout + 1.0)
            if worker.is_alive():
                log.warning("rest connection thread still running after stop",
                            thread=worker.name)
        log.info("rest api stopped")

    def __enter__(self) -> RestServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
