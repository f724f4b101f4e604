"""Per-operation access control (APEX §7): who may do what, on which topics and queues.

A :class:`Policy` is an ordered set of :class:`Rule` objects, each an *allow* or a *deny* of
some operations (:class:`Operation`) to some actors, on some topic patterns (the topic
operations) or subscription queues (``attach-queue``):

* an actor is a principal name where ``*`` stands for any run of characters:
  ``alice@example.com``, ``*@example.com``, ``*``;
* a deny wins over every allow (deny exceptions: "everyone at example.com may subscribe to
  ``/weather/#``, but not mallory, and nobody to ``/weather/secret/#``"); what no allow
  grants is refused;
* ``admin`` allows every operation on everything, and every subscription whoever owns it
  (a deny of an operation still refuses that operation to an administrator).

How the topic of a request is compared with a rule's topic patterns depends on the
operation (:meth:`Policy.decide`):

* a concrete topic (each publication's, ``GET``, ``PUT``, ``DELETE /topics/<t>``): some
  allowed pattern matches it and no denied pattern does;
* a pattern a subscriber or a subscription names (``subscribe``, ``create-subscription``,
  ...): some allowed pattern *covers* it (matches every topic it matches) and no denied
  pattern covers it; the denied patterns that only overlap it are *exclusions*: the
  subscriber sees everything under its pattern but them (:attr:`Decision.exclude`);
* a publishing link's address (``publish`` on a pattern): some allowed pattern overlaps it
  and no denied pattern covers it; each publication's topic is then decided on its own.

Source names (the ``sources`` of a rule, ``*`` = any characters, default every source) speak
only to ``own-source`` and ``contribute``: a source an ``own-source`` allow names is reserved
to the principals it names (:meth:`Policy.may_publish_source`: a publication under it by
anyone else is refused), and ``contribute`` lets a principal send contributions to the
sources it names, on the topics it covers (:meth:`Policy.may_contribute`). A source pattern
may hold ``{principal}``, the principal the rule is applied to: ``actors = ["*@example.com"]``
with ``sources = ["{principal}/*"]`` gives every principal at example.com the sources named
after it, and reserves them all (``{principal}`` then stands for any name the actors match).

This module is pure: no I/O, no clock. Reading a policy file is the adapter's
(:mod:`seqrepair.amqp.component.policyfile`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import attrs

from seqrepair.core.errors import InvalidConfigError, SeqRepairError
from seqrepair.core.topics import ANY_WORDS, ONE_WORD, TopicPattern

ANONYMOUS = "anonymous"
"""The principal of a client no authentication identified."""


class Operation(enum.Enum):
    """The operations a policy grants or denies (the APEX pubsub access tokens, by name)."""

    PUBLISH = "publish"
    """Publish to a topic (APEX ``core:data``): a publishing link's address, each topic."""
    SUBSCRIBE = "subscribe"
    """Attach a subscriber link to a topic pattern (APEX ``pubsub:subscribe``)."""
    ATTACH_QUEUE = "attach-queue"
    """Attach a subscriber link to (and read) an operator-configured subscription queue
    ``/subscriptions/<id>``, named by the rule's ``queues``. An API-made queue is its owner's
    (the one that created it, which took ``create-subscription`` and ``subscribe``)."""
    CREATE_SUBSCRIPTION = "create-subscription"
    CHANGE_SUBSCRIPTION = "change-subscription"
    """Replace a subscription (pause and resume included)."""
    DELETE_SUBSCRIPTION = "delete-subscription"
    """Delete a subscription (APEX ``pubsub:cancel``)."""
    READ_SUBSCRIPTION = "read-subscription"
    """Read one's subscriptions (``GET /subscriptions``, ``GET /subscriptions/<id>``)."""
    CREATE_TOPIC = "create-topic"
    """APEX ``pubsub:createtopic``: declare a topic in the catalog ahead of any publication
    (``PUT /topics/<t>``, which also needs ``list-topics`` on it). Publishing a topic never
    needs it: a published topic is listed by being published (``publish`` alone)."""
    DELETE_TOPIC = "delete-topic"
    """APEX ``pubsub:deletetopic``: take a topic out of the catalog (``DELETE /topics/<t>``;
    the journal keeps its publications, and a topic published again is listed again)."""
    LIST_TOPICS = "list-topics"
    """Read the topic list (APEX ``pubsub:listtopics``): ``GET /topics`` shows only the topics
    the caller may list, ``GET /topics/<t>`` answers 404 for another."""
    ADMIN = "admin"
    """Every operation on everything, and every principal's subscriptions."""
    ACT_FOR = "act-for"
    """Attach links and send requests on behalf of the principals the rule's ``principals``
    name (a gateway forwarding the identities its own clients proved: RabbitMQ's
    *impersonator*). Only ever named: neither ``*`` nor ``admin`` grants it."""
    OWN_SOURCE = "own-source"
    """Own the source names of the rule's ``sources``: a source some ``own-source`` allow names
    is *reserved*: only its owners (and administrators) may publish under it or take its
    contributions (:meth:`Policy.may_publish_source`). A source no rule names is anyone's
    who may publish. Only ever named, as ``admin`` (``"*"`` would reserve every source)."""
    CONTRIBUTE = "contribute"
    """Send a contribution (XEP-0040 §5.2) to a source of the rule's ``sources``, on a topic
    of its ``topics`` (:meth:`Policy.may_contribute`); the source's owner takes it or not."""


SOURCE_OPERATIONS = frozenset({Operation.OWN_SOURCE, Operation.CONTRIBUTE})
"""The operations a rule's ``sources`` speak of (other operations ignore them)."""
TOPIC_OPERATIONS = frozenset(Operation) - {Operation.ATTACH_QUEUE, Operation.ADMIN,
                                           Operation.ACT_FOR, Operation.OWN_SOURCE}
ALL_OPERATIONS = frozenset(Operation) - {Operation.ADMIN, Operation.ACT_FOR,
                                         Operation.OWN_SOURCE}
"""What ``operations = ["*"]`` means: everything but ``admin``, ``act-for`` and
``own-source``, which are only ever named."""

EVERY_TOPIC = TopicPattern("/#")
WITHOUT_POLICY = (ALL_OPERATIONS - {Operation.ATTACH_QUEUE}) | {Operation.OWN_SOURCE}
"""What :meth:`Policy.allow_all` grants everyone."""


class Effect(enum.Enum):
    """What a rule does to the operations it names."""

    ALLOW = "allow"
    DENY = "deny"


class InvalidPolicyError(InvalidConfigError):
    """A policy (file or object) that cannot be read."""


def _actor_regex(actor: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in actor.split("*")), re.DOTALL)


def _actors(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidPolicyError("actors is a list of principals ('*' = any characters)",
                                 expected="list of strings", got=value)
    items = tuple(value)
    if not items or not all(isinstance(a, str) and a for a in items):
        raise InvalidPolicyError("actors is a non-empty list of non-empty strings",
                                 expected="list of strings", got=list(items))
    return items


def _operations(value: object) -> frozenset[Operation]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidPolicyError("operations is a list", expected="list of strings", got=value)
    ops: set[Operation] = set()
    for item in value:
        if item == "*":
            ops |= ALL_OPERATIONS
            continue
        try:
            ops.add(item if isinstance(item, Operation) else Operation(item))
        except ValueError:
            raise InvalidPolicyError(
                f"unknown operation {item!r}",
                expected=[*sorted(o.value for o in Operation), "*"], got=item) from None
    if not ops:
        raise InvalidPolicyError("operations is a non-empty list", expected="list", got=[])
    return frozenset(ops)


def _topics(value: object) -> tuple[TopicPattern, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidPolicyError("topics is a list of topic patterns", expected="list",
                                 got=value)
    try:
        items = tuple(v if isinstance(v, TopicPattern) else TopicPattern(v) for v in value)
    except SeqRepairError as exc:
        raise InvalidPolicyError(f"topics: {exc.message}", expected=exc.expected,
                                 got=exc.got) from None
    if not items:
        raise InvalidPolicyError("topics is a non-empty list", expected="list", got=[])
    return items


def _names(value: object, key: str, what: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidPolicyError(f"{key} is a list of {what} ('*' = any characters)",
                                 expected="list of strings", got=value)
    items = tuple(value)
    if not items or not all(isinstance(q, str) and q for q in items):
        raise InvalidPolicyError(f"{key} is a non-empty list of non-empty strings",
                                 expected="list of strings", got=list(items))
    return items


def _queues(value: object) -> tuple[str, ...]:
    return _names(value, "queues", "subscription ids")


def _principals(value: object) -> tuple[str, ...]:
    return _names(value, "principals", "principals")


PRINCIPAL_PLACEHOLDER = "{principal}"
"""In a rule's ``sources``: the principal the rule is applied to (``"{principal}.*"``: every
principal its actors match owns the sources named after it)."""


def _sources(value: object) -> tuple[str, ...]:
    items = _names(value, "sources", "source names")
    for item in items:
        if "{" in item.replace(PRINCIPAL_PLACEHOLDER, "") or "}" in item.replace(
                PRINCIPAL_PLACEHOLDER, ""):
            raise InvalidPolicyError(
                f"a source pattern holds no braces but {PRINCIPAL_PLACEHOLDER}",
                expected=f"source names, '*' and {PRINCIPAL_PLACEHOLDER}", got=item)
    return items


def _glob(text: str) -> str:
    """The regular expression of ``text`` where ``*`` is any run of characters."""
    return ".*".join(re.escape(part) for part in text.split("*"))


def _source_regex(pattern: str, principals: str) -> re.Pattern[str]:
    """``pattern`` (a source pattern) with :data:`PRINCIPAL_PLACEHOLDER` standing for the
    regular expression ``principals``."""
    return re.compile(f"(?:{principals})".join(
        _glob(part) for part in pattern.split(PRINCIPAL_PLACEHOLDER)), re.DOTALL)


@lru_cache(maxsize=4096)
def _bound_source(pattern: str, principal: str) -> re.Pattern[str]:
    return _source_regex(pattern, re.escape(principal))


@attrs.frozen
class Rule:
    """``Rule(Effect.ALLOW, ["*@example.com"], ["subscribe"], ["/weather/#"])``."""

    effect: Effect = attrs.field(converter=Effect)
    actors: tuple[str, ...] = attrs.field(converter=_actors)
    operations: frozenset[Operation] = attrs.field(converter=_operations)
    topics: tuple[TopicPattern, ...] = attrs.field(default=(EVERY_TOPIC,), converter=_topics)
    queues: tuple[str, ...] = attrs.field(default=("*",), converter=_queues)
    principals: tuple[str, ...] = attrs.field(default=("*",), converter=_principals)
    sources: tuple[str, ...] = attrs.field(default=("*",), converter=_sources)
    """Source names (``*`` = any characters) for ``own-source`` and ``contribute``."""
    _actor_res: tuple[re.Pattern[str], ...] = attrs.field(init=False, eq=False, repr=False)
    _queue_res: tuple[re.Pattern[str], ...] = attrs.field(init=False, eq=False, repr=False)
    _principal_res: tuple[re.Pattern[str], ...] = attrs.field(init=False, eq=False,
                                                              repr=False)
    _source_res: tuple[re.Pattern[str], ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_actor_res", tuple(_actor_regex(a) for a in self.actors))
        object.__setattr__(self, "_queue_res", tuple(_actor_regex(q) for q in self.queues))
        object.__setattr__(self, "_principal_res",
                           tuple(_actor_regex(p) for p in self.principals))
        # with the placeholder standing for any of the rule's actors: what the rule reserves
        actors = "|".join(_glob(a) for a in self.actors)
        object.__setattr__(self, "_source_res",
                           tuple(_source_regex(s, actors) for s in self.sources))

    def applies_to(self, principal: str, operation: Operation) -> bool:
        """Whether this rule speaks of ``operation`` by ``principal``."""
        return operation in self.operations and self.names_actor(principal)

    def names_actor(self, principal: str) -> bool:
        """Whether ``principal`` is one of this rule's actors."""
        return any(r.fullmatch(principal) for r in self._actor_res)

    def names_queue(self, queue: str) -> bool:
        """Whether ``queue`` (a subscription id) is one of this rule's queues."""
        return any(r.fullmatch(queue) for r in self._queue_res)

    def names_principal(self, principal: str) -> bool:
        """Whether ``principal`` is one of those this rule's ``act-for`` speaks of."""
        return any(r.fullmatch(principal) for r in self._principal_res)

    def names_source(self, source: str, principal: str | None = None) -> bool:
        """Whether ``source`` (a source name) is one of this rule's sources: for
        ``principal`` (its name in place of :data:`PRINCIPAL_PLACEHOLDER`), or None: for any
        principal the rule's actors match."""
        if principal is None:
            return any(r.fullmatch(source) for r in self._source_res)
        return any(
            (_bound_source(s, principal) if PRINCIPAL_PLACEHOLDER in s else r).fullmatch(source)
            for s, r in zip(self.sources, self._source_res, strict=True))

    @classmethod
    def from_json(cls, effect: str, value: object) -> Rule:
        """One ``[[allow]]`` / ``[[deny]]`` table of a policy file."""
        if not isinstance(value, Mapping):
            raise InvalidPolicyError(f"an {effect} rule is a table", expected="table", got=value)
        keys = ["actors", "operations", "topics", "queues", "principals", "sources"]
        unknown = sorted(set(value) - set(keys))
        if unknown:
            raise InvalidPolicyError(f"unknown {effect} rule keys: {', '.join(unknown)}",
                                     expected=keys, got=unknown)
        for key in ("actors", "operations"):
            if key not in value:
                raise InvalidPolicyError(f"an {effect} rule needs {key}", expected=key, got=None)
        return cls(effect, value["actors"], value["operations"],
                   value.get("topics", ("/#",)), value.get("queues", ("*",)),
                   value.get("principals", ("*",)), value.get("sources", ("*",)))


def _rules(value: Iterable[Rule]) -> tuple[Rule, ...]:
    return tuple(value)


@attrs.frozen
class Decision:
    """The answer of :meth:`Policy.decide`: whether the operation is allowed, and (for a
    pattern) the denied patterns inside it the caller must not see."""

    allowed: bool
    exclude: tuple[TopicPattern, ...] = ()
    why: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOWED = Decision(True, why="allowed")


@attrs.frozen
class Policy:
    """The access policy of a component: its rules (see the module docstring).

    ``permissive``: the policy in force when the operator gave none: every principal may do
    every operation but ``admin`` (what a component without a policy always did).
    """

    rules: tuple[Rule, ...] = attrs.field(default=(), converter=_rules)
    permissive: bool = False

    @classmethod
    def allow_all(cls) -> Policy:
        """No policy configured: everything but ``admin`` and ``attach-queue`` to everyone
        (every source is everyone's: ``own-source`` of every source to everyone). An
        operator-configured queue is then attachable only by those its configuration names
        (:func:`may_access`): a queue hands out its permission tokens, so nobody gets them
        by default."""
        return cls((Rule(Effect.ALLOW, ("*",), WITHOUT_POLICY),), permissive=True)

    @classmethod
    def from_json(cls, value: object) -> Policy:
        """A policy from its file form: ``{"allow": [rule, ...], "deny": [rule, ...]}``."""
        if not isinstance(value, Mapping):
            raise InvalidPolicyError("a policy is a table", expected="table", got=value)
        unknown = sorted(set(value) - {"allow", "deny"})
        if unknown:
            raise InvalidPolicyError(f"unknown policy keys: {', '.join(unknown)}",
                                     expected=["allow", "deny"], got=unknown)
        rules = []
        for effect in ("allow", "deny"):
            tables = value.get(effect, [])
            if not isinstance(tables, list):
                raise InvalidPolicyError(f"{effect} is a list of rules ([[{effect}]] tables)",
                                         expected="list", got=tables)
            rules += [Rule.from_json(effect, table) for table in tables]
        return cls(tuple(rules))

    def _rules(self, principal: str, operation: Operation) -> tuple[list[Rule], list[Rule]]:
        allows: list[Rule] = []
        denies: list[Rule] = []
        for rule in self.rules:
            if rule.applies_to(principal, operation) or (
                rule.effect is Effect.ALLOW and rule.applies_to(principal, Operation.ADMIN)
            ):
                (allows if rule.effect is Effect.ALLOW else denies).append(rule)
        return allows, denies

    def is_admin(self, principal: str) -> bool:
        """Whether ``principal`` has the ``admin`` grant (and no deny of it)."""
        allows, denies = self._rules(principal, Operation.ADMIN)
        return bool(allows) and not any(Operation.ADMIN in r.operations for r in denies)

    def decide(self, principal: str, operation: Operation,
               topic: TopicPattern | str | None = None) -> Decision:
        """May ``principal`` do ``operation`` on ``topic`` (a concrete topic or a pattern;
        None: no topic, e.g. reading one's subscriptions)? See the module docstring."""
        allows, denies = self._rules(principal, operation)
        if topic is None:  # denied only by a deny of every topic
            if any(covers(d, EVERY_TOPIC) for r in denies for d in r.topics):
                return Decision(False, why=f"{operation.value} denied to {principal!r}")
            return ALLOWED if allows else _refused(principal, operation, None)
        pattern = topic if isinstance(topic, TopicPattern) else TopicPattern(topic)
        for rule in denies:
            if any(covers(d, pattern) for d in rule.topics):
                return Decision(False, why=f"{operation.value} on {pattern} denied to "
                                           f"{principal!r}")
        if any(Operation.ADMIN in r.operations for r in allows):
            granted = True
        elif operation is Operation.PUBLISH and not pattern.is_literal:
            granted = any(overlaps(a, pattern) for r in allows for a in r.topics)
        else:
            granted = any(covers(a, pattern) for r in allows for a in r.topics)
        if not granted:
            return _refused(principal, operation, pattern)
        exclude = tuple(dict.fromkeys(
            d for r in denies for d in r.topics if overlaps(d, pattern)))
        return Decision(True, exclude, "allowed")

    def exclusions(self, principal: str, operation: Operation,
                   topic: TopicPattern | str) -> Decision:
        """What the denies alone say of ``principal`` doing ``operation`` on pattern
        ``topic``, whatever the allows grant: refused when a deny covers it all, else allowed
        with the denied patterns inside it as :attr:`Decision.exclude` (an operator-configured
        queue: whoever may attach to it sees its topic but what is denied to them)."""
        _, denies = self._rules(principal, operation)
        pattern = topic if isinstance(topic, TopicPattern) else TopicPattern(topic)
        if any(covers(d, pattern) for r in denies for d in r.topics):
            return Decision(False, why=f"{operation.value} on {pattern} denied to "
                                       f"{principal!r}")
        exclude = tuple(dict.fromkeys(
            d for r in denies for d in r.topics if overlaps(d, pattern)))
        return Decision(True, exclude, "allowed")

    def reserved(self, source: str) -> bool:
        """Whether some ``own-source`` allow names ``source`` (whoever it names)."""
        return any(r.effect is Effect.ALLOW and Operation.OWN_SOURCE in r.operations
                   and r.names_source(source) for r in self.rules)

    def may_publish_source(self, principal: str, source: str) -> Decision:
        """May ``principal`` publish under source name ``source`` (and take its
        contributions)? A reserved source (:meth:`reserved`): only a principal an
        ``own-source`` allow names it to, or an administrator; any other source: anyone (the
        ``publish`` grant of each topic is checked on its own). A deny of ``own-source``
        naming the source refuses it whatever the allows say."""
        allows, denies = self._rules(principal, Operation.OWN_SOURCE)
        if any(Operation.OWN_SOURCE in r.operations and r.names_source(source, principal)
               for r in denies):
            return Decision(False, why=f"own-source {source!r} denied to {principal!r}")
        if not self.reserved(source) or any(
            r.names_source(source, principal) or Operation.ADMIN in r.operations for r in allows
        ):
            return ALLOWED
        return Decision(False, why=f"source {source!r} belongs to another principal than "
                                   f"{principal!r}")

    def may_contribute(self, principal: str, source: str,
                       topic: TopicPattern | str | None = None) -> Decision:
        """May ``principal`` contribute to ``source`` (None ``topic``: to some topic of it,
        at attach; else on ``topic``)? An allow of ``contribute`` naming the source and
        covering the topic, and no deny naming the source that covers it (with no topic: a
        deny of every topic)."""
        allows, denies = self._rules(principal, Operation.CONTRIBUTE)
        allows = [r for r in allows if r.names_source(source, principal)]
        denies = [r for r in denies if r.names_source(source, principal)]
        if not allows:
            return Decision(False, why=f"contribute to {source!r} not granted to "
                                       f"{principal!r}")
        sourced = Policy(tuple(allows) + tuple(denies))
        decision = sourced.decide(principal, Operation.CONTRIBUTE, topic)
        if not decision:
            where = "" if topic is None else f" on {topic}"
            return Decision(False, why=f"contribute to {source!r}{where} not granted to "
                                       f"{principal!r}")
        return decision

    def may_attach_queue(self, principal: str, queue: str) -> Decision:
        """May ``principal`` attach to subscription queue ``queue`` (its id)?"""
        allows, denies = self._rules(principal, Operation.ATTACH_QUEUE)
        if any(r.names_queue(queue) for r in denies):
            return Decision(False, why=f"attach-queue {queue!r} denied to {principal!r}")
        if any(r.names_queue(queue) or Operation.ADMIN in r.operations for r in allows):
            return ALLOWED
        return Decision(False, why=f"attach-queue {queue!r} not granted to {principal!r}")


def may_act_for(policy: Policy, actor: str, principal: str) -> Decision:
    """May ``actor`` (a connection's proven principal) act on behalf of ``principal``? Only an
    ``act-for`` rule naming ``principal`` grants it (not ``admin``, not ``*``), a deny naming
    it wins, and nobody acts for :data:`ANONYMOUS` or for an administrator it is not."""
    if principal == ANONYMOUS:
        return Decision(False, why="nobody acts on behalf of the anonymous principal")
    rules = [r for r in policy.rules if Operation.ACT_FOR in r.operations
             and r.names_actor(actor) and r.names_principal(principal)]
    if any(r.effect is Effect.DENY for r in rules):
        return Decision(False, why=f"act-for {principal!r} denied to {actor!r}")
    if not any(r.effect is Effect.ALLOW for r in rules):
        return Decision(False, why=f"act-for {principal!r} not granted to {actor!r}")
    if policy.is_admin(principal) and not policy.is_admin(actor):
        return Decision(False, why=f"{actor!r} may not act for administrator {principal!r}")
    return ALLOWED


def may_access(policy: Policy, principal: str, *, sub_id: str, owner: str | None,
               configured: bool, attachers: Iterable[str] = ()) -> bool:
    """Whether ``principal`` may read, change, delete or attach to a subscription: an
    administrator may; an operator-configured one, whoever the policy lets attach to it
    (``attach-queue``) or its configuration names (``attachers``, ``*`` = any characters),
    unless a deny of ``attach-queue`` names it; an API-made one, its owner. One without an
    owner (stored before subscriptions had owners) or made by an anonymous client is
    everyone's: without an identity there is nobody to keep it for."""
    if policy.is_admin(principal):
        return True
    if configured:
        if policy.may_attach_queue(principal, sub_id):
            return True
        _, denies = policy._rules(principal, Operation.ATTACH_QUEUE)
        return not any(r.names_queue(sub_id) for r in denies) and any(
            _actor_regex(a).fullmatch(principal) for a in attachers)
    return owner is None or owner in (ANONYMOUS, principal)


def _refused(principal: str, operation: Operation, topic: TopicPattern | None) -> Decision:
    where = "" if topic is None else f" on {topic}"
    return Decision(False, why=f"{operation.value}{where} not granted to {principal!r}")


def covers(outer: TopicPattern, inner: TopicPattern) -> bool:
    """Whether every topic ``inner`` matches, ``outer`` matches too."""
    words = _normal(inner.words)
    if words == (ANY_WORDS,):
        words = (ONE_WORD, ANY_WORDS)  # a topic has at least one word: '/#' is '/*/#'
    around = _normal(outer.words)
    if around == (ONE_WORD, ANY_WORDS):
        around = (ANY_WORDS,)  # every topic, as '/#'
    return _covers(around, words)


def _normal(words: tuple[str, ...]) -> tuple[str, ...]:
    """``words`` with each run of wildcards holding a ``#`` written as its ``*`` then one
    ``#`` (``#/*`` and ``*/#`` both mean "one word or more")."""
    out: list[str] = []
    run: list[str] = []
    for word in (*words, ""):
        if word in (ONE_WORD, ANY_WORDS):
            run.append(word)
            continue
        if ANY_WORDS in run:
            out += [ONE_WORD] * run.count(ONE_WORD) + [ANY_WORDS]
        else:
            out += run
        run = []
        if word:
            out.append(word)
    return tuple(out)


def overlaps(a: TopicPattern, b: TopicPattern) -> bool:
    """Whether some topic matches both ``a`` and ``b``."""
    return _overlaps(a.words, b.words)


@lru_cache(maxsize=4096)
def _covers(outer: tuple[str, ...], inner: tuple[str, ...]) -> bool:
    # inner's wildcards are symbols only a wildcard of outer can stand for: outer's '*' takes
    # one word of inner that is a word or '*', outer's '#' any run of inner's words
    n, m = len(outer), len(inner)
    reach = [[False] * (m + 1) for _ in range(n + 1)]
    reach[0][0] = True
    for i in range(n + 1):
        for j in range(m + 1):
            if not reach[i][j]:
                continue
            if i < n and outer[i] == ANY_WORDS:
                reach[i + 1][j] = True  # '#' takes nothing more
                if j < m:
                    reach[i][j + 1] = True  # '#' takes inner's next word, whatever it is
            elif i < n and j < m and inner[j] != ANY_WORDS and (
                outer[i] == ONE_WORD or (outer[i] == inner[j] and inner[j] != ONE_WORD)
            ):
                reach[i + 1][j + 1] = True
    return reach[n][m]


@lru_cache(maxsize=4096)
def _overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    n, m = len(a), len(b)
    reach = [[False] * (m + 1) for _ in range(n + 1)]
    reach[0][0] = True
    for i in range(n + 1):
        for j in range(m + 1):
            if not reach[i][j]:
                continue
            if i < n and a[i] == ANY_WORDS:
                reach[i + 1][j] = True
                if j < m and b[j] != ANY_WORDS:
                    reach[i][j + 1] = True
            if j < m and b[j] == ANY_WORDS:
                reach[i][j + 1] = True
                if i < n and a[i] != ANY_WORDS:
                    reach[i + 1][j] = True
            if i < n and j < m and a[i] != ANY_WORDS and b[j] != ANY_WORDS and (
                a[i] == ONE_WORD or b[j] == ONE_WORD or a[i] == b[j]
            ):
                reach[i + 1][j + 1] = True
    return reach[n][m]


def describe(policy: Policy) -> dict[str, Any]:
    """A short summary for a log line."""
    return {"rules": len(policy.rules), "permissive": policy.permissive}
