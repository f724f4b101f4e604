"""Contributions at the component (XEP-0040 §5.2, WIRE.md "Contributions") and the source
names the access policy reserves to their owners.

* A publication under a source name the policy reserves to another principal
  (``own-source``, :meth:`~seqrepair.core.policy.Policy.may_publish_source`) is rejected
  ``amqp:unauthorized-access`` before anything of its message is numbered or journaled
  (:meth:`Contributions.check_publications`, called by ingest for every message). So is a
  publication whose reserved ``$contributor``/``$contribution`` fields name a contribution the
  component did not hand its publisher (:meth:`~seqrepair.core.contributions.Desk.check_claim`).
* A source's owner takes contributions on a receiving link from ``$contributions/<source>``
  (:meth:`Contributions.open_owner`: the principal must own the source; one such link per
  source). A contributor sends publications to ``$contribute/<source>``
  (:meth:`Contributions.open_contributor`: ``contribute`` granted on the source). Each one
  (:meth:`Contributions.on_contribution`) is checked (one unnumbered publication, topic
  granted, fields without reserved keys), charged to its principal's token bucket
  (``--contribution-rate``/``--contribution-burst``: over it, ``amqp:resource-limit-exceeded``,
  counted in ``contributions_throttled``), and handed to the owner, marked with the
  contributor's principal, as an unsettled delivery. The contributor's delivery stays
  unsettled until the owner's answer: accepted (with a ``CONTRIBUTION-ACCEPTED`` answer to its
  ``reply-to`` naming the source number) once the publication that took it in is journaled;
  rejected ``seqrepair:contribution-refused`` when the owner refuses it (its reason), does not
  answer within ``--contribution-timeout``, goes away, or is not connected at all (refused at
  once: nothing is held for an absent owner).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from proton import Condition, Delivery, Endpoint, Link, Message, ulong

from seqrepair.amqp.component.authz import effective_principal, policy_of
from seqrepair.amqp.component.ingest import check_sendable
from seqrepair.amqp.component.responses import MAX_WAITING_ANSWERS, ResponseRoute
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.errors import (
    AmqpAdapterError,
    MalformedMessageError,
    UnauthorizedAccessError,
    UnknownAddressError,
    UnknownMessageTypeError,
    condition_info,
)
from seqrepair.amqp.wire.framing import encode_frame
from seqrepair.amqp.wire.vocabulary import (
    CONTRIBUTE_PREFIX,
    CONTRIBUTION_ACCEPTED,
    CONTRIBUTION_PROPERTY,
    CONTRIBUTION_REFUSED,
    CONTRIBUTIONS_PREFIX,
    CONTRIBUTOR_PROPERTY,
    plain_properties,
)
from seqrepair.core.contributions import (
    CONTRIBUTION_FIELD,
    CONTRIBUTOR_FIELD,
    Closed,
    Desk,
    ForgedContributionError,
    Outcome,
    TooManyPendingError,
)
from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication
from seqrepair.core.policy import Decision, Policy
from seqrepair.core.throttle import Throttle
from seqrepair.journal.format import check_source
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component

log = get_logger("seqrepair.amqp.component")

OWNER_CREDIT = 64
"""Contributions in flight to one owner before the component waits for its credit (the rest
wait in proton's buffer, bounded by ``--max-pending-contributions``)."""
SOURCES_CHECKED = 4096
"""Source names a publishing link remembers as checked (then it starts again)."""


class ContributionRefusedError(AmqpAdapterError):
    """The owner refused the contribution, did not answer, or is not connected."""

    condition = CONTRIBUTION_REFUSED


class ContributionFloodError(AmqpAdapterError):
    """The contributor is over its rate, or the owner over its unanswered contributions."""

    condition = "amqp:resource-limit-exceeded"


class Contributions:
    """The component's contribution desk and owner links (see the module docstring)."""

    def __init__(self, component: Component) -> None:
        config = component.config
        self.component = component
        self.desk = Desk(timeout=config.contribution_timeout,
                         max_pending=config.max_pending_contributions,
                         prefix=uuid.uuid4().hex[:8] + "-")
        self.throttle = Throttle(config.contribution_rate, config.contribution_burst)
        self.owners: dict[str, Any] = {}  # source -> the owner's sender link
        stats = component.stats
        for key in ("contributions", "contributions_published", "contributions_refused",
                    "contributions_throttled", "publications_refused_source"):
            stats.setdefault(key, 0)

    # --- source names ---------------------------------------------------------------------

    def check_publications(self, receiver: Any, pubs: Iterable[Any]) -> None:
        """The publications of one message of publishing link ``receiver``: none may be
        under a source reserved to another principal, and the reserved fields of each must
        name a contribution handed to it (raises for the first that fails)."""
        checked: dict[str, Any] | None = getattr(receiver, "sources_checked", None)
        if checked is None:
            checked = receiver.sources_checked = {}
        policy = policy_of(self.component)
        for pub in pubs:
            if checked.get(pub.source) is not policy:
                self._check_source(receiver, pub.source, policy, checked)
            fields = pub.fields
            if CONTRIBUTOR_FIELD in fields or CONTRIBUTION_FIELD in fields:
                try:
                    self.desk.check_claim(pub)
                except ForgedContributionError as exc:
                    raise UnauthorizedAccessError(exc.message, expected=exc.expected,
                                                  got=pub.source) from None

    def _check_source(self, receiver: Any, source: str, policy: Any,
                      checked: dict[str, Any]) -> None:
        decision = policy.may_publish_source(receiver.principal, source)
        if not decision:
            self.component.stats["publications_refused_source"] += 1
            raise UnauthorizedAccessError(decision.why, expected="own-source", got=source)
        if len(checked) >= SOURCES_CHECKED:
            checked.clear()
        checked[source] = policy

    # --- attaching ------------------------------------------------------------------------

    def open_contributor(self, receiver: Any, address: str) -> None:
        """A contributor's sending link to ``$contribute/<source>``."""
        source = _source_of(address, CONTRIBUTE_PREFIX)
        principal = _principal(self.component, receiver)
        decision = policy_of(self.component).may_contribute(principal, source)
        if not decision:
            raise UnauthorizedAccessError(decision.why, expected="contribute", got=source)
        receiver.kind = "contribute"
        receiver.contribute_to = source
        receiver.principal = principal

    def open_owner(self, sender: Any, address: str) -> None:
        """An owner's receiving link from ``$contributions/<source>``: one per source; the
        same principal's new link takes over (the old one is detached ``amqp:link:stolen``),
        another principal's is refused."""
        source = _source_of(address, CONTRIBUTIONS_PREFIX)
        sender.source.address = address
        principal = _principal(self.component, sender)
        decision = _may_take(policy_of(self.component), principal, source)
        if not decision:
            raise UnauthorizedAccessError(decision.why, expected="own-source", got=source)
        current = self.owners.get(source)
        if current is not None and current.state & Endpoint.LOCAL_ACTIVE:
            if current.owner_principal != principal:
                raise UnauthorizedAccessError(
                    f"the contributions of {source!r} are taken by another principal's link",
                    expected="one owner link per source", got=source)
            self.link_gone(current)
            current.condition = Condition("amqp:link:stolen",
                                          "another link takes this source's contributions")
            current.close()
        sender.snd_settle_mode = Link.SND_UNSETTLED
        sender.kind = "owner"
        sender.owner_of = source
        sender.owner_principal = principal
        self.owners[source] = sender

    # --- a contribution -------------------------------------------------------------------

    def on_contribution(self, receiver: Any, delivery: Delivery, message: Any) -> None:
        """Check a contribution, charge it to its contributor, hand it to the owner; its
        delivery stays unsettled until the owner's answer (or is rejected: raises)."""
        component = self.component
        source, principal = receiver.contribute_to, receiver.principal
        pub = _read(message, source, principal)
        decision = policy_of(component).may_contribute(principal, source, pub.topic)
        if not decision:
            raise UnauthorizedAccessError(decision.why, expected="contribute", got=pub.topic)
        now = component.clock()
        if not self.throttle.take(principal, now):
            component.stats["contributions_throttled"] += 1
            raise ContributionFloodError(
                f"{principal!r} is over its contribution rate "
                f"({component.config.contribution_rate:g}/s, burst "
                f"{component.config.contribution_burst:g}); slow down",
                expected=component.config.contribution_rate,
                got=self.throttle.refused.get(principal, 0))
        check_answer_room(component.routes, receiver.connection, message.reply_to)
        owner = self.owners.get(source)
        if owner is None or not owner.state & Endpoint.LOCAL_ACTIVE:
            component.stats["contributions_refused"] += 1
            raise ContributionRefusedError(f"the owner of {source!r} is not connected; "
                                           f"contribute again later", got=source)
        try:
            pending = self.desk.open(source, principal, pub.topic, now,
                                     handle=(delivery, receiver.connection,
                                             message.reply_to, message.id))
        except TooManyPendingError as exc:
            raise ContributionFloodError(exc.message, expected=exc.expected,
                                         got=exc.got) from None
        out: Any = encode_frame(pub)
        props = {k: v for k, v in dict(out.properties).items()
                 if k not in ("source_seq", "source_bits", "link_seq", "retransmit")}
        props[CONTRIBUTOR_PROPERTY] = principal
        props[CONTRIBUTION_PROPERTY] = pending.id
        out.properties = props
        handed = owner.send(out)
        handed.contribution = pending.id
        component.stats["contributions"] += 1
        log.info("contribution handed to its owner", source=source, contributor=principal,
                 contribution=pending.id, topic=pub.topic)

    def on_owner_outcome(self, delivery: Delivery) -> None:
        """The owner settled a contribution: accepted (it publishes it; the contributor is
        answered when the journal holds that), or refused (the contributor is told why)."""
        cid = getattr(delivery, "contribution", None)
        if cid is None:
            return
        state = delivery.remote_state
        if state == Delivery.ACCEPTED:
            self.desk.take(cid, self.component.clock())
            return
        cond = delivery.remote.condition if state == Delivery.REJECTED else None
        reason = (cond.description if cond is not None and cond.description else
                  "refused by the owner" if state == Delivery.REJECTED else
                  "the owner did not take it")
        closed = self.desk.refuse(cid, reason)
        if closed is not None:
            self._finish(closed)

    def published(self, pubs: list[Publication]) -> None:
        """``pubs`` are journaled: answer the contributors whose contribution they took in."""
        if not self.desk.pending:
            return
        for pub in pubs:
            if CONTRIBUTION_FIELD in pub.fields:
                closed = self.desk.published(pub)
                if closed is not None:
                    self._finish(closed)

    def poll(self, now: float) -> None:
        """The timer: contributions whose owner did not answer in time are refused."""
        deadline = self.desk.next_deadline
        if deadline is not None and deadline <= now:
            for closed in self.desk.expire(now):
                self._finish(closed)

    def link_gone(self, link: Any) -> None:
        """A link ended: an owner link's unanswered contributions are refused."""
        source = getattr(link, "owner_of", None)
        if source is None or self.owners.get(source) is not link:
            return
        del self.owners[source]
        for closed in self.desk.owner_gone(source):
            self._finish(closed)

    def revoked(self) -> None:
        """The policy was reloaded: an owner link whose principal no longer owns its source
        is detached (``amqp:unauthorized-access``) and its unanswered contributions refused."""
        policy = policy_of(self.component)
        for source, link in list(self.owners.items()):
            decision = _may_take(policy, link.owner_principal, source)
            if not decision:
                self.link_gone(link)
                link.condition = Condition(UnauthorizedAccessError.condition, decision.why)
                link.close()

    def connection_gone(self, conn: Any) -> None:
        """A connection ended: its owner links are gone."""
        for link in [link for link in self.owners.values() if link.connection == conn]:
            self.link_gone(link)

    def _finish(self, closed: Closed) -> None:
        """Answer the contributor: accepted (with the number) or rejected with the reason."""
        pending = closed.pending
        delivery, conn, reply_to, message_id = pending.handle
        stats = self.component.stats
        published = closed.outcome is Outcome.PUBLISHED
        stats["contributions_published" if published else "contributions_refused"] += 1
        log.info("contribution answered", source=pending.source, contributor=pending.contributor,
                 contribution=pending.id, outcome=closed.outcome.value,
                 source_seq=closed.source_seq, reason=closed.reason or None)
        if delivery.settled or not delivery.link.state & Endpoint.LOCAL_ACTIVE:
            return  # the contributor went away: nobody to answer
        if published:
            self._answer(conn, reply_to, message_id, pending.id, pending.source,
                         closed.source_seq)
            self.component.accept(delivery)
            return
        delivery.local.condition = Condition(
            CONTRIBUTION_REFUSED, closed.reason[:500],
            condition_info(closed.outcome.value, pending.id))
        delivery.update(Delivery.REJECTED)
        delivery.settle()

    def _answer(self, conn: Any, reply_to: str | None, message_id: Any, cid: str, source: str,
                source_seq: int | None) -> None:
        """``CONTRIBUTION-ACCEPTED`` to the contribution's ``reply-to`` (a receiving link of
        the contributor's connection), when it named one."""
        route = self.component.routes.get((conn.seqrepair_id, reply_to)) if reply_to else None
        if route is None or source_seq is None:
            return
        answer = Message(properties={
            "message-type": CONTRIBUTION_ACCEPTED, "source": source,
            "source_seq": ulong(source_seq), CONTRIBUTION_PROPERTY: cid})
        route.respond(answer, message_id)
        if route.sender is not None:
            self.component._pump_sender(route.sender)


def check_answer_room(routes: Mapping[Any, ResponseRoute], conn: Any,
                      reply_to: str | None) -> None:
    """ContributionFloodError when :data:`MAX_WAITING_ANSWERS` answers wait already on the
    route of ``reply_to`` (its peer gives no credit): its ``CONTRIBUTION-ACCEPTED`` would be
    queued without bound, as a request's answer is not (``ResponseRoute.check_room``). Those
    taken before wait at most ``--max-pending-contributions`` more."""
    route = routes.get((conn.seqrepair_id, reply_to)) if reply_to else None
    if route is not None and len(route.responses) >= MAX_WAITING_ANSWERS:
        raise ContributionFloodError(
            f"{len(route.responses)} answers wait for credit on {reply_to!r}; grant credit "
            "before contributing again", expected=MAX_WAITING_ANSWERS, got=len(route.responses))


def _may_take(policy: Policy, principal: str, source: str) -> Decision:
    """May ``principal`` take the contributions of ``source``: it owns it, and somebody
    does (a source no ``own-source`` names is anyone's to publish under, never anyone's to
    take what others contribute to: the first to attach would read them)."""
    if not policy.reserved(source) and not policy.is_admin(principal):
        return Decision(False, why=f"no principal owns source {source!r} (own-source)")
    return policy.may_publish_source(principal, source)


def _principal(component: Component, link: Any) -> str:
    """Who ``link`` acts as (a forwarding gateway's client: :func:`.authz.effective_principal`)."""
    return effective_principal(component, link.connection,
                               plain_properties(link.remote_properties))


def _source_of(address: str, prefix: str) -> str:
    source = address[len(prefix):]
    try:
        return check_source(source)
    except InvalidMessageError as exc:
        raise UnknownAddressError(f"{address!r} names no source: {exc.message}",
                                  got=address) from None


def _read(message: Any, source: str, principal: str) -> Publication:
    """The one unnumbered publication a contribution message carries, its reserved fields
    checked (a ``$contributor`` naming the sender itself is dropped: the component writes it)."""
    if getattr(message, "malformed", None):
        raise MalformedMessageError(f"a contribution message {message.malformed}",
                                    got="unreadable bytes")
    props = message.properties if isinstance(message.properties, dict) else {}
    kind = props.get("message-type", "PUBLICATION")
    if kind != "PUBLICATION":
        raise UnknownMessageTypeError("a contribution is one PUBLICATION",
                                      expected="PUBLICATION", got=str(kind)[:200])
    if "source_seq" in props:
        raise MalformedMessageError("a contribution carries no source_seq: its owner numbers "
                                    "it", expected="no source_seq", got=props["source_seq"])
    frames = Decoder().decode(message, default_source=source, assign=lambda _: 1)
    if len(frames) != 1 or not isinstance(frames[0], Publication):
        raise MalformedMessageError("a contribution is one PUBLICATION",
                                    expected="PUBLICATION", got=len(frames))
    pub = frames[0]
    if pub.source != source:
        raise MalformedMessageError(f"a contribution to {source!r} names source {pub.source!r}",
                                    expected=source, got=pub.source)
    fields = dict(pub.fields)
    if CONTRIBUTION_FIELD in fields:
        raise MalformedMessageError(f"{CONTRIBUTION_FIELD} is the component's to write",
                                    expected="no reserved field", got=CONTRIBUTION_FIELD)
    claimed = fields.pop(CONTRIBUTOR_FIELD, principal)
    if claimed != principal:
        raise UnauthorizedAccessError(
            f"{CONTRIBUTOR_FIELD} is the sender's authenticated principal, not {claimed!r}",
            expected=principal, got=claimed)
    pub = Publication(pub.topic, source, 1, pub.ptype, fields, permtoken=pub.permtoken,
                      timestamp=pub.timestamp)
    check_sendable(pub)
    return pub
