"""The image fold (journal/imagefold.py) against a real redis-server: it must equal an
ImageCache fed the stream the asking link may see, through the number it is current as of."""

from __future__ import annotations

import random

import pytest

from seqrepair.core.image import ImageCache
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.permissions import Entitlement
from seqrepair.core.snapshot import ImageComplete, ImageFrame, ImageRequest
from seqrepair.journal import Journal
from seqrepair.journal.imagefold import ImageFold

pytestmark = pytest.mark.redis

TYPES = ["update", "update", "correction", "image", "drop", "snapshot"]


def history(rng: random.Random, n: int, source: str = "feed.a") -> list[Publication]:
    pubs = []
    for seq in range(1, n + 1):
        ptype = rng.choice(TYPES)
        fields = {} if ptype in ("drop", "snapshot") else {
            rng.choice("abcd"): rng.randint(0, 9) for _ in range(rng.randint(0, 3))}
        pubs.append(Publication(
            topic=f"/t/{rng.choice('xyz')}/{rng.randint(0, 4)}", source=source, source_seq=seq,
            ptype=ptype, fields=fields, permtoken=rng.choice([None, None, "gold", "secret"]),
        ))
    return pubs


def answer(journal: Journal, request: ImageRequest, as_of: dict[str, int],
           entitlement: Entitlement, page: int = 7) -> tuple[list[ImageFrame], ImageComplete]:
    fold = ImageFold(journal, request, as_of, entitlement.allows, page_size=page)
    steps = list(fold.steps())
    frames = [s for s in steps if isinstance(s, ImageFrame)]
    complete = steps[-1]
    assert isinstance(complete, ImageComplete)
    assert steps.count(None) >= 1  # it yields between pages
    return frames, complete


def expected(pubs: list[Publication], request: ImageRequest, entitlement: Entitlement,
             through: int) -> dict[str, dict[str, object]]:
    cache = ImageCache()
    for pub in pubs:
        if pub.source_seq <= through and entitlement.allows(pub) and request.matches(pub.topic):
            cache.apply(pub)
    return cache.snapshot()


@pytest.mark.parametrize("seed", range(8))
def test_fold_equals_the_cache_of_the_visible_stream(journal: Journal, seed: int) -> None:
    rng = random.Random(seed)
    pubs = history(rng, 300)
    journal.append(pubs, 32)
    entitlement = Entitlement(topics=["/t/x/#", "/t/y/#"], grant={"gold"})
    request = ImageRequest(patterns=["/t/#"], request_id=seed)
    through = rng.randint(150, 300)
    frames, complete = answer(journal, request, {"feed.a": through}, entitlement)
    got: dict[str, dict[str, object]] = {}
    for frame in frames:
        pub = frame.publication
        assert frame.request_id == seed
        assert pub.source_seq == through
        assert pub.topic.startswith(("/t/x/", "/t/y/"))  # never a topic it may not see
        assert pub.topic not in got  # one image per item
        if pub.ptype is PublishType.DROP:
            continue
        assert pub.ptype is PublishType.IMAGE
        got[pub.topic] = dict(pub.fields)
    assert got == expected(pubs, request, entitlement, through)
    assert complete.partial == ()
    assert dict(complete.as_of) == ({"feed.a": through} if frames else {})


def test_a_drop_is_answered_as_a_drop_and_an_item_made_again_as_its_image(
    journal: Journal,
) -> None:
    journal.append([
        Publication("/a", "s", 1, "image", {"x": 1}),
        Publication("/b", "s", 2, "image", {"y": 1}),
        Publication("/a", "s", 3, "drop"),
        Publication("/b", "s", 4, "drop"),
        Publication("/b", "s", 5, "update", {"z": 2}),
    ], 32)
    frames, _ = answer(journal, ImageRequest(topics=["/a", "/b"]), {"s": 5},
                       Entitlement.everything())
    by_topic = {f.publication.topic: f.publication for f in frames}
    assert by_topic["/a"].ptype is PublishType.DROP
    assert by_topic["/b"].ptype is PublishType.IMAGE
    assert dict(by_topic["/b"].fields) == {"z": 2}


def test_an_image_whose_base_was_trimmed_is_partial(journal: Journal) -> None:
    journal.append([
        Publication("/a", "s", 1, "image", {"x": 1, "y": 1}),
        Publication("/a", "s", 2, "update", {"x": 2}),
        Publication("/c", "s", 3, "image", {"k": 0}),
        Publication("/a", "s", 4, "correction", {"y": 3}),
    ], 32)
    journal.trim_through("s", 1, now=0.0)
    frames, complete = answer(journal, ImageRequest(patterns=["/#"]), {"s": 4},
                              Entitlement.everything())
    by_topic = {f.publication.topic: f.publication for f in frames}
    assert by_topic["/a"].ptype is PublishType.UPDATE  # what is known, not the whole item
    assert dict(by_topic["/a"].fields) == {"x": 2, "y": 3}
    assert by_topic["/c"].ptype is PublishType.IMAGE
    assert complete.partial == ("/a",)


def test_a_topic_request_stops_reading_once_its_items_are_found(journal: Journal) -> None:
    pubs = [Publication(f"/n/{i % 10}", "s", i + 1, "update", {"v": i}) for i in range(2000)]
    pubs.append(Publication("/wanted", "s", 2001, "image", {"v": 1}))
    journal.append(pubs, 32)
    fold = ImageFold(journal, ImageRequest(topics=["/wanted"]), {"s": 2001},
                     Entitlement.everything().allows, page_size=50)
    frames = [s for s in fold.steps() if isinstance(s, ImageFrame)]
    assert [f.publication.topic for f in frames] == ["/wanted"]
    assert fold.scanned <= 50  # one page, not the journal


def test_an_item_nobody_may_see_is_never_answered(journal: Journal) -> None:
    journal.append([
        Publication("/open/a", "s", 1, "image", {"x": 1}),
        Publication("/open/a", "s", 2, "update", {"x": 9}, permtoken="secret"),
        Publication("/closed/b", "s", 3, "image", {"y": 1}),
    ], 32)
    entitlement = Entitlement(topics=["/open/#"])  # no token granted
    frames, complete = answer(journal, ImageRequest(patterns=["/#"], topics=["/closed/b"]),
                              {"s": 3}, entitlement)
    assert [(f.publication.topic, dict(f.publication.fields)) for f in frames] == [
        ("/open/a", {"x": 1})]
    assert dict(complete.as_of) == {"s": 3}


class CountingJournal:
    """The journal, counting the pages read."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.pages = 0

    def page_back(self, source: str, through: int, count: int) -> tuple[int, list[Publication]]:
        self.pages += 1
        return self.journal.page_back(source, through, count)


def test_a_pattern_over_a_large_journal_reads_one_page_per_step(journal: Journal) -> None:
    """Every item is open until its base: the fold holds the open items and one page, and
    hands the event loop back after each page (the component's repair turns)."""
    n = 3000
    journal.append([Publication(f"/n/{i % 40}", "s", i + 1, "image" if i < 40 else "update",
                                {"v": i}) for i in range(n)], 32)
    counting = CountingJournal(journal)
    fold = ImageFold(counting, ImageRequest(patterns=["/#"]), {"s": n},  # type: ignore[arg-type]
                     Entitlement.everything().allows, page_size=100)
    pages_between: list[int] = []
    before = 0
    frames = 0
    for step in fold.steps():
        if step is None:
            pages_between.append(counting.pages - before)
            before = counting.pages
        elif isinstance(step, ImageFrame):
            frames += 1
    assert frames == 40
    assert counting.pages == n // 100
    assert set(pages_between) == {1}  # never two pages in one step
    assert fold.scanned == n


def test_an_entry_that_cannot_be_delivered_is_passed_over_and_its_item_is_partial(
    journal: Journal,
) -> None:
    journal.append([
        Publication("/a", "s", 1, "image", {"x": 1}),
        Publication("/a", "s", 2, "update", {"x": 2**70}),  # written before limits: unsendable
        Publication("/b", "s", 3, "image", {"y": 1}),
    ], 32)
    frames, complete = answer(journal, ImageRequest(patterns=["/#"]), {"s": 3},
                              Entitlement.everything())
    by_topic = {f.publication.topic: f.publication for f in frames}
    assert by_topic["/a"].ptype is PublishType.UPDATE
    assert dict(by_topic["/a"].fields) == {"x": 1}
    assert by_topic["/b"].ptype is PublishType.IMAGE
    assert complete.partial == ("/a",)
