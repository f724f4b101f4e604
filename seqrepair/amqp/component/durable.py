"""Durable subscriptions in the component: which links have a position, where they resume.

A subscriber link is *durable* when it attaches with ``seqrepair-ack`` true (it will say what
its application has taken, in ``ACK`` messages) and either to a subscription queue
(``/subscriptions/ID``: the durable is the queue, ``sub/ID``; ``seqrepair-durable`` false
declines it) or with ``seqrepair-durable`` true (the durable is its link name,
``link/NAME``). A plain AMQP client, without them, is served as before: no position.

The position (:mod:`seqrepair.journal.positions`) is per source the last number the
application took. When a durable link attaches into a *new* link context (a new process, or
one whose context the component no longer holds), the context starts after that position
(``seqrepair-start-after`` of the attach reply) and at link number 0: the subscriber repairs
by source from the journal, so it gets everything published while it was away, in order,
and at most again what it had not acknowledged. Retention still wins: numbers trimmed before it
came back are answered ``GapError("trimmed")`` by the source replay, an ``Unrecoverable`` at
the subscriber.

``ACK``'s ``taken`` advances the position in memory (never past what the component has fanned
out, never back); :meth:`Durables.flush` writes the advances in one pipeline on the
component's timer and when a durable link detaches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import redis

from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.amqp.wire.security import ANONYMOUS
from seqrepair.amqp.wire.vocabulary import PROP_ACK, PROP_DURABLE
from seqrepair.core.errors import InvalidMessageError
from seqrepair.journal.errors import JournalError
from seqrepair.journal.positions import PositionStore, link_durable, queue_durable
from seqrepair.logs import get_logger

log = get_logger(__name__)

def durable_user(principal: str) -> str | None:
    """Whom a link's durable is kept for: the principal it acts as (proven by SASL or a TLS
    certificate, or forwarded by a gateway allowed to act for it), None for an anonymous one
    (it names nothing a durable could be kept for)."""
    return None if principal == ANONYMOUS else principal


class PositionUnavailableError(AmqpAdapterError):
    """The position of a durable link could not be read or made now: the attach is refused
    with ``amqp:internal-error`` (not fatal: the subscriber attaches again later), never
    served from a position that would lose what it is owed."""


class Durables:
    """The durable links of a component and their positions.

    ``high_waters``: the journal's high-water per source now (a durable never seen starts
    there). ``ceiling``: per source, the last number the component has fanned out (a position
    never goes past it, whatever an ``ACK`` says).
    """

    def __init__(
        self,
        store: PositionStore | None,
        high_waters: Callable[[], Mapping[str, int]],
        ceiling: Callable[[], Mapping[str, int]],
        quiet: Callable[[], bool] = lambda: False,
    ) -> None:
        self.store = store
        self.high_waters = high_waters
        self.ceiling = ceiling
        self.quiet = quiet
        """Whether Redis is left alone for now (the journal's quiet rule, :mod:`.ingest`):
        a call that stalled the event loop is not followed by another at once."""
        self.by_link: dict[str, str] = {}
        """Link name -> its durable, for the links attached durable."""
        self.stats = {"acks_ignored": 0, "acks_refused": 0}

    @classmethod
    def of(cls, client: redis.Redis | None, ingest: Any) -> Durables:
        """The durables of a component journaling through ``ingest`` (an
        :class:`~seqrepair.amqp.component.ingest.Ingest`), positions on ``client`` (None: a journal
        that is not Redis, in tests: no link is durable)."""
        return cls(
            None if client is None else PositionStore(client),
            ingest.journal.high_waters, lambda: ingest.ingested,
            lambda: ingest.quiet_until is not None and ingest.quiet_until > ingest.clock(),
        )

    def durable_for(
        self, props: Mapping[str, Any], link_name: str, queue: str | None, user: str | None = None
    ) -> str | None:
        """The durable a link attaching with ``props`` belongs to (``queue``: the subscription
        id when it attaches to a subscription queue), or None when it is not durable.

        A named link's durable is its user's when the connection authenticated one (``user``,
        see :func:`durable_user`): another user attaching under the same link name gets
        a durable of its own, and can neither read nor move this one."""
        wants = props.get(str(PROP_DURABLE))
        if self.store is None or props.get(str(PROP_ACK)) is not True or wants is False:
            return None
        if queue is not None:
            return queue_durable(queue)
        if props.get(str(PROP_DURABLE)) is True:
            return link_durable(link_name if user is None else f"{user}/{link_name}")
        return None

    def start(self, durable: str) -> dict[str, int] | None:
        """Where a new context of ``durable`` starts: its position; None when there was none
        and it is made now, at the journal's high-waters (where any new link starts). Raises
        :class:`PositionUnavailableError` when Redis does not answer."""
        assert self.store is not None  # durable_for names no durable without a store
        known = self.store.peek(durable)
        if known is not None:
            return known
        try:
            if self.quiet():
                raise JournalError("the journal stalled the event loop; it is left alone a while")
            position, existed = self.store.position(durable, self.high_waters())
        except JournalError as exc:
            raise PositionUnavailableError(
                f"the durable position of {durable!r} cannot be read now; attach again later"
                f" ({exc.message})", got=durable,
            ) from None
        log.info("durable position", durable=durable, position=position, existed=existed)
        return position if existed else None

    def attached(self, link_name: str, durable: str | None) -> None:
        """The link ``link_name`` is attached (durable or not, replacing what it was)."""
        if durable is None:
            self.by_link.pop(link_name, None)
        else:
            self.by_link[link_name] = durable

    def forget_link(self, link_name: str) -> None:
        """The link's context is gone for good (expired, or its subscription changed): its
        durable's position leaves memory once written, when no other link uses it (Redis
        keeps it; the next attach reads it back)."""
        durable = self.by_link.pop(link_name, None)
        if self.store is None or durable is None or durable in self.by_link.values():
            return
        self.flush()
        if not self.store.dirty:
            self.store.forget(durable)

    def forget_queue(self, sub_id: str) -> None:
        """Subscription ``sub_id`` was deleted: its position goes (the store removed it)."""
        if self.store is not None:
            self.store.forget(queue_durable(sub_id))

    def taken(self, link_name: str, taken: Mapping[str, int] | None) -> int:
        """An ``ACK``'s ``taken`` for the link ``link_name`` (whose connection attached it:
        the caller checks): advance its durable's position; return how many sources
        advanced. Ignored for a link that is not durable; a number past what was fanned out
        is cut to it (no position may skip what the subscriber never had)."""
        durable = self.by_link.get(link_name)
        if self.store is None or durable is None or not taken:
            if taken:
                self.stats["acks_ignored"] += 1
            return 0
        ceiling = self.ceiling()
        capped = {
            source: min(number, ceiling.get(source, 0))
            for source, number in taken.items()
            if isinstance(number, int)
        }
        try:
            return self.store.take(durable, capped)
        except InvalidMessageError as exc:
            self.stats["acks_refused"] += 1
            log.warning("ACK taken refused", link=link_name, error=exc.message)
            return 0

    def record(self, link: Any, taken: Mapping[str, int]) -> None:
        """The component's positions hook (an ``ACK`` of ``link`` from its connection)."""
        self.taken(link.name, taken)

    def flush(self) -> None:
        """Write what advanced (the component's timer, a durable link's detach)."""
        if self.store is not None and self.store.dirty and not self.quiet():
            self.store.flush()
