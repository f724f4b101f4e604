"""A stateful property: whatever the outages, the transport only ever sees what the journal
holds, in order, each number once, and nothing stamped is lost or renumbered."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from seqrepair.core.messages import Publication
from seqrepair.journal import (
    BacklogFullError,
    EmbeddedRedis,
    Journal,
    JournalError,
    PublicationQueuedError,
    Publisher,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]


class PublisherUnderOutages(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="seqrepair-outages-"))
        self.server = EmbeddedRedis(data_dir=self.tmp, appendfsync="always").start()
        self.journal = Journal.from_url(
            self.server.url, socket_timeout=1.0, socket_connect_timeout=0.3
        )
        self.sent: list[Publication] = []
        self.stamped: list[Publication] = []
        self.publisher = Publisher(
            "feed.a", self.journal, bits=4, transport=self.transport, batch_size=3, window=9
        )

    def transport(self, pub: Publication) -> None:
        if self.server.running:  # when it is up we can check; when down the pipeline holds it
            assert self.journal.high_water("feed.a") >= pub.source_seq
        self.sent.append(pub)

    @rule(n=st.integers(1, 8))
    def publish(self, n: int) -> None:
        for i in range(n):
            try:
                self.stamped.append(self.publisher.publish(f"/t/{i % 3}", {"i": i}))
            except PublicationQueuedError as exc:
                self.stamped.append(exc.publication)  # stamped and queued, not published
            except BacklogFullError:
                pass  # refused: nothing stamped

    @rule()
    def flush(self) -> None:
        with contextlib.suppress(JournalError):
            self.publisher.flush()

    @precondition(lambda self: self.server.running)
    @rule()
    def crash_redis(self) -> None:
        self.server.kill()

    @precondition(lambda self: not self.server.running)
    @rule()
    def restart_redis(self) -> None:
        self.server.start()

    @invariant()
    def sent_in_order_exactly_once(self) -> None:
        assert [p.source_seq for p in self.sent] == list(range(1, len(self.sent) + 1))
        assert self.sent == self.stamped[: len(self.sent)]
        assert self.publisher.pending == len(self.stamped) - len(self.sent)
        assert self.publisher.pending <= 9

    def teardown(self) -> None:
        try:
            if not self.server.running:
                self.server.start()
            self.publisher.flush()
            assert self.sent == self.stamped
            assert self.journal.read_range("feed.a", 1, 10_000) == self.stamped
            self.publisher.close()
            self.journal.close()
        finally:
            self.server.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)


PublisherUnderOutages.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_publisher_under_outages = PublisherUnderOutages.TestCase
