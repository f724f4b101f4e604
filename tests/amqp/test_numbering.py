"""The component numbers a plain publisher's publications; a failed journal append must not
leave a hole in that numbering, and what the journal took is published.

The component runs in memory on :class:`~tests.amqp.test_journalport.FakeJournal` (the
journal's contiguity rule, with Redis failures on demand); messages go in through
``on_message`` as proton delivers them, and a subscriber link without a network shows what
fan-out offered.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from proton import Delivery, Endpoint, Message

from seqrepair.amqp.component.component import Component, ComponentConfig
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.topics import TopicPattern

from .test_journalport import FakeJournal
from .test_links import _link

PUBLISHER = "plain-publisher"  # the container id of a publisher that sends no numbers


class _Delivery:
    """The parts of a proton delivery the component settles."""

    def __init__(self) -> None:
        self.local = SimpleNamespace(condition=None)
        self.outcome: Any = None
        self.settled = False

    def update(self, state: Any) -> None:
        self.outcome = state

    def settle(self) -> None:
        self.settled = True

    @property
    def condition(self) -> str | None:
        return None if self.local.condition is None else self.local.condition.name


class StubEndpoint(SimpleNamespace):
    """A proton link or connection stand-in: hashable by identity, as proton's are (the
    component keeps them in sets)."""

    __hash__ = object.__hash__


class Harness:
    """A component on a fake journal, one plain publishing link and one subscriber."""

    def __init__(self, journal: FakeJournal | None = None) -> None:
        self.journal = journal or FakeJournal()
        self.component = Component(ComponentConfig(security=ANONYMOUS_LISTENER),
                                   self.journal)  # type: ignore[arg-type]
        self.subscriber = _link(Entitlement(topics=("/#",)), max_pending=1000)
        self.component.links["sub"] = self.subscriber
        self.receiver = StubEndpoint(
            kind="publish", name="pub-link", default_topic="/plain/x", is_receiver=True,
            pattern=TopicPattern("/plain/x"), topics_checked=set(), held_back={}, own_sources=set(),
            connection=StubEndpoint(remote_container=PUBLISHER),
            state=Endpoint.LOCAL_ACTIVE, credit=1_000, flow=lambda n: None,
        )

    def send(self, message: Message) -> _Delivery:
        delivery = _Delivery()
        event = SimpleNamespace(receiver=self.receiver, delivery=delivery, message=message)
        self.component.on_message(event)
        assert delivery.settled
        return delivery

    def publish(self, n: int) -> _Delivery:
        return self.send(Message(body={"n": n}))

    def received(self) -> list[tuple[str, int, int]]:
        """What fan-out offered the subscriber: (source, number, n) in order."""
        pending: list[tuple[Publication, Any]] = list(self.subscriber.pending)
        return [(p.source, p.source_seq, p.fields["n"]) for p, _ in pending]

    def journaled(self, source: str = PUBLISHER) -> list[tuple[int, int]]:
        held = self.journal.held.get(source, [])
        return [(seq, self.journal.stored[(source, seq)].fields["n"]) for seq in held]


def batch(*entries: tuple[str, int]) -> Message:
    """One message of unnumbered publications, each naming its source."""
    body = [{"source": source, "fields": {"n": n}} for source, n in entries]
    return Message(body=body, properties={"message-type": "PUBLICATIONS"})


def test_after_the_journal_fails_a_plain_publishers_numbers_continue_what_it_holds() -> None:
    h = Harness()
    assert h.publish(1).outcome == Delivery.ACCEPTED
    h.journal.down.add(PUBLISHER)  # Redis unreachable: the append fails, nothing written
    refused = h.publish(2)  # the append may have reached the journal: a resend may duplicate
    released = h.publish(3)  # the high-water cannot even be read now: nothing written, send again
    h.journal.down.clear()
    later = [h.publish(n) for n in (4, 5)]

    assert (refused.outcome, refused.condition) == (Delivery.REJECTED, "amqp:internal-error")
    assert released.outcome == Delivery.RELEASED
    assert [d.outcome for d in later] == [Delivery.ACCEPTED] * 2
    assert h.journaled() == [(1, 1), (2, 4), (3, 5)]  # contiguous: no hole left by 2 or 3
    assert h.received() == [(PUBLISHER, 1, 1), (PUBLISHER, 2, 4), (PUBLISHER, 3, 5)]
    assert h.component.ingested[PUBLISHER] == 3


def test_what_the_journal_took_of_a_message_reaches_subscribers_though_the_message_is_rejected(
) -> None:
    h = Harness()
    h.journal.refusing.add("feed.b")  # appends go source by source: feed.a's is taken, not b's
    refused = h.send(batch(("feed.a", 1), ("feed.b", 2), ("feed.a", 3)))
    h.journal.refusing.clear()
    accepted = h.send(batch(("feed.b", 4), ("feed.a", 5)))

    assert refused.outcome == Delivery.REJECTED  # not all of it is journaled
    assert accepted.outcome == Delivery.ACCEPTED
    assert h.journaled("feed.a") == [(1, 1), (2, 3), (3, 5)]
    assert h.journaled("feed.b") == [(1, 4)]
    # journaled is published: feed.a's part of the rejected message went out, once, in order
    assert h.received() == [("feed.a", 1, 1), ("feed.a", 2, 3), ("feed.b", 1, 4),
                            ("feed.a", 3, 5)]
    assert h.component.ingested == {"feed.a": 3, "feed.b": 1}


def test_an_append_whose_reply_was_lost_is_published_before_what_follows() -> None:
    h = Harness()
    h.publish(1)
    h.journal.replies_lost.add(PUBLISHER)  # written, but the answer times out
    refused = h.publish(2)
    h.journal.replies_lost.clear()
    accepted = h.publish(3)

    assert refused.outcome == Delivery.REJECTED  # the component cannot know it was taken
    assert accepted.outcome == Delivery.ACCEPTED
    assert h.journaled() == [(1, 1), (2, 2), (3, 3)]  # 2's number is not given out again
    assert h.received() == [(PUBLISHER, 1, 1), (PUBLISHER, 2, 2), (PUBLISHER, 3, 3)]


@pytest.mark.parametrize("failure", ["down", "refusing", "replies_lost"])
def test_a_message_the_journal_did_not_take_is_rejected_as_an_internal_error(
    failure: str,
) -> None:
    h = Harness()
    h.publish(1)
    getattr(h.journal, failure).add(PUBLISHER)
    refused = h.publish(2)
    getattr(h.journal, failure).clear()

    assert (refused.outcome, refused.condition) == (Delivery.REJECTED, "amqp:internal-error")
    assert h.publish(3).outcome == Delivery.ACCEPTED  # and the component serves on
