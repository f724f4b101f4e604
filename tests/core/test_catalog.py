"""The topic catalog: the concrete topics a service lists for subscription (SWIM ``getTopics``).

A topic enters when it is published (``add``) or declared (``declare``: by the operator,
``configured``, or a REST client) and leaves when removed (``remove``; never a configured one);
the catalog is bounded by a count and a topic length, past which new topics are refused and
counted, never raised; listing is sorted and may be filtered by a topic pattern; bad input
raises InvalidTopicPatternError and changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.catalog import MAX_TOPICS, PATTERN_MATCHING, TopicCatalog, TopicInfo
from seqrepair.core.errors import (
    InvalidConfigError,
    InvalidTopicPatternError,
    SeqRepairError,
    TopicConflictError,
    TopicNotFoundError,
)
from seqrepair.core.topics import ANY_WORDS, ONE_WORD, SEPARATOR, TopicPattern

AIRPORT_TOPICS = ["/weather/wind/LFPG", "/weather/precipitation/LEMD", "/weather/wind/LEMD",
                  "/weather/precipitation/LFPG", "/flight/LEMD"]


def catalog_of(*topics: str, **kwargs: Any) -> TopicCatalog:
    catalog = TopicCatalog(**kwargs)
    for topic in topics:
        catalog.add(topic)
    return catalog


# --- what it holds ---------------------------------------------------------------------------


def test_an_empty_catalog_is_an_empty_topic_tree_with_our_wildcards() -> None:
    catalog = TopicCatalog()
    assert len(catalog) == 0
    assert catalog.topics() == []
    assert catalog.tree() == {
        "type": "Tree",
        "patternMatching": {"wordSeparator": "/", "singleWordWildcard": "*",
                            "multiWordWildcard": "#"},
        "topics": [],
    }
    assert PATTERN_MATCHING == {"wordSeparator": SEPARATOR, "singleWordWildcard": ONE_WORD,
                                "multiWordWildcard": ANY_WORDS}


def test_add_says_whether_the_topic_is_new_and_listing_is_sorted() -> None:
    catalog = TopicCatalog()
    assert [catalog.add(topic) for topic in AIRPORT_TOPICS] == [True] * 5
    assert [catalog.add(topic) for topic in AIRPORT_TOPICS] == [False] * 5
    assert catalog.topics() == sorted(AIRPORT_TOPICS)
    assert catalog.tree()["topics"] == sorted(AIRPORT_TOPICS)
    assert len(catalog) == 5
    assert "/flight/LEMD" in catalog
    assert "/flight" not in catalog


def test_what_topics_returns_is_a_copy() -> None:
    catalog = catalog_of("/a", "/b")
    catalog.topics().clear()
    catalog.tree()["topics"].append("/c")
    catalog.tree()["patternMatching"]["wordSeparator"] = "."
    assert catalog.tree()["topics"] == ["/a", "/b"]
    assert PATTERN_MATCHING["wordSeparator"] == "/"


def test_the_published_set_is_live_for_a_membership_test_before_add() -> None:
    catalog = TopicCatalog()
    published = catalog.published
    assert "/a" not in published
    catalog.add("/a")
    assert "/a" in published
    assert published == {"/a"}


def test_get_tells_what_the_catalog_knows_of_a_topic() -> None:
    catalog = catalog_of("/weather/wind/LEMD")
    assert catalog.get("/weather/wind/LEMD") == TopicInfo("/weather/wind/LEMD", published=True)
    assert catalog.get("/weather/wind/LEMD").to_json() == {
        "topic": "/weather/wind/LEMD", "declared": False, "configured": False,
        "published": True}


def test_a_declared_topic_is_listed_and_its_first_publication_is_still_news() -> None:
    catalog = TopicCatalog()
    assert catalog.declare("/weather/wind/LEMD")
    assert not catalog.declare("/weather/wind/LEMD")
    assert catalog.topics() == ["/weather/wind/LEMD"]
    assert catalog.get("/weather/wind/LEMD") == TopicInfo("/weather/wind/LEMD", declared=True)
    assert "/weather/wind/LEMD" not in catalog.published
    assert catalog.add("/weather/wind/LEMD")  # news: an adapter stores published topics
    assert not catalog.add("/weather/wind/LEMD")
    assert catalog.get("/weather/wind/LEMD") == TopicInfo("/weather/wind/LEMD", declared=True,
                                                          published=True)
    assert catalog.topics() == ["/weather/wind/LEMD"]


def test_declaring_a_published_topic_marks_it_declared_too() -> None:
    catalog = catalog_of("/a")
    assert catalog.declare("/a")
    assert catalog.get("/a") == TopicInfo("/a", declared=True, published=True)
    assert len(catalog) == 1


def test_a_configured_topic_is_declared_and_configured_and_stays_so() -> None:
    catalog = catalog_of("/a")
    assert catalog.declare("/a", configured=True)
    assert catalog.get("/a") == TopicInfo("/a", declared=True, published=True, configured=True)
    assert not catalog.declare("/a")  # declaring it again does not unconfigure it
    assert not catalog.declare("/a", configured=True)
    assert catalog.declare("/b")
    assert catalog.declare("/b", configured=True)  # news: now the operator's
    assert catalog.get("/b") == TopicInfo("/b", declared=True, configured=True)
    assert catalog.get("/b").to_json() == {"topic": "/b", "declared": True, "configured": True,
                                           "published": False}


def test_a_removed_topic_is_no_longer_listed_and_its_next_publication_is_news() -> None:
    catalog = catalog_of("/a", "/b")
    catalog.declare("/c")
    published = catalog.published
    assert catalog.remove("/a") == TopicInfo("/a", published=True)
    assert catalog.remove("/c") == TopicInfo("/c", declared=True)
    assert catalog.topics() == ["/b"]
    assert "/a" not in published  # the live set the component reads
    assert published == {"/b"}
    with pytest.raises(TopicNotFoundError):
        catalog.get("/a")
    with pytest.raises(TopicNotFoundError) as raised:
        catalog.remove("/a")
    assert raised.value.got == "/a"
    assert catalog.add("/a")  # learned again
    assert catalog.topics() == ["/a", "/b"]
    assert catalog.get("/a") == TopicInfo("/a", published=True)


def test_a_configured_topic_cannot_be_removed() -> None:
    catalog = catalog_of("/a")
    catalog.declare("/a", configured=True)
    with pytest.raises(TopicConflictError) as raised:
        catalog.remove("/a")
    assert raised.value.got == "/a"
    assert "serve --topic" in raised.value.message
    assert catalog.get("/a") == TopicInfo("/a", declared=True, published=True, configured=True)
    assert catalog.published == {"/a"}


def test_removing_makes_room_in_a_full_catalog() -> None:
    catalog = TopicCatalog(max_topics=2, max_length=8)
    assert catalog.add("/a")
    assert catalog.add("/b")
    assert not catalog.has_room("/c")
    assert catalog.has_room("/a")  # listed: no room needed
    catalog.remove("/a")
    assert catalog.has_room("/c")
    assert not catalog.has_room("/12345678")  # longer than max_length
    assert catalog.declare("/c")
    assert catalog.full


def test_load_takes_published_and_declared_topics_or_none_of_them() -> None:
    catalog = TopicCatalog()
    catalog.load(["/b", "/a"], ["/c", "/a"])
    assert catalog.topics() == ["/a", "/b", "/c"]
    assert catalog.published == {"/a", "/b"}
    assert catalog.get("/a") == TopicInfo("/a", declared=True, published=True)
    assert catalog.get("/c") == TopicInfo("/c", declared=True)
    with pytest.raises(InvalidTopicPatternError):
        catalog.load(["/d"], ["/e/#"])
    assert catalog.topics() == ["/a", "/b", "/c"]


def test_load_takes_every_topic_as_published_or_none_of_them() -> None:
    catalog = TopicCatalog()
    catalog.load(["/b", "/a", "/a"])
    assert catalog.topics() == ["/a", "/b"]
    assert catalog.published == {"/a", "/b"}
    with pytest.raises(InvalidTopicPatternError) as raised:
        catalog.load(["/c", "/d/#", "/e"])
    assert raised.value.got == "/d/#"
    assert catalog.topics() == ["/a", "/b"]


# --- filtering by a pattern --------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "listed"), [
    ("/weather/#", ["/weather/precipitation/LEMD", "/weather/precipitation/LFPG",
                    "/weather/wind/LEMD", "/weather/wind/LFPG"]),
    ("/weather/wind/*", ["/weather/wind/LEMD", "/weather/wind/LFPG"]),
    ("/#/LEMD", ["/flight/LEMD", "/weather/precipitation/LEMD", "/weather/wind/LEMD"]),
    ("/weather/precipitation/LFPG", ["/weather/precipitation/LFPG"]),
    ("/*", []),
    ("/#", sorted(AIRPORT_TOPICS)),
    ("/nowhere/#", []),
])
def test_a_pattern_lists_only_the_topics_it_matches(pattern: str, listed: list[str]) -> None:
    catalog = catalog_of(*AIRPORT_TOPICS)
    assert catalog.topics(pattern) == listed
    assert catalog.topics(TopicPattern(pattern)) == listed
    assert catalog.tree(pattern)["topics"] == listed


@pytest.mark.parametrize("pattern", ["", "/", "weather/#", "/weather/wi*d", "/a//b", "/a b", 7])
def test_a_bad_pattern_is_refused(pattern: Any) -> None:
    catalog = catalog_of(*AIRPORT_TOPICS)
    with pytest.raises(InvalidTopicPatternError) as raised:
        catalog.topics(pattern)
    assert raised.value.got == pattern
    with pytest.raises(InvalidTopicPatternError):
        catalog.tree(pattern)


# --- bounds ----------------------------------------------------------------------------------


def test_past_max_topics_new_topics_are_refused_and_counted() -> None:
    catalog = TopicCatalog(max_topics=2)
    catalog.declare("/declared")
    assert catalog.add("/a")
    assert catalog.full
    assert not catalog.add("/b")
    assert not catalog.declare("/c")
    assert not catalog.add("/b")
    assert catalog.refused == 3
    assert catalog.topics() == ["/a", "/declared"]
    assert "/b" not in catalog.published
    # a topic the catalog holds is still news when first published
    assert catalog.add("/declared")
    assert catalog.refused == 3
    assert catalog.tree()["topics"] == ["/a", "/declared"]


def test_a_topic_longer_than_max_length_is_refused_and_counted() -> None:
    catalog = TopicCatalog(max_length=8)
    assert catalog.add("/1234567")  # 8 characters
    assert not catalog.add("/12345678")
    assert not catalog.declare("/12345678")
    assert (catalog.topics(), catalog.refused, catalog.full) == (["/1234567"], 2, False)


def test_the_default_bound() -> None:
    assert TopicCatalog().max_topics == MAX_TOPICS == 100_000


@pytest.mark.parametrize("kwargs", [
    {"max_topics": 0}, {"max_topics": True}, {"max_topics": "10"}, {"max_topics": 1.5},
    {"max_length": 0}, {"max_length": None},
])
def test_a_bad_bound_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        TopicCatalog(**kwargs)


# --- bad input -------------------------------------------------------------------------------

NOT_TOPICS: list[Any] = ["", "/", "weather", "/weather/", "/weather//wind", "/weather/#",
                         "/weather/*", "/we*ther", "/a b", "/a\x00", None, 7, b"/a", ["/a"],
                         {"/a": 1}]


@pytest.mark.parametrize("value", NOT_TOPICS)
def test_a_value_that_is_not_a_topic_is_refused_and_changes_nothing(value: Any) -> None:
    catalog = catalog_of("/a")
    for method in (catalog.add, catalog.declare, catalog.get, catalog.remove):
        with pytest.raises(InvalidTopicPatternError) as raised:
            method(value)
        assert raised.value.got == value
    assert (catalog.topics(), catalog.refused, catalog.published) == (["/a"], 0, {"/a"})


def test_a_topic_not_listed_is_not_found() -> None:
    catalog = catalog_of("/weather/wind/LEMD")
    with pytest.raises(TopicNotFoundError) as raised:
        catalog.get("/weather/wind/LFPG")
    assert raised.value.got == "/weather/wind/LFPG"
    assert isinstance(raised.value, LookupError)
    assert isinstance(raised.value, SeqRepairError)


# --- against a model -------------------------------------------------------------------------

words = st.sampled_from(["a", "b", "LEMD", "wind"])
topics = st.lists(words, min_size=1, max_size=3).map(lambda w: "/" + "/".join(w))


@settings(deadline=None)
@given(st.lists(st.tuples(st.booleans(), topics), max_size=40), st.integers(1, 12))
def test_any_sequence_of_adds_and_declares_agrees_with_a_bounded_set(
    steps: list[tuple[bool, str]], bound: int
) -> None:
    catalog = TopicCatalog(max_topics=bound)
    published: set[str] = set()
    declared: set[str] = set()
    refused = 0
    for publish, topic in steps:
        room = topic in published | declared or len(published | declared) < bound
        seen = published if publish else declared
        news = room and topic not in seen
        got = catalog.add(topic) if publish else catalog.declare(topic)
        assert got is news
        if news:
            seen.add(topic)
        refused += not room
    assert catalog.topics() == sorted(published | declared)
    assert catalog.published == published
    assert catalog.refused == refused
    for topic in published | declared:
        assert catalog.get(topic) == TopicInfo(topic, declared=topic in declared,
                                               published=topic in published)


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "declare", "remove"]), topics), max_size=40),
       st.integers(1, 12))
def test_any_sequence_of_adds_declares_and_removals_agrees_with_a_bounded_set(
    steps: list[tuple[str, str]], bound: int
) -> None:
    catalog = TopicCatalog(max_topics=bound)
    published: set[str] = set()
    declared: set[str] = set()
    for step, topic in steps:
        listed = published | declared
        if step == "remove":
            if topic in listed:
                assert catalog.remove(topic) == TopicInfo(
                    topic, declared=topic in declared, published=topic in published)
                published.discard(topic)
                declared.discard(topic)
            else:
                with pytest.raises(TopicNotFoundError):
                    catalog.remove(topic)
            continue
        room = topic in listed or len(listed) < bound
        seen = published if step == "add" else declared
        news = room and topic not in seen
        assert (catalog.add(topic) if step == "add" else catalog.declare(topic)) is news
        if news:
            seen.add(topic)
    assert catalog.topics() == sorted(published | declared)
    assert catalog.published == published
    assert len(catalog) == len(published | declared)
