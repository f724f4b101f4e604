"""An image request the component rejects reaches the application (WIRE.md "Image requests"),
over real processes: a private redis-server, ``seqrepair serve``, a library ``Subscriber``.

Before, the Subscriber passed to its stub only the repair requests of a rejected delivery: a
rejected ``SNAPSHOT`` was logged and nothing else; the stub sent it again after 30 s
(``IMAGE_RETRY``) until its tries ran out, then forgot it (``images_abandoned``), and the
application was never told. Now a temporary rejection is asked again with the stub's backoff
(seconds, not 30 s), and one for good reaches the application as :class:`ImageRefused`
naming the condition.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.component.images import MAX_IMAGE_ANSWERS, MAX_IMAGE_ANSWERS_PER_PRINCIPAL
from seqrepair.amqp.wire.framing import Outgoing
from seqrepair.amqp.wire.technical import MESSAGE_TYPE
from seqrepair.amqp.wire.vocabulary import PROP_ON_BEHALF_OF
from seqrepair.core.events import Event
from seqrepair.core.snapshot import ImageRefused, ImageResynced
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .principals import amqp_identity


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", *args]

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


class Claiming(Subscriber):
    """A subscriber whose image requests claim to act for a principal its connection may not
    act for: the component refuses them ``amqp:unauthorized-access``, for good (the library
    never claims so by itself: this is how a permanent refusal is provoked from a real
    component; its other permanent ones, a malformed request, the stub never sends)."""

    def _request(self, message: Outgoing, asked: Any = ()) -> None:
        super()._request(message, asked)
        props = dict(message.properties or {})
        if str(props.get(MESSAGE_TYPE)) == "SNAPSHOT":
            props[str(PROP_ON_BEHALF_OF)] = "mallory"
            message.properties = props


@contextlib.contextmanager
def _slow_images(comp: ComponentProcess, redis_url: str, source: str, events: list[Event],
                 images: list[Any]) -> Iterator[Subscriber]:
    """300 images of ``source`` journaled and published, then a subscriber of them on a link of
    little credit (image answers run slowly), its events and images collected."""
    journal = Journal.from_url(redis_url)
    try:
        with Publisher(comp.url, source, journal=journal) as publisher:
            publisher.publish_many([(f"/weather/item/{i}", {"v": i}, "image")
                                    for i in range(300)])
            assert publisher.flush(30)
        with Subscriber(comp.url, "/weather/#", on_event=events.append,
                        on_image=images.append, heartbeat_interval=0.2, credit=10) as sub:
            assert sub.connected.wait(10)
            yield sub
    finally:
        journal.close()


def _events(of: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in of if isinstance(e, kind)]


def test_an_image_request_refused_for_good_reaches_the_application(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    events: list[Event] = []
    with Claiming(comp.url, "/weather/#", on_event=events.append,
                  heartbeat_interval=0.2) as sub:
        assert sub.connected.wait(10)
        sub.request_image(patterns=["/#"], sources=["feed.a"])
        assert wait_for(lambda: _events(events, ImageRefused), 10), (
            events, sub.stats().as_dict())
        time.sleep(1.0)  # the stub's backoff would have asked again by now: it must not
        stats = sub.stats()
        assert sub.images_refused == _events(events, ImageRefused)
    [refused] = _events(events, ImageRefused)
    assert refused.request.patterns == ("/#",)
    assert refused.request.sources == ("feed.a",)
    assert refused.reason == "amqp:unauthorized-access"
    assert stats.rejected == 1  # given up at once: not asked again
    assert stats.images_refused == 1
    assert not _events(events, ImageResynced)


def test_an_image_request_rejected_for_now_is_asked_again(
    component: Callable[..., ComponentProcess], redis_url: str,
) -> None:
    """Five image requests at once over a journal of more items than the link has credit: four
    answers run on the connection, the fifth is rejected ``amqp:resource-limit-exceeded``; it
    is asked again with backoff and answered like the others within seconds."""
    comp = component("--heartbeat", "0.2")
    events: list[Event] = []
    images: list[Any] = []
    with _slow_images(comp, redis_url, "feed.r", events, images) as sub:
        for _ in range(5):
            sub.request_image(patterns=["/#"])
        assert wait_for(lambda: len(_events(events, ImageResynced)) == 5, 15), (
            sub.stats().as_dict(), _events(events, ImageRefused))
        stats = sub.stats()
    assert stats.rejected >= 1
    assert not _events(events, ImageRefused)
    assert stats.images_refused == 0
    resyncs = _events(events, ImageResynced)
    assert sorted(r.request.request_id for r in resyncs) == [1, 2, 3, 4, 5]
    assert all(dict(r.as_of) == {"feed.r": 300} for r in resyncs)
    assert {p.topic for p in images} == {f"/weather/item/{i}" for i in range(300)}
    # the five overlap: each names every item, none delivered twice (core/stubimages.py)
    assert all(r.topics == {p.topic for p in images} for r in resyncs)
    assert len(images) == 300


def _hog_image_answers(url: str, stack: contextlib.ExitStack) -> None:
    """Hold the anonymous principal's 16 image answers in progress: four connections of it,
    each asking four images on a link with no credit (they never end while it is open)."""
    for _ in range(MAX_IMAGE_ANSWERS_PER_PRINCIPAL // MAX_IMAGE_ANSWERS):
        conn = BlockingConnection(url, timeout=10, **amqp_identity("anonymous"))
        stack.callback(conn.close)
        link = uuid.uuid4().hex
        conn.create_receiver("/weather/#", name=link, credit=0)
        sender = conn.create_sender("$seqrepair")
        for i in range(MAX_IMAGE_ANSWERS):
            asked = Message(body={"patterns": ["/#"]}, id=i, reply_to=f"$link/{link}",
                            properties={MESSAGE_TYPE: "SNAPSHOT", "link": link})
            assert sender.send(asked, error_states=[]).remote.condition is None


def test_subscribe_names_a_resync_rejected_for_now_and_exits_3(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path,
) -> None:
    """``seqrepair subscribe --resync-on-unrecoverable`` resumes a durable link past a trim
    (Unrecoverable), while other connections of its principal hold every image answer it may
    run: its resync is rejected ``amqp:resource-limit-exceeded`` again and again, asked again
    with backoff (minutes before it is given up: IMAGE_REJECTIONS). The run stops first: the
    resync still unanswered is named on stderr and in the statistics, and it exits 3."""
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    out, stats = tmp_path / "out.jsonl", tmp_path / "stats.json"
    common = ("subscribe", "--url", comp.url, "--address", "/weather/#", "--link-name",
              "cli-refused", "--output", str(out), "--stats-file", str(stats),
              "--resync-on-unrecoverable")
    ready = tmp_path / "ready"
    first = subprocess.Popen(cli(*common, "--count", "10", "--ready-file", str(ready)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(ready.exists, 60), "the subscriber did not attach"
        with Publisher(comp.url, "feed.a", journal=journal) as publisher:
            publisher.publish_many([(f"/weather/x/{i % 4}", {"v": i}, "update")
                                    for i in range(1, 11)])
            assert publisher.flush(30)
        assert first.wait(30) == 0, first.communicate()
        with Publisher(comp.url, "feed.a", journal=journal) as publisher:
            publisher.publish_many([(f"/weather/x/{i % 4}", {"v": i}, "update")
                                    for i in range(11, 111)])
            assert publisher.flush(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    journal.trim_through("feed.a", 90, now=0.0)  # what the link owes from 11 is gone
    with contextlib.ExitStack() as hogs:
        _hog_image_answers(comp.url, hogs)
        second = subprocess.run(cli(*common, "--duration", "12"), capture_output=True,
                                text=True, timeout=60)
    report = json.loads(stats.read_text())
    assert second.returncode == 3, second.stderr[-3000:]
    assert "1 still unanswered at the end (resyncs_unanswered_events)" in second.stderr, \
        second.stderr[-3000:]
    assert len(report["unrecoverable_events"]) >= 1
    [unanswered] = report["resyncs_unanswered_events"]
    assert "/#" in unanswered
    assert report["images_refused_events"] == []  # 12 s is well inside the retries' bound
    assert report["images_refused"] == 0
    assert report["rejected"] >= 4  # asked again and again, with backoff
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [r for r in records if r.get("image")]
    journal.close()


def test_image_requests_cut_off_by_a_lost_connection_are_answered_after_it(
    component: Callable[..., ComponentProcess], redis_url: str,
) -> None:
    """Three image requests over 300 items on a link of little credit (the answers run
    slowly); the connection is dropped while they run, and one more is asked meanwhile. Once
    attached again the subscriber sends the unanswered ones once each (SubscriberStub.
    resend_images), and every request ends answered, none refused, each image once."""
    comp = component("--heartbeat", "0.2")
    events: list[Event] = []
    images: list[Any] = []
    with _slow_images(comp, redis_url, "feed.c", events, images) as sub:
        for _ in range(3):
            sub.request_image(patterns=["/#"])
        sub.drop_connection()
        sub.request_image(topics=["/weather/item/1", "/weather/item/2"])
        assert wait_for(lambda: len(_events(events, ImageResynced)) == 4, 20), (
            sub.stats().as_dict(), _events(events, ImageRefused))
        stats = sub.stats()
    assert stats.connections >= 2
    assert not _events(events, ImageRefused)
    resyncs = _events(events, ImageResynced)
    everything = {f"/weather/item/{i}" for i in range(300)}
    assert sorted(len(r.topics) for r in resyncs) == [2, 300, 300, 300]
    assert {p.topic for p in images} == everything
    assert len(images) == 300  # none delivered twice
