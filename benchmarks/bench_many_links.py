"""Component RSS with many reading subscriber links on one connection.

    python benchmarks/bench_many_links.py LINKS PUBLICATIONS [serve options...]

Starts a private redis-server and ``seqrepair serve``, one plain proton connection with LINKS
receiving links on ``/weather/#`` that read everything (credit 1000 each, topped up), and
publishes PUBLICATIONS (a 200-byte field each). Prints the component's VmRSS before and once
every link has everything (or nothing more comes: a paused link is not repaired by these plain
readers), and the component's log of pauses and stop counters (``memory_peak``...).
"""

from __future__ import annotations

import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from proton.handlers import MessagingHandler
from proton.reactor import Container

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqrepair.amqp.client.subscriber import Publisher  # noqa: E402
from seqrepair.journal.journal import Journal  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402
from tests.amqp.conftest import ComponentProcess  # noqa: E402


def rss_mb(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else 0.0


class Readers(MessagingHandler):  # type: ignore[misc]
    """LINKS receivers on one connection, counting the transfers they read."""

    def __init__(self, url: str, links: int) -> None:
        super().__init__(prefetch=1000)
        self.url, self.links = url, links
        self.received = 0
        self.ready = threading.Event()
        self.opened = 0

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        for i in range(self.links):
            event.container.create_receiver(conn, "/weather/#", name=f"reader-{i}")

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None:
            self.opened += 1
            if self.opened == self.links:
                self.ready.set()

    def on_message(self, event: Any) -> None:
        self.received += 1


def main() -> None:
    links, total = int(sys.argv[1]), int(sys.argv[2])
    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory() as tmp:
        comp = ComponentProcess(redis.url, Path(tmp), *sys.argv[3:]).start()
        assert comp.proc is not None
        pid = comp.proc.pid
        readers = Readers(comp.url, links)
        container = Container(readers)
        thread = threading.Thread(target=container.run, daemon=True)
        thread.start()
        try:
            assert readers.ready.wait(30)
            print(f"{links} links attached: rss={rss_mb(pid):.0f} MB", flush=True)
            with Publisher(comp.url, "feed.l", journal=Journal.from_url(redis.url)) as pub:
                pad = "x" * 200
                for first in range(0, total, 1000):
                    pub.publish_many([("/weather/wind/LEMD", {"n": first + i, "pad": pad},
                                       "update", None) for i in range(min(1000, total - first))])
                    time.sleep(0.02)
                assert pub.flush(120)
            # every link has everything, or (links paused for bytes: these plain readers do
            # not repair) nothing more arrives for 3 s
            last, still = -1, 0
            while readers.received < links * total and still < 6:
                time.sleep(0.5)
                still = still + 1 if readers.received == last else 0
                last = readers.received
            print(f"after {total} publications on each of {links} links: "
                  f"rss={rss_mb(pid):.0f} MB (transfers read: {readers.received})", flush=True)
        finally:
            container.stop()
            comp.stop()
            for line in comp.log_text().splitlines():
                if "component stopped" in line or "link paused" in line:
                    print(line[:700])


if __name__ == "__main__":
    main()
