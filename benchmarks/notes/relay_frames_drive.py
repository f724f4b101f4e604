"""Events, reactor passes and socket reads per transfer on the relay's upstream thread: ``seqrepair
serve`` (A), ``seqrepair relay`` (B) under ``relay_frames_events.py``, a subscriber of B in this
process, ``seqrepair publish`` of N into A (batches of 256, as ``bench_relay.py``). Prints, per
relay thread, the counts between just before the publisher starts and 0.4 s after the last
delivery (so the 20 ms tick's timer events of that span are in them), per transfer, and each
connection's max-frame-size and frames. ``FRAMES_MAX_FRAME=N`` in the environment: the relay's
upstream connection advertises N.

    .venv/bin/python benchmarks/notes/relay_frames_drive.py [N]
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from procs import free_port, proc_cpu, stop  # noqa: E402

from seqrepair.amqp.client.subscriber import Subscriber  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
OUT = Path(f"/tmp/relay-frames-{os.getpid()}.json")
EVENTS = str(Path(__file__).with_name("relay_frames_events.py"))


def start(args: list[str], name: str, wrapper: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    url = f"127.0.0.1:{free_port()}"
    ready = Path(f"/tmp/relay-frames-{os.getpid()}-{name}")
    ready.unlink(missing_ok=True)
    flag = "--url" if args[0] == "serve" else "--listen"
    proc = subprocess.Popen(
        [sys.executable, *(wrapper or ["-m", "seqrepair.cli"]), *args, flag, url,
         "--ready-file", str(ready), "--allow-anonymous"],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited")
        time.sleep(0.05)
    ready.unlink()
    return proc, url


def snapshot() -> dict[str, Any]:
    time.sleep(0.4)  # the wrapper rewrites its file every 0.25 s
    data: dict[str, Any] = json.loads(OUT.read_text())
    return data


def report(before: dict[str, Any], after: dict[str, Any]) -> None:
    for thread, counts in after["counts"].items():
        diff = collections.Counter(counts)
        diff.subtract(collections.Counter(before["counts"].get(thread, {})))
        reads = after["reads"].get(thread, [])[len(before["reads"].get(thread, [])):]
        transfers = diff["transfers"] or 1
        print(f"== {thread}: transfers {diff['transfers']}, frames {diff['frames']}; per "
              f"transfer: events {diff['events'] / transfers:.1f}, passes "
              f"{diff['process'] / transfers:.1f}, selects {diff['select'] / transfers:.1f}, "
              f"reads {len(reads) / transfers:.2f}")
        kinds = sorted(((k[3:], v) for k, v in diff.items() if k.startswith("ev:") and v),
                       key=lambda kv: -kv[1])
        print("   events:", ", ".join(f"{k} {v}" for k, v in kinds))
        if reads:
            sizes = [got for _, got in reads]
            print(f"   reads: mean {sum(sizes) / len(sizes):.0f} B, max {max(sizes)}, capacity "
                  f"{min(c for c, _ in reads)}..{max(c for c, _ in reads)}, filled "
                  f"{sum(1 for c, got in reads if got == c)}")
    print(json.dumps(after["transports"]))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    with EmbeddedRedis() as redis_a, EmbeddedRedis() as redis_b:
        a, a_url = start(["serve", "--redis-url", redis_a.url, "--max-pending", "200000"], "a",
                         [])
        b, b_url = start(["relay", "--upstream", a_url, "--redis-url", redis_b.url,
                          "--subscribe", "/load/#", "--name", "b"], "b", [EVENTS, str(OUT)])
        try:
            got: list[int] = []
            sub = Subscriber(b_url, "/load/#", on_publication=lambda p: got.append(p.source_seq),
                             credit=500).start()
            sub.wait_connected(20)
            time.sleep(1.0)
            before, cpu = snapshot(), proc_cpu(b.pid)
            subprocess.run([sys.executable, "-m", "seqrepair.cli", "publish", "--url", a_url,
                            "--redis-url", redis_a.url, "--source", "bench", "--count", str(n),
                            "--batch", "256", "--topics", "/load/a,/load/b"],
                           env=ENV, check=True, capture_output=True)
            deadline = time.monotonic() + 120
            while len(got) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            after, cpu = snapshot(), proc_cpu(b.pid) - cpu
            sub.stop()
            print(f"exact {got == list(range(1, n + 1))}, relay CPU {cpu / n * 1e6:.1f} us/pub "
                  "(counting included)")
            report(before, after)
        finally:
            stop(b)
            stop(a)
            OUT.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
