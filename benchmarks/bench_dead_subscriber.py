"""Component RSS while a dead-but-alive subscriber (huge credit, never reads) is attached.

    python benchmarks/bench_dead_subscriber.py SECONDS RATE [serve options...]

Starts a private redis-server and ``seqrepair serve``, an honest subscriber of ``/weather/#``
and a dead one (``tests/amqp/deadpeer.py``: attaches with 10,000,000 credit, never reads),
publishes RATE publications/s (each with a 200-byte field) for SECONDS, then drops the dead
peer and waits 5 s. Prints the component's VmRSS every 5 s, the honest subscriber's count and
the component's stop counters (its log's ``component stopped`` line).
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqrepair.amqp.client.subscriber import Publisher, Subscriber  # noqa: E402
from seqrepair.journal.journal import Journal  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402
from tests.amqp.conftest import ComponentProcess  # noqa: E402
from tests.amqp.deadpeer import DeadPeer  # noqa: E402


def rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else 0.0


def main() -> None:
    seconds, rate = float(sys.argv[1]), int(sys.argv[2])
    extra = sys.argv[3:]
    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory() as tmp:
        comp = ComponentProcess(redis.url, Path(tmp), *extra).start()
        assert comp.proc is not None
        pid = comp.proc.pid
        got: list[int] = []
        try:
            with Subscriber(comp.url, "/weather/#", link_name="honest",
                            on_publication=lambda p: got.append(p.source_seq)) as sub, \
                 Publisher(comp.url, "feed.d", journal=Journal.from_url(redis.url)) as pub:
                assert sub.connected.wait(10)
                dead = DeadPeer(comp.url, "/weather/#", "dead").open()
                print(f"t=0 rss={rss_mb(pid):.0f} MB", flush=True)
                start = time.monotonic()
                sent = 0
                mark = start
                pad = "x" * 200
                while (now := time.monotonic()) - start < seconds:
                    due = int((now - start) * rate) - sent
                    if due > 0:
                        pub.publish_many([("/weather/wind/LEMD", {"n": sent + i, "pad": pad},
                                           "update", None) for i in range(due)])
                        sent += due
                    if now - mark >= 5:
                        mark = now
                        print(f"t={now - start:.0f} rss={rss_mb(pid):.0f} MB sent={sent} "
                              f"honest={len(got)}", flush=True)
                    time.sleep(0.01)
                assert pub.flush(60)
                dead.close()
                time.sleep(5)
                print(f"after the dead peer left: rss={rss_mb(pid):.0f} MB honest={len(got)} "
                      f"of {sent}, in order: {got == sorted(got)}", flush=True)
        finally:
            comp.stop()
            for line in comp.log_text().splitlines():
                if "component stopped" in line or "link paused" in line or "detached" in line:
                    print(line[:600])


if __name__ == "__main__":
    main()
