"""SourceGapDetector: per-source ordering and repair of a stream without link numbers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidConfigError, InvalidMessageError, SeqRepairError
from seqrepair.core.events import (
    BufferOverflow,
    Delivered,
    Event,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.messages import (
    GapError,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sourcegaps import SourceGapDetector


def pub(source: str, seq: int, topic: str = "/t/a", *, retransmit: bool = False) -> Publication:
    return Publication(topic, source, seq, PublishType.UPDATE, {"n": seq, "none": None},
                       retransmit=retransmit)


def delivered(events: Iterable[Event]) -> list[tuple[str, int]]:
    return [(e.publication.source, e.publication.source_seq) for e in events
            if isinstance(e, Delivered)]


def requests(events: Iterable[Event]) -> list[SourceGapRequest]:
    return [e.request for e in events if isinstance(e, RequestSourceGap)]


class Journal:
    """A journal in memory: what the repair authority answers (like GapFillService)."""

    def __init__(self, entitlement: Entitlement | None = None,
                 start_after: dict[str, int] | None = None, limit: int | None = None) -> None:
        self.held: dict[str, list[Publication]] = {}
        self.entitlement = entitlement
        self.start_after = dict(start_after or {})
        self.limit = limit  # the most numbers one answer reads, as GapFillService's max_range

    def append(self, p: Publication) -> None:
        self.held.setdefault(p.source, []).append(p)

    def answer(self, request: SourceGapRequest) -> Iterator[Publication | ReplayComplete]:
        through = {}
        room = self.limit
        more = False
        for source, pubs in sorted(self.held.items()):
            after = request.after.get(source, self.start_after.get(source, 0))
            last = len(pubs) if room is None else min(len(pubs), after + room)
            if last < len(pubs):
                more = True
            if last <= after and more:
                continue  # not reached: nothing is claimed for it
            through[source] = last
            for p in pubs[after:last]:
                if self.entitlement is None or self.entitlement.allows(p):
                    yield Publication(p.topic, p.source, p.source_seq, p.ptype, p.fields,
                                      retransmit=True)
            if room is not None:
                room -= max(0, last - after)
        yield ReplayComplete(through=through, request=request, more=more)


def perform(det: SourceGapDetector, journal: Journal, events: list[Event], now: float,
            out: list[tuple[str, int]]) -> None:
    """Deliveries go to ``out``; requests are answered by ``journal`` at once."""
    out.extend(delivered(events))
    for request in requests(events):
        for frame in journal.answer(request):
            perform(det, journal, det.receive(frame, now), now, out)


# ------------------------------------------------------------------------------ examples


def test_in_order_stream_is_delivered_at_once_without_requests() -> None:
    det = SourceGapDetector()
    events = [e for seq in (1, 2, 3) for e in det.receive(pub("a", seq), 0.0)]
    assert delivered(events) == [("a", 1), ("a", 2), ("a", 3)]
    assert det.poll(0.5) == []
    assert det.stats.delivered == 3
    assert det.stats.requests_sent == 0


def test_gap_is_requested_after_nak_delay_naming_every_known_source() -> None:
    det = SourceGapDetector(start_after={"b": 7}, nak_delay=0.1)
    det.receive(pub("a", 1), 0.0)
    assert delivered(det.receive(pub("a", 3), 0.0)) == []
    assert det.buffered == 1
    assert det.poll(0.05) == []
    assert det.next_deadline == pytest.approx(0.1)
    [request] = requests(det.poll(0.1))
    assert dict(request.after) == {"a": 1, "b": 7}
    assert det.repairing
    assert det.stats.gaps_detected == 1


def test_replay_fills_the_gap_and_drains_the_buffer_in_order_exactly_once() -> None:
    det = SourceGapDetector(nak_delay=0.0)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 4), 0.0)
    [request] = requests(det.poll(0.0))
    events = det.receive(pub("a", 2, retransmit=True), 0.0)
    events += det.receive(pub("a", 3, retransmit=True), 0.0)
    events += det.receive(pub("a", 4, retransmit=True), 0.0)  # the replay runs past the gap
    events += det.receive(ReplayComplete(through={"a": 4}, request=request), 0.0)
    assert delivered(events) == [("a", 2), ("a", 3), ("a", 4)]
    assert det.stats.repaired == 2
    assert det.stats.duplicates == 1
    assert not det.repairing
    assert det.buffered == 0


def test_replay_complete_moves_past_numbers_the_subscriber_does_not_get() -> None:
    # a filtered queue: 2 and 3 were never for us; the replay carries nothing for them
    det = SourceGapDetector(nak_delay=0.0)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 4), 0.0)
    det.receive(pub("a", 6), 0.0)
    [request] = requests(det.poll(0.0))
    events = det.receive(ReplayComplete(through={"a": 6}, request=request), 0.0)
    assert delivered(events) == [("a", 4), ("a", 6)]
    assert det.stats.covered == 3
    assert det.last_delivered == {"a": 6}


def test_duplicates_and_numbers_at_or_below_start_after_are_dropped() -> None:
    det = SourceGapDetector(start_after={"a": 5})
    assert delivered(det.receive(pub("a", 5), 0.0)) == []
    assert delivered(det.receive(pub("a", 6), 0.0)) == [("a", 6)]
    assert delivered(det.receive(pub("a", 6), 0.0)) == []
    det.receive(pub("a", 9), 0.0)
    assert delivered(det.receive(pub("a", 9), 0.0)) == []  # already buffered
    assert det.stats.duplicates == 3


def test_quiet_source_is_probed_so_a_lost_tail_is_found() -> None:
    det = SourceGapDetector(probe_interval=1.0)
    det.receive(pub("a", 1), 0.0)
    assert det.next_deadline == pytest.approx(1.0)
    assert det.poll(0.9) == []
    [request] = requests(det.poll(1.0))
    assert dict(request.after) == {"a": 1}
    events = det.receive(pub("a", 2, retransmit=True), 1.0)
    events += det.receive(ReplayComplete(through={"a": 2}, request=request), 1.0)
    assert delivered(events) == [("a", 2)]
    assert det.stats.probes_sent == 1
    assert det.next_deadline == pytest.approx(2.0)


def test_no_probe_when_disabled() -> None:
    det = SourceGapDetector(probe_interval=None)
    det.receive(pub("a", 1), 0.0)
    assert det.next_deadline is None
    assert det.poll(100.0) == []


def test_unanswered_request_is_retried_with_backoff_then_given_up() -> None:
    det = SourceGapDetector(nak_delay=0.0, retry_interval=1.0, backoff=2.0, max_retries=2)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 3), 0.0)
    assert len(requests(det.poll(0.0))) == 1
    assert det.next_deadline == pytest.approx(1.0)
    assert len(requests(det.poll(1.0))) == 1
    assert det.next_deadline == pytest.approx(3.0)
    events = det.poll(3.0)
    assert Unrecoverable(source="a", after=1, reason="give-up") in events
    assert delivered(events) == [("a", 3)]
    assert det.stats.unrecoverable == 1
    assert not det.repairing


def test_a_given_up_repair_also_reports_the_sources_it_never_heard_of() -> None:
    """The journal answers a request with the sources it does not name too (from the
    subscriber's start): when the repair is given up, what was lost of a source the detector
    never saw a publication of is reported as well, as ``source=None``."""
    journal = Journal()
    for seq in (1, 2, 3):
        journal.append(pub("a", seq))
    journal.append(pub("b", 1))  # every publication of "b" is lost on the way
    det = SourceGapDetector(nak_delay=0.0, retry_interval=1.0, max_retries=1)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 3), 0.0)
    [request] = requests(det.poll(0.0))
    assert "b" not in request.after
    assert any(isinstance(f, Publication) and f.source == "b" for f in journal.answer(request))
    events = det.poll(1.0)  # never answered: given up
    assert [e for e in events if isinstance(e, Unrecoverable)] == [
        Unrecoverable(source="a", after=1, reason="give-up"),
        Unrecoverable(source=None, after=None, reason="give-up"),
    ]
    assert delivered(events) == [("a", 3)]


@pytest.mark.parametrize("reason", ["refused", "trimmed"])
def test_refused_or_trimmed_repair_moves_past_the_gap(reason: str) -> None:
    det = SourceGapDetector(nak_delay=0.0)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 5), 0.0)
    [request] = requests(det.poll(0.0))
    events = det.receive(GapError(reason, request, "no"), 0.0)  # type: ignore[arg-type]
    assert Unrecoverable(source="a", after=1, reason=reason) in events
    assert delivered(events) == [("a", 5)]


def test_context_lost_is_asked_again_and_stray_answers_are_ignored() -> None:
    det = SourceGapDetector(nak_delay=0.0)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 3), 0.0)
    [request] = requests(det.poll(0.0))
    assert det.receive(GapError("context-lost", request), 0.0) == []
    assert len(requests(det.poll(0.0))) == 1
    stray = SourceGapRequest(after={"zz": 1})
    assert det.receive(GapError("refused", stray), 0.0) == []
    assert det.stats.stray_dropped == 1


def test_entitlement_filters_live_publications_but_they_keep_their_place() -> None:
    det = SourceGapDetector(entitlement=Entitlement(topics=["/t/a"]))
    events = det.receive(pub("a", 1, "/t/b"), 0.0) + det.receive(pub("a", 2, "/t/a"), 0.0)
    assert delivered(events) == [("a", 2)]
    assert det.stats.filtered == 1
    assert det.buffered == 0


def test_buffer_overflow_is_an_event_and_the_dropped_ones_are_repaired() -> None:
    det = SourceGapDetector(nak_delay=0.0, max_buffer=2)
    journal = Journal()
    for seq in range(1, 6):
        journal.append(pub("a", seq))
    out: list[tuple[str, int]] = []
    events = []
    for seq in (3, 4, 5):
        events += det.receive(pub("a", seq), 0.0)
    assert BufferOverflow(limit=2, dropped=1) in events
    perform(det, journal, det.poll(0.0), 0.0, out)
    assert out == [("a", seq) for seq in range(1, 6)]


def test_resume_point_is_the_start_after_of_a_restarted_detector() -> None:
    det = SourceGapDetector(start_after={"b": 3})
    det.receive(pub("a", 1), 0.0)
    assert dict(det.resume_point().after) == {"a": 1, "b": 3}


def test_bad_input_raises_typed_errors_and_changes_nothing() -> None:
    det = SourceGapDetector()
    with pytest.raises(InvalidMessageError):
        det.receive(Heartbeat(link_seq=1), 0.0)
    with pytest.raises(InvalidConfigError):
        det.receive(pub("a", 1), float("nan"))
    for bad in ({"nak_delay": -1}, {"max_buffer": 0}, {"probe_interval": 0},
                {"start_after": {"a": -1}}, {"start_after": "a"}, {"entitlement": "/#"}):
        with pytest.raises(SeqRepairError):
            SourceGapDetector(**bad)  # type: ignore[arg-type]
    assert det.stats.delivered == 0
    assert det.last_delivered == {}


def test_a_replay_stopped_at_the_journals_limit_is_asked_on_at_once() -> None:
    det = SourceGapDetector(nak_delay=0.0)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 9), 0.0)
    [request] = requests(det.poll(0.0))
    events = det.receive(pub("a", 2, retransmit=True), 0.0)
    events += det.receive(ReplayComplete(through={"a": 4}, request=request, more=True), 0.0)
    assert delivered(events) == [("a", 2)]  # 3 and 4 were not for this subscriber
    assert requests(events) == [SourceGapRequest({"a": 4})]
    events = det.receive(pub("a", 5, retransmit=True), 0.0)
    events += det.receive(ReplayComplete(through={"a": 9}, request=SourceGapRequest({"a": 4})),
                          0.0)
    assert delivered(events) == [("a", 5), ("a", 9)]
    assert (det.stats.continued, det.stats.unrecoverable, det.repairing) == (1, 0, False)


def test_a_replay_stopped_without_reading_anything_new_gives_up() -> None:
    det = SourceGapDetector(nak_delay=0.0)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 3), 0.0)
    [request] = requests(det.poll(0.0))
    events = det.receive(ReplayComplete(through={"a": 1}, request=request, more=True), 0.0)
    assert [e for e in events if isinstance(e, Unrecoverable)] == [
        Unrecoverable(source="a", after=1, reason="no-progress"),
        Unrecoverable(source=None, after=None, reason="no-progress"),
    ]
    assert delivered(events) == [("a", 3)]
    assert requests(events) == []


# ------------------------------------------------------------------------------ properties

TOPICS = ("/t/a", "/t/b")


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, object]:
    sources = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3,
                            unique=True))
    counts = {s: draw(st.integers(0, 30)) for s in sources}
    order = [s for s in sources for _ in range(counts[s])]
    order = draw(st.permutations(order))
    n = len(order)
    return {
        "order": order,
        "topics": draw(st.lists(st.sampled_from(TOPICS), min_size=n, max_size=n)),
        "fate": draw(st.lists(st.sampled_from(["ok", "ok", "ok", "drop", "dup", "late"]),
                              min_size=n, max_size=n)),
        "start_after": {s: draw(st.integers(0, 3)) for s in sources if draw(st.booleans())},
        "queue_filter": draw(st.sampled_from([None, "/t/a"])),
        "entitled": draw(st.sampled_from([None, "/t/a"])),
        "steps": draw(st.lists(st.sampled_from([0.0, 0.01, 0.2]), min_size=n, max_size=n)),
        "replay_limit": draw(st.sampled_from([None, 1, 4])),
    }


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_entitled_publication_is_delivered_once_in_source_order(
    sc: dict[str, object],
) -> None:
    """Live loss, duplication, lateness and filtering; the journal repairs; all arrive once."""
    order: list[str] = sc["order"]  # type: ignore[assignment]
    topics: list[str] = sc["topics"]  # type: ignore[assignment]
    fate: list[str] = sc["fate"]  # type: ignore[assignment]
    steps: list[float] = sc["steps"]  # type: ignore[assignment]
    start_after: dict[str, int] = sc["start_after"]  # type: ignore[assignment]
    queue_filter = sc["queue_filter"]
    entitlement = None if sc["entitled"] is None else Entitlement(topics=[sc["entitled"]])
    # a queue bound to part of the stream must come with the same entitlement (see module doc)
    if queue_filter is not None:
        entitlement = Entitlement(topics=[queue_filter])
    journal = Journal(entitlement, start_after, sc["replay_limit"])  # type: ignore[arg-type]
    det = SourceGapDetector(start_after=start_after, entitlement=entitlement, nak_delay=0.05,
                            probe_interval=1.0, retry_interval=0.5)
    out: list[tuple[str, int]] = []
    assert det.poll(0.0) == []
    numbers: dict[str, int] = {}
    late: list[Publication] = []
    now = 0.0
    published: list[Publication] = []
    for source, topic, what, step in zip(order, topics, fate, steps, strict=True):
        numbers[source] = numbers.get(source, 0) + 1
        p = pub(source, numbers[source], topic)
        published.append(p)
        journal.append(p)  # journal first, then the broker
        now += step
        live = [] if queue_filter is not None and topic != queue_filter else [p]
        if what == "drop":
            live = []
        elif what == "dup":
            live = live * 2
        elif what == "late":
            late.extend(live)
            live = []
        elif late and step:
            live = late + live
            late = []
        for frame in live:
            perform(det, journal, det.receive(frame, now), now, out)
        perform(det, journal, det.poll(now), now, out)
    for frame in late:
        perform(det, journal, det.receive(frame, now), now, out)
    for _ in range(5):
        deadline = det.next_deadline
        assert deadline is not None
        now = max(now, deadline)
        perform(det, journal, det.poll(now), now, out)
    expected = [
        (p.source, p.source_seq) for p in published
        if p.source_seq > start_after.get(p.source, 0)
        and (entitlement is None or entitlement.allows(p))
    ]
    for source in numbers:
        assert [x for x in out if x[0] == source] == [x for x in expected if x[0] == source]
    assert len(out) == len(set(out)) == len(expected)
    assert det.buffered == 0
    assert det.stats.unrecoverable == 0


def test_a_trimmed_answer_reports_the_loss_and_asks_again_after_the_trim_point() -> None:
    det = SourceGapDetector(nak_delay=0.0)
    det.receive(pub("a", 1), 0.0)
    det.receive(pub("a", 50), 0.0)
    [request] = requests(det.poll(0.0))
    assert request == SourceGapRequest(after={"a": 1})
    events = det.receive(GapError("trimmed", request, "gone", {"a": 40}), 0.1)
    assert [e for e in events if isinstance(e, Unrecoverable)] == [
        Unrecoverable(source="a", after=1, reason="trimmed")
    ]
    assert requests(events) == [SourceGapRequest(after={"a": 40})]
    assert delivered(events) == []  # 41..49 are still journaled: asked for, not skipped
    replay = [det.receive(pub("a", n, retransmit=True), 0.2) for n in range(41, 50)]
    assert [d for e in replay for d in delivered(e)] == [("a", n) for n in range(41, 51)]
    assert det.last_delivered == {"a": 50}
