"""The ``/topics`` resources of the REST API, without HTTP (sans-IO): what each request reads
or changes in the :class:`~seqrepair.rest.catalog.SharedCatalog`, and what the access policy
lets the caller see and do (:mod:`seqrepair.core.policy`).

:mod:`seqrepair.rest.api` maps each function's answer onto a response and its errors onto
statuses: :class:`~seqrepair.core.errors.TopicNotFoundError` 404,
:class:`~seqrepair.core.errors.AccessDeniedError` 403,
:class:`~seqrepair.core.errors.TopicConflictError` 409, bad input 400, the store's failure 503.

What the caller may not list does not exist for it, so names do not leak: ``GET`` and
``DELETE`` of a topic it may not list are answered as for a topic nobody has (404, the same
text), and a ``PUT`` of one is refused (403) with the same text whether the topic is listed
or not; ``create-topic`` alone would otherwise tell, by 201 or 200, what the caller may not
list.
"""

from __future__ import annotations

from typing import Any

from seqrepair.core.errors import AccessDeniedError, TopicNotFoundError
from seqrepair.core.policy import Operation, Policy
from seqrepair.core.topics import validate_topic
from seqrepair.logs import get_logger
from seqrepair.rest.catalog import SharedCatalog
from seqrepair.rest.manager import SubscriptionManager

log = get_logger("seqrepair.rest.topics")


def topic_tree(catalog: SharedCatalog, policy: Policy, principal: str,
               pattern: str | None) -> dict[str, Any]:
    """``GET /topics``: the topic tree of what ``principal`` may list (those ``pattern``
    matches when one is given); AccessDeniedError when it may list nothing."""
    if not policy.decide(principal, Operation.LIST_TOPICS):
        raise AccessDeniedError(f"list-topics not granted to {principal!r}",
                                expected="list-topics", got=principal)
    tree = catalog.tree(pattern)
    if not policy.permissive:
        tree["topics"] = [t for t in tree["topics"]
                          if policy.decide(principal, Operation.LIST_TOPICS, t)]
    return tree


def read_topic(catalog: SharedCatalog, manager: SubscriptionManager, policy: Policy,
               principal: str, topic: str) -> dict[str, Any]:
    """``GET /topics/<topic>``: what the catalog knows of it and the ids of the caller's
    subscriptions that may select it."""
    info = catalog.get(topic)
    _check_listed(policy, principal, info.topic)
    return {**info.to_json(), "subscriptions": _wanted(manager, principal, info.topic)}


def declare_topic(catalog: SharedCatalog, manager: SubscriptionManager, policy: Policy,
                  principal: str, topic: str) -> tuple[bool, dict[str, Any]]:
    """``PUT /topics/<topic>``: declare it (stored, listed before anything is published on
    it); whether it is new to the catalog, and its JSON form as :func:`read_topic`'s.
    ``principal`` needs ``create-topic`` and ``list-topics`` on it."""
    validate_topic(topic)
    if not (policy.decide(principal, Operation.LIST_TOPICS, topic)
            and policy.decide(principal, Operation.CREATE_TOPIC, topic)):
        raise AccessDeniedError(
            f"declaring topic {topic[:200]!r} needs create-topic and list-topics on it, "
            f"not granted to {principal!r}", expected=["create-topic", "list-topics"],
            got=principal)
    info, new = catalog.declare(topic)
    if new:
        log.info("topic declared", topic=topic[:200], principal=principal)
    return new, {**info.to_json(), "subscriptions": _wanted(manager, principal, topic)}


def delete_topic(catalog: SharedCatalog, manager: SubscriptionManager, policy: Policy,
                 principal: str, topic: str) -> dict[str, Any]:
    """``DELETE /topics/<topic>``: take it out of the catalog and the store; its JSON form as
    it was. The journal keeps its publications (retention governs them), subscriptions are
    untouched, and the topic is listed again when it is next published. ``principal`` needs
    ``delete-topic`` on it (and ``list-topics``, else it is not there for it)."""
    info = catalog.get(topic)
    _check_listed(policy, principal, info.topic)
    if not policy.decide(principal, Operation.DELETE_TOPIC, info.topic):
        raise AccessDeniedError(f"delete-topic on {topic[:200]!r} not granted to {principal!r}",
                                expected="delete-topic", got=principal)
    wanted = _wanted(manager, principal, info.topic)
    gone = catalog.remove(info.topic)
    log.info("topic deleted", topic=topic[:200], principal=principal)
    return {**gone.to_json(), "subscriptions": wanted}


def _check_listed(policy: Policy, principal: str, topic: str) -> None:
    """A topic ``principal`` may not list is answered as one the catalog does not hold."""
    if not policy.decide(principal, Operation.LIST_TOPICS, topic):
        raise TopicNotFoundError(f"no topic {topic[:200]!r} in the catalog", got=topic)


def _wanted(manager: SubscriptionManager, principal: str, topic: str) -> list[str]:
    """The ids of the subscriptions ``principal`` may read that may select ``topic`` (none
    when it may read none: listing a topic needs ``list-topics`` alone)."""
    return [sub.id for sub in manager.readable(principal) if sub.may_select(topic)]
