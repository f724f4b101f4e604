"""Topic trees and patterns: "/"-separated words, "*" one word, "#" zero or more words."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidTopicPatternError, SeqRepairError
from seqrepair.core.topics import TopicPattern, topic_pattern, topic_words, validate_topic

# --- the examples of the SWIM guidance ---------------------------------------------------

SWIM_TOPICS = [
    "/weather/precipitation/LEMD",
    "/weather/precipitation/LFPG",
    "/weather/wind/LEMD",
    "/weather/wind/LFPG",
]


def test_hash_subscribes_to_a_whole_branch() -> None:
    pattern = TopicPattern("/weather/#")
    assert all(pattern.matches(topic) for topic in SWIM_TOPICS)


def test_star_subscribes_to_one_level() -> None:
    pattern = TopicPattern("/weather/wind/*")
    assert [t for t in SWIM_TOPICS if pattern.matches(t)] == [
        "/weather/wind/LEMD",
        "/weather/wind/LFPG",
    ]


def test_literal_pattern_subscribes_to_one_topic() -> None:
    pattern = TopicPattern("/weather/precipitation/LFPG")
    assert [t for t in SWIM_TOPICS if pattern.matches(t)] == ["/weather/precipitation/LFPG"]
    assert pattern.is_literal


def test_hash_matches_zero_words_so_the_branch_root_itself() -> None:
    assert TopicPattern("/weather/#").matches("/weather")


# --- a table of decisions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("/weather", "/weather", True),
        ("/weather", "/weather/wind", False),
        ("/weather/wind", "/weather", False),
        ("/weather/#", "/weatherstation", False),
        ("/weather/#", "/climate/weather", False),
        ("/*", "/weather", True),
        ("/*", "/weather/wind", False),
        ("/weather/*", "/weather", False),
        ("/*/wind/*", "/weather/wind/LEMD", True),
        ("/*/wind/*", "/weather/rain/LEMD", False),
        ("/#", "/weather", True),
        ("/#", "/weather/wind/LEMD", True),
        ("/#/LEMD", "/LEMD", True),
        ("/#/LEMD", "/weather/wind/LEMD", True),
        ("/#/LEMD", "/weather/wind/LEMDX", False),
        ("/#/LEMD", "/weather/LEMD/wind", False),
        ("/weather/#/LEMD", "/weather/LEMD", True),
        ("/weather/#/LEMD", "/weather/a/b/c/LEMD", True),
        ("/#/wind/#", "/wind", True),
        ("/#/wind/#", "/weather/wind/LEMD", True),
        ("/#/wind/#", "/weather/windy/LEMD", False),
        ("/#/a/#/b", "/x/ab/y/b", False),  # "a" must be a whole word, not a prefix of "ab"
        ("/#/a/#/b", "/x/a/y/b", True),
        ("/#/a/#/b", "/ab/a/b", True),  # "a" is not found inside "ab" first and then given up
        ("/#/a/*/#", "/a/a", True),
        ("/#/a/*/b/#", "/a/a/x/b", True),  # the leftmost "a" is not where the match is
        ("/#/a/*/#", "/x/a", False),
        ("/#/#/a", "/a", True),  # "#/#" is the same as "#"
        ("/*/#/*", "/a", False),
        ("/*/#/*", "/a/b", True),
        ("/a.b/c+d", "/a.b/c+d", True),  # regex metacharacters are plain text in a word
        ("/a.b", "/aXb", False),
        ("/wetter/München", "/wetter/München", True),
    ],
)
def test_matching(pattern: str, topic: str, expected: bool) -> None:
    assert TopicPattern(pattern).matches(topic) is expected


# --- the syntax, and its errors ----------------------------------------------------------

INVALID_PATTERNS: list[object] = [
    "",  # empty
    "/",  # no word
    "weather/wind",  # no leading "/"
    " /weather/#",  # leading space (as in a typo of the SWIM text)
    "//weather",  # empty word
    "/weather//wind",  # empty word
    "/weather/",  # trailing "/" is an empty word
    "/wi*d",  # wildcard inside a word
    "/weather/#x",
    "/weather/x#",
    "/**",
    "/##",
    "/*#",
    "/weather/wind speed",  # whitespace
    "/weather/\twind",
    "/weather/wind\n",
    "/weather/\x00",  # control character
    "/weather/\x7f",
    None,  # not a string
    42,
    b"/weather",
    ["weather"],
]


@pytest.mark.parametrize("pattern", INVALID_PATTERNS)
def test_invalid_pattern_raises_with_got(pattern: object) -> None:
    with pytest.raises(InvalidTopicPatternError) as info:
        TopicPattern(pattern)  # type: ignore[arg-type]
    assert info.value.got == pattern
    assert isinstance(info.value, SeqRepairError)


INVALID_TOPICS: list[object] = [
    p for p in INVALID_PATTERNS if p not in ("/wi*d", "/weather/#x", "/weather/x#")
] + ["/weather/*", "/weather/#", "/#", "/*", "/wi*d", "/weather/#x"]


@pytest.mark.parametrize("topic", INVALID_TOPICS)
def test_validate_topic_rejects_invalid_topics_and_wildcards(topic: object) -> None:
    with pytest.raises(InvalidTopicPatternError) as info:
        validate_topic(topic)
    assert info.value.got == topic


@pytest.mark.parametrize("topic", INVALID_TOPICS)
@pytest.mark.parametrize("pattern", ["/#", "/weather/#", "/*", "/weather/*", "/weather"])
def test_matches_on_an_invalid_topic_raises(pattern: str, topic: object) -> None:
    with pytest.raises(InvalidTopicPatternError) as info:
        TopicPattern(pattern).matches(topic)  # type: ignore[arg-type]
    assert info.value.got == topic


def test_matching_a_pattern_against_itself_is_an_error_not_a_match() -> None:
    # A pattern is not a topic: "/weather/#" contains the reserved word "#".
    with pytest.raises(InvalidTopicPatternError):
        TopicPattern("/weather/#").matches("/weather/#")


@pytest.mark.parametrize(
    "topic", ["/weather", "/weather/wind/LEMD", "/a.b/c-d/e_f/1:2", "/wetter/München"]
)
def test_validate_topic_returns_a_valid_topic_unchanged(topic: str) -> None:
    assert validate_topic(topic) is topic


def test_topic_words() -> None:
    assert topic_words("/weather/wind/LEMD") == ("weather", "wind", "LEMD")
    with pytest.raises(InvalidTopicPatternError):
        topic_words("/weather/*")


def test_pattern_exposes_its_words_and_text() -> None:
    pattern = TopicPattern("/weather/*/#")
    assert pattern.words == ("weather", "*", "#")
    assert str(pattern) == "/weather/*/#"
    assert not pattern.is_literal
    assert not TopicPattern("/weather/#").is_literal


def test_patterns_are_equal_and_hashable_by_text() -> None:
    assert TopicPattern("/weather/#") == TopicPattern("/weather/#")
    assert TopicPattern("/weather/#") != TopicPattern("/weather/*")
    assert len({TopicPattern("/a/#"), TopicPattern("/a/#"), TopicPattern("/b")}) == 2


def test_patterns_are_immutable() -> None:
    pattern = TopicPattern("/weather/#")
    with pytest.raises(AttributeError):
        pattern.pattern = "/#"  # type: ignore[misc]


def test_topic_pattern_reads_text_and_passes_patterns_through() -> None:
    pattern = TopicPattern("/a/#")
    assert topic_pattern(pattern) is pattern
    assert topic_pattern("/a/#") == pattern
    with pytest.raises(InvalidTopicPatternError):
        topic_pattern("a")


def test_many_hash_words_do_not_backtrack_exponentially() -> None:
    # A naive translation of each "#" into a backtracking regex takes time ~ n**k here.
    pattern = TopicPattern("/#/a/#/a/#/a/#/a/#/a/#/a/#/a/#/x")
    topic = "/a" * 300
    started = time.perf_counter()
    assert not pattern.matches(topic)
    assert pattern.matches(topic + "/x")
    # A guard against a hang, not a benchmark: the real figure is a few milliseconds.
    assert time.perf_counter() - started < 2.0


# --- properties against a reference matcher ----------------------------------------------


def reference_matches(pattern: list[str], topic: list[str]) -> bool:
    """The definition, word by word, with no cleverness."""
    if not pattern:
        return not topic
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_matches(rest, topic[i:]) for i in range(len(topic) + 1))
    if not topic:
        return False
    if head == "*" or head == topic[0]:
        return reference_matches(rest, topic[1:])
    return False


def reference_is_valid(text: str, *, pattern: bool) -> bool:
    if not text.startswith("/") or text == "/":
        return False
    for word in text[1:].split("/"):
        if pattern and word in ("*", "#"):
            continue
        if not word or any(c in "*#" or c.isspace() or ord(c) < 32 or c == "\x7f" for c in word):
            return False
    return True


# Few distinct words so that patterns and topics often share them.
words = st.sampled_from(["a", "b", "ab", "LEMD"])
topic_word_lists = st.lists(words, min_size=1, max_size=8)
pattern_word_lists = st.lists(st.one_of(words, st.sampled_from(["*", "#"])), min_size=1, max_size=8)


def join(word_list: list[str]) -> str:
    return "/" + "/".join(word_list)


# Cold hypothesis caches (first use of st.text) can make one example miss the deadline.
@settings(deadline=None, max_examples=500)
@given(pattern_word_lists, topic_word_lists)
def test_matches_agrees_with_the_reference(pattern: list[str], topic: list[str]) -> None:
    assert TopicPattern(join(pattern)).matches(join(topic)) is reference_matches(pattern, topic)


@st.composite
def topic_and_covering_pattern(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """A topic, and a pattern made from it by replacing words by "*" and runs by "#"."""
    topic = draw(topic_word_lists)
    pattern: list[str] = []
    i = 0
    while i <= len(topic):
        choice = draw(st.sampled_from(["keep", "star", "hash"]))
        if choice == "hash":
            run = draw(st.integers(0, len(topic) - i))
            pattern.append("#")
            i += run
        elif i < len(topic):
            pattern.append(topic[i] if choice == "keep" else "*")
            i += 1
        else:
            break
    return topic, pattern


@settings(deadline=None)
@given(topic_and_covering_pattern())
def test_a_pattern_generalised_from_a_topic_matches_it(
    pair: tuple[list[str], list[str]],
) -> None:
    topic, pattern = pair
    assert reference_matches(pattern, topic)
    assert TopicPattern(join(pattern)).matches(join(topic))


syntax_soup = st.text(alphabet="/ab*# \t\x00", max_size=10)


@settings(deadline=None)
@given(syntax_soup)
def test_pattern_validity_agrees_with_the_reference(text: str) -> None:
    if reference_is_valid(text, pattern=True):
        assert TopicPattern(text).pattern == text
    else:
        with pytest.raises(InvalidTopicPatternError):
            TopicPattern(text)


@settings(deadline=None)
@given(syntax_soup, st.sampled_from(["/#", "/a/#", "/*/b", "/#/a/#/b", "/a"]))
def test_topic_validity_agrees_with_the_reference(text: str, pattern: str) -> None:
    if reference_is_valid(text, pattern=False):
        assert validate_topic(text) == text
        expected = reference_matches(pattern[1:].split("/"), text[1:].split("/"))
        assert TopicPattern(pattern).matches(text) is expected
    else:
        with pytest.raises(InvalidTopicPatternError):
            validate_topic(text)
        with pytest.raises(InvalidTopicPatternError):
            TopicPattern(pattern).matches(text)
