"""The subscription API over HTTP/1.1, on the standard library's threading HTTP server.

A thin adapter: it frames requests (Content-Length bodies only, at most ``api.max_body``
bytes read), hands each to :meth:`SubscriptionApi.handle <seqrepair.rest.api.SubscriptionApi
.handle>` and writes the :class:`~seqrepair.rest.api.Response` back, keeping the connection
alive when it can. What the standard library refuses itself (a malformed request line, headers
too long, an unknown method) is answered in the API's JSON error form too; nothing goes to
stderr, everything is logged through structlog (``seqrepair.rest``).

Requests over a connection the adapter cannot frame close it after the answer: a POST or PUT
without Content-Length (411), a chunked body (411), a malformed Content-Length (400), a body
over the limit, which is not read (413). Each read and write on a connection times out after
``request_timeout`` seconds, so an idle or stalled client does not hold a thread for good; and
:meth:`RestServer.stop` ends the connections still open, then waits for their threads.

::

    with RestServer(SubscriptionApi(manager)) as server:
        print(server.url)        # http://127.0.0.1:<port>
"""

from __future__ import annotations

import contextlib
import http.server
import re
import socket
import socketserver
import sys
import threading
from http import HTTPStatus
from types import TracebackType
from typing import Any

import structlog

from seqrepair.core.errors import InvalidConfigError
from seqrepair.rest.api import Response, SubscriptionApi, error_response

log = structlog.get_logger("seqrepair.rest")

REQUEST_TIMEOUT = 30.0
"""Default seconds a connection may stay silent (mid-request or between requests)."""

_DIGITS = re.compile(r"[0-9]+")
_ERROR_CODES = {400: "invalid", 413: "payload-too-large"}
"""The API's error codes for statuses the adapter answers itself; other statuses take their
reason phrase (``411`` -> ``length-required``)."""


def _error(status: int, message: str) -> Response:
    code = _ERROR_CODES.get(status) or HTTPStatus(status).phrase.lower().replace(" ", "-")
    return error_response(status, code, message)


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection: its requests in turn, each answered by the server's API."""

    protocol_version = "HTTP/1.1"
    server_version = "seqrepair"
    sys_version = ""  # the Server header need not name the Python version
    # A request line without a version is answered with a status line and headers too (the
    # standard library would take it for HTTP/0.9 and send a bare body); 0.9 is not served.
    default_request_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)

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
    """Tracks its connections and their threads, so that :meth:`RestServer.stop` can end
    them (the standard library lets daemon handler threads run on unseen)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], api: SubscriptionApi,
                 request_timeout: float) -> None:
        self.api = api
        self.request_timeout = request_timeout
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
        worker = threading.Thread(target=self.process_request_thread,
                                  args=(request, client_address),
                                  name=f"seqrepair-rest {client_address[0]}", daemon=True)
        with self.lock:
            self.workers = [w for w in self.workers if w.is_alive()]
            self.workers.append(worker)
            self.connections.add(request)
        worker.start()

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


class RestServer:
    """Serves a :class:`~seqrepair.rest.api.SubscriptionApi` on ``host:port`` (port 0: any free
    port) from a daemon thread, one more thread per connection."""

    def __init__(self, api: SubscriptionApi, host: str = "127.0.0.1", port: int = 0, *,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        if not request_timeout > 0:
            raise InvalidConfigError("request_timeout must be > 0", expected="> 0",
                                     got=request_timeout)
        self.api = api
        self.host = host
        self.port = port
        self.request_timeout = request_timeout
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
                self._server = _Server((self.host, self.port), self.api, self.request_timeout)
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
        """``http://host:port`` (brackets around an IPv6 host)."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

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
