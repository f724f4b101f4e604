"""The subscription manager: one registry, shared by the REST API's threads and the component.

Every change is validated by the core registry, then persisted (when there is a store), and
only then visible and announced: a change the store could not take is undone and raises, so a
subscription the API confirmed survives a restart. Listeners hear of each change, in the order
the changes were made, as ``(previous, current)`` (None: absent); the component's listener only
queues the change for its own event loop, since it is called with the manager's lock held. A
listener that raises is logged and does not stop the others, nor fail the change.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from seqrepair.core.errors import AccessDeniedError, SubscriptionNotFoundError
from seqrepair.core.policy import Operation, Policy, may_access
from seqrepair.core.subscriptions import Subscription, SubscriptionRegistry
from seqrepair.logs import get_logger

log = get_logger("seqrepair.rest.manager")

Listener = Callable[[Subscription | None, Subscription | None], None]


class SubscriptionStore(Protocol):
    """Where subscriptions made through the API are kept (see
    :class:`~seqrepair.journal.substore.RedisSubscriptionStore`)."""

    def load(self) -> list[Subscription]:
        """Every stored subscription."""

    def save(self, subscription: Subscription) -> None:
        """Store (or replace) one subscription."""

    def remove(self, sub_id: str) -> None:
        """Forget one subscription."""


class SubscriptionManager:
    """Thread-safe create / retrieve / query / update / delete over a
    :class:`~seqrepair.core.subscriptions.SubscriptionRegistry`.

    ``configured`` subscriptions (the operator's) are loaded first and cannot be changed;
    a ``store``'s subscriptions are loaded next. Errors are the registry's
    (:class:`~seqrepair.core.errors.SeqRepairError` subclasses) or the store's own.

    ``policy`` gives the access policy in force (read at each call: a reload takes effect at
    once). A method given a ``principal`` acts for it: a subscription it may not access
    (:func:`~seqrepair.core.policy.may_access`) is not there for it
    (SubscriptionNotFoundError, so ids do not leak), an operation the policy refuses raises
    AccessDeniedError, and what it creates is its own. Without one the caller is trusted
    (the component, the operator's tools).
    """

    def __init__(
        self,
        *,
        configured: Iterable[Subscription] = (),
        store: SubscriptionStore | None = None,
        registry: SubscriptionRegistry | None = None,
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        policy: Callable[[], Policy] = Policy.allow_all,
    ) -> None:
        self.policy = policy
        self.registry = registry if registry is not None else SubscriptionRegistry()
        self.store = store
        self.new_id = new_id
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.registry.load(configured)
        if store is not None:
            self.registry.load(store.load())
        # what find() reads without the lock: the component's event loop must never wait for
        # a change whose store (Redis) is slow to answer; replaced whole after each change
        self._committed = {sub.id: sub for sub in self.registry.query()}

    def listen(self, listener: Listener) -> None:
        """Call ``listener(previous, current)`` after every change from now on."""
        with self._lock:
            self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        """Stop calling ``listener``."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def find(self, sub_id: str) -> Subscription | None:
        """The subscription ``sub_id`` as last committed, or None. Never waits: a change being
        stored right now is not seen until it is stored."""
        return self._committed.get(sub_id)

    def may_access(self, sub: Subscription, principal: str | None) -> bool:
        """Whether ``principal`` (None: a trusted caller) may see ``sub`` at all."""
        return principal is None or may_access(
            self.policy(), principal, sub_id=sub.id, owner=sub.owner, configured=sub.configured,
            attachers=sub.attachers)

    def _check(self, principal: str | None, operation: Operation, topic: Any = None) -> None:
        if principal is None:
            return
        decision = self.policy().decide(principal, operation, topic)
        if not decision:
            raise AccessDeniedError(decision.why, expected=operation.value, got=principal)

    def _visible(self, sub_id: str, principal: str | None) -> Subscription:
        sub = self.registry.get(sub_id)
        if not self.may_access(sub, principal):
            raise SubscriptionNotFoundError(f"no subscription {sub_id!r}", got=sub_id)
        return sub

    def get(self, sub_id: str, principal: str | None = None) -> Subscription:
        """The subscription ``sub_id`` (SubscriptionNotFoundError when there is none)."""
        with self._lock:
            sub = self._visible(sub_id, principal)
            self._check(principal, Operation.READ_SUBSCRIPTION, sub.topic)
            return sub

    def query(self, principal: str | None = None) -> list[Subscription]:
        """Every subscription (``principal``'s only, when given), by id."""
        self._check(principal, Operation.READ_SUBSCRIPTION)
        with self._lock:
            subs = self.registry.query()
        return [sub for sub in subs if self.may_access(sub, principal)]

    def readable(self, principal: str | None = None) -> list[Subscription]:
        """The subscriptions ``principal`` may read (None: every one): those it may access
        with ``read-subscription`` on their topic; none, never a refusal, when it may read
        none (``GET /topics/<t>`` names only these)."""
        with self._lock:
            subs = self.registry.query()
        if principal is None:
            return subs
        policy = self.policy()
        return [sub for sub in subs if self.may_access(sub, principal)
                and policy.decide(principal, Operation.READ_SUBSCRIPTION, sub.topic)]

    def create(self, proposal: Any, principal: str | None = None) -> Subscription:
        """Create a subscription from a proposed JSON object; return it as realized (owned by
        ``principal``)."""
        with self._lock:
            proposal = self._hidden_id_ignored(proposal, principal)
            sub = self.registry.create(proposal, new_id=self.new_id(), owner=principal)
            try:
                self._check(principal, Operation.CREATE_SUBSCRIPTION, sub.topic)
                self._check(principal, Operation.SUBSCRIBE, sub.topic)  # what it stands for
            except AccessDeniedError:
                self.registry.restore(sub.id, None)
                raise
            self._commit(sub.id, None, sub)
            return sub

    def _hidden_id_ignored(self, proposal: Any, principal: str | None) -> Any:
        """The proposal without its ``id`` when that id names a subscription ``principal`` may
        not see: a conflict would tell that it exists, so the manager assigns an id instead (a
        binding may ignore a proposed id, CloudEvents Subscriptions API, Create)."""
        if isinstance(proposal, dict) and isinstance(proposal.get("id"), str):
            taken = self.registry.find(proposal["id"])
            if taken is not None and not self.may_access(taken, principal):
                return {key: value for key, value in proposal.items() if key != "id"}
        return proposal

    def update(self, sub_id: str, proposal: Any, principal: str | None = None) -> Subscription:
        """Replace subscription ``sub_id`` by a proposed JSON object; return it as realized."""
        with self._lock:
            before = self._visible(sub_id, principal)
            previous, current = self.registry.update(sub_id, proposal)
            try:
                self._check(principal, Operation.CHANGE_SUBSCRIPTION, before.topic)
                self._check(principal, Operation.CHANGE_SUBSCRIPTION, current.topic)
                self._check(principal, Operation.SUBSCRIBE, current.topic)
            except AccessDeniedError:
                self.registry.restore(sub_id, previous)
                raise
            self._commit(sub_id, previous, current)
            return current

    def delete(self, sub_id: str, principal: str | None = None) -> Subscription:
        """Delete subscription ``sub_id``; return what it was."""
        with self._lock:
            sub = self._visible(sub_id, principal)
            self._check(principal, Operation.DELETE_SUBSCRIPTION, sub.topic)
            previous = self.registry.delete(sub_id)
            self._commit(sub_id, previous, None)
            return previous

    def _commit(self, sub_id: str, previous: Subscription | None,
                current: Subscription | None) -> None:
        if self.store is not None:
            try:
                if current is None:
                    self.store.remove(sub_id)
                else:
                    self.store.save(current)
            except BaseException:
                self.registry.restore(sub_id, previous)
                raise
        committed = dict(self._committed)
        if current is None:
            committed.pop(sub_id, None)
        else:
            committed[sub_id] = current
        self._committed = committed
        log.info("subscription " + ("deleted" if current is None else
                                    "created" if previous is None else "updated"),
                 subscription=sub_id,
                 status=None if current is None else current.status.value)
        for listener in self._listeners:
            try:
                listener(previous, current)
            except Exception:  # the change is made and stored: the caller must not think
                # otherwise (and retry it), and the other listeners must still hear of it
                log.exception("subscription listener failed", subscription=sub_id,
                              listener=repr(listener))
