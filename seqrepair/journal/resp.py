"""Redis replies read by hand: a flat buffer and one index, not redis-py's generic parser.

redis-py reads a reply through its socket buffer line by line (a ``BytesIO`` seek and tell per
line, a method call per element): for the small replies of the hot paths, the append script's
``[b"ok", b"<high-water>"]`` and the journal's Pub/Sub announcements, that was most of the
cost of taking them (the component's announcement feed, ~a fifth of its CPU at one
publication per transfer; the publisher's append replies likewise). :class:`ReplyReader` reads
what the socket has into one buffer and frames the replies in it with :func:`parse`.

What :func:`parse` returns is what redis-py's parsers return for the same bytes with
``decode_responses=False`` (RESP2 and RESP3; tests compare the two on every reply shape):
bytes for simple and bulk strings, ``int``, ``float``, ``bool``, None for the nulls, lists
for arrays, sets and pushes, a ``dict`` for maps, and for an error the exception instance
redis-py's ``parse_error`` makes of it (a ``ConnectionError`` kind raised at once, as
redis-py does; a ``ResponseError`` returned inside an array, raised at the top by
:meth:`ReplyReader.read`). Anything else is a protocol error (``InvalidResponse``).
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["INCOMPLETE", "ReplyReader", "parse"]


class _Incomplete(Exception):
    """The buffer ends before the reply does (read more, then parse again)."""


class _Sentinel:
    def __repr__(self) -> str:
        return "INCOMPLETE"


INCOMPLETE: Any = _Sentinel()
"""What :func:`parse` returns when the buffer ends before the reply does."""

READ_SIZE = 65536


def _parse_error(text: str) -> Any:
    from redis._parsers.base import BaseParser  # redis-py's own error classes and mapping

    return BaseParser.parse_error(text)  # type: ignore[no-untyped-call]


def _value(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """The reply starting at ``pos`` and the index after it; raises ``_Incomplete``."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind = buf[pos]
    line = buf[pos + 1:end]
    pos = end + 2
    if kind == 36:  # $ bulk string
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return bytes(buf[pos:pos + size]), pos + size + 2
    if kind in (42, 62, 126):  # * array, > push, ~ set
        count = int(line)
        if count < 0:
            return None, pos
        items = []
        for _ in range(count):
            item, pos = _value(buf, pos)
            items.append(item)
        return items, pos
    if kind == 58 or kind == 40:  # : integer, ( big number
        return int(line), pos
    if kind == 43:  # + simple string
        return bytes(line), pos
    if kind == 45 or kind == 33:  # - error, ! blob error
        if kind == 33:
            size = int(line)
            if len(buf) < pos + size + 2:
                raise _Incomplete
            line, pos = buf[pos:pos + size], pos + size + 2
        error = _parse_error(bytes(line).decode("utf-8", errors="replace"))
        from redis.exceptions import ConnectionError as RedisConnectionError

        if isinstance(error, RedisConnectionError):
            raise error
        return error, pos
    if kind == 95:  # _ null
        return None, pos
    if kind == 44:  # , double
        return float(line), pos
    if kind == 35:  # # boolean
        return line == b"t", pos
    if kind == 61:  # = verbatim string: "txt:" and the text
        size = int(line)
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return bytes(buf[pos + 4:pos + size]), pos + size + 2
    if kind == 37:  # % map
        mapping = {}
        for _ in range(int(line)):
            key, pos = _value(buf, pos)
            mapping[key], pos = _value(buf, pos)
        return mapping, pos
    from redis.exceptions import InvalidResponse

    raise InvalidResponse(f"Protocol Error: {bytes(buf[pos - len(line) - 3:pos])!r}")


def parse(buf: bytes | bytearray, pos: int = 0) -> Any:
    """The reply that starts at ``buf[pos]`` and the index after it, or :data:`INCOMPLETE`
    when ``buf`` ends before it does. An error reply is returned as redis-py's exception
    instance, but one redis-py raises (a ``ConnectionError`` kind) is raised."""
    if pos >= len(buf):
        return INCOMPLETE
    try:
        return _value(buf, pos)
    except _Incomplete:
        return INCOMPLETE


class ReplyReader:
    """The replies on ``sock``, read into one buffer and framed by :func:`parse`.

    Once a reader reads a connection, every reply on it must be read through the reader
    (what the socket gave beyond one reply stays in the reader's buffer). A socket error,
    timeout or end raises redis-py's ``ConnectionError`` / ``TimeoutError`` (the connection
    is then not to be used again).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes read from the socket and not yet taken as replies."""
        return len(self._buf) - self._pos

    def _take(self) -> Any:
        got = parse(self._buf, self._pos)
        if got is INCOMPLETE:
            return INCOMPLETE
        value, self._pos = got
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos > READ_SIZE:
            del self._buf[:self._pos]
            self._pos = 0
        return value

    def _receive(self) -> bool:
        """Add what the socket has to the buffer; False when a non-blocking socket has
        nothing now. A timeout raises redis-py's ``TimeoutError``, a failed or closed
        connection its ``ConnectionError``."""
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        try:
            chunk = self._sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return False
        except TimeoutError as exc:  # socket.timeout
            raise RedisTimeoutError("Timeout reading from the journal") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error while reading from the journal: {exc}") from exc
        if not chunk:
            raise RedisConnectionError("Connection closed by server.")
        self._buf += chunk
        return True

    def read(self) -> Any:
        """The next reply, waiting for it (up to the socket's timeout); an error reply is
        raised (redis-py's exception, as ``Connection.read_response`` raises it)."""
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import ResponseError

        while (value := self._take()) is INCOMPLETE:
            if not self._receive():
                raise RedisConnectionError(
                    "Error while reading from the journal: a non-blocking socket had nothing")
        if isinstance(value, ResponseError):
            raise value
        return value

    def read_ready(self) -> list[Any]:
        """Every reply the socket has now, without waiting: the socket must be a plain (not a
        TLS) socket set non-blocking (``setblocking(False)``; one with a timeout waits for
        it). Error replies are returned as they are parsed, not raised."""
        while self._receive():
            pass
        replies: list[Any] = []
        while True:
            value = self._take()
            if value is INCOMPLETE:
                return replies
            replies.append(value)
