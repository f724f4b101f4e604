"""What TLS costs end to end: delivered publications per second through the component with
TLS on both hops vs plaintext, in one run, as a ratio (issue 25's goal: TLS >= 0.8).

    .venv/bin/python benchmarks/bench_tls.py [N] [ROUNDS]

Each run: ``seqrepair serve`` (journal on a private redis-server, ``--allow-anonymous`` on
loopback), ``seqrepair publish --redis-url`` (journal first, 256 publications per transfer)
and one library subscriber in this process. The TLS runs give the component
``--tls-cert/--tls-key`` and both clients the CA (``amqps://localhost``; certificates made by
``openssl`` for the run); nothing else differs. Rate = deliveries / (last - first delivery).
Plaintext and TLS runs are interleaved ROUNDS times (default 3; which goes first alternates);
best and median of each, and their ratios, are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from procs import free_port  # noqa: E402

from seqrepair.amqp.client.subscriber import Subscriber  # noqa: E402
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402


def make_certificates(folder: Path) -> None:
    """A CA and a server certificate for localhost, by openssl."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=bench CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext")


def rate(n: int, certs: Path | None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    port = free_port()
    serve_tls = ([] if certs is None else
                 ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key")])
    client_tls = [] if certs is None else ["--tls-ca", str(certs / "ca.pem")]
    url = f"localhost:{port}" if certs is not None else f"127.0.0.1:{port}"
    security = NO_CLIENT_SECURITY if certs is None else ClientSecurity(ca=str(certs / "ca.pem"))
    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        comp = subprocess.Popen(
            [sys.executable, "-m", "seqrepair.cli", "serve", "--url", f"127.0.0.1:{port}",
             "--redis-url", redis.url, "--ready-file", str(ready), "--max-pending", "200000",
             "--allow-anonymous", *serve_tls], env=env)
        try:
            while not ready.exists():
                if comp.poll() is not None:
                    raise RuntimeError(f"seqrepair serve exited with {comp.returncode}")
                time.sleep(0.05)
            times: list[float] = []
            sub = Subscriber(url, "/load/#", on_publication=lambda _p: times.append(
                time.perf_counter()), credit=500, security=security).start()
            if not sub.connected.wait(10):
                raise RuntimeError("the subscriber did not connect")
            time.sleep(0.5)
            subprocess.run(
                [sys.executable, "-m", "seqrepair.cli", "publish", "--url", url, "--redis-url",
                 redis.url, "--source", "bench", "--count", str(n), *client_tls],
                env=env, check=True, capture_output=True, timeout=600)
            deadline = time.monotonic() + 120
            while len(times) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            sub.stop()
        finally:
            comp.terminate()
            comp.wait(10)
    return {"delivered": len(times), "rate": (len(times) - 1) / (times[-1] - times[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=20_000)
    parser.add_argument("rounds", type=int, nargs="?", default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    plain: list[dict[str, Any]] = []
    tls: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        certs = Path(folder)
        make_certificates(certs)
        for i in range(args.rounds):
            for secured in ((False, True) if i % 2 == 0 else (True, False)):
                (tls if secured else plain).append(rate(args.n, certs if secured else None))
    best_plain, best_tls = max(r["rate"] for r in plain), max(r["rate"] for r in tls)
    med_plain = statistics.median(r["rate"] for r in plain)
    med_tls = statistics.median(r["rate"] for r in tls)
    print(json.dumps({
        "n": args.n,
        "rounds": args.rounds,
        "load_avg_before_after": [load_before, os.getloadavg()],
        "plaintext_pubs_per_s": [round(r["rate"]) for r in plain],
        "tls_pubs_per_s": [round(r["rate"]) for r in tls],
        "ratio_best": round(best_tls / best_plain, 3),
        "ratio_median": round(med_tls / med_plain, 3),
        "delivered_plain_tls": [[r["delivered"] for r in plain], [r["delivered"] for r in tls]],
    }, indent=2))


if __name__ == "__main__":
    main()
