"""A redis-server that hangs (SIGSTOP) loses nothing and does not hold the component.

Real parts only: a real redis-server is stopped with SIGSTOP (it keeps its connections open
and answers nothing, as behind a path that drops packets) while a :class:`Publisher` that
numbers its own publications publishes steadily to a real component (``seqrepair serve
--redis-timeout 1``), then continued with SIGCONT. Each journal call fails only at the socket
timeout; the component then leaves the journal quiet for twice the time it waited (its log
says so) and releases what comes meanwhile untried, so its event loop goes on serving links.
The publisher sends the released publications again, in order; a subscriber gets every
publication exactly once, in order. No timed assertions: every wait is a generous deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess
from .test_journal_outage_redis import assert_once_in_order, publish_through

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCE = "feed.hang"
TOTAL = 600


@contextlib.contextmanager
def hung(server: EmbeddedRedis) -> Iterator[None]:
    """``server`` stopped (SIGSTOP) inside the block, continued (SIGCONT) after it."""
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_hung_redis_loses_nothing_and_the_component_keeps_serving(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    comp = ComponentProcess(private_server.url, tmp_path, "--heartbeat", "0.2",
                            "--redis-timeout", "1").start()
    run = publish_through(private_server, comp, lambda: hung(private_server),
                          source=SOURCE, prefix="/hang", total=TOTAL, pace=0.004, lasting=3.0)
    assert_once_in_order(run, SOURCE, TOTAL)
    assert "the journal stalled the event loop" in run.log  # it stopped trying a while
