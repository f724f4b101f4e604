"""The relay's upstream subscriber hands what it receives over with the entry bytes it came in
(:mod:`seqrepair.amqp.relay.upstream`): a transfer's in-order run at once, and publications
the stub held back (reordered) with their own entries once they are delivered."""

from __future__ import annotations

from typing import Any

import pytest

from seqrepair.amqp.relay.upstream import NO_ENTRY, UpstreamSubscriber
from seqrepair.amqp.wire.framing import encode_entry, encode_frames
from seqrepair.amqp.wire.rawamqp import RawIncomingHandler, read_message
from seqrepair.core.messages import Publication


class _Delivery:
    settled = True

    def settle(self) -> None:
        pass


class _Event:
    def __init__(self, message: Any) -> None:
        self.message = message
        self.delivery = _Delivery()


def _pub(seq: int) -> Publication:
    return Publication("/load/a", "bench", seq, fields={"n": seq, "text": "x" * seq},
                       link_seq=seq)


LAZY = True
"""Whether transfers are read as the upstream subscriber's handler reads them (the list body
left to its decoder, read in one pass) or as other receivers do."""


def _transfer(seqs: range) -> _Event:
    packed = encode_frames([_pub(seq) for seq in seqs], 32)
    message = read_message(packed.encode(), LAZY)  # as the subscriber reads it off the wire
    assert message is not None
    return _Event(message)


def _entry(seq: int) -> bytes:
    return encode_entry(_pub(seq).with_link(None), lambda _source: 32)


def _upstream() -> tuple[UpstreamSubscriber, list[tuple[list[Publication], list[bytes]]],
                         list[Publication]]:
    """The subscriber, the runs it handed over, the publications it handed over one by one
    (and, in the runs' list, each of those as a run of one, so the list keeps the order)."""
    runs: list[tuple[list[Publication], list[bytes]]] = []
    singles: list[Publication] = []

    def single(pub: Publication) -> None:
        singles.append(pub)
        runs.append(([pub], [sub.entry_of(pub)]))

    sub = UpstreamSubscriber("127.0.0.1:1", "/load/#", on_publication=single,
                             on_run=lambda pubs, entries: runs.append((pubs, entries)))
    return sub, runs, singles


@pytest.fixture(params=[True, False], ids=["lazy", "eager"])
def lazy(request: pytest.FixtureRequest) -> Any:
    global LAZY
    LAZY = request.param
    yield request.param
    LAZY = True


def test_the_upstream_handler_leaves_list_bodies_to_the_decoder() -> None:
    sub, _runs, _singles = _upstream()
    raw = [h for h in sub.handlers if isinstance(h, RawIncomingHandler)]  # type: ignore[union-attr]
    assert raw
    assert all(h.lazy_body for h in raw)


def test_an_in_order_transfer_is_handed_over_at_once_with_the_entries_it_came_in(
        lazy: bool) -> None:
    sub, runs, singles = _upstream()
    sub.on_message(_transfer(range(1, 5)))
    sub.on_message(_transfer(range(5, 9)))
    assert singles == []
    assert [[p.source_seq for p in pubs] for pubs, _ in runs] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert [entry for _, entries in runs for entry in entries] == [_entry(s) for s in range(1, 9)]
    assert sub._kept == {}  # nothing left behind


def test_a_held_back_transfer_keeps_its_entries_until_it_is_delivered(lazy: bool) -> None:
    sub, runs, _singles = _upstream()
    sub.on_message(_transfer(range(1, 3)))
    sub.on_message(_transfer(range(5, 8)))  # early: 3..4 missing, the stub holds these back
    assert [p.source_seq for pubs, _ in runs for p in pubs] == [1, 2]
    sub.on_message(_transfer(range(3, 5)))  # the gap filled: 3..7 delivered
    assert [p.source_seq for pubs, _ in runs for p in pubs] == list(range(1, 8))
    entries = [e for _, es in runs for e in es]
    assert NO_ENTRY not in entries
    assert entries == [_entry(s) for s in range(1, 8)]
    assert sub._kept == {}
