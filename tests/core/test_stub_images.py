"""The stub's image requests (core/stubimages.py): an image current as of n covers its item's
publications at or below n (consumed in the source's order, never delivered), nothing else."""

from __future__ import annotations

import random
from typing import Any

import pytest

from seqrepair.core.errors import InvalidMessageError, InvalidTopicPatternError
from seqrepair.core.events import Delivered, DeliveredRun, Event, Unrecoverable
from seqrepair.core.image import ImageCache
from seqrepair.core.messages import GapError, GapRequest, Heartbeat, Publication, ReplayComplete
from seqrepair.core.snapshot import (
    ImageComplete,
    ImageDelivered,
    ImageFrame,
    ImageOutdated,
    ImageRequest,
    ImageResynced,
    RequestImage,
    image_publication,
)
from seqrepair.core.stub import SubscriberStub


def pub(topic: str, seq: int, link: int | None, **fields: Any) -> Publication:
    return Publication(topic, "s", seq, "update", fields or {"v": seq}, link_seq=link)


def image(topic: str, as_of: int, request_id: int = 1, **fields: Any) -> ImageFrame:
    return ImageFrame(image_publication(topic, "s", as_of, "image", fields), request_id)


def delivered(events: list[Event]) -> list[tuple[str, int]]:
    out = []
    for ev in events:
        if isinstance(ev, Delivered):
            out.append((ev.publication.topic, ev.publication.source_seq))
        elif isinstance(ev, DeliveredRun):
            out.extend((p.topic, p.source_seq) for p in ev.publications)
    return out


def test_request_image_numbers_its_requests_and_a_bad_one_changes_nothing() -> None:
    stub = SubscriberStub()
    assert stub.request_image(["/a"]) == [RequestImage(ImageRequest(("/a",), request_id=1))]
    with pytest.raises(InvalidMessageError):
        stub.request_image()  # neither topic nor pattern
    with pytest.raises(InvalidTopicPatternError):
        stub.request_image(patterns=["/wi*d"])
    [ask] = stub.request_image(patterns=["/#"], sources=["s"])
    assert isinstance(ask, RequestImage)
    assert ask.request.request_id == 2
    assert [r.request_id for r in stub.pending_images()] == [1, 2]


def test_an_image_covers_its_item_through_as_of_and_nothing_else() -> None:
    stub = SubscriberStub()
    stub.request_image(["/a"])
    assert delivered(stub.receive(pub("/a", 1, 1), 0.0)) == [("/a", 1)]
    [ev] = stub.receive(image("/a", 5, v=5), 0.1)
    assert isinstance(ev, ImageDelivered)
    assert ev.publication.source_seq == 5
    got: list[tuple[str, int]] = []
    for link, (topic, seq) in enumerate([("/b", 2), ("/a", 3), ("/a", 5), ("/b", 6), ("/a", 7)],
                                        start=2):
        got += delivered(stub.receive(pub(topic, seq, link), 0.2))
    assert got == [("/b", 2), ("/b", 6), ("/a", 7)]
    assert stub.stats.image_covered == 2
    assert stub.last_delivered == {"s": 7}
    assert stub.image_floors == 0  # the source passed as_of: nothing left to cover
    [done] = stub.receive(ImageComplete({"s": 5}, 1), 0.3)
    assert isinstance(done, ImageResynced)
    assert done.topics == frozenset({"/a"})
    assert stub.pending_images() == []


def test_covered_publications_fill_link_gaps_in_order() -> None:
    """Frames behind a link gap, the gap then resent: what the image holds is consumed in its
    slot, what it does not is delivered in link order."""
    stub = SubscriberStub(nak_delay=0.0)
    stub.request_image(["/a"])
    stub.receive(pub("/a", 1, 1), 0.0)
    assert stub.receive(pub("/b", 4, 4), 0.0) == []  # 2, 3 missing
    stub.poll(0.01)
    stub.receive(image("/a", 4, v=4), 0.02)
    got = delivered(stub.receive(pub("/a", 3, 3, ).with_link(3, retransmit=True), 0.03))
    assert got == []  # slot 2 still missing: held
    got = delivered(stub.receive(pub("/b", 2, 2).with_link(2, retransmit=True), 0.04))
    assert got == [("/b", 2), ("/b", 4)]  # 3 covered by the image, in its slot
    assert stub.last_delivered == {"s": 4}


def test_an_image_older_than_its_source_delivered_is_not_taken() -> None:
    stub = SubscriberStub()
    stub.request_image(["/a"])
    stub.receive(pub("/a", 1, 1), 0.0)
    stub.receive(pub("/b", 9, 2), 0.0)
    [ev] = stub.receive(image("/a", 5), 0.1)
    assert isinstance(ev, ImageOutdated)
    assert ev.delivered == 9
    assert stub.stats.images_delivered == 0
    assert stub.image_floors == 0


def test_answers_to_no_request_are_stray_and_copies_are_dropped() -> None:
    stub = SubscriberStub()
    assert stub.receive(image("/a", 5, request_id=9), 0.0) == []
    assert stub.receive(ImageComplete({"s": 5}, 9), 0.0) == []
    assert stub.stats.stray_dropped == 2
    stub.request_image(["/a"])
    assert len(stub.receive(image("/a", 5), 0.0)) == 1
    assert stub.receive(image("/a", 5), 0.0) == []  # the same image again
    assert stub.stats.images_delivered == 1


def test_a_replay_after_a_reset_is_covered_by_an_image_that_came_first() -> None:
    stub = SubscriberStub()
    stub.request_image(patterns=["/#"])
    stub.receive(pub("/a", 1, 1), 0.0)
    stub.receive(Heartbeat(0), 0.1)  # a reset: the stub asks for a replay after 1
    stub.receive(image("/a", 3, v=3), 0.2)
    stub.receive(image("/b", 3, v=3), 0.2)
    got: list[tuple[str, int]] = []
    for seq, topic in ((2, "/a"), (3, "/b")):
        got += delivered(stub.receive(Publication(topic, "s", seq, retransmit=True), 0.3))
    got += delivered(stub.receive(ReplayComplete({"s": 3}), 0.4))
    got += delivered(stub.receive(pub("/a", 4, 1), 0.5))
    assert got == [("/a", 4)]
    assert stub.last_delivered == {"s": 4}


def test_unrecoverable_says_when_items_are_unknown() -> None:
    stub = SubscriberStub()
    stub.receive(pub("/a", 1, 1), 0.0)
    stub.receive(Heartbeat(0), 0.1)
    events = stub.receive(GapError("trimmed", stub.resume_point(), "gone", {"s": 5}), 0.2)
    lost = [e for e in events if isinstance(e, Unrecoverable)]
    assert lost == [Unrecoverable("s", 1, "trimmed", items=None)]


@pytest.mark.parametrize("seed", range(20))
def test_the_application_ends_with_the_exact_image(seed: int) -> None:
    """Random publications over a few items; the stub gets the first k in order, an image of
    some items as of m, then the rest with reordering and resends: an ImageCache fed what it
    is given, in order, equals the whole stream's, and each publication the images do not hold
    is delivered once, in source order."""
    rng = random.Random(seed)
    topics = ["/a", "/b", "/c", "/d"]
    n = 60
    pubs = []
    for seq in range(1, n + 1):
        ptype = rng.choice(["update", "update", "correction", "image", "drop"])
        fields = {} if ptype == "drop" else {rng.choice("xyz"): seq}
        pubs.append(Publication(rng.choice(topics), "s", seq, ptype, fields, link_seq=seq))
    k = rng.randint(0, 30)
    m = rng.randint(k, n)
    imaged = set(rng.sample(topics, rng.randint(1, 4)))
    stub = SubscriberStub(nak_delay=0.0, max_retries=50)
    stub.request_image(sorted(imaged))
    app = ImageCache()
    handed: list[Publication] = []
    now = 0.0

    def take(events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, Delivered):
                handed.append(ev.publication)
                app.apply(ev.publication)
            elif isinstance(ev, DeliveredRun):
                for p in ev.publications:
                    handed.append(p)
                    app.apply(p)
            elif isinstance(ev, ImageDelivered):
                app.apply(ev.publication)
            elif hasattr(ev, "request") and isinstance(ev.request, GapRequest):
                lo, hi = ev.request.link_from, ev.request.link_to
                for p in pubs[lo - 1:hi]:
                    take(stub.receive(p.with_link(p.link_seq, retransmit=True), now))

    for p in pubs[:k]:
        take(stub.receive(p, now))
    for topic in sorted(imaged):  # what the component folds: the item through m
        cache = ImageCache()
        for p in pubs[:m]:
            if p.topic == topic:
                cache.apply(p)
        fields = cache.get(topic)
        ptype = "image" if fields is not None else "drop"
        if any(p.topic == topic for p in pubs[:m]):
            take(stub.receive(ImageFrame(image_publication(topic, "s", m, ptype,
                                                           fields or {}), 1), now))
    rest = pubs[k:]
    order = list(range(len(rest)))
    for i in range(0, len(order) - 1, 3):  # swap neighbours, drop some: the stub repairs
        order[i], order[i + 1] = order[i + 1], order[i]
    for i in order:
        if rng.random() < 0.15:
            continue
        now += 0.01
        take(stub.receive(rest[i], now))
        take(stub.poll(now))
    for _ in range(200):
        now += 0.5
        take(stub.poll(now))
    whole = ImageCache()
    for p in pubs:
        whole.apply(p)
    assert app.snapshot() == whole.snapshot()
    seqs = [p.source_seq for p in handed]
    assert seqs == sorted(set(seqs))
    expected = [p.source_seq for p in pubs if p.source_seq <= k or p.topic not in imaged
                or p.source_seq > m or not any(q.topic == p.topic for q in pubs[:m])]
    assert seqs == expected


def test_an_unanswered_image_request_is_sent_again_then_given_up() -> None:
    from seqrepair.core.stubimages import IMAGE_RETRY, IMAGE_TRIES

    stub = SubscriberStub(heartbeat_interval=1000.0)
    stub.poll(0.0)
    [ask] = stub.request_image(["/a"])
    assert stub.next_deadline == IMAGE_RETRY
    again = [e for e in stub.poll(IMAGE_RETRY) if isinstance(e, RequestImage)]
    assert again == [ask]  # the same request, the same id: its answers are told apart
    now = IMAGE_RETRY
    for _ in range(IMAGE_TRIES):
        now += IMAGE_RETRY * 2**IMAGE_TRIES
        stub.poll(now)
    assert stub.pending_images() == []
    assert stub.stats.images_abandoned == 1
    assert stub.next_deadline is None or stub.next_deadline > now


def test_an_image_request_being_answered_is_not_sent_again() -> None:
    from seqrepair.core.stubimages import IMAGE_RETRY

    stub = SubscriberStub(heartbeat_interval=1000.0)
    stub.poll(0.0)
    stub.request_image(["/a", "/b"])
    stub.receive(image("/a", 5), IMAGE_RETRY - 1)  # progress pushes the retry back
    assert not [e for e in stub.poll(IMAGE_RETRY + 1) if isinstance(e, RequestImage)]
    stub.receive(ImageComplete({"s": 5}, 1), IMAGE_RETRY + 2)
    assert not [e for e in stub.poll(10 * IMAGE_RETRY) if isinstance(e, RequestImage)]


@pytest.mark.parametrize("delivered_first", [False, True])
def test_overlapping_requests_each_name_every_item_they_resynced(delivered_first: bool) -> None:
    """Two requests for the same items, both answered as of the same number: the second's
    images are those the first delivered, not delivered again, but its ImageResynced names
    them (an item missing from ``topics`` no longer exists). ``delivered_first``: the
    source had delivered through ``as_of`` already (no floor needed to cover)."""
    stub = SubscriberStub()
    stub.poll(0.0)
    if delivered_first:
        stub.receive_many([pub("/a", 1, 1), pub("/b", 2, 2)], 0.05)
    [ask1] = stub.request_image(["/a", "/b"])
    [ask2] = stub.request_image(["/a", "/b"])
    assert isinstance(ask1, RequestImage)
    assert isinstance(ask2, RequestImage)
    first, second = ask1.request.request_id, ask2.request.request_id
    assert first is not None
    assert second is not None
    events: list[Event] = []
    for request_id in (first, second):
        for topic in ("/a", "/b"):
            events += stub.receive(image(topic, 2, request_id), 0.1)
        events += stub.receive(ImageComplete({"s": 2}, request_id), 0.1)
    images = [(e.publication.topic, e.request_id) for e in events
              if isinstance(e, ImageDelivered)]
    assert images == [("/a", first), ("/b", first)]  # each image delivered once
    resynced = [e for e in events if isinstance(e, ImageResynced)]
    assert [(r.request.request_id, r.topics) for r in resynced] == [
        (first, frozenset({"/a", "/b"})), (second, frozenset({"/a", "/b"}))]
    # the item images an application keeps are whole
    cache = ImageCache()
    for e in events:
        if isinstance(e, ImageDelivered):
            cache.apply(e.publication)
    assert sorted(cache) == ["/a", "/b"]
