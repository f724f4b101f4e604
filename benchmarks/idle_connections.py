"""What connections that never open cost ``seqrepair serve`` (issue 24): a figure, not a ratio.

    python benchmarks/idle_connections.py silent 500 [serve options...]
    python benchmarks/idle_connections.py header 1100 --open-timeout 5
    python benchmarks/idle_connections.py silent-seq 1100

``-seq``: one blocking connect after the other (each waits for the component's accept when
its listen backlog is full) rather than all at once.

Starts a private redis-server and the component, opens N TCP connections at once that send
nothing (``silent``) or only the AMQP protocol header (``header``), then samples the
component's descriptors (``/proc/PID/fd``) and notes when the component closes each
connection, for up to 40 s. An honest ``seqrepair capabilities`` runs in a process of its own
(this one holds too many descriptors for proton's ``select()``) before and after. Prints one
line: descriptors at rest and at the peak, whether the component is alive, how many
connections it closed and when the first and last went, descriptors after, the honest query.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from seqrepair.journal.server import EmbeddedRedis, free_port

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except FileNotFoundError:
        return -1


def honest(url: str) -> str:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "seqrepair.cli", "capabilities", "--url", url,
                           "--timeout", "5"], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return f"ok in {time.monotonic() - started:.2f}s"
    return "FAILED " + (done.stderr or done.stdout).strip()[-120:]


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def main(mode: str, n: int, serve_args: list[str]) -> None:
    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory() as tmp:
        url = f"127.0.0.1:{free_port()}"
        host, port = url.split(":")
        ready = Path(tmp) / "ready"
        with open(Path(tmp) / "component.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "seqrepair.cli", "serve", "--url", url, "--redis-url",
                 redis.url, "--ready-file", str(ready), "--allow-anonymous", *serve_args],
                stdout=log, stderr=subprocess.STDOUT)
        try:
            while not ready.exists():
                time.sleep(0.05)
            before = honest(url)
            rest = peak = fds(proc.pid)
            socks = []
            for _ in range(n):
                sock = socket.socket()
                if mode.endswith("-seq"):
                    try:
                        sock.connect((host, int(port)))
                    except OSError:  # the component is gone, or refuses
                        sock.close()
                        break
                else:
                    sock.connect_ex((host, int(port)))
                sock.setblocking(False)
                socks.append(sock)
            started = time.monotonic()  # closing times count from the last connect
            time.sleep(0.5)
            if mode.startswith("header"):
                for sock in socks:
                    with contextlib.suppress(OSError):
                        sock.send(AMQP_HEADER)
            closed: dict[socket.socket, float] = {}
            while (time.monotonic() - started < 40 and len(closed) < len(socks)
                   and proc.poll() is None):
                peak = max(peak, fds(proc.pid))
                poller = select.poll()  # select() takes no descriptor past 1023
                by_fd = {s.fileno(): s for s in socks if s not in closed}
                for fd in by_fd:
                    poller.register(fd, select.POLLIN)
                for fd, _ in poller.poll(200):
                    if closed_by_peer(by_fd[fd]):
                        closed[by_fd[fd]] = time.monotonic() - started
            times = sorted(closed.values())
            when = f", first {times[0]:.1f}s, last {times[-1]:.1f}s" if times else ""
            alive = proc.poll() is None
            for sock in socks:
                sock.close()
            time.sleep(0.5)
            print(f"{n} {mode} {' '.join(serve_args) or '(defaults)'}: descriptors at rest {rest},"
                  f" peak {peak}; component alive {alive}; closed by it {len(times)}/"
                  f"{len(socks)} connected{when};"
                  f" descriptors after {fds(proc.pid)}; honest query before {before}, after "
                  f"{honest(url) if alive else 'component gone'}")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
