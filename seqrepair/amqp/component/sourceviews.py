"""Which topics of a source decide who may learn of it (the attach reply's
``seqrepair-start-after``, CAPABILITIES' sources: :func:`.authz.visible_sources`), in
bounded memory, with no principal's view cut off by a cap.

A principal may learn of a source when it may subscribe to one of the source's topics. Keeping
every topic a source published is unbounded; keeping the first N (what was done) hid a source
from a principal entitled only to topics published after the N-th. But the policy decides
``subscribe`` on a topic only by which of its patterns cover the topic: the allows' and the
denies' of the rules that speak of ``subscribe`` (or grant ``admin``). Two topics covered by
the same of those patterns (the same *class*) are decided alike for every principal. So each
source keeps the classes it has published, and each class one topic (shared by every source):
a principal's view is decided on the topics it is entitled to, however late they came, and
the memory is bounded by the classes the policy makes, not by the topics.

A class is never dropped, so a source is never hidden by a cap: the caps are kept by refusing
the publication that would pass them before it is journaled (:mod:`.sourcelimits`: a source
whose topics already make :data:`MAX_CLASSES_PER_SOURCE` classes, or a class past
:data:`MAX_CLASSES` of every source together). Publications that reach the component another
way (a relay's upstream feed, a publisher's own journal appends fanned out from the journal)
are learnt whatever their class: never hiding beats the bound there.

A reload of the policy makes other classes: the topics kept (the first
:data:`MAX_TOPICS_PER_SOURCE` of each source while all sources' kept topics stay under
:data:`MAX_KEPT_CHARS`, and those of the sources one principal brought under
:data:`MAX_KEPT_CHARS_PER_PRINCIPAL`: else a publisher of long topics used up the budget and
every later source of every other principal kept none of its own; and the topic kept for a
class of the old policy when this source published it) are classed again under the new one.
Never another source's topic: two topics of one old class may fall in classes the new policy
decides apart, and a source classed on another's topic was shown to a principal entitled to
none of its own. A topic of a new class that was in neither is learnt again when it is next
published (a source replay's scan, :func:`.authz.reveal_named_sources`, shows a source
meanwhile).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from seqrepair.core.policy import Effect, Operation, Policy, covers
from seqrepair.core.topics import TopicPattern

MAX_TOPICS_PER_SOURCE = 256
"""Topics kept per source as they came (to class them again after a policy reload)."""
MAX_KEPT_CHARS = 16 << 20
"""Characters of the topics kept to class again, all sources together (at most 16 Mi: a
publisher of many sources of long topics cannot make the component hold 256 of each)."""
MAX_KEPT_CHARS_PER_PRINCIPAL = MAX_KEPT_CHARS // 16
"""Characters of the topics kept to class again of the sources one principal brought (1 Mi,
a sixteenth of :data:`MAX_KEPT_CHARS`). Sources nobody brought (the journal's own, a relay's
feed: trusted writers) share :data:`MAX_KEPT_CHARS` only."""
MAX_CLASSES_PER_SOURCE = 256
"""Classes a source's topics may make: far more than a policy makes of one source's topics;
a publication of a topic of another is refused (:mod:`.sourcelimits`)."""
MAX_CLASSES = 65_536
"""Classes (one topic each, up to 1 KiB) of every source together: past it a publication of a
topic of a new class is refused (:mod:`.sourcelimits`)."""
MAX_CLASSED_TOPICS = 4096
"""Topics whose class is remembered (a cache: emptied when full, or on a policy reload). Its
keys are topics a publisher chose, up to 1 KiB each: 4096 is at most about 5 MiB (65,536 was
about 80 MiB a publisher of distinct long topics could make the component hold)."""

Class = frozenset[int]


def _nobody(source: str) -> str:
    return ""


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
    """Per source, the classes of the policy in force it published (see the module)."""

    def __init__(self) -> None:
        self._policy: Policy | None = None
        self._patterns: tuple[TopicPattern, ...] = ()
        self._classed: dict[str, Class] = {}
        self._kept: dict[str, set[str]] = {}
        self._kept_chars = 0
        self._chars_of: Counter[str] = Counter()  # of those, per principal that brought them
        self.owner: Callable[[str], str] = _nobody
        """The principal that brought a source ("" for nobody: :mod:`.sourcelimits`)."""
        self._classes: dict[str, set[Class]] = {}
        self._topic_of: dict[Class, str] = {}  # one topic of each class, for every source
        self._owner_of: dict[Class, str] = {}  # the source that published that topic

    def __contains__(self, source: object) -> bool:
        return source in self._classes

    def __len__(self) -> int:
        """Sources learnt of."""
        return len(self._classes)

    @property
    def class_count(self) -> int:
        """Classes of every source together (one topic kept for each)."""
        return len(self._topic_of)

    def learn(self, policy: Policy, source: str, topic: str) -> None:
        """``source`` published ``topic``."""
        kept = self._kept.get(source)
        if kept is None:
            kept = self._kept[source] = set()
            self._classes[source] = set()
        elif topic in kept and self._policy is policy:
            return  # classed when it was kept
        if (len(kept) < MAX_TOPICS_PER_SOURCE and topic not in kept
                and self._kept_chars + len(topic) <= MAX_KEPT_CHARS):
            owner = self.owner(source)
            if not owner or self._chars_of[owner] + len(topic) <= MAX_KEPT_CHARS_PER_PRINCIPAL:
                kept.add(topic)
                self._kept_chars += len(topic)
                if owner:
                    self._chars_of[owner] += len(topic)
        self._class_in(policy, source, topic)

    def new_classes(self, policy: Policy, source: str, topics: Iterable[str]) -> set[Class]:
        """The classes of ``topics`` that ``source`` has not published yet."""
        if self._policy is not policy:
            self._reclass(policy)
        known = self._classes.get(source, set())
        return {cls for topic in topics if (cls := self._class_of(policy, topic)) not in known}

    def classes_of(self, source: str) -> int:
        """How many classes ``source`` published (under the policy last used)."""
        return len(self._classes.get(source, ()))

    def is_new(self, cls: Class) -> bool:
        """No source published a topic of ``cls``."""
        return cls not in self._topic_of

    def topics(self, policy: Policy, source: str) -> Iterable[str] | None:
        """One topic of each class ``source`` published (None: nothing learnt of it)."""
        if source not in self._classes:
            return None
        if self._policy is not policy:
            self._reclass(policy)
        return [self._topic_of[cls] for cls in self._classes[source]]

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
        self._classes[source].add(cls)  # never dropped: a cap would hide the source
        if cls not in self._topic_of:
            self._topic_of[cls] = topic
            self._owner_of[cls] = source

    def _reclass(self, policy: Policy) -> None:
        """Class every topic kept again under ``policy`` (a reload)."""
        old_topic_of, old_owner_of, old_classes = self._topic_of, self._owner_of, self._classes
        self._policy, self._patterns = policy, deciding_patterns(policy)
        self._classed.clear()
        self._classes, self._topic_of, self._owner_of = {}, {}, {}
        for source, kept in self._kept.items():
            self._classes[source] = set()
            old = (old_topic_of[cls] for cls in old_classes.get(source, ())
                   if old_owner_of[cls] == source)  # its own topics only
            for topic in (*kept, *old):
                self._class_in(policy, source, topic)


__all__ = ["MAX_CLASSES", "MAX_CLASSES_PER_SOURCE", "MAX_KEPT_CHARS",
           "MAX_KEPT_CHARS_PER_PRINCIPAL", "MAX_TOPICS_PER_SOURCE", "SourceViews",
           "deciding_patterns"]
