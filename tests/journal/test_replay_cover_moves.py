"""A replay stops a source where the link itself starts carrying it, also when the link
numbers that publication only while the replay is under way (the limit is read again once
the link numbered more: ``LinkCover.moved``), on the full path and on the fast path."""

from __future__ import annotations

import pytest

from seqrepair.amqp.component.replaywire import JournaledEntries
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.messages import ReplayComplete, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer, SourceSequencer
from seqrepair.journal import GapFillService, Journal, Replay

pytestmark = pytest.mark.redis


def _bits(_source: str) -> int:
    return 16


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("moves_at", [0, 3, 7])
def test_the_replay_stops_where_the_link_starts_carrying_it_meanwhile(
    journal: Journal, fast: bool, moves_at: int
) -> None:
    seq = SourceSequencer(source="feed.a", bits=16, start_after=0)
    pubs = [seq.stamp("/w/x", {"n": i}) for i in range(20)]
    journal.append(pubs, 16)
    service = GapFillService(journal, link_bits=8)
    service.attach("L1", Entitlement.everything(), start_after={})
    link = LinkSequencer(bits=8)
    other = SourceSequencer(source="feed.z", bits=16, start_after=0)
    service.record("L1", link.stamp(other.stamp("/w/y", {}), 0.0))  # link 1: not feed.a
    request = SourceGapRequest({"feed.a": 0}, link_through=1)
    answer = service.answer_source_gap(
        "L1", request, now=0.0, encoder=JournaledEntries(_bits) if fast else None)
    assert isinstance(answer, Replay)
    out: list[object] = []
    steps = answer.steps()
    for frame in steps:
        if frame is None:
            continue
        out.append(frame)
        if len(out) == moves_at + 1:
            # the link fans out feed.a 12 now: the replay must stop after 11
            service.record("L1", link.stamp(pubs[11], 0.0))
        if isinstance(frame, ReplayComplete):
            break
    sent = [f if type(f) is bytes else encode_entry(f, _bits)  # type: ignore[arg-type]
            for f in out[:-1]]
    want = [encode_entry(p.with_link(None, retransmit=True), _bits) for p in pubs[:11]]
    assert sent == want
    last = out[-1]
    assert isinstance(last, ReplayComplete)
    assert last.through == {"feed.a": 11}
