"""A relay's restart of its links for numbers lost upstream, over narrow links (issue 27):
the scenario of test_relay.py's live subscriber told of numbers lost upstream, with B at 3, 4
and 5 link bits. The subscriber acknowledges (the window discipline); B restarts its link
when it journals the loss and names the new context (``SUBSCRIPTION`` ``ACTIVE``), so the
subscriber's ``ACK``s are taken and its window opens again. Was a bare reset: its ``ACK``s named
the old context, were never taken, and at these widths the window shut for good (the
subscriber got nothing after the loss)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal import Journal

from .conftest import ComponentProcess
from .test_relay import RelayProcess, expected, took_live_then_lost_upstream, upstream_back

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_a_narrow_link_restarted_for_numbers_lost_upstream_opens_its_window_again(
    bits: int, redises: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, "--heartbeat", "0.2").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--heartbeat",
                     "0.2", "--link-bits", str(bits)).start()
    got: list[Publication] = []
    live = Subscriber(b.url, "/w/#", link_name="live", heartbeat_interval=0.2,
                      on_publication=got.append)
    try:
        before = took_live_then_lost_upstream(a, b, a_redis, live, got)
        topics = ["/w/a/1", "/w/b/2", "/x/c/3", "/w/a/4", "/x/d/5"]
        with Journal.from_url(a_redis) as journal:  # the origin's publisher journals on
            bits_t = journal.info("feed.t").bits or 32
            journal.append([Publication(topics[i % 5], "feed.t", i + 1, fields={"n": i})
                            for i in range(10, 110)], bits_t)
            after = [k for k in expected(a_redis, "feed.t", "/w/#") if k[1] > 40]
            journal.trim_through("feed.t", 40, now=time.time())
        upstream_back(a, b, got, after)
    finally:
        live.stop()
        b.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in got] == before + after
    lost = [(u.source, u.reason) for u in live.unrecoverable]
    assert ("feed.t", "trimmed") in lost, (lost, b.log_text()[-2000:])
    assert "numbers lost upstream: every link restarts its context" in b.log_text()
