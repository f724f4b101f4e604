"""The component's per-link state without a network: entitlement answers, queueing, credit."""

from __future__ import annotations

from typing import Any

from seqrepair.amqp.links import ALLOWS_CACHE, SubscriberLink
from seqrepair.amqp.runner import BatchedCredit
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer


def _link(entitlement: Entitlement, max_pending: int = 100) -> SubscriberLink:
    return SubscriberLink(
        name="l", address="/w/#", entitlement=entitlement,
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 1000), batch=True,
        max_batch=8, max_pending=max_pending, source_bits=lambda _s: 32,
    )


def _pub(seq: int, topic: str = "/w/a", token: str | None = None) -> Publication:
    return Publication(topic, "s", seq, "update", {"n": seq}, permtoken=token)


def test_link_allows_what_its_entitlement_allows_for_every_topic_and_token() -> None:
    ent = Entitlement(topics=("/w/#",), grant={"gold"}, deny={"bad"})
    link = _link(ent)
    cases = [_pub(1), _pub(2, "/x/a"), _pub(3, token="gold"), _pub(4, token="bad"),
             _pub(5, token="other"), _pub(6, "/x/a", "gold")]
    for _ in range(2):  # asked again: the remembered answer
        assert [link.allows(p) for p in cases] == [ent.allows(p) for p in cases]
    for i in range(ALLOWS_CACHE + 10):  # bounded memory: it starts again, answers unchanged
        assert link.allows(_pub(7, f"/w/t{i}"))
    assert len(link._allowed) <= ALLOWS_CACHE
    assert not link.allows(_pub(8, "/x/a"))


def test_offer_many_queues_in_order_and_pauses_past_max_pending() -> None:
    link = _link(Entitlement(topics=("/#",)), max_pending=5)
    link.offer_many([(_pub(i), None) for i in range(1, 4)], 0.0)
    link.offer(_pub(4), 0.0, b"x")
    assert [(p.source_seq, e) for p, e in link.pending] == [(1, None), (2, None), (3, None),
                                                            (4, b"x")]
    link.offer_many([(_pub(5), None), (_pub(6), None)], 0.0)
    assert link.paused
    assert not link.pending
    assert link.stats["paused"] == 1
    link.offer_many([(_pub(7), None)], 0.0)  # paused: nothing queued until it resumes
    assert not link.pending


class _Receiver:
    is_receiver = True

    def __init__(self) -> None:
        self.credit = 0
        self.flows: list[int] = []

    def flow(self, n: int) -> None:
        self.flows.append(n)
        self.credit += n


class _Event:
    def __init__(self, link: Any) -> None:
        self.link = link


def test_batched_credit_grants_the_window_and_tops_up_at_half() -> None:
    credit = BatchedCredit(10)
    link = _Receiver()
    credit.on_link_local_open(_Event(link))
    assert link.flows == [10]
    for _ in range(4):  # 10 -> 6: above half, no flow frame
        link.credit -= 1
        credit.on_delivery(_Event(link))
    assert link.flows == [10]
    link.credit -= 1  # 5: half used, back to the window in one grant
    credit.on_delivery(_Event(link))
    assert link.flows == [10, 5]
    assert link.credit == 10
    credit.on_link_flow(_Event(link))  # nothing due
    assert link.flows == [10, 5]


def test_batched_credit_leaves_senders_alone() -> None:
    flows: list[int] = []

    class _Sender:
        is_receiver = False

        def flow(self, n: int) -> None:
            flows.append(n)

    BatchedCredit(10).on_link_remote_open(_Event(_Sender()))
    assert flows == []  # a sender is given no credit


class _Sender:
    """A proton sender's credit: each send spends one."""

    def __init__(self, credit: int) -> None:
        self.credit = credit
        self.sent: list[object] = []

    def send(self, message: object) -> None:
        self.sent.append(message)
        self.credit -= 1


def test_a_link_without_batches_numbers_no_more_publications_than_its_credit() -> None:
    link = SubscriberLink(
        name="plain", address="/w/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 1000), batch=False,
        max_batch=256, max_pending=1000, source_bits=lambda _s: 32,
    )
    link.offer_many([(_pub(i), None) for i in range(1, 301)], 0.0)
    sender = _Sender(credit=5)
    link.attach(sender)
    link.pump(0.0)
    assert (len(sender.sent), sender.credit) == (5, 0)
    assert len(link.pending) == 295  # unnumbered: still free to pause or drop
    assert link.sequencer.absolute == 5
