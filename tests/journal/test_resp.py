"""The hand-framed Redis reply reader returns and raises what redis-py's parsers do for the
same bytes (RESP2 and RESP3), whole or split anywhere; and over a real redis-server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from seqrepair.journal import EmbeddedRedis
from seqrepair.journal.pipelined import APPEND_SHA
from seqrepair.journal.resp import INCOMPLETE, ReplyReader, parse

# every shape either protocol may answer with; the append script's own replies first
BOTH = [
    b"*2\r\n$2\r\nok\r\n$5\r\n12345\r\n",  # appended: the new high-water
    b"*2\r\n$4\r\nbits\r\n$2\r\n16\r\n",  # journaled with other bits
    b"*2\r\n$8\r\nconflict\r\n$1\r\n7\r\n",  # not the high-water + 1
    b"*2\r\n$2\r\nok\r\n:12345\r\n",
    b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
    b"-ERR Error running script (call to f_x): @user_script:1: oops\r\n",
    b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
    b"-READONLY You can't write against a read only replica.\r\n",
    b"-OOM command not allowed when used memory > 'maxmemory'.\r\n",
    b"-MOVED 3999 127.0.0.1:6381\r\n",
    b"-ASK 3999 127.0.0.1:6381\r\n",
    b"-BUSY Redis is busy running a script.\r\n",
    b"-NOPERM this user has no permissions to run the 'evalsha' command\r\n",
    b"-EXECABORT Transaction discarded because of previous errors.\r\n",
    b"-LOADING Redis is loading the dataset in memory\r\n",  # a ConnectionError kind: raised
    b"-NOAUTH Authentication required.\r\n",
    b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    b"-Not a code\r\n",
    b"+OK\r\n",
    b"+\r\n",
    b":0\r\n",
    b":-42\r\n",
    b"$0\r\n\r\n",
    b"$13\r\nwith\r\nnewline\r\n",
    b"$4\r\n\xff\x00\r\n\r\n",
    b"*0\r\n",
    b"*3\r\n$7\r\nmessage\r\n$19\r\nseqrepair:journaled\r\n$9\r\n12 feed.a\r\n",
    b"*3\r\n$9\r\nsubscribe\r\n$19\r\nseqrepair:journaled\r\n:1\r\n",
    b"*2\r\n*2\r\n:1\r\n$1\r\na\r\n*0\r\n",
    b"*3\r\n$1\r\na\r\n-ERR inside\r\n:3\r\n",
]
RESP2 = [b"$-1\r\n", b"*-1\r\n", b"*2\r\n$-1\r\n*-1\r\n"]  # RESP3 has _ for these
RESP3 = [
    b">3\r\n$7\r\nmessage\r\n$19\r\nseqrepair:journaled\r\n$9\r\n12 feed.a\r\n",
    b">3\r\n$9\r\nsubscribe\r\n$19\r\nseqrepair:journaled\r\n:1\r\n",
    b"_\r\n",
    b",3.25\r\n",
    b",-inf\r\n",
    b"#t\r\n",
    b"#f\r\n",
    b"(3492890328409238509324850943850943825024385\r\n",
    b"=15\r\ntxt:Some string\r\n",
    b"!21\r\nSYNTAX invalid syntax\r\n",
    b"!13\r\nERR \r\n inside\r\n",
    b"%2\r\n$1\r\na\r\n:1\r\n+b\r\n*1\r\n_\r\n",
    b"~2\r\n:1\r\n$1\r\nx\r\n",
    b"*2\r\n_\r\n#t\r\n",
]


def redis_py_reads(data: bytes, protocol: int) -> Any:
    """What redis-py's connection returns (or raises) reading ``data``."""
    ours, theirs = socket.socketpair()
    try:
        conn = redis.Connection(protocol=protocol)
        conn._sock = theirs
        conn._parser.on_connect(conn)
        ours.sendall(data)
        try:
            if protocol == 3:
                return conn.read_response(push_request=True)
            return conn.read_response()
        except Exception as exc:  # what it raises is what is compared
            return exc
    finally:
        ours.close()
        theirs.close()


def reader_reads(data: bytes, split: int | None = None) -> Any:
    """What ReplyReader.read returns (or raises) for ``data``, sent in two parts."""
    ours, theirs = socket.socketpair()
    try:
        theirs.settimeout(5)
        reader = ReplyReader(theirs)
        if split is None:
            ours.sendall(data)
            try:
                return reader.read()
            except Exception as exc:
                return exc
        ours.sendall(data[:split])
        theirs.setblocking(False)
        assert reader.read_ready() == []
        theirs.settimeout(5)  # not a whole reply yet: nothing taken
        ours.sendall(data[split:])
        try:
            return reader.read()
        except Exception as exc:
            return exc
    finally:
        ours.close()
        theirs.close()


def same(a: Any, b: Any) -> bool:
    if isinstance(a, BaseException) or isinstance(b, BaseException):
        return type(a) is type(b) and a.args == b.args
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("data", BOTH)
def test_every_shape_is_read_as_redis_py_reads_it(data: bytes, protocol: int) -> None:
    expected = redis_py_reads(data, protocol)
    assert same(reader_reads(data), expected), (reader_reads(data), expected)


@pytest.mark.parametrize(("data", "protocol"), [(d, 3) for d in RESP3] + [(d, 2) for d in RESP2])
def test_every_shape_of_one_protocol_is_read_as_redis_py_reads_it(
    data: bytes, protocol: int
) -> None:
    expected = redis_py_reads(data, protocol)
    assert same(reader_reads(data), expected), (reader_reads(data), expected)


@pytest.mark.parametrize("data", [d for d in BOTH + RESP3 + RESP2 if not d.startswith(b"-LOADING")])
def test_a_reply_split_anywhere_is_read_whole(data: bytes) -> None:
    whole = reader_reads(data)
    for split in range(1, len(data)):
        assert parse(data[:split]) is INCOMPLETE
        assert same(reader_reads(data, split), whole), split


def test_replies_back_to_back_are_taken_one_by_one_and_errors_returned() -> None:
    data = b"".join(BOTH[:3]) + b"-ERR no\r\n" + b">2\r\n$1\r\na\r\n:1\r\n" + b"$3\r\nab"
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.setblocking(False)
        reader = ReplyReader(theirs)
        ours.sendall(data)
        got = reader.read_ready()
        assert got[:3] == [[b"ok", b"12345"], [b"bits", b"16"], [b"conflict", b"7"]]
        assert isinstance(got[3], ResponseError)
        assert got[3].args == ("no",)
        assert got[4:] == [[b"a", 1]]
        assert reader.buffered == len(b"$3\r\nab")
        ours.sendall(b"c\r\n")
        assert reader.read_ready() == [b"abc"]
        assert reader.buffered == 0


def test_a_closed_connection_and_a_timeout_are_redis_py_errors() -> None:
    ours, theirs = socket.socketpair()
    with theirs:
        theirs.settimeout(0.01)
        reader = ReplyReader(theirs)
        with pytest.raises(redis.exceptions.TimeoutError):
            reader.read()
        ours.sendall(b"$5\r\nab")
        ours.close()
        with pytest.raises(redis.exceptions.ConnectionError):
            reader.read()


def test_an_unknown_type_byte_is_a_protocol_error() -> None:
    with pytest.raises(redis.exceptions.InvalidResponse):
        parse(b"?what\r\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path_factory.mktemp("resp"), appendfsync="no") as srv:
        yield srv


@pytest.mark.redis
@pytest.mark.parametrize("protocol", [2, 3])
def test_a_real_servers_replies_read_as_redis_py_reads_them(
    server: EmbeddedRedis, protocol: int
) -> None:
    """The bytes a real redis-server sends for the append's replies (appended, refused, no
    script, a script error, a wrong type) and others, read by both."""
    from seqrepair.journal import Journal
    from seqrepair.journal.scripts import APPEND

    client = redis.Redis.from_url(server.url, protocol=protocol)
    client.flushall()
    client.script_load(APPEND)
    envelope = b'[["1","/a","update","{}",null,null,"1"]]'
    gap = b'[["5","/a","update","{}",null,null,"5"]]'
    Journal(client).register_source("s", 16)
    commands = [
        ["HELLO", str(protocol)],
        ["EVALSHA", APPEND_SHA, "2", "{s}:stream", "{s}:meta", "s", "16", envelope],
        ["EVALSHA", APPEND_SHA, "2", "{s}:stream", "{s}:meta", "s", "16", gap],
        ["EVALSHA", APPEND_SHA, "2", "{s}:stream", "{s}:meta", "s", "8", gap],
        ["EVALSHA", "0" * 40, "0"],
        ["EVAL", "return redis.error_reply('MINE went wrong')", "0"],
        ["EVAL", "error('raised')", "0"],
        ["SET", "str", "x"],
        ["LPUSH", "str", "y"],
        ["GET", "missing"],
        ["HGETALL", "{s}:meta"],
        ["XRANGE", "{s}:stream", "-", "+"],
        ["SUBSCRIBE", "seqrepair:journaled"],
    ]
    for command in commands:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            if command[0] != "HELLO":  # each on a connection spoken to in the protocol
                sock.sendall(pack(["HELLO", str(protocol)]))
                ReplyReader(sock).read()
            sock.sendall(pack(command))
            data = read_some(sock)
        assert data, command
        assert same(reader_reads(data), redis_py_reads(data, protocol)), (command, data)


def pack(command: list[Any]) -> bytes:
    parts = [p if isinstance(p, bytes) else str(p).encode() for p in command]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def read_some(sock: socket.socket) -> bytes:
    """One reply's bytes (the server's answer to one command), whole."""
    sock.settimeout(5)
    data = b""
    while parse(data) is INCOMPLETE:
        data += sock.recv(65536)
    return data
