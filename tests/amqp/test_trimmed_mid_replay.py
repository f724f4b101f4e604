"""Numbers retention trims while a source replay reads them (issue 27): over real processes
(a private redis-server, ``seqrepair serve --retain-count --replay-page``, a raw AMQP
subscriber that gives credit a little at a time), the replay ends with ``GAP-ERROR``
``trimmed`` whose ``items`` name what the trimmed numbers it had not sent held, as the link
may see them (journal/trimsummary.py; was: no items)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from proton import Message, ulong
from proton.utils import BlockingConnection

from seqrepair.amqp.client.publisher import Publisher
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPICS = ["/weather/a", "/weather/b", "/news/x"]


def _batch(first: int, n: int, topics: list[str]) -> list[tuple[str, dict[str, Any], str,
                                                               None]]:
    return [(topics[i % len(topics)], {"n": i}, "update", None)
            for i in range(first, first + n)]


def test_a_replay_cut_by_retention_names_the_items_it_did_not_send(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "5", "--retain-count", "50", "--retention-interval",
                     "0.2", "--replay-page", "10")
    with Journal.from_url(redis_url) as journal:
        with Publisher(comp.url, "feed.a", journal=journal) as publisher:
            publisher.publish_many(_batch(0, 40, TOPICS))
            assert publisher.flush(30)
        conn = BlockingConnection(comp.url, timeout=20)
        try:
            link = f"slow-{uuid.uuid4().hex[:8]}"
            receiver = conn.create_receiver("/weather/#", name=link, credit=0)
            sender = conn.create_sender("$seqrepair")
            sender.send(Message(id="r1", reply_to=f"$link/{link}", body={"feed.a": ulong(0)},
                                properties={"message-type": "SOURCE-GAP-REQUEST",
                                            "link": link}))
            receiver.flow(3)  # REPLAY-STARTED and the first publications: then it waits
            first = [receiver.receive(timeout=20) for _ in range(3)]
            # while it waits: more published, retention trims past where the replay is,
            # the trimmed span's items (later ones, /weather/late among them) summarized
            with Publisher(comp.url, "feed.a", journal=journal) as publisher:
                publisher.publish_many(_batch(40, 20, ["/weather/late"]))
                publisher.publish_many(_batch(60, 100, TOPICS))
                assert publisher.flush(30)
            assert wait_for(lambda: journal.info("feed.a").trimmed_through >= 100, 30), (
                comp.log_text()[-2000:])
            frames: list[Message] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                receiver.flow(1)
                message = receiver.receive(timeout=20)
                frames.append(message)
                if (message.properties or {}).get("message-type") in (
                        "GAP-ERROR", "REPLAY-COMPLETE"):
                    break
        finally:
            conn.close()
    kinds = [(m.properties or {}).get("message-type") for m in first + frames]
    assert kinds[0] == "REPLAY-STARTED", kinds
    end = frames[-1]
    assert (end.properties or {}).get("message-type") == "GAP-ERROR", kinds
    assert "gapfill.trimmed_during_replay" in comp.log_text()
    _after, trimmed_through, items = end.body
    assert trimmed_through["feed.a"] >= 100
    # what the trimmed numbers it had not sent held on /weather/# (not /news/x)
    assert sorted(items["feed.a"]) == ["/weather/a", "/weather/b", "/weather/late"], end.body
