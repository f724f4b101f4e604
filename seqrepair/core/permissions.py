"""Entitlement: what one subscriber may see (topic patterns plus permission tokens).

Live delivery and repair (gap fills, source replays) ask the same question of the same object,
so a repair can never leak a publication that live delivery would not have sent.

A publication is visible to a subscriber when

1. its topic matches at least one of the subscriber's topic patterns, and
2. its permission token (XEP-0040 §5.1, "tokenised grant and deny permissioning") is allowed:

   * no token (``permtoken=None``): allowed; tokens are not compulsory;
   * the token is in ``deny``: refused, whatever the grants say (deny exceptions, as in the
     APEX access entries);
   * the token is in ``grant``, or ``grant`` holds the wildcard ``"*"``: allowed;
   * otherwise refused. The default grant is empty: tokenised data is visible only to
     subscribers granted its token; and

3. it passes every one of the subscriber's filters (:mod:`seqrepair.core.filters`), if any.

A publication whose topic is not a valid concrete topic matches no pattern (it is never
visible) rather than raising in the middle of a replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from seqrepair.core.errors import InvalidConfigError, InvalidTopicPatternError
from seqrepair.core.filters import BasicFilter, parse_filters, passes
from seqrepair.core.messages import Publication
from seqrepair.core.topics import TopicPattern, topic_pattern

ANY_TOKEN = "*"
"""In ``grant``: every token is granted (``deny`` still applies)."""


def _patterns(value: object) -> tuple[TopicPattern, ...]:
    if isinstance(value, str | TopicPattern):
        value = (value,)
    if not isinstance(value, Iterable):
        raise InvalidConfigError(
            "topics must be an iterable of topic patterns",
            expected="Iterable[str | TopicPattern]",
            got=value,
        )
    return tuple(topic_pattern(item) for item in value)


def _excluded(value: object) -> tuple[TopicPattern, ...]:
    return _patterns(value) if value else ()


def _tokens(value: object) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidConfigError(
            "permission tokens must be given as an iterable of strings",
            expected="Iterable[str]",
            got=value,
        )
    items: list[Any] = list(value)
    for token in items:
        if not isinstance(token, str) or not token:
            raise InvalidConfigError(
                "a permission token must be a non-empty string", expected="str", got=token
            )
    return frozenset(items)


@attrs.frozen
class Entitlement:
    """A subscriber's topic patterns, permission grants/denies and filters.

    ``Entitlement(topics=["/weather/#"], grant={"6747"}, deny={"secret"})``. Bad patterns raise
    :class:`~seqrepair.core.errors.InvalidTopicPatternError`, bad tokens
    :class:`~seqrepair.core.errors.InvalidConfigError`, bad filters
    :class:`~seqrepair.core.errors.InvalidSubscriptionError`.
    """

    topics: tuple[TopicPattern, ...] = attrs.field(converter=_patterns)
    grant: frozenset[str] = attrs.field(default=frozenset(), converter=_tokens)
    deny: frozenset[str] = attrs.field(default=frozenset(), converter=_tokens)
    # every filter must pass: their order, or one given twice, does not change the entitlement
    filters: tuple[BasicFilter, ...] = attrs.field(
        default=(), converter=parse_filters, eq=frozenset
    )
    exclude: tuple[TopicPattern, ...] = attrs.field(default=(), converter=_excluded)
    """Topic patterns inside ``topics`` the subscriber must not see (the access policy's deny
    exceptions, :mod:`seqrepair.core.policy`)."""

    @classmethod
    def everything(cls) -> Entitlement:
        """Every topic and every token: an operator's or a relay's view."""
        return cls(topics=("/#",), grant=(ANY_TOKEN,))

    def allows_topic(self, topic: str) -> bool:
        """Whether ``topic`` matches one of the patterns (False for an invalid topic)."""
        try:
            return any(pattern.matches(topic) for pattern in self.topics) and not (
                self.exclude and any(pattern.matches(topic) for pattern in self.exclude))
        except InvalidTopicPatternError:
            return False

    def allows_token(self, permtoken: str | None) -> bool:
        """Whether a publication carrying ``permtoken`` may be seen (None is always allowed)."""
        if permtoken is None:
            return True
        if permtoken in self.deny:
            return False
        return permtoken in self.grant or ANY_TOKEN in self.grant

    def allows(self, publication: Publication) -> bool:
        """Whether live delivery would send ``publication`` to this subscriber."""
        return (
            self.allows_token(publication.permtoken)
            and self.allows_topic(publication.topic)
            and (not self.filters or passes(self.filters, publication))
        )
