"""A private ``redis-server`` for seqrepair when no Redis URL is given (and for tests).

::

    with EmbeddedRedis(data_dir=".seqrepair/redis", appendfsync="everysec") as srv:
        journal = Journal.from_url(srv.url)

It listens on a free loopback port with append-only persistence in ``data_dir`` and no RDB
snapshots, and is gone when the block ends, whatever ends it. Nothing is left behind:

* the block's exit stops it (SHUTDOWN, then SIGTERM, then SIGKILL);
* a failed start kills what was started;
* interpreter exit and garbage collection stop it (``weakref.finalize``);
* with ``die_with_parent`` (default, Linux), the kernel kills it if this process dies, even by
  SIGKILL. The signal follows the *thread* that started it: start it from a thread that
  lives as long as you need the server (the main thread, usually).

:meth:`EmbeddedRedis.kill` (SIGKILL, for durability tests) and :meth:`EmbeddedRedis.start`
(again, on the same port and data folder) let a test crash and recover the server.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Literal

from seqrepair.journal.datadir import DEFAULT_DATA_DIR as DEFAULT_DATA_DIR  # its old home
from seqrepair.journal.errors import EmbeddedRedisError
from seqrepair.logs import get_logger

log = get_logger(__name__)

AppendFsync = Literal["always", "everysec", "no"]
_PR_SET_PDEATHSIG = 1


# Ports handed out by a bind to port 0, and the local ports of every outgoing connection on
# the machine, come from the kernel's ephemeral range: a port found free there may be taken by
# anyone's connect() before the process it is meant for binds it. Below that range nothing
# takes a port unless asked to by number, so free ports are chosen there when there is room.
_FLOOR = 10000
_ROOM = 2000
_recent: collections.deque[int] = collections.deque(maxlen=2048)
_rng = random.Random()
_lock = threading.Lock()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


PORT_SHARE_ENV = "SEQREPAIR_PORT_SHARE"
"""``K/N`` (0 <= K < N): free ports are drawn only among those equal to K modulo N, so N
processes drawing at once (the test workers, and what they start, which inherits it) never
draw the same port, not even one that another's server left free for a moment between its stop
and its restart on that port (a cluster node's bus port, 10000 higher, is in the same share
when N divides 10000). Unset: every port."""


def _share() -> tuple[int, int]:
    value = os.environ.get(PORT_SHARE_ENV, "")
    if not value:
        return 0, 1
    share, _, of = value.partition("/")
    try:
        k, n = int(share), int(of)
    except ValueError:
        k = n = 0
    if not 0 <= k < n:
        raise EmbeddedRedisError(f"{PORT_SHARE_ENV} must be K/N with 0 <= K < N", got=value)
    return k, n


def _pick(low: int, high: int, *, bus_offset: int = 0) -> int | None:
    """A random port in ``low``..``high`` (and its port + ``bus_offset``) bindable right now,
    in this process's share (:data:`PORT_SHARE_ENV`) and not handed out recently by this
    process; None after 200 tries."""
    k, n = _share()
    first = low + (k - low) % n  # the lowest port of the share
    if high < first:
        return None
    with _lock:
        for _ in range(200):
            port = first + n * _rng.randint(0, (high - first) // n)
            if port in _recent:
                continue
            if _bindable(port) and (not bus_offset or _bindable(port + bus_offset)):
                _recent.append(port)
                return port
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now: below the kernel's ephemeral
    range when there is room (no outgoing connection takes it meanwhile), in this process's
    share (:data:`PORT_SHARE_ENV`) and not one this process handed out recently."""
    low, high = _ephemeral_range()
    port = _pick(_FLOOR, low - 1) if low - _FLOOR >= _ROOM else None
    if port is None and 65535 - high >= _ROOM:
        port = _pick(high + 1, 65535)
    if port is not None:
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        bound: int = sock.getsockname()[1]
        return bound


# A cluster node also listens on its port + 10000 (the cluster bus), so redis-server refuses
# ports above this; the kernel's ephemeral range (32768-60999 here) often hands out such ports.
CLUSTER_BUS_OFFSET = 10000
MAX_CLUSTER_PORT = 65535 - CLUSTER_BUS_OFFSET


def free_cluster_port(low: int = _FLOOR) -> int:
    """A port that a Redis Cluster node may take: at most 55535, with it and its bus port free
    on 127.0.0.1 right now (both below the kernel's ephemeral range when there is room)."""
    ephemeral_low, _ = _ephemeral_range()
    below = ephemeral_low - 1 - CLUSTER_BUS_OFFSET
    port = None
    if below - low >= _ROOM:
        port = _pick(low, below, bus_offset=CLUSTER_BUS_OFFSET)
    if port is None:
        port = _pick(low, MAX_CLUSTER_PORT, bus_offset=CLUSTER_BUS_OFFSET)
    if port is None:
        raise EmbeddedRedisError(
            f"no free port pair for a cluster node in {low}-{MAX_CLUSTER_PORT}"
        )
    return port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _terminate(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _ping(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """A private redis-server on loopback with append-only persistence in ``data_dir``.

    ``data_dir`` None uses a temporary folder removed at :meth:`stop`. ``appendfsync`` is
    Redis's fsync policy for the append-only file (``always`` for no loss on a crash).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        appendfsync: AppendFsync = "everysec",
        port: int | None = None,
        executable: str = "redis-server",
        startup_timeout: float = 10.0,
        die_with_parent: bool = True,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise EmbeddedRedisError(
                "appendfsync must be always, everysec or no",
                expected=("always", "everysec", "no"),
                got=appendfsync,
            )
        self._temp = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="seqrepair-redis-"))
            if data_dir is None
            else (Path(data_dir))
        )
        self.appendfsync = appendfsync
        self.port = port
        self.executable = executable
        self.startup_timeout = startup_timeout
        self.die_with_parent = die_with_parent
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def host(self) -> str:
        """Always loopback."""
        return "127.0.0.1"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (the server must have been started)."""
        if self.port is None:
            raise EmbeddedRedisError("the embedded redis-server was never started")
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_file(self) -> Path:
        """Where the server writes its log."""
        return self.data_dir / "redis.log"

    def _command(self, port: int) -> list[str]:
        return [
            self.executable,
            "--port", str(port),
            "--bind", self.host,
            "--protected-mode", "yes",
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.log_file.resolve()),
            *self.extra_args,
        ]  # fmt: skip

    def _free_port(self) -> int:
        if "--cluster-enabled" in self.extra_args:
            return free_cluster_port()
        return free_port()

    def start(self) -> EmbeddedRedis:
        """Start the server (again) and wait until it answers PING; return self."""
        if self.running:
            raise EmbeddedRedisError("the embedded redis-server is already running")
        if shutil.which(self.executable) is None:
            raise EmbeddedRedisError(
                f"{self.executable!r} is not on PATH (bin/setup installs redis-server)",
                got=self.executable,
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self.port is not None else 3
        last_error = ""
        for _ in range(attempts):
            port = self.port if self.port is not None else self._free_port()
            proc = subprocess.Popen(
                self._command(port),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=_die_with_parent
                if self.die_with_parent and sys.platform == "linux"
                else None,
            )
            try:
                if self._wait_ready(proc, port):
                    self._proc = proc
                    self.port = port
                    self._finalizer = weakref.finalize(self, _terminate, proc)
                    log.info(
                        "embedded_redis.started",
                        port=port,
                        pid=proc.pid,
                        data_dir=str(self.data_dir),
                        appendfsync=self.appendfsync,
                    )
                    return self
            except BaseException:
                _terminate(proc)
                raise
            _terminate(proc)
            last_error = self._failure(proc)
        raise EmbeddedRedisError(f"redis-server did not start: {last_error}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.005
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if _ping(port, timeout=0.5):
                return True
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return False

    def _failure(self, proc: subprocess.Popen[bytes]) -> str:
        stderr = b""
        if proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                stderr = proc.stderr.read() or b""
        tail = ""
        with contextlib.suppress(OSError):
            tail = self.log_file.read_text(errors="replace")[-2000:]
        return (stderr.decode(errors="replace") + tail).strip() or f"exit code {proc.returncode}"

    def stop(self) -> None:
        """Shut the server down (its append-only file is flushed) and wait for it to exit."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                self._shutdown(proc)
            _terminate(proc)
            if proc.stderr is not None:
                proc.stderr.close()
            log.info("embedded_redis.stopped", port=self.port, pid=proc.pid)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._temp:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _shutdown(self, proc: subprocess.Popen[bytes]) -> None:
        assert self.port is not None
        with (
            contextlib.suppress(OSError),
            socket.create_connection((self.host, self.port), timeout=2.0) as sock,
        ):
            sock.sendall(b"SHUTDOWN\r\n")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10.0)

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed) and reap it. Data stays on disk."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        log.info("embedded_redis.killed", port=self.port, pid=proc.pid)

    def __enter__(self) -> EmbeddedRedis:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<EmbeddedRedis port={self.port} {state} data_dir={str(self.data_dir)!r}>"
