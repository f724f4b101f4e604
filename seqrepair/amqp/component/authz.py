"""The access policy at the component's doors (:mod:`seqrepair.core.policy`, WIRE.md
"Authorization").

Every check reads the policy in force (the subscription manager's ``policy``: a reload of
``serve --policy`` takes effect at the next attach, publication or request):

* a publishing link's address needs ``publish`` on a pattern that overlaps it, and each
  publication's topic ``publish`` on that topic (the delivery is rejected with
  ``amqp:unauthorized-access``; nothing of it is journaled);
* a subscriber link on a topic pattern needs ``subscribe`` covering it; the denied patterns
  inside it are excluded from what it sees, live and in repair;
* a subscription queue is attachable by who may access it (its owner, an administrator; an
  operator-configured one, whoever ``attach-queue`` names): anyone else is told
  ``amqp:not-found`` exactly as for a queue that does not exist, so ids do not leak;
* a link name is its principal's while attached: another principal's attach with it is
  refused (``amqp:unauthorized-access``) and the owner keeps its link;
* after a reload, the attached subscriber links the new policy takes something from are
  detached (:func:`revoked`);
* a link or request that names ``seqrepair-on-behalf-of`` acts as that principal, when the
  connection's principal has ``act-for`` on it (a gateway forwarding the identity its client
  proved, :func:`effective_principal`); else it is refused (``amqp:unauthorized-access``).
  ``anonymous`` needs no ``act-for``: a connection may always make itself anonymous (a
  forwarding gateway's anonymous clients act as ``anonymous``, never as the gateway);
* the attach reply's ``seqrepair-start-after``, CAPABILITIES' ``source-bits`` and a source
  replay's answers name only the sources the caller may subscribe to a topic of (learned as
  publications are fanned out, when a policy restricts anything, or from a source's latest
  journaled publication when it has published nothing since the component started).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from seqrepair.amqp.component.sourceviews import (
    MAX_TOPICS_PER_SOURCE as MAX_TOPICS_PER_SOURCE,  # re-exported: it lived here
)
from seqrepair.amqp.wire.errors import (
    AmqpAdapterError,
    InvalidLinkPropertyError,
    UnauthorizedAccessError,
    UnknownAddressError,
)
from seqrepair.amqp.wire.security import principal_of
from seqrepair.amqp.wire.vocabulary import (
    MAX_PRINCIPAL_LENGTH,
    PROP_ON_BEHALF_OF,
    SUBSCRIPTION_PREFIX,
    plain_properties,
)
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.policy import (
    ANONYMOUS,
    Decision,
    Operation,
    Policy,
    may_access,
    may_act_for,
)
from seqrepair.core.subscriptions import Subscription
from seqrepair.core.topics import TopicPattern

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component
    from seqrepair.amqp.component.links import SubscriberLink
    from seqrepair.core.messages import Publication

V = TypeVar("V")

MAX_REVEALED = 65_536
"""(principal, source) pairs remembered as shown by a source replay's scan (bounded memory;
past it a scan is made again for each request)."""
REVEAL_SCAN = 100_000
"""Numbers a source replay's scan reads at most, looking for one its principal may see."""


def policy_of(component: Component) -> Policy:
    """The policy in force."""
    return component.subscriptions.policy()


def effective_principal(component: Component, connection: Any,
                        properties: Mapping[str, Any] | None) -> str:
    """Who a link or request acts as: its connection's principal, or the one its
    ``seqrepair-on-behalf-of`` names when the connection's principal may act for it."""
    actor = principal_of(connection)
    claimed = (properties or {}).get(str(PROP_ON_BEHALF_OF))
    if claimed is None:
        return actor
    if claimed == ANONYMOUS:  # acting as nobody only takes privileges away: no act-for needed
        return ANONYMOUS
    if not isinstance(claimed, str) or not claimed or len(claimed) > MAX_PRINCIPAL_LENGTH:
        raise InvalidLinkPropertyError(
            f"{PROP_ON_BEHALF_OF} names a principal",
            expected=f"a string of 1..{MAX_PRINCIPAL_LENGTH} characters",
            got=claimed if not isinstance(claimed, str) else claimed[:64])
    decision = may_act_for(policy_of(component), actor, claimed)
    if not decision:
        raise UnauthorizedAccessError(decision.why, expected="act-for", got=claimed)
    return claimed


def acting_for(component: Component, link: Any) -> str | None:
    """The principal ``link`` acts for when its connection's may act for another (a
    forwarding gateway's client: counted as itself, :mod:`~seqrepair.amqp.wire.admission`);
    None for the connection's own, and for a claim not honoured (its attach is refused with why)."""
    try:
        return effective_principal(component, link.connection,
                                   plain_properties(link.remote_properties))
    except AmqpAdapterError:
        return None


def check_publish_link(component: Component, receiver: Any, principal: str) -> None:
    """A publishing link on ``receiver.pattern``: refuse it when ``principal`` may publish
    nowhere under it; remember who publishes, for each publication's check."""
    receiver.principal = principal
    receiver.policy_of = component.subscriptions.policy
    decision = policy_of(component).decide(principal, Operation.PUBLISH, receiver.pattern)
    if not decision:
        raise UnauthorizedAccessError(decision.why, expected="publish",
                                      got=str(receiver.pattern))


def check_publish_topic(receiver: Any, topic: str) -> None:
    """One publication's topic (the caller caches the topics that passed, per policy)."""
    policy_fn = getattr(receiver, "policy_of", None)
    if policy_fn is None:
        return
    decision = policy_fn().decide(receiver.principal, Operation.PUBLISH, topic)
    if not decision:
        raise UnauthorizedAccessError(decision.why, expected="publish", got=topic)


def topics_cache(receiver: Any) -> set[str]:
    """The topics ``receiver`` already saw pass, emptied when the policy was reloaded."""
    checked: set[str] = receiver.topics_checked
    policy_fn = getattr(receiver, "policy_of", None)
    if policy_fn is not None:
        policy = policy_fn()
        if getattr(receiver, "policy_seen", None) is not policy:
            checked.clear()
            receiver.policy_seen = policy
    return checked


def subscribe_exclusions(component: Component, principal: str,
                         address: str) -> tuple[TopicPattern, ...]:
    """A subscriber link on topic pattern ``address``: refuse it unless ``principal`` may
    subscribe to it; the patterns it must not see."""
    decision = policy_of(component).decide(principal, Operation.SUBSCRIBE, address)
    if not decision:
        raise UnauthorizedAccessError(decision.why, expected="subscribe", got=address)
    return decision.exclude


def queue_exclusions(component: Component, principal: str, address: str,
                     sub: Subscription | None) -> tuple[TopicPattern, ...]:
    """A subscriber link on queue ``address`` (``sub``: the subscription, None when there is
    none): refuse it as not found unless ``principal`` may access it, and as unauthorized
    when its topic is refused to it (:func:`queue_decision`); the patterns of its topic the
    principal must not see."""
    decision = queue_decision(policy_of(component), principal, sub)
    if decision is None:
        raise UnknownAddressError(f"no subscription queue {address!r}", got=address)
    if not decision:
        raise UnauthorizedAccessError(decision.why, expected="subscribe", got=address)
    return decision.exclude


def queue_decision(policy: Policy, principal: str, sub: Subscription | None) -> Decision | None:
    """What ``principal`` may see of subscription queue ``sub``: None when it may not access
    it (no such queue, another's); else the ``subscribe`` decision on its topic. An API-made
    queue needs the ``subscribe`` grant of its topic (as the pattern would at attach: a queue
    is never wider than its holder's grant, and a revoked grant takes the queue too); an
    operator-configured one is granted by ``attach-queue`` (or its configuration), and only the
    denies speak of its topic (:meth:`~seqrepair.core.policy.Policy.exclusions`)."""
    if sub is None or not may_access(policy, principal, sub_id=sub.id, owner=sub.owner,
                                     configured=sub.configured, attachers=sub.attachers):
        return None
    if sub.configured:
        return policy.exclusions(principal, Operation.SUBSCRIBE, sub.topic)
    return policy.decide(principal, Operation.SUBSCRIBE, sub.topic)


def check_link_name(component: Component, name: str, principal: str) -> None:
    """A link name held by another principal is refused: it is never taken over (the same
    principal's attach takes it over: a reconnect). It is held while its link is attached and
    while the component keeps its context after a detach (``--context-retention``), so a
    principal that reconnects finds its context, never another's attach in its place."""
    link = component.links.get(name)
    if link is not None and component.principals.get(name, principal) != principal:
        raise UnauthorizedAccessError(
            f"link name {name!r} belongs to another principal", expected="a link name of "
            "one's own", got=name)


def learn_sources(component: Component, pubs: Iterable[Publication]) -> None:
    """Remember the topics each source published, one per class of the policy
    (:mod:`.sourceviews`; only when the policy restricts anyone)."""
    policy = policy_of(component)
    if policy.permissive:
        return
    views = component.source_views
    for pub in pubs:
        views.learn(policy, pub.source, pub.topic)


def visible_sources(component: Component, principal: str,
                    by_source: Mapping[str, V]) -> dict[str, V]:
    """``by_source`` without the sources ``principal`` may not learn of: those none of whose
    known topics it may subscribe to."""
    policy = policy_of(component)
    if policy.permissive:
        return dict(by_source)
    revealed = component.revealed_sources
    return {
        source: value for source, value in by_source.items()
        if (principal, source) in revealed
        or any(policy.decide(principal, Operation.SUBSCRIBE, topic)
               for topic in _topics_of(component, policy, source))
    }


def reveal_named_sources(component: Component, principal: str,
                         after: Mapping[str, int]) -> set[str]:
    """The sources a source replay names (``after``) that ``principal`` may not learn of
    yet but that the journal holds, after the requested number, a publication of it may see:
    shown to it from now on (remembered, at most :data:`MAX_REVEALED` pairs).

    The topics the component knows of a source (:func:`learn_sources`) are those fanned out
    since it started (one per class of the policy, :mod:`.sourceviews`), or after a restart
    only the latest journaled one's: a principal owed publications of a topic not among them
    would be answered as for an unknown source and never get them. So the numbers the request asks
    for (at most :data:`REVEAL_SCAN`) are read until one the principal may subscribe to. What
    the principal may not see is never the reason for a reveal, so hidden sources stay hidden.
    A range found to hold nothing it may see is remembered too, and not read again.
    """
    shown: set[str] = set()
    policy = policy_of(component)
    if policy.permissive:
        return shown
    journal = component.gapfill.journal
    revealed, unseen = component.revealed_sources, component.unseen_ranges
    for source in sorted(after):
        key = (principal, source)
        if key in revealed or visible_sources(component, principal, {source: None}):
            continue
        try:
            high_water, trimmed = journal.high_waters([source]).get(source, (0, 0))
            first = max(after[source], trimmed) + 1
            known = unseen.get(key)
            start = max(first, known[1] + 1) if known and first >= known[0] else first
            last = min(high_water, start + REVEAL_SCAN - 1)
            seen = start <= last and any(
                policy.decide(principal, Operation.SUBSCRIBE, pub.topic)
                for pub in journal.iter_range(source, start, last))
        except SeqRepairError:  # a name the journal cannot hold, a trim racing, no answer
            continue
        if len(revealed) + len(unseen) >= MAX_REVEALED:
            unseen.clear()  # forgotten ranges are only read again
        if seen:
            shown.add(source)
            if len(revealed) < MAX_REVEALED:
                revealed.add(key)
        elif start <= last:
            unseen[key] = (known[0] if known and start > first else first, last)
    return shown


def _topics_of(component: Component, policy: Policy, source: str) -> Iterable[str]:
    """The topics ``source`` is known to publish, one per class of ``policy``
    (:mod:`.sourceviews`): learned as they are fanned out, else (a source journaled before
    this process started) its latest journaled publication's, remembered. Nothing when the
    journal has none or does not answer now (the source is then hidden: never revealed by
    mistake). Only sources the journal holds are remembered, so naming made-up sources
    fills no memory."""
    known = component.source_views.topics(policy, source)
    if known is not None:
        return known
    journal = component.gapfill.journal
    try:
        through = journal.high_water(source)
        latest = journal.page_back(source, through, 1)[1] if through else []
    except SeqRepairError:  # a name the journal cannot hold, or it does not answer
        return ()
    if not latest:
        return ()
    for pub in latest:
        component.source_views.learn(policy, source, pub.topic)
    return component.source_views.topics(policy, source) or ()


def revoked(component: Component) -> list[tuple[SubscriberLink, str, str]]:
    """The attached subscriber links the policy in force no longer gives what they were
    given (after a reload), each with the condition and text to detach it with: a link whose
    pattern or queue the principal may no longer use ends (``amqp:unauthorized-access``, or
    ``amqp:not-found`` for a queue, as at attach); one whose exclusions changed is detached
    with ``amqp:link:detach-forced`` (the subscriber attaches again, under the new policy)."""
    policy = policy_of(component)
    ended = []
    for name, link in component.links.items():
        principal = component.principals.get(name)
        if link.sender is None or principal is None:
            continue
        if link.address.startswith(SUBSCRIPTION_PREFIX):
            sub = component.subscriptions.find(link.address[len(SUBSCRIPTION_PREFIX):])
            queued = queue_decision(policy, principal, sub)
            if queued is None:
                ended.append((link, "amqp:not-found", "no subscription queue"))
                continue
            decision = queued
        else:
            decision = policy.decide(principal, Operation.SUBSCRIBE, link.address)
        if not decision:
            ended.append((link, UnauthorizedAccessError.condition, decision.why))
            continue
        if frozenset(decision.exclude) != frozenset(link.entitlement.exclude):
            ended.append((link, "amqp:link:detach-forced", "access policy changed: attach "
                                                          "again"))
    return ended
