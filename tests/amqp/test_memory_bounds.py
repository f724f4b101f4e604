"""Byte accounting of subscriber links (memory.py): unsent transfers, contexts, shares, pauses.

The senders here are stand-ins for proton's: credit, a connection, ``queued`` (deliveries not
yet written) and ``send`` returning a delivery with its ``pending`` bytes.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from seqrepair.amqp.component.config import ComponentConfig
from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.component.memory import TRANSFER_OVERHEAD, MemoryGuard, Unsent
from seqrepair.core.context import LinkContext, frame_size
from seqrepair.core.messages import GapError, GapRequest, Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.core.window import LinkWindow

pytestmark = pytest.mark.amqp


class _Sender:
    """Credit, a connection, and the deliveries proton has not written (``queued``)."""

    def __init__(self, connection: int, credit: int = 1_000_000, size: int = 1000) -> None:
        self.credit = credit
        self.connection = SimpleNamespace(seqrepair_id=connection)
        self.size = size
        self.queued = 0
        self.sent: list[Any] = []

    def send(self, message: object) -> SimpleNamespace:
        self.sent.append(message)
        self.credit -= 1
        self.queued += 1
        return SimpleNamespace(pending=self.size)


def _pub(seq: int) -> Publication:
    return Publication("/w/a", "s", seq, "update", {"pad": "x" * 100})


ONE = frame_size(_pub(1).with_link(1))


def _link(name: str, connection: int = 1, *, window: bool = False, batch: bool = False,
          max_bytes: int | None = None, size: int = 1000) -> SubscriberLink:
    link = SubscriberLink(
        name=name, address="/w/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(16, 1.0),
        context=LinkContext(16, 65_536, max_bytes=max_bytes), batch=batch,
        max_batch=256, max_pending=100_000, source_bits=lambda _s: 64,
        window=LinkWindow(16) if window else None,
    )
    link.attach(_Sender(connection, size=size))
    return link


def _feed(link: SubscriberLink, first: int, count: int) -> None:
    link.offer_many([(_pub(i), None) for i in range(first, first + count)], 0.0)
    link.pump(0.0)


def test_unsent_counts_what_proton_still_queues_newest_last() -> None:
    unsent = Unsent()
    for size in (10, 20, 30):
        unsent.sent(SimpleNamespace(pending=size))
    assert unsent.bytes == 60 + 3 * TRANSFER_OVERHEAD
    assert unsent.update(queued=2) == 50 + 2 * TRANSFER_OVERHEAD  # the oldest was written
    assert unsent.update(queued=0) == 0


def test_a_windowed_link_stamps_nothing_past_what_its_context_can_keep_unacknowledged() -> None:
    link = _link("w", window=True, batch=True, max_bytes=20 * ONE)
    assert link.window is not None
    _feed(link, 1, 1000)
    stamped = link.stats["sent"]
    assert stamped == 256  # one transfer went before the bytes were full, then no more
    assert link.stats["context_full"] >= 1
    # every number the subscriber has not acknowledged is still held, however many bytes
    held = link.context.answer(GapRequest(1, stamped))
    assert not isinstance(held, GapError)
    assert len(held) == stamped
    link.probe_tail()  # a window its context's bytes hold full gets its tail probed too
    link.probe_tail()
    assert link.stats["tail_probes"] == 1
    link.route.responses.clear()
    assert link.window.ack(250)  # it took 1..250
    link.pump(0.1)
    assert link.stats["sent"] == 512  # room again: the next transfer
    held = link.context.answer(GapRequest(251, 512))
    assert not isinstance(held, GapError)
    assert len(held) == 262
    lost = link.context.answer(GapRequest(250, 250))  # acknowledged: the bytes let it go
    assert isinstance(lost, GapError)
    assert lost.reason == "context-lost"
    assert link.context.newest_bytes(link.window.outstanding) == link.context.bytes


def test_a_link_over_its_unsent_bytes_is_paused_then_detached_after_the_grace() -> None:
    config = ComponentConfig(link_unsent_bytes=50_000, memory_grace=5.0)
    stats: dict[str, int] = {}
    guard = MemoryGuard(config, stats)
    dead, honest = _link("dead", 1), _link("honest", 2)
    links = {"dead": dead, "honest": honest}
    _feed(dead, 1, 100)  # 100 transfers of 1000 bytes, none taken
    _feed(honest, 1, 100)
    honest_sender = honest.sender
    assert honest_sender is not None
    honest_sender.queued = 0  # its peer took them
    assert guard.check(links, {}, 0.0) == []
    assert dead.paused
    assert dead.memory_paused
    assert not honest.paused
    assert stats["paused_for_bytes"] == 1
    assert stats["unsent_bytes"] == 100 * (1000 + TRANSFER_OVERHEAD)
    states = [m.body for m in dead.route.responses if isinstance(getattr(m, "body", None), dict)]
    assert [(b["subscription_status"], "not yet taken" in b["reason"]) for b in states] == [
        ("PAUSED", True)
    ]
    dead.pump(1.0)  # much credit left, but it resumes only once its peer took everything
    assert dead.paused
    assert guard.check(links, {}, 4.9) == []
    assert guard.check(links, {}, 5.0) == [dead]
    assert stats["detached_for_bytes"] == 1
    dead_sender = dead.sender
    assert dead_sender is not None
    dead_sender.queued = 0  # the peer read at last (before it was detached)
    dead.pump(6.0)
    assert not dead.paused
    assert not dead.memory_paused
    bodies = [m.body for m in dead_sender.sent if isinstance(getattr(m, "body", None), dict)]
    assert [b["subscription_status"] for b in bodies] == ["PAUSED", "ACTIVE"]


def test_a_link_that_drains_in_time_is_not_detached() -> None:
    guard = MemoryGuard(ComponentConfig(link_unsent_bytes=50_000, memory_grace=5.0), {})
    slow = _link("slow")
    _feed(slow, 1, 100)
    guard.check({"slow": slow}, {}, 0.0)
    assert slow.paused
    assert slow.sender is not None
    slow.sender.queued = 10  # its peer read most of it
    assert guard.check({"slow": slow}, {}, 3.0) == []
    assert guard.check({"slow": slow}, {}, 100.0) == []  # under its bound: never detached
    assert slow.paused  # until its peer has taken everything
    slow.pump(101.0)  # SUBSCRIPTION PAUSED goes out
    assert slow.paused
    slow.sender.queued = 0  # its peer took everything
    slow.pump(102.0)
    assert not slow.paused


@pytest.mark.parametrize("scope", ["connection", "principal", "component"])
def test_links_each_under_their_bound_are_paused_when_their_scope_is_over(scope: str) -> None:
    # three links of 40 transfers (~45 KB unsent each) against a scope bound of 200 KB: the
    # scope's half (100 KB) is passed, its links with unsent bytes are paused; another is not
    bound = 200_000
    settings = {"link_unsent_bytes": 1 << 20, "connection_bytes": 1 << 30,
                "principal_bytes": 1 << 30, "component_bytes": 1 << 30}
    settings[f"{scope}_bytes"] = bound
    guard = MemoryGuard(ComponentConfig(**settings), {})
    same = scope == "connection"
    links = {name: _link(name, 1 if same else i) for i, name in enumerate("abc")}
    principals = {name: "p" if scope == "principal" else name for name in links}
    other = _link("other", 9)
    for link in links.values():
        _feed(link, 1, 40)
    if scope != "component":
        links["other"] = other
        principals["other"] = "q"
    guard.check(links, principals, 0.0)
    assert [links[n].paused for n in "abc"] == [True, True, True]
    assert not other.paused


def test_contexts_share_their_scopes_bytes_and_shrink_as_links_join() -> None:
    config = ComponentConfig(link_context_bytes=1 << 20, connection_bytes=400 * ONE,
                             principal_bytes=1 << 30, component_bytes=1 << 30)
    guard = MemoryGuard(config, {})
    first = _link("first")
    _feed(first, 1, 500)
    first_sender = first.sender
    assert first_sender is not None
    first_sender.queued = 0
    guard.check({"first": first}, {}, 0.0)
    assert first.context.max_bytes == 200 * ONE  # half the connection's bound, for contexts
    assert first.context.bytes == 200 * ONE
    links = {"first": first, **{f"n{i}": _link(f"n{i}") for i in range(3)}}
    stats: dict[str, int] = {}
    MemoryGuard(config, stats).check(links, {}, 1.0)
    assert first.context.bytes == 50 * ONE  # four links on the connection now
    assert stats["context_bytes"] == 50 * ONE
    assert stats["link_states"] == 4


def test_a_detached_link_holds_no_unsent_bytes_and_its_context_counts_until_it_expires() -> None:
    stats: dict[str, int] = {}
    guard = MemoryGuard(ComponentConfig(), stats)
    link = _link("gone")
    _feed(link, 1, 10)
    link.detach(1.0)
    guard.check({"gone": link}, {}, 1.0)
    assert stats["unsent_bytes"] == 0
    assert stats["context_bytes"] == 10 * ONE
    guard.check({}, {}, 2.0)  # the component dropped it (context retention)
    assert stats["memory_bytes"] == 0
    assert stats["link_states"] == 0
    assert stats["memory_peak"] == 10 * ONE
