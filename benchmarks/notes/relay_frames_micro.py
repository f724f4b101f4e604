"""The relay's upstream receive path with proton's default max-frame-size (32 KiB) and with
1 MiB advertised (set on the connection's transport as ``Container.connect(max_frame_size=)``
does; the change tried on branch frames32 and dropped, see ``relay-bound.md``), in one process:
an :class:`~seqrepair.amqp.relay.upstream.UpstreamSubscriber` (its ``on_run`` only counts) of
a real ``seqrepair serve`` whose journal holds M publications, started after 0 (a source
replay, as a relay catching up gets: transfers of up to 1024 entries, ~75 KiB) or, with
``--live``, attached first and then fed by ``seqrepair publish`` (transfers of 256, ~19 KiB).
The figure is the subscriber thread's CPU per publication (``/proc`` task times), the two
frame sizes interleaved ROUNDS times.

    .venv/bin/python benchmarks/notes/relay_frames_micro.py [M] [ROUNDS] [--live]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from procs import free_port, stop  # noqa: E402
from proton import _reactor  # noqa: E402

from seqrepair.amqp.relay.upstream import UpstreamSubscriber  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
LARGE_FRAME = 1 << 20
FRAME: list[int | None] = [None]
"""The max-frame-size the next connection advertises (None: proton's default)."""
_connect = _reactor._Connector._connect


def _connect_framed(self: Any, connection: Any, url: Any) -> None:
    _connect(self, connection, url)
    if FRAME[0]:
        connection.transport.max_frame_size = FRAME[0]


_reactor._Connector._connect = _connect_framed  # type: ignore[method-assign]


def thread_cpu(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def publish(url: str, redis_url: str, n: int) -> None:
    subprocess.run([sys.executable, "-m", "seqrepair.cli", "publish", "--url", url,
                    "--redis-url", redis_url, "--source", "bench", "--count", str(n),
                    "--batch", "256", "--topics", "/load/a,/load/b"],
                   env=ENV, check=True, capture_output=True, timeout=600)


def serve(redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    url = f"127.0.0.1:{free_port()}"
    ready = Path(f"/tmp/relay-frames-{os.getpid()}")
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "seqrepair.cli", "serve", "--url", url,
                             "--redis-url", redis_url, "--ready-file", str(ready),
                             "--allow-anonymous", "--max-pending", "200000"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError("serve exited")
        time.sleep(0.05)
    ready.unlink()
    return proc, url


def one(url: str, redis_url: str, m: int, frame: int | None, live: bool, name: str) -> float:
    """The subscriber thread's CPU seconds for ``m`` publications (``name``: a durable
    link whose position is at 0, from :func:`positioned`, when not ``live``)."""
    got = [0]
    done = threading.Event()

    def run(pubs: list[Any], entries: list[bytes]) -> None:
        got[0] += len(pubs)
        if got[0] >= m:
            done.set()

    def single(pub: Any) -> None:
        run([pub], [])

    sub = UpstreamSubscriber(url, "/load/#", link_name=name, on_publication=single,
                             on_run=run, durable=True, ack=True, acknowledge=False)
    FRAME[0] = frame
    sub.start()
    assert sub.wait_connected(20)
    time.sleep(0.5)
    assert sub._thread is not None
    assert sub._thread.native_id is not None
    before = thread_cpu(sub._thread.native_id)
    if live:
        publish(url, redis_url, m)
    assert done.wait(60), got
    used = thread_cpu(sub._thread.native_id) - before
    sub.stop()
    return used


def positioned(url: str, name: str) -> None:
    """A durable link ``name`` whose position at the origin is the source's start."""
    sub = UpstreamSubscriber(url, "/startup/#", link_name=name, durable=True, ack=True,
                             acknowledge=False)
    sub.start()
    assert sub.wait_connected(20)
    sub.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("m", type=int, nargs="?", default=100_000)
    parser.add_argument("rounds", type=int, nargs="?", default=5)
    parser.add_argument("--live", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"32KiB": [], "1MiB": []}
    with EmbeddedRedis() as redis:
        proc, url = serve(redis.url)
        try:
            links = [f"f{k}" for k in range(2 * args.rounds)]
            if not args.live:
                for link in links:
                    positioned(url, link)
                publish(url, redis.url, args.m)
            for k in range(args.rounds):
                for j, (name, frame) in enumerate((("32KiB", None),
                                                    ("1MiB", LARGE_FRAME))):
                    used = one(url, redis.url, args.m, frame, args.live, links[2 * k + j])
                    results[name].append(used / args.m * 1e6)
        finally:
            stop(proc)
    for name, values in results.items():
        print(f"{name}: upstream thread us/pub median {statistics.median(values):.2f} "
              f"({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
