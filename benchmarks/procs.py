"""What the benchmarks that run real processes share: a free loopback port and a process's CPU
time. Imports nothing of seqrepair, so a benchmark comparing two code trees stays free to choose
which one it imports."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a live process has used so far (0 when it is gone)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End ``proc``: SIGTERM, then SIGKILL after 10 s (nothing when it has ended already)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
