"""The networked demo: component, publisher and subscribers as real processes over loopback.

:func:`run_network_demo` starts ``seqrepair serve`` with a forced loss rate and its REST API,
makes a filtered subscription through that API, starts three ``seqrepair subscribe`` processes
(two on topic patterns, one on the subscription's queue) and ``seqrepair publish``; half way it
SIGKILLs the component and restarts it (a forced reset: every link comes back at 0 and repairs
by source from the journal; the subscription comes back from Redis). It then checks each
subscriber's output against the journal: exactly the publications it is entitled to, in
order, once.

Authentication is on (issue 25): the demo makes its own certificate authority, a server
certificate for ``localhost`` and a client certificate ``CN=demo`` with ``openssl``, and a REST
bearer token of the same principal; the component requires client certificates (SASL
EXTERNAL) and serves its REST API over HTTPS. Without ``openssl`` it says so and runs with
``--allow-anonymous`` on loopback instead.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement

SUBSCRIBERS = {"all": "/demo/#", "wind": "/demo/wind/*", "lfpg": "/subscriptions/demo-lfpg"}
TOPICS = "/demo/wind/LEMD,/demo/rain/LFPG,/demo/wind/LFPG,/demo/temp/EGLL"
LFPG = {"id": "demo-lfpg", "topic": "/demo/#", "filters": [
    {"dialect": "basic", "type": "suffix", "property": "subject", "value": "/LFPG"}]}
"""The subscription the demo makes through the REST API (every topic ending in /LFPG)."""


def _free_port() -> int:
    # outside the kernel's ephemeral range: no outgoing connection takes it before we listen
    from seqrepair.journal.server import free_port

    return free_port()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


PRINCIPAL = "CN=demo"
"""Who the demo's clients are: their certificate's subject, and their REST token's principal."""


class Credentials:
    """The demo's own certificates and REST token (:meth:`make`), or none (anonymous)."""

    def __init__(self, folder: Path | None, token: str | None) -> None:
        self.folder = folder
        self.token = token

    @classmethod
    def make(cls, work: Path) -> Credentials:
        """A CA, a server certificate for localhost and 127.0.0.1, a client certificate of
        :data:`PRINCIPAL`, a REST token of it; no credentials without ``openssl``."""
        if shutil.which("openssl") is None:
            return cls(None, None)
        from seqrepair.auth.restauth import new_token

        folder = work / "pki"
        folder.mkdir(exist_ok=True)

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True,
                           timeout=60)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                "ca.pem", "-days", "2", "-subj", "/CN=seqrepair demo CA")
        (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        for name, subject, extra in (("server", "/CN=localhost", ["-extfile", "san.ext"]),
                                     ("client", f"/{PRINCIPAL}", [])):
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                    f"{name}.csr", "-subj", subject)
            openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                    "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *extra)
        return cls(folder, new_token(folder / "rest.tokens", PRINCIPAL))

    def describe(self) -> str:
        if self.folder is None:
            return "anonymous on loopback (no openssl to make certificates)"
        return (f"TLS with client certificates (SASL EXTERNAL) as {PRINCIPAL}; REST over "
                f"HTTPS with a bearer token of {PRINCIPAL}")

    def host(self, address: str) -> str:
        """``address`` by the name the server certificate carries (clients check it)."""
        return address if self.folder is None else address.replace("127.0.0.1", "localhost")

    def serve_args(self) -> tuple[str, ...]:
        if self.folder is None:
            return ("--allow-anonymous",)  # loopback only
        f = self.folder
        return ("--tls-cert", str(f / "server.pem"), "--tls-key", str(f / "server.key"),
                "--tls-ca", str(f / "ca.pem"), "--client-cert", "required",
                "--rest-tokens", str(f / "rest.tokens"))

    def client_args(self) -> tuple[str, ...]:
        if self.folder is None:
            return ()
        f = self.folder
        return ("--tls-ca", str(f / "ca.pem"), "--tls-cert", str(f / "client.pem"),
                "--tls-key", str(f / "client.key"))

    def http(self, rest: str) -> tuple[http.client.HTTPConnection, dict[str, str]]:
        """A connection to the REST API and the headers that authenticate on it."""
        host, _, port = rest.rpartition(":")
        if self.folder is None:
            return http.client.HTTPConnection(host, int(port), timeout=10), {}
        context = ssl.create_default_context(cafile=str(self.folder / "ca.pem"))
        return (http.client.HTTPSConnection(self.host(host), int(port), timeout=10,
                                            context=context),
                {"Authorization": f"Bearer {self.token}"})


def _start_component(url: str, rest: str, redis_url: str, work: Path, n: int,
                     drop_rate: float, creds: Credentials) -> subprocess.Popen[bytes]:
    ready = work / f"ready-{n}"
    proc = subprocess.Popen(
        _cli("--log-level", "info", "serve", "--url", url, "--redis-url", redis_url,
             "--drop-rate", str(drop_rate), "--drop-seed", str(n), "--heartbeat", "0.25",
             "--rest", rest, "--ready-file", str(ready), *creds.serve_args()),
        env=_env(), stdout=open(work / f"component-{n}.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"component did not start; see {work}/component-{n}.log")
        time.sleep(0.05)
    return proc


def _subscribe_over_rest(rest: str, proposal: dict[str, Any],
                         creds: Credentials) -> dict[str, Any]:
    """Make (or, from an earlier run on the same Redis, make again) a subscription."""
    conn, auth = creds.http(rest)
    try:
        conn.request("DELETE", f"/subscriptions/{proposal['id']}", headers=auth)
        conn.getresponse().read()
        conn.request("POST", "/subscriptions", body=json.dumps(proposal),
                     headers={"Content-Type": "application/json", **auth})
        response = conn.getresponse()
        made: dict[str, Any] = json.loads(response.read())
    finally:
        conn.close()
    if response.status != 201:
        raise RuntimeError(f"the REST API refused the subscription: {made}")
    return made


def _publish(url: str, redis_url: str, count: int, source: str,
             creds: Credentials) -> dict[str, Any]:
    out = subprocess.run(
        _cli("publish", "--url", creds.host(url), "--redis-url", redis_url, "--source", source,
             "--count", str(count), "--topics", TOPICS,  # the CLI defaults, as shipped
             *creds.client_args()),
        env=_env(), capture_output=True, timeout=300, check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"publisher failed: {out.stderr.decode(errors='replace')[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


def _kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_network_demo(
    redis_url: str,
    n_publications: int = 2000,
    *,
    drop_rate: float = 0.02,
    source: str = "demo.feed",
    workdir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Run the demo; return the repair report (see module docstring).

    ``redis_url`` is the journal (an :class:`~seqrepair.journal.server.EmbeddedRedis` is
    fine); the demo's source should be new in it, or ``source`` given a fresh name.
    Returns ``{"published", "component_restarts", "subscribers": {name: {...}}, "ok"}`` where
    each subscriber has ``pattern, entitled, delivered, gaps, repairs, duplicates, resets,
    unrecoverable, in_order_exactly_once``.
    """
    from seqrepair.journal.journal import Journal

    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="seqdemo-"))
    work.mkdir(parents=True, exist_ok=True)
    url = f"127.0.0.1:{_free_port()}"
    rest = f"127.0.0.1:{_free_port()}"
    journal = Journal.from_url(redis_url)
    first_hw = journal.high_water(source)
    creds = Credentials.make(work)
    component = _start_component(url, rest, redis_url, work, 1, drop_rate, creds)
    subs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        lfpg = _subscribe_over_rest(rest, LFPG, creds)
        for name, pattern in SUBSCRIBERS.items():
            subs[name] = subprocess.Popen(
                _cli("--log-level", "info", "subscribe", "--url", creds.host(url),
                     "--address", pattern, *creds.client_args(),
                     "--link-name", f"demo-{name}", "--heartbeat", "0.25",
                     "--output", str(work / f"{name}.jsonl"),
                     "--stats-file", str(work / f"{name}.stats.json"),
                     "--idle-exit", "4", "--duration", "240",
                     "--ready-file", str(work / f"{name}.ready")),
                env=_env(), stdout=subprocess.DEVNULL,
                stderr=open(work / f"{name}.log", "wb"),  # noqa: SIM115
            )
        # subscribers attach before the first publication (a slow start under load must not
        # let them miss it: they would wait out --duration for a stream that never comes)
        deadline = time.monotonic() + 60
        while not all((work / f"{name}.ready").exists() for name in SUBSCRIBERS):
            if time.monotonic() > deadline:
                raise RuntimeError("subscribers did not attach within 60 s; see their logs")
            time.sleep(0.05)
        half = n_publications // 2
        _publish(url, redis_url, half, source, creds)
        _kill(component)  # forced reset: the component loses every link context
        component = _start_component(url, rest, redis_url, work, 2, drop_rate, creds)
        _publish(url, redis_url, n_publications - half, source, creds)
        for proc in subs.values():
            proc.wait(timeout=240)
    finally:
        for proc in subs.values():
            _kill(proc, signal.SIGTERM)
        _kill(component, signal.SIGTERM)
    journaled = journal.read_range(source, first_hw + 1, first_hw + n_publications)
    report: dict[str, Any] = {
        "published": len(journaled),
        "component_restarts": 1,
        "drop_rate": drop_rate,
        "authentication": creds.describe(),
        "workdir": str(work),
        "subscribers": {},
    }
    ok = len(journaled) == n_publications
    for name, pattern in SUBSCRIBERS.items():
        ent = Entitlement(topics=(pattern,))
        if name == "lfpg":
            ent = Entitlement(topics=(lfpg["topic"],), filters=lfpg["filters"])
        expected = [p.source_seq for p in journaled if ent.allows(p)]
        lines = (work / f"{name}.jsonl").read_text().splitlines()
        got = [json.loads(line)["source_seq"] for line in lines]
        stats = json.loads((work / f"{name}.stats.json").read_text())
        exact = got == expected
        ok = ok and exact
        report["subscribers"][name] = {
            "pattern": pattern,
            "entitled": len(expected),
            "delivered": len(got),
            "gaps": stats["gaps_detected"],
            "repairs": stats["repaired"],
            "duplicates": stats["duplicates"],
            "resets": stats["resets"],
            "unrecoverable": stats["unrecoverable"],
            "in_order_exactly_once": exact,
        }
    report["ok"] = ok
    return report


def entitled_seqs(pubs: list[Publication], pattern: str) -> list[int]:
    """The source numbers a subscriber on ``pattern`` is entitled to, in order."""
    ent = Entitlement(topics=(pattern,))
    return [p.source_seq for p in pubs if ent.allows(p)]


if __name__ == "__main__":  # pragma: no cover - manual run
    from seqrepair.journal.server import EmbeddedRedis

    with EmbeddedRedis() as server:
        print(json.dumps(run_network_demo(server.url, int(sys.argv[1]) if len(sys.argv) > 1
                                          else 2000), indent=2))
