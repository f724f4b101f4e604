"""Which topics of a source decide who may learn of it (the attach reply's
``seqrepair-start-after``, CAPABILITIES' sources: :func:`.authz.visible_sources`), in
bounded memory, with no principal's view cut off by a cap.

A principal may learn of a source when it may subscribe to one of the source's topics. Keeping
every topic a source published is unbounded; keeping the first N (what was done) hid a source
from a principal entitled only to topics published after the N-th. But the policy decides
``subscribe`` on a topic only by which of its patterns cover the topic: the allows' and the
denies' of the rules that speak of ``subscribe`` (or grant ``admin``). Two topics covered by
the same of those patterns (the same *class*) are decided alike for every principal. So each
source keeps one topic per class it has published: a principal's view is decided on the topics
it is entitled to, however late they came, and the memory is bounded by the classes the
policy makes (at most :data:`MAX_CLASSES_PER_SOURCE` per source), not by the topics.

A reload of the policy makes other classes: the topics kept (the first
:data:`MAX_TOPICS_PER_SOURCE` of each source, and one per class of the old policy) are
classed again under the new one; a topic of a new class that was in neither is learnt again
when it is next published (a source replay's scan, :func:`.authz.reveal_named_sources`,
shows a source meanwhile).
"""

from __future__ import annotations

from collections.abc import Iterable

from seqrepair.core.policy import Effect, Operation, Policy, covers
from seqrepair.core.topics import TopicPattern

MAX_TOPICS_PER_SOURCE = 256
"""Topics kept per source as they came (to class them again after a policy reload)."""
MAX_CLASSES_PER_SOURCE = 256
"""Classes (one topic each) kept per source: far more than a policy makes of one source's
topics; past it the oldest class is kept and a new one is not."""
MAX_CLASSED_TOPICS = 4096
"""Topics whose class is remembered (a cache: emptied when full, or on a policy reload). Its
keys are topics a publisher chose, up to 1 KiB each: 4096 is at most about 5 MiB (65,536 was
about 80 MiB a publisher of distinct long topics could make the component hold)."""

Class = frozenset[int]


def deciding_patterns(policy: Policy) -> tuple[TopicPattern, ...]:
    """The patterns whose cover of a topic may change a ``subscribe`` decision on it: those of
    the rules that speak of ``subscribe``, and of the allows that grant ``admin``."""
    return tuple(
        pattern for rule in policy.rules
        if Operation.SUBSCRIBE in rule.operations
        or (rule.effect is Effect.ALLOW and Operation.ADMIN in rule.operations)
        for pattern in rule.topics
    )


class SourceViews:
    """Per source, one topic per class of the policy in force (see the module)."""

    def __init__(self) -> None:
        self._policy: Policy | None = None
        self._patterns: tuple[TopicPattern, ...] = ()
        self._classed: dict[str, Class] = {}
        self._kept: dict[str, set[str]] = {}
        self._classes: dict[str, dict[Class, str]] = {}

    def __contains__(self, source: object) -> bool:
        return source in self._classes

    def learn(self, policy: Policy, source: str, topic: str) -> None:
        """``source`` published ``topic``."""
        kept = self._kept.get(source)
        if kept is None:
            kept = self._kept[source] = set()
            self._classes[source] = {}
        elif topic in kept and self._policy is policy:
            return  # classed when it was kept
        if len(kept) < MAX_TOPICS_PER_SOURCE:
            kept.add(topic)
        self._class_in(policy, source, topic)

    def topics(self, policy: Policy, source: str) -> Iterable[str] | None:
        """One topic of each class ``source`` published (None: nothing learnt of it)."""
        if source not in self._classes:
            return None
        if self._policy is not policy:
            self._reclass(policy)
        return list(self._classes[source].values())

    def _class_of(self, policy: Policy, topic: str) -> Class:
        if self._policy is not policy:
            self._reclass(policy)
        found = self._classed.get(topic)
        if found is None:
            concrete = TopicPattern(topic)
            found = frozenset(i for i, pattern in enumerate(self._patterns)
                              if covers(pattern, concrete))
            if len(self._classed) >= MAX_CLASSED_TOPICS:
                self._classed.clear()
            self._classed[topic] = found
        return found

    def _class_in(self, policy: Policy, source: str, topic: str) -> None:
        cls = self._class_of(policy, topic)
        classes = self._classes[source]
        if cls not in classes and len(classes) < MAX_CLASSES_PER_SOURCE:
            classes[cls] = topic

    def _reclass(self, policy: Policy) -> None:
        """Class every topic kept again under ``policy`` (a reload)."""
        self._policy, self._patterns = policy, deciding_patterns(policy)
        self._classed.clear()
        old, self._classes = self._classes, {}
        for source, kept in self._kept.items():
            self._classes[source] = {}
            for topic in (*kept, *old.get(source, {}).values()):
                self._class_in(policy, source, topic)


__all__ = ["MAX_CLASSES_PER_SOURCE", "MAX_TOPICS_PER_SOURCE", "SourceViews",
           "deciding_patterns"]
