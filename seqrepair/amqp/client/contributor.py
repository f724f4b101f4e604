"""Contributions (XEP-0040 §5.2) from the clients' side (WIRE.md "Contributions").

:class:`Contributor` sends contributions to one source and waits for each answer: the source
number the owner's stream gave it, or the reason it was refused. :class:`Contribution` is
what a source's owner sees of one (``Publisher(on_contribution=...)``), and
:func:`owner_answer` turns the owner's callback's verdict into the delivery's outcome.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from proton import Condition, Delivery, Message, ProtonException
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.errors import AmqpAdapterError, ConnectionFailedError
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.vocabulary import (
    CONTRIBUTE_PREFIX,
    CONTRIBUTION_ACCEPTED,
    CONTRIBUTION_PROPERTY,
    CONTRIBUTOR_PROPERTY,
    LINK_PREFIX,
)
from seqrepair.core.contributions import CONTRIBUTION_FIELD, CONTRIBUTOR_FIELD
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Publication, PublishType


class ContributionLinkError(AmqpAdapterError):
    """The component refused the contributor's link (``condition``: why; no ``contribute``
    grant for the source is ``amqp:unauthorized-access``)."""

    def __init__(self, condition: str, message: str, *, got: Any = None) -> None:
        super().__init__(f"{condition}: {message}", got=got)
        self.condition = condition


@attrs.frozen
class ContributionResult:
    """The answer to one contribution: ``accepted`` with the ``source_seq`` it got in its
    owner's stream, or refused: ``condition`` (``seqrepair:contribution-refused`` when the
    owner refused it, did not answer or is not connected; ``amqp:resource-limit-exceeded``
    over the contributor's rate; ``amqp:decode-error``... for a malformed one) and
    ``reason``."""

    accepted: bool
    source: str
    source_seq: int | None = None
    contribution: str | None = None
    condition: str | None = None
    reason: str = ""


@attrs.frozen
class Contribution:
    """A contribution handed to its source's owner: who sent it (``contributor``, the
    component's word for its authenticated principal), and the publication it proposes."""

    id: str
    contributor: str
    source: str
    topic: str
    ptype: PublishType
    fields: Mapping[str, Any]
    permtoken: str | None = None

    def as_fields(self) -> dict[str, Any]:
        """The fields to publish it with: its own, plus the reserved ones that mark it."""
        return {**self.fields, CONTRIBUTOR_FIELD: self.contributor,
                CONTRIBUTION_FIELD: self.id}


def read_contribution(message: Any) -> Contribution:
    """The :class:`Contribution` a message from ``$contributions/<source>`` carries
    (MalformedMessageError-like SeqRepairError when it is not one)."""
    props = dict(message.properties or {})
    who, cid = props.get(CONTRIBUTOR_PROPERTY), props.get(CONTRIBUTION_PROPERTY)
    if not isinstance(who, str) or not isinstance(cid, str):
        raise SeqRepairError("a contribution names its contributor and its id",
                             expected=[CONTRIBUTOR_PROPERTY, CONTRIBUTION_PROPERTY], got=props)
    [pub] = Decoder().decode(message, assign=lambda _: 1)
    if not isinstance(pub, Publication):
        raise SeqRepairError("a contribution is a PUBLICATION", got=type(pub).__name__)
    return Contribution(cid, who, pub.source, pub.topic, pub.ptype, dict(pub.fields),
                        pub.permtoken)


Verdict = bool | str | None
"""What an owner's ``on_contribution`` returns: True to take the contribution into its
stream; False, None or a reason (a string) to refuse it."""


def refusal(verdict: Verdict) -> str | None:
    """The reason to refuse with (None: take it)."""
    if verdict is True:
        return None
    if isinstance(verdict, str) and verdict:
        return verdict
    return "refused by the owner"


def refuse(delivery: Any, reason: str) -> None:
    """Reject a contribution delivery with the owner's ``reason``."""
    delivery.local.condition = Condition("seqrepair:contribution-refused", reason[:500])
    delivery.update(Delivery.REJECTED)
    delivery.settle()


class Contributor:
    """Sends contributions to ``source`` at the component at ``url``, one at a time.

    ``with Contributor(url, "feed.a", security=...) as c: result = c.contribute(topic,
    fields)``. A refused link (no ``contribute`` grant: ``amqp:unauthorized-access``) raises
    :class:`ContributionLinkError`; a component that cannot be reached
    :class:`~seqrepair.amqp.wire.errors.ConnectionFailedError`. Each :meth:`contribute` waits
    for the owner's answer (the component's ``--contribution-timeout`` bounds how long the
    owner has) and returns a :class:`ContributionResult`.
    """

    def __init__(self, url: str, source: str, *, security: ClientSecurity = NO_CLIENT_SECURITY,
                 timeout: float = 30.0) -> None:
        self.url = url
        self.source = source
        self.timeout = timeout
        name = "contrib-" + uuid.uuid4().hex[:12]
        self._reply_to = LINK_PREFIX + name
        try:
            self._conn = BlockingConnection(security.url(url), timeout=timeout, reconnect=False,
                                            **security.connect_kwargs(url))
        except (ProtonException, OSError) as exc:
            raise ConnectionFailedError(f"cannot reach {url}: {exc}", got=url) from exc
        try:
            self._answers = self._conn.create_receiver(self._reply_to, name=name, credit=16)
            self._sender = self._conn.create_sender(CONTRIBUTE_PREFIX + source)
        except LinkDetached as exc:
            # the link's own condition, read before the connection (and the link) is freed:
            # LinkDetached.condition is its name alone, and the description says why (a
            # loop's names the path it went round)
            cond = exc.link.remote_condition
            self._conn.close()
            raise ContributionLinkError(str(getattr(cond, "name", None) or "refused"),
                                        str(getattr(cond, "description", "") or ""),
                                        got=source) from None
        except ProtonException as exc:
            self._conn.close()
            raise ConnectionFailedError(f"cannot contribute at {url}: {exc}", got=url) from exc
        self._early: dict[Any, Message] = {}

    def contribute(self, topic: str, fields: Mapping[str, Any],
                   ptype: PublishType | str = PublishType.UPDATE, *,
                   permtoken: str | None = None, extra: Mapping[str, Any] | None = None,
                   timeout: float | None = None) -> ContributionResult:
        """Send one contribution and wait for its answer. ``extra``: more application
        properties, as sent (tests use it to send what a hostile peer would)."""
        wait = self.timeout if timeout is None else timeout
        mid = uuid.uuid4().hex
        props: dict[str, Any] = {"message-type": "PUBLICATION", "topic": topic,
                                 "ptype": ptype.value if isinstance(ptype, PublishType)
                                 else str(ptype)}  # the component checks it
        if permtoken is not None:
            props["permtoken"] = permtoken
        props.update(extra or {})
        message = Message(id=mid, reply_to=self._reply_to, properties=props, body=dict(fields))
        link = self._sender.link
        try:
            self._conn.wait(lambda: link.credit > 0, timeout=wait, msg="no credit to contribute")
            delivery: Any = link.send(message)
            self._conn.wait(lambda: delivery.remote_state in _FINAL or delivery.settled,
                            timeout=wait, msg="no answer to the contribution")
        except ProtonException as exc:
            raise ConnectionFailedError(f"contribution to {self.source!r}: {exc}",
                                        got=self.source) from exc
        state = delivery.remote_state
        if state != Delivery.ACCEPTED:
            cond = delivery.remote.condition
            info = {str(k): v for k, v in dict(cond.info or {}).items()} if cond else {}
            cid = info.get("got") if info.get("expected") in _OUTCOMES else None
            delivery.settle()
            return ContributionResult(
                False, self.source, contribution=cid,
                condition=cond.name if cond is not None else "released",
                reason=(cond.description or "") if cond is not None else "not processed")
        delivery.settle()
        answer = self._answer(mid, wait)
        got: dict[Any, Any] = dict(answer.properties or {}) if answer is not None else {}
        seq = got.get("source_seq")
        return ContributionResult(True, self.source,
                                  source_seq=int(seq) if seq is not None else None,
                                  contribution=got.get(CONTRIBUTION_PROPERTY))

    def _answer(self, mid: Any, wait: float) -> Message | None:
        """The ``CONTRIBUTION-ACCEPTED`` answer to message ``mid`` (sent just before the
        delivery was accepted)."""
        if mid in self._early:
            return self._early.pop(mid)
        while True:
            try:
                answer = self._answers.receive(timeout=wait)
            except ProtonException:
                return None
            props: dict[Any, Any] = dict(answer.properties or {})
            if props.get("message-type") != CONTRIBUTION_ACCEPTED:
                continue
            if answer.correlation_id == mid:
                return answer
            if len(self._early) < 64:
                self._early[answer.correlation_id] = answer

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> Contributor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_OUTCOMES = ("refused", "timed-out", "owner-gone")
"""The ``expected`` of a refusal's info when the desk closed it (its ``got``: the id)."""
_FINAL = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)

OnContribution = Callable[[Contribution], Verdict]
"""An owner's callback (``Publisher(on_contribution=...)``)."""
