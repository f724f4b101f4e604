"""Publishing links and fan-out: from a publisher's delivery to the subscriber links.

A publisher attaches a receiving link whose target is a topic, a pattern it may publish
under, or the anonymous target (each message's ``to`` names its topic); the principal's
grant is checked at attach (:func:`open_publisher`, :func:`.authz.check_publish_link`). Each
delivery is journaled before anything goes out (:mod:`.ingest`) and then accepted, or
released where the journal could not take it for now and a resend is safe (:mod:`.holdback`).
What ingest journaled is offered to every subscriber link that allows it, each publication
encoded once for all batch links (:func:`fan_out`). A delivery past ``max_message_size`` is
refused as its bytes arrive and its link detached (:func:`oversized`, :mod:`.sizelimit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from proton import Delivery, Message

from seqrepair.amqp.component.authz import (
    check_publish_link,
    effective_principal,
    learn_sources,
)
from seqrepair.amqp.component.ingest import Released
from seqrepair.amqp.wire.errors import UnknownAddressError
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.amqp.wire.rawamqp import Unsupported
from seqrepair.amqp.wire.vocabulary import SUBSCRIPTION_PREFIX, plain_properties
from seqrepair.core.messages import Publication
from seqrepair.core.topics import TopicPattern
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component

log = get_logger("seqrepair.amqp.component")


def open_publisher(component: Component, receiver: Any, address: str | None) -> None:
    """Attach a publishing link to ``address`` (None: the anonymous target), if the
    connection's principal may publish there."""
    # the topics this link has already seen valid and inside its address (bounded)
    receiver.topics_checked = set()
    receiver.held_back = {}  # per source, what it must send again first (holdback)
    receiver.own_sources = set()  # the sources it sent numbered publications of
    principal = effective_principal(component, receiver.connection,
                                    plain_properties(receiver.remote_properties))
    receiver.check_frames = component.contributions.check_publications  # source names
    receiver.lazy_body = True  # its list bodies are read by the ingest (read_publications)
    if address is None:
        receiver.kind = "publish"
        receiver.pattern = TopicPattern("/#")
        receiver.default_topic = None
        check_publish_link(component, receiver, principal)
        return
    if address.startswith("$") or address.startswith(SUBSCRIPTION_PREFIX):
        raise UnknownAddressError(f"cannot publish to {address!r}", got=address)
    receiver.kind = "publish"
    receiver.pattern = TopicPattern(address)
    receiver.default_topic = address if receiver.pattern.is_literal else None
    check_publish_link(component, receiver, principal)


def on_publish(component: Component, receiver: Any, delivery: Delivery, message: Message) -> None:
    """A message on a publishing link: journaled and fanned out, then accepted; or released."""
    released = component.ingest.publish(receiver, message)
    if getattr(receiver, "queued", None) == 0:  # none of its transfers left in this read
        component.pump_offered()
    if released is None:
        component.accept(delivery)
    else:
        release(component, receiver, delivery, released)


def release(component: Component, receiver: Any, delivery: Delivery, released: Released) -> None:
    """RELEASED: not processed, send again."""
    component.stats["released"] += 1
    log.warning("message released: publish again", link=receiver.name, error=released.reason)
    component.release(delivery, delivered=False)


def oversized(component: Component, receiver: Any, size: int, limit: int) -> None:
    """A delivery past ``max_message_size`` was rejected and its link detached
    (:mod:`.sizelimit`); the connection's other links go on."""
    component.stats["rejected"] += 1
    component.stats["oversized"] += 1
    conn = receiver.connection
    log.warning("message too large: rejected, link detached", link=receiver.name,
                kind=getattr(receiver, "kind", None), received=size, limit=limit,
                connection=getattr(conn, "seqrepair_id", None),
                container=conn.remote_container)


def fan_out(
    component: Component,
    pubs: Sequence[Publication],
    entries: dict[int, bytes | None] | list[bytes | None] | None = None,
) -> None:
    """Offer ``pubs`` (journaled) to every subscriber link that allows them, and send.
    ``entries``: their encoded entries by index, those known (a list: every one of them)."""
    now = component.clock()
    touched = []
    learn_sources(component, pubs)
    listed = entries if type(entries) is list else None
    known: dict[int, bytes | None] = entries if type(entries) is dict else {}
    keys: list[tuple[str, str | None]] | None = None
    keyed: dict[tuple[str, str | None], Publication] = {}
    for link in component.links.values():
        allows = link.allows
        if link.batch:
            verdicts = None
            if listed is not None:  # every entry at hand: a verdict per key, not per publication
                if keys is None:
                    keys = list(zip(map(_TOPIC, pubs), map(_PERMTOKEN, pubs), strict=True))
                    keyed = dict(zip(keys, pubs, strict=True))
                verdicts = link.allows_keyed(keyed)
            if verdicts is not None and listed is not None and keys is not None:
                if all(verdicts.values()):
                    offers = list(zip(pubs, listed, strict=True))
                else:
                    offers = [(pub, entry) for pub, entry, key in zip(pubs, listed, keys,
                                                                      strict=True)
                              if verdicts[key]]
            else:
                offers = []
                for i, pub in enumerate(pubs):
                    if allows(pub):
                        if listed is not None:
                            entry = listed[i]
                        else:
                            entry = known.get(i, _MISSING)
                            if entry is _MISSING:
                                entry = known[i] = _entry(component, pub)
                        offers.append((pub, entry))
        else:
            offers = [(pub, None) for pub in pubs if allows(pub)]
        if offers:
            link.offer_many(offers, now)
            touched.append(link)
    for link in touched:
        component.pump_soon(link)
    recent = component.recent
    if recent.max_bytes:  # kept encoded for source replays (journal/recent.py)
        if listed is not None:
            kept = listed
        else:
            kept = []
            for i, pub in enumerate(pubs):
                entry = known.get(i, _MISSING)
                if entry is _MISSING:
                    entry = known[i] = _entry(component, pub)
                kept.append(entry)
        recent.add_many(pubs, kept)
    component.contributions.published(list(pubs))  # contributors whose publication this is


_TOPIC = attrgetter("topic")
_PERMTOKEN = attrgetter("permtoken")
_MISSING: Any = object()


def _entry(component: Component, pub: Publication) -> bytes | None:
    try:
        return encode_entry(pub, component.outgoing_bits)
    except Unsupported:
        return None
