"""The AMQP publisher client: :class:`Publisher` and how it reads the component's outcomes.

:class:`Publisher` stamps publications with a :class:`~seqrepair.core.sequencers.SourceSequencer`
(continuing after the journal's high-water when given a journal), journals them first when it
has one, and sends them batched; deliveries stay unsettled until the component accepts them
(after its own journaling) and are sent again after a reconnect. A rejection becomes a typed
:class:`~seqrepair.amqp.wire.errors.PublishRejectedError`; a release is sent again after a backoff.
Importable from :mod:`seqrepair.amqp.client.subscriber` as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from proton import Delivery, symbol

from seqrepair.amqp.client.contributor import (
    OnContribution,
    read_contribution,
    refusal,
    refuse,
)
from seqrepair.amqp.client.runner import PublisherRunner
from seqrepair.amqp.wire.backoff import Backoff
from seqrepair.amqp.wire.batchsize import fitting
from seqrepair.amqp.wire.errors import OversizedMessageError, PublishRejectedError
from seqrepair.amqp.wire.framing import plain_value
from seqrepair.amqp.wire.reactor import write_now
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.vocabulary import CONTRIBUTIONS_PREFIX
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.core.topics import TopicPattern
from seqrepair.journal.errors import JournalError, PublicationQueuedError
from seqrepair.journal.publisher import Publisher as JournalPublisher
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

log = get_logger("seqrepair.amqp.client")  # the clients' logger, as before the split


class Publisher(PublisherRunner[list[Publication]]):
    """Publishes one source's publications to a component, batched, at least once.

    ``journal``: when given, numbering continues after its high-water and every publication is
    journaled before it is sent (a publication counts as published once the journal holds it).
    Without one, numbering starts after ``start_after`` and the component journals. It takes a
    number at or below what it already has of the source for a resend and skips it (accepted,
    not delivered again): a publisher without a journal that restarts must start after the
    source's high-water: the component rejects a number it holds for another publication
    (``amqp:precondition-failed``), and the publisher stops, its :attr:`error` a
    :class:`~seqrepair.amqp.wire.errors.PublishRejectedError` whose ``expected`` is the next number
    the source may use. Any rejection makes :meth:`flush` return False.
    Publications are sent to ``address`` (a topic or a pattern the topics fall under).

    A batch larger than the component takes (``amqp:link:message-size-exceeded``: more bytes
    than the ``max-message-size`` its link advertises, see :mod:`seqrepair.amqp.wire.sizelimit`) is
    rejected and the sender link detached; a publisher without a journal stops then (its
    :attr:`error` is that rejection: the numbers of the batch will never be in the journal), one
    with a journal reconnects and goes on (the component fans the batch out from the journal).

    A lost connection, or a sender link the component refused or detached (or whose session
    or connection it ended) for a reason a reconnect may cure, is made again after
    ``reconnect_delay``, doubled at each failed attempt up to ``max_reconnect_delay`` (plus up
    to a quarter at random), and from ``reconnect_delay`` again once the component has accepted
    the sender link; the unsettled batches go again, in order. A condition in
    :data:`FATAL_CONDITIONS` (``amqp:not-found``: an address it may not publish to) stops it:
    :attr:`error` names the condition and :meth:`flush` returns False at once (see
    :class:`~seqrepair.amqp.client.runner.PublisherRunner`).

    Publications go at once, unless the application is inside ``publish()`` again, back to
    back (it spends more time in the calls than between them): then what is queued waits for
    that publication, at most :data:`LINGER` from the oldest, and goes as one transfer
    (batching under load, never on a timer, never on an idle path).

    A batch the component releases (its journal is out for now) is sent again after a backoff:
    ``reconnect_delay`` at first, doubled up to ``max_backoff`` while releases go on (no
    jitter), back to the start once a batch is accepted. Nothing newer is sent meanwhile, and
    the released batches go again in the order they were first sent, once the outcome of every
    batch sent after them is in (the component releases those too: see
    :mod:`seqrepair.amqp.component.holdback`).

    ``on_contribution``: this publisher takes its source's contributions (XEP-0040 §5.2, WIRE.md
    "Contributions"): it attaches a link from ``$contributions/<source>`` (its principal must
    own the source) and calls ``on_contribution(contribution)`` (a
    :class:`~seqrepair.amqp.client.contributor.Contribution`, in the container's thread) for
    each. True publishes it in this source's stream, numbered as the rest, its fields
    marked with the contributor (``$contributor``, ``$contribution``); a string (its reason),
    False or None refuses it, and so does a callback that raises. :attr:`contributions`
    counts the ones taken and refused.
    """

    def __init__(
        self,
        url: str,
        source: str,
        *,
        bits: int = 32,
        address: str = "/#",
        journal: Journal | None = None,
        max_batch: int = 256,
        max_unsettled: int = 64,
        reconnect_delay: float = 0.2,
        max_reconnect_delay: float = 5.0,
        idle_timeout: float = 10.0,
        on_sent: Callable[[Sequence[Publication]], None] | None = None,
        max_backoff: float = 5.0,
        start_after: int = 0,
        security: ClientSecurity = NO_CLIENT_SECURITY,
        on_contribution: OnContribution | None = None,
    ) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnect_delay=max_reconnect_delay)
        self.on_contribution = on_contribution
        self.contributions = {"taken": 0, "refused": 0}
        self._contributions: Any = None  # the link from $contributions/<source>
        if on_contribution is not None:  # a contribution is settled when the owner decided
            handlers: Any = self.handlers
            for handler in handlers:
                if hasattr(handler, "auto_accept"):
                    handler.auto_accept = False
        self.url = url
        self.security = security
        self.address = address
        self.sequencer = SourceSequencer(source, bits, start_after)
        self.embedded: JournalPublisher | None = None
        if journal is not None:
            self.embedded = JournalPublisher(
                source, journal, bits=bits, transport=self._pending.append,
                batch_size=max_batch,
            )
        self.bits = bits
        self.max_batch = max_batch
        self.max_unsettled = max_unsettled
        self.idle_timeout = idle_timeout
        self.on_sent = on_sent
        self.max_backoff = max_backoff
        self.accepted = 0
        self.rejected = 0
        """Publications the component rejected (refused for good, not sent again)."""
        self.rejection: PublishRejectedError | None = None
        """The last rejection: the component's condition and reason, the batch's numbers."""
        self.released = 0
        """Publications the component released (each time: a batch released twice counts
        twice); they were sent again."""
        self._released: set[Any] = set()  # tags of released batches, kept in _unsettled
        self._release_backoff = Backoff(
            initial=reconnect_delay, maximum=max(reconnect_delay, max_backoff), jitter=0.0
        )
        # Stamping and journaling, by the application's threads: under its own lock, not
        # ``_lock``, which the sending thread takes for the queue (``_pending``, whose appends
        # and pops are atomic): the sender must not wait out the journal's round trip of the
        # next publication to send the last one.
        self._stamping = threading.Lock()
        self._waiting_since: float | None = None  # when the oldest of _pending was queued
        # the last publishing call: how long it took, when it ended, whether it came back to
        # back after the one before (the sender lingers only for such an application)
        self._last_call = 0.0
        self._last_end = float("-inf")
        self._back_to_back = False
        self._backing_off = False  # a backoff timer is pending: send nothing
        self._finish_when_done = False
        self.log = log.bind(source=source, topic=address)

    # --- public API ---------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        fields: Mapping[str, Any],
        ptype: PublishType | str = PublishType.UPDATE,
        *,
        permtoken: str | None = None,
        timestamp: float | None = None,
    ) -> Publication:
        """Stamp, journal (if configured) and queue one publication; thread-safe (what cannot
        be delivered raises UndeliverableError, :mod:`seqrepair.core.limits`)."""
        stamp = time.time() if timestamp is None else timestamp
        with self._stamping:
            began = self._call_began()
            if self.embedded is not None:
                pub = self.embedded.publish(topic, fields, ptype, permtoken=permtoken,
                                            timestamp=stamp)
                self._journal([pub])
            else:
                pub = self.sequencer.stamp(topic, fields, ptype, permtoken=permtoken,
                                           timestamp=stamp)
                self._pending.append(pub)
            self._call_ended(began)
        self._wake()
        return pub

    def _call_began(self) -> float:
        """A publishing call starts (under ``_stamping``): back to back when less time passed
        since the last one ended than that one took (the application is journal-bound)."""
        now = time.monotonic()
        self._back_to_back = now - self._last_end < self._last_call
        return now

    def _call_ended(self, began: float) -> None:
        """A publishing call queued what it stamped (under ``_stamping``)."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        self._last_call, self._last_end = now - began, now

    def publish_many(self, items: Sequence[tuple[Any, ...]]) -> list[Publication]:
        """Several ``(topic, fields, ptype[, permtoken])`` at once: one journal append per
        batch of ``max_batch``. Returns the stamped publications.

        With a journal, a failure to journal raises :class:`PublicationQueuedError` naming in
        ``stamped`` the publications stamped (and queued) before it: the first ones of
        ``items``; :meth:`flush` journals and sends them once the journal is back. A bad item
        raises its error (InvalidMessageError, ...) once the items before it are published.
        """
        stamped: list[Publication] = []
        with self._stamping:
            began = self._call_began()
            now = time.time()
            for item in items:
                topic, fields, ptype = item[:3]
                token = item[3] if len(item) > 3 else None
                if self.embedded is None:
                    stamped.append(self.sequencer.stamp(topic, fields, ptype, permtoken=token,
                                                        timestamp=now))
                    self._pending.append(stamped[-1])
                    continue
                try:
                    stamped.append(self.embedded.publish(topic, fields, ptype, permtoken=token,
                                                         timestamp=now))
                except PublicationQueuedError as exc:
                    stamped.append(exc.publication)
                    raise self._queued(stamped, exc) from exc
                except JournalError as exc:  # nothing stamped for this item (backlog full)
                    if stamped:
                        raise self._queued(stamped, exc) from exc
                    raise
                except SeqRepairError as exc:  # a bad item: nothing stamped for it
                    if stamped:
                        self._journal(stamped)
                        exc.add_note(f"the {len(stamped)} items before it were published")
                    raise
            if self.embedded is not None:
                self._journal(stamped)
            self._call_ended(began)
        self._wake()
        return stamped

    def _journal(self, stamped: list[Publication]) -> None:
        """Journal what the embedded publisher holds; a failure names what stays queued."""
        assert self.embedded is not None
        try:
            self.embedded.flush()
        except JournalError as exc:
            if stamped:
                raise self._queued(stamped, exc) from exc
            raise

    def _queued(self, stamped: list[Publication], cause: JournalError) -> PublicationQueuedError:
        assert self.embedded is not None
        return PublicationQueuedError(
            f"{len(stamped)} publication(s) through {stamped[-1].source_seq} stamped and "
            f"queued, not confirmed journaled (flush reads the journal's high-water before it "
            f"appends again): {cause.message}",
            publication=stamped[-1], pending=self.embedded.pending,
            source=self.sequencer.source, stamped=stamped,
        )

    def flush(self, timeout: float = 30.0) -> bool:
        """Journal what is stamped but not yet journaled (again and again while the journal is
        out), then wait until the component has accepted everything. False on timeout or error,
        so also while anything stamped is not yet journaled, and once the component has
        rejected anything (:attr:`rejected`, :attr:`rejection`)."""
        deadline = time.monotonic() + timeout
        while self.embedded is not None and self.embedded.pending:
            with self._stamping:
                try:
                    self.embedded.flush()
                except JournalError as exc:
                    self.log.warning("journal out, publications wait", error=exc.message,
                                     pending=self.embedded.pending)
            if not self.embedded.pending:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        self._wake()
        return super().flush(max(0.0, deadline - time.monotonic())) and not self.rejected

    # --- contributions ------------------------------------------------------------------

    def _connect(self) -> None:
        super()._connect()
        if self.on_contribution is not None:
            self._contributions = self._container.create_receiver(
                self._conn, CONTRIBUTIONS_PREFIX + self.sequencer.source)
            self._contributions.flow(16)

    def _main_links(self) -> dict[str, Any]:
        return {"sender": self._sender, "contributions": self._contributions}

    def _lost(self, conn: Any, reason: str) -> None:
        if conn is not None and conn == self._conn:
            self._contributions = None
        super()._lost(conn, reason)

    def on_message(self, event: Any) -> None:
        """A contribution to this publisher's source: the callback decides."""
        delivery, receiver = event.delivery, event.receiver
        if receiver != self._contributions or self.on_contribution is None:
            return
        receiver.flow(1)
        try:
            contribution = read_contribution(event.message)
            if not TopicPattern(self.address).matches(contribution.topic):
                raise SeqRepairError(f"topic {contribution.topic!r} is outside this "
                                     f"publisher's address {self.address}")
            reason = refusal(self.on_contribution(contribution))
            if reason is None:
                self.publish(contribution.topic, contribution.as_fields(), contribution.ptype,
                             permtoken=contribution.permtoken)
        except Exception as exc:  # a bad contribution or callback refuses it, nothing else
            reason = f"the owner could not take it: {getattr(exc, 'message', None) or exc!r}"
            self.log.warning("contribution refused", error=reason)
        if reason is None:
            self.contributions["taken"] += 1
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
        else:
            self.contributions["refused"] += 1
            refuse(delivery, reason)

    # --- sending ------------------------------------------------------------------------

    def _send(self) -> None:
        sender = self._sender
        if sender is None or self._backing_off or self._released:
            return  # nothing may overtake a released batch
        if sender.credit > 0 and len(self._unsettled) < self.max_unsettled:
            self._linger()
        sent = False
        while sender.credit > 0 and len(self._unsettled) < self.max_unsettled:
            with self._lock:
                if not self._pending:
                    break
                n = min(self.max_batch, len(self._pending))
                batch = [self._pending.popleft() for _ in range(n)]
                self._in_hand = n  # neither queued nor unsettled until sent: flush waits
                self._waiting_since = time.monotonic() if self._pending else None
            try:
                batch, message, rest = fitting(batch, self.bits, sender.remote_max_message_size)
                if rest:
                    with self._lock:
                        self._pending.extendleft(reversed(rest))
                delivery = sender.send(message)
                self._unsettled[delivery.tag] = batch
            finally:
                self._in_hand = 0
            sent = True
            if self.on_sent is not None:
                self.on_sent(batch)
        if sent:  # out now, not after the round's other events and a select
            write_now(getattr(sender, "connection", None))

    def _may_send(self) -> bool:
        return not self._backing_off and not self._released and super()._may_send()

    def _linger(self) -> None:
        """While a ``publish()`` that came back to back (less time since the last call ended
        than that call took: the application is bound by the journal's round trips) is
        journaling the next publication and the queue is not a full batch, wait for it (its
        publication joins the batch), at most until the oldest queued has waited
        :data:`LINGER`. An application that publishes now and then (at 1,000/s one
        ``publish()`` takes a fraction of the millisecond between them) is never held.
        Waiting on the application's lock, not looping: the container thread does nothing
        meanwhile, and leaves the interpreter to the application's thread."""
        if not self._pending or len(self._pending) >= self.max_batch:
            return
        if not self._stamping.locked() or not self._back_to_back:
            return  # nobody is publishing, or not back to back: what is queued goes at once
        since = self._waiting_since
        left = LINGER - (time.monotonic() - since) if since is not None else LINGER
        if left > 0 and self._stamping.acquire(timeout=left):
            self._stamping.release()

    def on_accepted(self, event: Any) -> None:
        # counted before it leaves _unsettled: flush() returns once that is empty
        batch = self._unsettled.get(event.delivery.tag)
        if batch is not None:
            self.accepted += len(batch)
            del self._unsettled[event.delivery.tag]
            if not self._released:
                self._release_backoff.reset()  # the component journals again
        self._outcome()

    def on_rejected(self, event: Any) -> None:
        """Refused for good: counted in :attr:`rejected`, named in :attr:`rejection`. A
        condition in :data:`NUMBERING_CONDITIONS` stops the publisher (:attr:`error`), and so
        does a batch too large for the component when there is no journal: its numbers are
        lost, so the component would refuse every later batch as skipping them (with a journal
        they are journaled already, and the component fans them out from there)."""
        batch = self._unsettled.get(event.delivery.tag)
        self.rejection = rejection = _rejection(event.delivery.remote.condition, batch)
        self.rejected += len(batch or ())  # before it leaves _unsettled, as in on_accepted
        self._unsettled.pop(event.delivery.tag, None)
        self.log.error("publications rejected", condition=rejection.condition,
                       description=rejection.message, first=rejection.first,
                       last=rejection.last, expected=rejection.expected)
        if rejection.condition in NUMBERING_CONDITIONS or (
            rejection.condition == OversizedMessageError.condition and self.embedded is None
        ):
            self._fail(rejection)
            return
        self._outcome()

    def on_released(self, event: Any) -> None:
        """Not processed (the component's journal is out): kept, sent again after a backoff."""
        tag = event.delivery.tag
        batch = self._unsettled.get(tag)
        if batch is None:
            return
        self._released.add(tag)
        self.released += len(batch)
        if not self._backing_off:
            self._backing_off = True
            delay = self._release_backoff.next_delay(self._rng)
            assert delay is not None  # no max_attempts: it never gives up
            self.log.warning("publications released; sending them again after a backoff",
                             delay=delay, first=batch[0].source_seq)
            self._container.schedule(delay, self)

    def on_timer_task(self, event: Any) -> None:
        """The backoff after a release is over."""
        self._backing_off = False
        if not self._stopping:
            self._outcome()

    def _outcome(self) -> None:
        """An outcome came (or a backoff ended): once the outcome of every batch sent is in and
        no backoff is pending, the released batches go first, in the order first sent."""
        if self._released and not self._backing_off and len(self._released) == len(
            self._unsettled
        ):
            with self._lock:
                for tag in sorted(self._released, reverse=True, key=_tag_order):
                    self._pending.extendleft(reversed(self._unsettled.pop(tag)))
            self._released.clear()
        self._notify()
        self._send()

    def _requeue_unsettled(self) -> None:
        for tag in sorted(self._unsettled, reverse=True, key=_tag_order):
            self._pending.extendleft(reversed(self._unsettled[tag]))
        self._unsettled.clear()
        self._released.clear()  # among them, in their place


LINGER = 0.005
"""Seconds at most a :class:`Publisher` holds a batch that is not full while the application
is inside ``publish()`` (journaling the next publication) back to back (see
:meth:`Publisher._linger`): an application publishing back to back gets transfers of many
publications, not one each (every transfer costs each process on the way far more than a
publication in it), and the sending thread leaves the application's thread the interpreter
meanwhile. Any other publisher sends at once: the idle path has no delay and no timer."""

NUMBERING_CONDITIONS = frozenset({"amqp:precondition-failed"})
"""Rejections that say this source's numbering does not continue the journal (numbers skipped,
or reused for other publications): every later batch would be refused too, so the
:class:`Publisher` stops; the rejection's ``expected`` is the next number the source may use."""


def _rejection(cond: Any, batch: list[Publication] | None) -> PublishRejectedError:
    """The component's rejection ``cond`` of ``batch`` as a typed error."""
    info = (cond.info if cond is not None else None) or {}
    return PublishRejectedError(
        cond.name if cond is not None else "amqp:internal-error",
        (cond.description if cond is not None else None) or "rejected without a reason",
        first=batch[0].source_seq if batch else None,
        last=batch[-1].source_seq if batch else None,
        expected=_info_value(info.get(symbol("expected"))),
        got=_info_value(info.get(symbol("got"))),
    )


def _info_value(value: Any) -> Any:
    """A typed value of a condition's ``info`` (WIRE.md, Errors) as a plain Python value:
    ``ulong`` an int, ``symbol`` a str, ``binary`` bytes, lists and maps element by element."""
    return plain_value(value)


def _tag_order(tag: Any) -> int:
    try:
        return int(tag)
    except (TypeError, ValueError):
        return 0
