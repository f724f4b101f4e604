"""Topic trees and topic patterns (SWIM pub/sub push guidance, "Subject-based Filtering").

Syntax, the same for topics and patterns:

* A topic is one or more *words*, each introduced by ``/``: ``/weather/wind/LEMD``. The
  leading ``/`` is required; there is no trailing ``/`` and no empty word (``//``). ``/`` on
  its own, the empty string and anything not a ``str`` are rejected.
* A word is any non-empty run of characters other than ``/``, ``*``, ``#``, whitespace and
  ASCII control characters. ``*`` and ``#`` are reserved for patterns, so a concrete topic
  can never be mistaken for a pattern.
* In a pattern a word may also be exactly ``*`` (matches exactly one word) or exactly ``#``
  (matches zero or more words). A wildcard mixed into a word (``wi*d``, ``#x``) is an error.
  ``#`` may appear anywhere and more than once: ``/#/LEMD`` matches every topic whose last
  word is ``LEMD``; ``/weather/#`` matches ``/weather`` and everything below it.

Every violation raises :class:`~seqrepair.core.errors.InvalidTopicPatternError` with ``got``
set to the offending value.

Matching is on the fan-out hot path, so a pattern is compiled once into a regular expression
that runs in time proportional to ``len(topic) * len(pattern)``: it never backtracks
exponentially, whatever the number of ``#`` words.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from seqrepair.core.errors import InvalidTopicPatternError

SEPARATOR = "/"
ONE_WORD = "*"
ANY_WORDS = "#"

# The characters a word may hold, as a regex class. Keep in step with _word_problem().
_WORD_CHARS = r"[^/*#\s\x00-\x1f\x7f]"
_WORD = _WORD_CHARS + "+"
_TOPIC_RE = re.compile(rf"(?:/{_WORD})+")
_WORD_RE = re.compile(_WORD)


def _word_problem(word: str) -> str | None:
    """Why ``word`` is not a valid concrete word, or None when it is."""
    if not word:
        return "an empty word (two '/' in a row, or a trailing '/')"
    if ONE_WORD in word or ANY_WORDS in word:
        return f"word {word!r} holds a wildcard, which may only be a whole pattern word"
    if _WORD_RE.fullmatch(word) is None:
        return f"word {word!r} holds whitespace or a control character"
    return None


def _split(text: object, what: str) -> list[str]:
    """The words of ``text`` after the syntax checks common to topics and patterns."""
    if not isinstance(text, str):
        raise InvalidTopicPatternError(
            f"a {what} must be a string, got {type(text).__name__}", expected="str", got=text
        )
    if not text.startswith(SEPARATOR) or text == SEPARATOR:
        raise InvalidTopicPatternError(
            f"a {what} must be '/' followed by at least one word, like '/weather/wind', "
            f"got {text!r}",
            expected="/word[/word...]",
            got=text,
        )
    return text[1:].split(SEPARATOR)


def validate_topic(topic: object) -> str:
    """Return ``topic`` unchanged if it is a valid concrete topic (no wildcards), else raise.

    Raises :class:`~seqrepair.core.errors.InvalidTopicPatternError` with ``got=topic``.
    """
    if isinstance(topic, str) and _TOPIC_RE.fullmatch(topic) is not None:
        return topic
    for word in _split(topic, "topic"):
        problem = _word_problem(word)
        if problem is not None:
            raise InvalidTopicPatternError(
                f"invalid topic {topic!r}: {problem}", expected="/word[/word...]", got=topic
            )
    raise AssertionError(f"unreachable: {topic!r} failed the topic regex but no word check")


def topic_words(topic: str) -> tuple[str, ...]:
    """The words of a valid topic: ``/weather/wind/LEMD`` -> ``("weather", "wind", "LEMD")``."""
    return tuple(validate_topic(topic)[1:].split(SEPARATOR))


def _parse_pattern(pattern: object) -> tuple[str, ...]:
    words = _split(pattern, "topic pattern")
    for word in words:
        if word in (ONE_WORD, ANY_WORDS):
            continue
        problem = _word_problem(word)
        if problem is not None:
            raise InvalidTopicPatternError(
                f"invalid topic pattern {pattern!r}: {problem}",
                expected="/word[/word...] with '*' or '#' as whole words",
                got=pattern,
            )
    return tuple(words)


def _compile(words: tuple[str, ...]) -> re.Pattern[str]:
    """Translate pattern words into a regex to ``fullmatch`` against the topic text.

    ``#`` is like a glob ``*`` over words. Runs of ``#`` collapse into one (``#/#`` is ``#``).
    The words between two ``#`` form a fixed-length segment; matching each such middle segment
    at its leftmost possible place is complete (the classic glob argument: any match can be
    shifted to use the leftmost place without harming what follows), so each middle segment is
    an atomic group with a lazy prefix and never backtracks. Only the last ``#`` backtracks,
    which keeps the whole match polynomial. The lookahead ends a middle segment on a word
    boundary, which the atomic group would otherwise not guarantee.
    """
    segments: list[list[str]] = [[]]
    for word in words:
        if word == ANY_WORDS:
            if segments[-1] or len(segments) == 1:
                segments.append([])
            # else: '#' straight after '#' adds nothing.
        else:
            segments[-1].append(f"/{_WORD}" if word == ONE_WORD else "/" + re.escape(word))
    if len(segments) == 1:
        return re.compile("".join(segments[0]))
    head, *middle, tail = ("".join(segment) for segment in segments)
    any_words = f"(?:/{_WORD})*"
    parts = [head]
    parts.extend(f"(?>{any_words}?{segment}(?=/|\\Z))" for segment in middle)
    parts.append(any_words + tail)
    return re.compile("".join(parts))


@attrs.frozen
class TopicPattern:
    """A subscription's topic pattern: ``/weather/wind/*``, ``/weather/#``, ``/#/LEMD``.

    Equal and hashable by its text. Raises
    :class:`~seqrepair.core.errors.InvalidTopicPatternError` (``got`` = the pattern) when the
    pattern breaks the syntax described in this module's docstring.
    """

    pattern: str
    words: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    _regex: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        words = _parse_pattern(self.pattern)
        object.__setattr__(self, "words", words)
        object.__setattr__(self, "_regex", _compile(words))

    @property
    def is_literal(self) -> bool:
        """True when the pattern has no wildcard and so matches exactly one topic."""
        return ONE_WORD not in self.words and ANY_WORDS not in self.words

    def matches(self, topic: str) -> bool:
        """Whether the concrete ``topic`` is covered by this pattern.

        Raises :class:`~seqrepair.core.errors.InvalidTopicPatternError` when ``topic`` is not
        a valid concrete topic (see :func:`validate_topic`).
        """
        # The regex only consumes valid words and '/' separators, so a match on a non-empty
        # string is itself proof that the topic is valid: the common case pays one regex.
        if isinstance(topic, str) and topic and self._regex.fullmatch(topic) is not None:
            return True
        validate_topic(topic)
        return False

    def __str__(self) -> str:
        return self.pattern


def topic_pattern(value: Any) -> TopicPattern:
    """Read ``value`` as a pattern: a :class:`TopicPattern` is returned as is, text is parsed."""
    if isinstance(value, TopicPattern):
        return value
    return TopicPattern(value)
