"""Durability: SIGKILL redis-server mid-stream under ``appendfsync always``.

Every append the journal acknowledged must be there after a restart on the same data folder,
and a new publisher resumes after it without reusing a number.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from seqrepair.core.messages import Publication
from seqrepair.journal import EmbeddedRedis, Journal, JournalError, Publisher

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "redis", appendfsync="always")
    acknowledged: list[Publication] = []
    try:
        server.start()
        journal = Journal.from_url(server.url, socket_timeout=2.0, socket_connect_timeout=1.0)
        publisher = Publisher(
            "feed.a", journal, bits=8, transport=acknowledged.append, batch_size=7, window=7
        )
        killer = threading.Timer(0.4, server.kill)
        killer.start()
        failure: JournalError | None = None
        deadline = time.monotonic() + 30
        i = 0
        while time.monotonic() < deadline:
            try:
                publisher.publish(f"/item/{i % 10}", {"i": i, "gust": None})
            except JournalError as exc:
                failure = exc
                break
            i += 1
        killer.join()
        journal.close()
        assert failure is not None, "the server was killed but every publish succeeded"
        assert len(acknowledged) > 50, "too few appends before the kill to mean anything"

        server.start()  # same port, same data folder
        with Journal.from_url(server.url) as recovered:
            high_water = recovered.high_water("feed.a")
            assert high_water >= acknowledged[-1].source_seq
            held = recovered.read_range("feed.a", 1, high_water)
            assert held[: len(acknowledged)] == acknowledged
            resumed = Publisher("feed.a", recovered, bits=8)
            nxt = resumed.publish("/item/0", {"after": "crash"})
            assert nxt.source_seq == high_water + 1
            assert recovered.read_range("feed.a", 1, nxt.source_seq)[-1] == nxt
    finally:
        server.stop()
    assert not server.running
