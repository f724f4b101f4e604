"""Fixtures: a private redis-server, free ports, and the component as a real process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from seqrepair.journal.server import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class ComponentProcess:
    """``seqrepair serve`` in a child process; :meth:`kill` is SIGKILL, :meth:`start` again
    restarts it on the same port."""

    def __init__(self, redis_url: str, tmp: Path, *args: str) -> None:
        self.redis_url = redis_url
        self.url = f"127.0.0.1:{free_port()}"
        self.args = args
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> ComponentProcess:
        self.starts += 1
        ready = self.tmp / f"ready-{self.starts}"
        log = open(self.tmp / f"component-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "serve",
             "--url", self.url, "--redis-url", self.redis_url, "--ready-file", str(ready),
             *self.args],
            env=_env(), stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while not ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"component exited: {self.log_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError("component did not start")
            time.sleep(0.02)
        return self

    def log_text(self) -> str:
        return (self.tmp / f"component-{self.starts}.log").read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def redis_url() -> Iterator[str]:
    with EmbeddedRedis(appendfsync="always") as server:
        yield server.url


@pytest.fixture
def component(
    redis_url: str, tmp_path: Path
) -> Iterator[Callable[..., ComponentProcess]]:
    started: list[ComponentProcess] = []

    def make(*args: str) -> ComponentProcess:
        proc = ComponentProcess(redis_url, tmp_path, *args).start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
