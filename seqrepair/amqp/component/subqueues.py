"""Subscription queues in the component: ``/subscriptions/<id>`` links and their changes.

A subscriber attaches a receiving link whose source is a subscription's queue. What the link
may see is the subscription's topic and filters within the permission tokens of the
subscriber's principal, narrowed by the subscription's ``permtokens`` when it names some; a
subscription the operator configured (``serve --subscription``) grants its ``permtokens``
itself, whoever attaches.

Changes made through the subscription manager (the REST API's threads) reach the component's
event loop through an :class:`~proton.reactor.EventInjector`, in the order they were made, and
act on the attached links as :func:`~seqrepair.core.subscriptions.link_action` says: a pause
holds them (heartbeats go on), a resume starts them again at link number 0 (each subscriber
repairs the pause by source), a change of what they may see detaches them with
``amqp:link:detach-forced`` (the subscriber re-attaches into a new link context under the new
entitlement), and a deletion closes them with ``amqp:not-found`` (the subscriber stops).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proton import Condition
from proton.reactor import ApplicationEvent, EventInjector

from seqrepair.amqp.component.grants import GrantTable
from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.core.permissions import Entitlement
from seqrepair.core.subscriptions import LinkAction, Subscription, link_action
from seqrepair.core.topics import TopicPattern
from seqrepair.rest.manager import SubscriptionManager

CHANGE_EVENT = "seqrepair_subscription"
"""The application event that carries ``(previous, current)`` into the event loop."""

ENDINGS = {
    LinkAction.REATTACH: ("amqp:link:detach-forced", "subscription changed: attach again"),
    LinkAction.CLOSE: ("amqp:not-found", "subscription deleted"),
}
"""The condition a link is detached with, per action that ends it."""


def entitlement_for(sub: Subscription, grants: GrantTable, principal: str,
                    exclude: Sequence[TopicPattern] = ()) -> Entitlement:
    r"""What a link attached to ``sub``'s queue by ``principal`` may see (never the topics
    the access policy ``exclude``\ s for it)."""
    if sub.configured:
        return Entitlement(topics=(sub.topic,), grant=sub.permtokens or frozenset(),
                           filters=sub.filters, exclude=exclude)
    return grants.entitlement(principal, (sub.topic,), sub.permtokens, sub.filters, exclude)


class SubscriptionChanges:
    """Brings a manager's changes into a container's event loop as ``CHANGE_EVENT`` events
    (the handler's ``on_seqrepair_subscription``)."""

    def __init__(self, manager: SubscriptionManager) -> None:
        self.manager = manager
        self._injector: EventInjector | None = None

    def start(self, container: Any) -> None:
        """Listen to the manager; inject its changes into ``container``."""
        self._injector = EventInjector()
        container.selectable(self._injector)
        self.manager.listen(self._heard)

    def stop(self) -> None:
        """Stop listening (the container can then end)."""
        self.manager.unlisten(self._heard)
        if self._injector is not None:
            self._injector.close()
            self._injector = None

    def inject(self, name: str, subject: Any = None) -> None:
        """Bring application event ``name`` into the event loop (from any thread)."""
        injector = self._injector
        if injector is not None:
            injector.trigger(ApplicationEvent(name, subject=subject))

    def _heard(self, previous: Subscription | None, current: Subscription | None) -> None:
        injector = self._injector
        if injector is not None:
            injector.trigger(ApplicationEvent(CHANGE_EVENT, subject=(previous, current)))


def apply_change(
    links: dict[str, SubscriberLink],
    previous: Subscription | None,
    current: Subscription | None,
    now: float,
) -> list[SubscriberLink]:
    """Act on the links attached to the changed subscription's queue; return the links that
    must end (their senders are closed here; the caller forgets their contexts)."""
    changed = current if current is not None else previous
    if changed is None:
        return []
    action = link_action(previous, current)
    ended = []
    for link in [link for link in links.values() if link.address == changed.queue]:
        if action is LinkAction.PAUSE:
            link.hold(now, "subscription paused")
        elif action is LinkAction.RESUME:
            link.release(now)
        elif action in ENDINGS:
            condition, description = ENDINGS[action]
            sender = link.sender
            link.detach(now)
            if sender is not None:
                sender.subscriber = None  # its closing is not a subscriber going away
                sender.condition = Condition(condition, description)
                sender.close()
            link.log.info("subscription link ended", reason=description)
            ended.append(link)
    return ended
