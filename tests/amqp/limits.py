"""Helpers of the tests of a listener's limits over real processes (the component's count
limits, the gateway's door, failed accepts): raw sockets that connect and wait, the descriptors
a process holds, and an honest ``seqrepair subscribe`` / ``seqrepair publish`` pair that checks
it got everything once, in order; ``seqrepair gateway`` in front of a component, with a
subscriber through it and a publisher to the component."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, FreePort, _die_with_parent, _env, start_binding, wait_for
from .pki import Pki, tls_url

LIMIT = "amqp:resource-limit-exceeded"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
HONEST = "feed.honest"
COUNT = 600


def cli(*args: str) -> subprocess.Popen[str]:
    """``seqrepair <args>`` in a child process, its output piped."""
    return subprocess.Popen([sys.executable, "-m", "seqrepair.cli", *args], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def fds(proc: ComponentProcess | subprocess.Popen[bytes]) -> int:
    """The file descriptors ``proc`` holds."""
    popen = proc.proc if isinstance(proc, ComponentProcess) else proc
    assert popen is not None
    return len(os.listdir(f"/proc/{popen.pid}/fd"))


def connect_all(host: str, port: int, n: int) -> list[tuple[socket.socket, float]]:
    """``n`` sockets connected at once (a sequence of connects waits on the listen backlog),
    each with the time its connect completed (asserting they all complete within 20 s)."""
    pending = []
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex((host, port))
        pending.append(sock)
    done: dict[socket.socket, float] = {}
    poller = select.poll()  # not select(): descriptors past 1023
    by_fd = {sock.fileno(): sock for sock in pending}
    for fd in by_fd:
        poller.register(fd, select.POLLOUT)
    deadline = time.monotonic() + 20
    while len(done) < n and time.monotonic() < deadline:
        for fd, _ in poller.poll(500):
            sock = by_fd[fd]
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
            done[sock] = time.monotonic()
            poller.unregister(fd)
    missing = n - len(done)
    for sock in pending:
        if sock not in done:
            sock.close()
    assert not missing, f"{len(done)} of {n} connected within 20 s"
    for sock in pending:
        sock.setblocking(True)
    return [(sock, done[sock]) for sock in pending]


def closed_by_peer(sock: socket.socket, within: float) -> bytes:
    """What ``sock`` received until its peer closed it (asserting it does within ``within``)."""
    sock.settimeout(within)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    return received


@contextlib.contextmanager
def honest_pair(comp: ComponentProcess, redis_url: str, tmp: Path,
                pki: Pki | None = None) -> Iterator[subprocess.Popen[str]]:
    """A subscriber of ``/honest/#`` (ready when this yields) and a publisher of COUNT
    publications at 100/s; on exit, checks the subscriber got them all once, in order. With
    ``pki``, both prove themselves with the certificate ``honest`` (principal ``CN=honest``).
    The subscriber writes what it gets to ``tmp / "honest.jsonl"``."""
    out, ready = tmp / "honest.jsonl", tmp / "honest-ready"
    url, tls = comp.url, ()
    if pki is not None:
        url, tls = tls_url(comp.url), ("--tls-ca", pki.pem("ca"), "--tls-cert",
                                       pki.pem("honest"), "--tls-key", pki.key("honest"))
    sub = cli("subscribe", "--url", url, "--address", "/honest/#", "--heartbeat", "0.2", *tls,
              "--output", str(out), "--ready-file", str(ready), "--count", str(COUNT))
    pub: subprocess.Popen[str] | None = None
    try:
        assert wait_for(lambda: ready.exists() or sub.poll() is not None, 60)
        pub = cli("publish", "--url", url, "--source", HONEST, "--redis-url", redis_url, *tls,
                  "--count", str(COUNT), "--rate", "100", "--batch", "8",
                  "--topics", "/honest/a,/honest/b", "--timeout", "60")
        yield pub
        assert pub.wait(60) == 0, pub.communicate()
        assert sub.wait(60) == 0, sub.communicate()
        numbers = [json.loads(line)["source_seq"] for line in out.read_text().splitlines()
                   if line.strip()]
        assert numbers == list(range(1, COUNT + 1))
    finally:
        for proc in (pub, sub):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


_GATEWAYS = itertools.count(1)


@contextlib.contextmanager
def gateway(upstream: str, tmp_path: Path, *args: str,
            security: tuple[str, ...] = ("--allow-anonymous",)
            ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``seqrepair gateway`` in front of ``upstream`` with ``args`` (``security``: its
    listener's authentication options, by default anonymous on loopback); yields its listen
    address and process. Started again on a new port if the one found free
    was taken before it listened."""
    port = FreePort()
    started: list[subprocess.Popen[bytes]] = []
    logname = tmp_path / "gateway.log"
    log = open(logname, "wb")  # noqa: SIM115

    def start_once() -> bool:
        nonlocal log
        log.close()
        log = open(logname, "wb")  # noqa: SIM115
        ready = tmp_path / f"gateway-ready-{next(_GATEWAYS)}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "gateway",
             "--listen", str(port), "--upstream", upstream, "--name", "edge", "--ready-file",
             str(ready), *security, *args],
            env=_env(), stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        started.append(proc)
        assert wait_for(lambda: ready.exists() or proc.poll() is not None, 60), (
            logname.read_text())
        return proc.poll() is None

    try:
        start_binding(start_once, logname.read_text, [port], what="gateway")
        proc = started[-1]
        assert proc.poll() is None, logname.read_text()[-3000:]
        yield str(port), proc
        assert proc.poll() is None, logname.read_text()[-3000:]  # alive to the end
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.terminate()
                if proc.wait(30) != 0:
                    proc.kill()
        log.close()


@contextlib.contextmanager
def subscriber(url: str, name: str) -> Iterator[list[Publication]]:
    """A subscriber of ``/weather/#`` through ``url``, its link relayed end to end."""
    got: list[Publication] = []
    with Subscriber(url, "/weather/#", on_publication=got.append, heartbeat_interval=0.2,
                    link_name=name) as sub:
        assert wait_for(lambda: sub.stub.stats.heartbeats > 0, 30)
        yield got


def publish(comp: ComponentProcess, redis_url: str, first: int, count: int) -> None:
    with Publisher(comp.url, "feed.a", journal=Journal.from_url(redis_url)) as publisher:
        publisher.publish_many([("/weather/wind/LEMD", {"n": i}, "update")
                                for i in range(first, first + count)])
        assert publisher.flush(30)
