"""Gap-fill service: link context, source replay from the journal, filters, refusals."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqrepair.core.budget import RefusalPolicy
from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.filters import BasicFilter
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer, SourceSequencer
from seqrepair.journal import GapFillService, Journal, Replay, UnknownLinkError
from seqrepair.journal.inprocess import JournalComponent
from seqrepair.simulation import LinkConditions, Simulation

pytestmark = pytest.mark.redis

EVERYTHING = Entitlement.everything()


def fill(journal: Journal, source: str, rows: list[tuple[str, str | None]]) -> list[Publication]:
    seq = SourceSequencer(source=source, bits=16, start_after=journal.high_water(source))
    pubs = [seq.stamp(topic, {"n": i}, permtoken=token) for i, (topic, token) in enumerate(rows)]
    if pubs:
        journal.append(pubs, 16)
    return pubs


def frames(answer: object) -> list[object]:
    assert isinstance(answer, Replay), answer
    return list(answer)


def test_gap_request_from_link_context(journal: Journal) -> None:
    service = GapFillService(journal, link_bits=4, context_capacity=5)
    service.attach("L1", EVERYTHING)
    link = LinkSequencer(bits=4)
    sent = []
    for i in range(20):  # wraps the 4-bit link space
        frame = (
            link.heartbeat(float(i))
            if i % 4 == 3
            else link.stamp(Publication("/a", "feed.a", i + 1, "update", {}), float(i))
        )
        service.record("L1", frame)
        sent.append(frame)
    answer = service.answer_gap("L1", GapRequest(sent[-3].link_seq, sent[-1].link_seq), now=0.0)
    assert isinstance(answer, list)
    assert len(answer) == 3
    assert [f.link_seq for f in answer] == [f.link_seq for f in sent[-3:]]
    assert all(f.retransmit for f in answer if isinstance(f, Publication))
    assert any(isinstance(f, Heartbeat) for f in answer)
    lost = service.answer_gap("L1", GapRequest(sent[-8].link_seq, sent[-6].link_seq), now=0.0)
    assert isinstance(lost, GapError)
    assert lost.reason == "context-lost"


def test_unknown_link_and_bad_requests(journal: Journal) -> None:
    service = GapFillService(journal)
    with pytest.raises(UnknownLinkError):
        service.answer_gap("nope", GapRequest(1, 2), now=0.0)
    service.attach("L1", EVERYTHING)
    with pytest.raises(InvalidMessageError):
        service.answer_source_gap("L1", GapRequest(1, 2), now=0.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        service.attach("L2", "everything")  # type: ignore[arg-type]
    service.detach("L1")
    with pytest.raises(UnknownLinkError):
        service.answer_source_gap("L1", SourceGapRequest({}), now=0.0)


def test_source_replay_in_source_order_then_complete(journal: Journal) -> None:
    a = fill(journal, "feed.a", [("/w/x", None)] * 120)
    b = fill(journal, "feed.b", [("/w/y", None)] * 30)
    service = GapFillService(journal)
    service.attach("L1", EVERYTHING, start_after={})
    request = SourceGapRequest({"feed.a": 100, "feed.b": 0})
    out = frames(service.answer_source_gap("L1", request, now=0.0))
    assert out[-1] == ReplayComplete(through={"feed.a": 120, "feed.b": 30}, request=request)
    assert out[:-1] == [_rt(p) for p in a[100:] + b]


def _rt(pub: Publication) -> Publication:
    import attrs

    return attrs.evolve(pub, retransmit=True)


def test_unlisted_sources_replay_after_the_link_start(journal: Journal) -> None:
    fill(journal, "feed.a", [("/w/x", None)] * 10)
    service = GapFillService(journal)
    service.attach("L1", EVERYTHING)  # starts after feed.a's 10
    new_a = fill(journal, "feed.a", [("/w/x", None)] * 2)
    new_c = fill(journal, "feed.c", [("/w/z", None)] * 3)  # a source born after the attach
    out = frames(service.answer_source_gap("L1", SourceGapRequest({}), now=0.0))
    assert out[:-1] == [_rt(p) for p in new_a + new_c]
    assert out[-1].through == {"feed.a": 12, "feed.c": 3}


def test_replay_never_leaks_what_live_delivery_would_not_send(journal: Journal) -> None:
    rows = [
        ("/weather/wind", None),
        ("/weather/wind", "gold"),
        ("/sport/x", None),
        ("/weather/rain", "secret"),
        ("/weather/rain", "silver"),
    ]
    pubs = fill(journal, "feed.a", rows)
    ent = Entitlement(topics=["/weather/#"], grant={"gold", "secret"}, deny={"secret"})
    service = GapFillService(journal)
    service.attach("L1", ent)
    out = frames(service.answer_source_gap("L1", SourceGapRequest({"feed.a": 0}), now=0.0))
    assert out[:-1] == [_rt(pubs[0]), _rt(pubs[1])]


def test_trimmed_range_is_an_error_not_silence(journal: Journal) -> None:
    fill(journal, "feed.a", [("/a", None)] * 50)
    journal.trim_through("feed.a", 20, now=1.0)
    service = GapFillService(journal)
    service.attach("L1", EVERYTHING)
    error = service.answer_source_gap("L1", SourceGapRequest({"feed.a": 10}), now=0.0)
    assert isinstance(error, GapError)
    assert error.reason == "trimmed"
    assert "20" in error.detail
    assert error.trimmed_through == {"feed.a": 20}
    ok = frames(service.answer_source_gap("L1", SourceGapRequest({"feed.a": 20}), now=0.0))
    assert len(ok) == 31


def test_trim_racing_a_replay_ends_it_with_trimmed(journal: Journal) -> None:
    fill(journal, "feed.a", [("/a", None)] * 200)
    service = GapFillService(journal, page_size=50)
    service.attach("L1", EVERYTHING)
    replay = service.answer_source_gap("L1", SourceGapRequest({"feed.a": 0}), now=0.0)
    assert isinstance(replay, Replay)
    it = iter(replay)
    first = [next(it) for _ in range(50)]
    journal.trim_through("feed.a", 120, now=1.0)
    rest = list(it)
    assert len(first) == 50
    assert isinstance(rest[-1], GapError)
    assert rest[-1].reason == "trimmed"
    assert rest[-1].trimmed_through == {"feed.a": 120}
    assert not any(isinstance(f, ReplayComplete) for f in rest)


def test_one_trimmed_answer_names_every_source_that_lost_numbers(journal: Journal) -> None:
    for source in ("feed.a", "feed.b", "feed.c"):
        fill(journal, source, [("/a", None)] * 30)
    journal.trim_through("feed.a", 10, now=1.0)
    journal.trim_through("feed.b", 25, now=1.0)
    service = GapFillService(journal)
    service.attach("L1", EVERYTHING)
    request = SourceGapRequest({"feed.a": 5, "feed.b": 26, "feed.c": 0})
    error = service.answer_source_gap("L1", request, now=0.0)
    assert isinstance(error, GapError)
    assert (error.reason, error.request) == ("trimmed", request)
    assert error.trimmed_through == {"feed.a": 10}  # feed.b asked after its trim point
    again = SourceGapRequest({"feed.a": 10, "feed.b": 26, "feed.c": 0})
    replayed = frames(service.answer_source_gap("L1", again, now=0.0))
    assert [(p.source, p.source_seq) for p in replayed[:-1]] == (
        [("feed.a", n) for n in range(11, 31)] + [("feed.b", n) for n in range(27, 31)]
        + [("feed.c", n) for n in range(1, 31)]
    )


def test_numbers_trimmed_of_a_source_the_request_does_not_name_are_reported_too(
    journal: Journal,
) -> None:
    fill(journal, "feed.a", [("/a", None)] * 10)
    service = GapFillService(journal)
    service.attach("L1", EVERYTHING)  # owed feed.a after 10, though it never names it
    fill(journal, "feed.a", [("/a", None)] * 40)  # 11..50
    journal.trim_through("feed.a", 30, now=1.0)  # 11..30 go before the subscriber got them
    request = SourceGapRequest({})
    error = service.answer_source_gap("L1", request, now=0.0)
    assert isinstance(error, GapError)
    assert (error.reason, error.trimmed_through) == ("trimmed", {"feed.a": 30})
    assert "after 10 through 30" in error.detail
    replayed = frames(service.answer_source_gap("L1", SourceGapRequest({"feed.a": 30}), now=0.0))
    assert [p.source_seq for p in replayed[:-1]] == list(range(31, 51))


def test_a_source_name_no_journal_can_hold_has_nothing_to_replay(journal: Journal) -> None:
    fill(journal, "feed.a", [("/a", None)] * 3)
    service = GapFillService(journal)
    service.attach("L1", EVERYTHING, start_after={})
    replayed = frames(service.answer_source_gap("L1", SourceGapRequest({"}x": 4}), now=0.0))
    assert [(p.source, p.source_seq) for p in replayed[:-1]] == [("feed.a", n) for n in (1, 2, 3)]


def test_a_source_replay_longer_than_max_range_stops_there_and_says_more(
    journal: Journal,
) -> None:
    fill(journal, "feed.a", [("/a", None)] * 100)
    fill(journal, "feed.b", [("/b", None)] * 30)
    service = GapFillService(journal, policy=RefusalPolicy(max_range=60))
    service.attach("L1", EVERYTHING, start_after={})
    first_request = SourceGapRequest({"feed.a": 30})
    first = frames(service.answer_source_gap("L1", first_request, now=0.0))
    assert [(p.source, p.source_seq) for p in first[:-1]] == [("feed.a", n) for n in range(31, 91)]
    # feed.b, owed since the link started, was not reached: the answer claims nothing for it
    assert first[-1] == ReplayComplete(through={"feed.a": 90}, request=first_request, more=True)

    rest_request = SourceGapRequest({"feed.a": 90})
    rest = frames(service.answer_source_gap("L1", rest_request, now=0.0))
    assert [(p.source, p.source_seq) for p in rest[:-1]] == [
        *(("feed.a", n) for n in range(91, 101)),
        *(("feed.b", n) for n in range(1, 31)),
    ]
    assert rest[-1] == ReplayComplete(through={"feed.a": 100, "feed.b": 30}, request=rest_request)


def test_a_filtered_replay_stopped_at_max_range_still_moves_past_what_it_read(
    journal: Journal,
) -> None:
    fill(journal, "feed.a", [("/hidden", None)] * 50 + [("/seen", None)] * 5)
    service = GapFillService(journal, policy=RefusalPolicy(max_range=20))
    service.attach("L1", Entitlement(topics=["/seen"]), start_after={})
    after = 0
    delivered: list[int] = []
    for _ in range(3):  # nothing the filter lets through in the first 40 numbers read
        answer = frames(service.answer_source_gap("L1", SourceGapRequest({"feed.a": after}), 0.0))
        complete = answer[-1]
        assert isinstance(complete, ReplayComplete)
        assert complete.more is (after + 20 < 55)
        assert complete.through["feed.a"] == min(after + 20, 55)
        delivered += [p.source_seq for p in answer[:-1]]
        after = complete.through["feed.a"]
    assert delivered == [51, 52, 53, 54, 55]


def test_refusals_by_range_and_budget(journal: Journal) -> None:
    fill(journal, "feed.a", [("/a", None)] * 100)
    policy = RefusalPolicy(max_range=60, budget_capacity=100, budget_refill_per_second=10.0)
    service = GapFillService(journal, policy=policy)
    service.attach("L1", EVERYTHING)
    assert isinstance(
        service.answer_source_gap("L1", SourceGapRequest({"feed.a": 50}), 0.0), Replay
    )
    assert isinstance(
        service.answer_source_gap("L1", SourceGapRequest({"feed.a": 50}), 0.0), Replay
    )
    spent = service.answer_source_gap("L1", SourceGapRequest({"feed.a": 50}), now=0.0)
    assert isinstance(spent, GapError)
    assert "budget" in spent.detail
    assert isinstance(
        service.answer_source_gap("L1", SourceGapRequest({"feed.a": 50}), 5.0), Replay
    )
    link = LinkSequencer(bits=16)
    for i in range(100):
        service.record("L1", link.stamp(Publication("/a", "feed.a", i + 1, "update", {}), 0.0))
    big_link = service.answer_gap("L1", GapRequest(1, 61), now=5.0)
    assert isinstance(big_link, GapError)
    assert big_link.reason == "refused"
    broke = service.answer_gap("L1", GapRequest(1, 10), now=5.0)
    assert isinstance(broke, GapError)
    assert broke.reason == "refused"
    assert "budget" in broke.detail


def test_answer_dispatches_both_request_kinds(journal: Journal) -> None:
    fill(journal, "feed.a", [("/a", None)] * 3)
    service = GapFillService(journal)
    service.attach("L1", EVERYTHING)
    assert list(service.answer("L1", GapRequest(1, 1), 0.0)) == []  # nothing sent yet
    service.record("L1", Heartbeat(link_seq=1, timestamp=0.0))
    assert list(service.answer("L1", GapRequest(1, 1), 0.0)) == [
        Heartbeat(1, timestamp=0.0, retransmit=True)
    ]
    out = list(service.answer("L1", SourceGapRequest({"feed.a": 1}), 0.0))
    assert len(out) == 3
    assert isinstance(out[-1], ReplayComplete)
    with pytest.raises(InvalidMessageError):
        service.answer("L1", "gap", 0.0)  # type: ignore[arg-type]


TOPICS = ["/weather/wind", "/weather/rain", "/sport/x", "/news/a/b"]
TOKENS = [None, "gold", "silver", "secret"]


@settings(
    max_examples=40, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.dictionaries(
        st.sampled_from(["feed.a", "feed.b", "feed.c"]),
        st.lists(st.tuples(st.sampled_from(TOPICS), st.sampled_from(TOKENS)), max_size=40),
        max_size=3,
    ),
    patterns=st.lists(st.sampled_from(["/weather/#", "/sport/*", "/#/b", "/news/*"]), min_size=1),
    grant=st.sets(st.sampled_from(["gold", "silver", "secret", "*"])),
    deny=st.sets(st.sampled_from(["gold", "secret"])),
    after=st.dictionaries(st.sampled_from(["feed.a", "feed.b", "feed.c"]), st.integers(0, 45)),
    filters=st.lists(
        st.builds(BasicFilter, st.sampled_from(["exact", "prefix", "suffix"]),
                  st.sampled_from(["source", "subject", "permtoken"]),
                  st.sampled_from(["feed.a", "feed.", "/weather/", "/b", "gold", "d", ""])),
        max_size=2,
    ),
)
def test_replay_is_exactly_the_entitled_publications_in_source_order(
    journal: Journal, rows, patterns, grant, deny, after, filters
) -> None:
    journal.client.flushall()
    journal = Journal(journal.client, page_size=7)  # a fresh one: no cached registrations
    journaled = {source: fill(journal, source, items) for source, items in rows.items()}
    ent = Entitlement(topics=patterns, grant=grant, deny=deny, filters=filters)
    service = GapFillService(journal, page_size=7)
    service.attach("L", ent, start_after={})
    request = SourceGapRequest(after)
    out = frames(service.answer_source_gap("L", request, now=0.0))
    expected = [
        _rt(p)
        for source in sorted(journaled)
        for p in journaled[source]
        if p.source_seq > after.get(source, 0) and ent.allows(p)
    ]
    assert out[:-1] == expected
    complete = out[-1]
    assert isinstance(complete, ReplayComplete)
    for source, pubs in journaled.items():
        if source in after or len(pubs) > 0:
            assert complete.through[source] == len(pubs)
    # the oracle: live delivery's filter, evaluated independently of Entitlement.allows
    compare = {"exact": str.__eq__, "prefix": str.startswith, "suffix": str.endswith}
    for pub in out[:-1]:
        assert pub.permtoken is None or (
            pub.permtoken not in deny and (pub.permtoken in grant or "*" in grant)
        )
        attributes = {"source": pub.source, "subject": pub.topic, "permtoken": pub.permtoken}
        for f in filters:
            value = attributes[f.property]
            assert value is not None
            assert compare[f.type.value](value, f.value)


@pytest.mark.parametrize(("bits", "seed"), [(8, 8), (16, 16)])
def test_resets_repaired_from_a_real_journal_in_pieces_arrive_exactly_once(
    journal: Journal, bits: int, seed: int
) -> None:
    """The simulation's lossy link against the Redis journal's gap-fill service, whose replays
    stop every 12 numbers: resets and lost link context are repaired by source in pieces.
    Each topic has one source: a replay keeps each source's order, not the order across
    sources, so an image written by several sources would depend on which replay came last."""
    plan = [(f"feed.{i % 3}", f"/w/{i % 3}/{i % 4}", {"n": i}, PublishType.UPDATE)
            for i in range(600)]
    component = JournalComponent(journal, link_bits=bits, context_capacity=8,
                                 policy=RefusalPolicy(max_range=12), batch_size=16)
    report = Simulation(bits=bits, plan=plan, component=component, seed=seed,
                        conditions=LinkConditions(loss=0.05, reorder=0.1, duplicate=0.05),
                        resets_at=frozenset({150, 400})).run()
    assert report.unrecoverable == ()
    assert report.exactly_once_in_order
    assert report.stats.source_continued > 0
    assert report.subscriber_images == report.publisher_images


def test_a_replay_stops_each_source_where_the_link_took_over(journal: Journal) -> None:
    """After a reset (frame 0) the link numbered feed.a's 11th and feed.b's 6th first: the
    replay asked through the reset frame carries each source only up to those."""
    a = fill(journal, "feed.a", [("/w/x", None)] * 12)
    b = fill(journal, "feed.b", [("/w/y", None)] * 6)
    service = GapFillService(journal, link_bits=8)
    service.attach("L1", EVERYTHING, start_after={})
    link = LinkSequencer(bits=8)
    link.reset()
    service.record("L1", link.heartbeat(0.0))  # the reset frame, numbered 0
    for pub in (a[10], b[5], a[11]):
        service.record("L1", link.stamp(pub, 0.0))
    request = SourceGapRequest({"feed.a": 4, "feed.b": 2}, link_through=0)
    out = frames(service.answer_source_gap("L1", request, now=0.0))
    assert out[:-1] == [_rt(p) for p in a[4:10] + b[2:5]]
    assert out[-1] == ReplayComplete(through={"feed.a": 10, "feed.b": 5}, request=request)


def test_a_replay_reads_what_the_link_numbers_while_it_goes(journal: Journal) -> None:
    """The link keeps numbering while a long replay is read page by page (50 per page here):
    the replay stops at what the link took over meanwhile."""
    a = fill(journal, "feed.a", [("/w/x", None)] * 200)
    service = GapFillService(journal, link_bits=8)
    service.attach("L1", EVERYTHING, start_after={})
    link = LinkSequencer(bits=8)
    service.record("L1", link.stamp(a[0], 0.0))  # link 1: the subscriber saw it
    replay = service.answer_source_gap(
        "L1", SourceGapRequest({"feed.a": 1}, link_through=1), now=0.0
    )
    assert isinstance(replay, Replay)
    read = iter(replay)
    first = [next(read) for _ in range(60)]  # past the first page: 2..61
    service.record("L1", link.stamp(a[120], 0.0))  # the link carries on from the 121st
    rest = list(read)
    assert first + rest[:-1] == [_rt(p) for p in a[1:120]]
    assert rest[-1] == ReplayComplete(
        through={"feed.a": 120}, request=SourceGapRequest({"feed.a": 1})
    )
    assert replay.left_to_link == 80


def test_without_a_link_number_a_replay_runs_to_the_high_water(journal: Journal) -> None:
    a = fill(journal, "feed.a", [("/w/x", None)] * 5)
    service = GapFillService(journal, link_bits=8)
    service.attach("L1", EVERYTHING, start_after={})
    link = LinkSequencer(bits=8)
    for pub in a[3:]:
        service.record("L1", link.stamp(pub, 0.0))
    out = frames(service.answer_source_gap("L1", SourceGapRequest({"feed.a": 1}), now=0.0))
    assert out[:-1] == [_rt(p) for p in a[1:]]
    assert out[-1].through == {"feed.a": 5}


def test_a_replay_stops_at_what_the_transport_carries_and_names_what_it_owes(
    journal: Journal,
) -> None:
    """A component has fanned out feed.a through 8 and nothing of feed.b (born since it
    started): whatever it fans out next goes to the link, so the replay stops there and names
    the sources the journal holds more of, which the component must then send itself."""
    a = fill(journal, "feed.a", [("/w/x", None)] * 12)
    fill(journal, "feed.b", [("/w/y", None)] * 3)
    service = GapFillService(journal, link_bits=8)
    service.attach("L1", EVERYTHING, start_after={})
    request = SourceGapRequest({"feed.a": 2, "feed.b": 0}, link_through=0)
    replay = service.answer_source_gap("L1", request, now=0.0, carried_after={"feed.a": 8})
    assert isinstance(replay, Replay)
    assert replay.owed_to_link == ["feed.a", "feed.b"]
    out = list(replay)
    assert out[:-1] == [_rt(p) for p in a[2:8]]
    assert out[-1].through == {"feed.a": 8, "feed.b": 0}
    unnamed = service.answer_source_gap(
        "L1", SourceGapRequest({"feed.a": 2}), now=0.0, carried_after={"feed.a": 8}
    )
    assert isinstance(unnamed, Replay)
    assert unnamed.owed_to_link == []  # without link_through nothing is left to the link


def test_a_replay_cut_to_nothing_by_the_link_says_no_more_though_the_limit_left_some_out(
    journal: Journal,
) -> None:
    """What the per-request limit left out is carried by the link itself (its first numbers
    after the cover point): the answer must not say ``more``. It did, with a ``through`` cut
    back to the numbers asked after, and the subscriber gave the replay up for lack of progress
    (``Unrecoverable(no-progress)``) although the link and the journal held every number."""
    a = fill(journal, "feed.a", [("/w/x", None)] * 12)
    b = fill(journal, "feed.b", [("/w/y", None)] * 6)
    service = GapFillService(journal, link_bits=8, policy=RefusalPolicy(max_range=2))
    service.attach("L1", EVERYTHING, start_after={})
    link = LinkSequencer(bits=8)
    for pub in a[:9] + b + a[9:]:  # links 1..9: a1..a9, then b1..b6, a10..a12
        service.record("L1", link.stamp(pub, 0.0))
    request = SourceGapRequest({"feed.a": 9}, link_through=9)  # saw link 9, delivered a9
    out = frames(service.answer_source_gap("L1", request, now=0.0))
    assert out == [ReplayComplete(through={"feed.a": 9, "feed.b": 0}, request=request)]
    # the limit still says more when the link does not carry what it left out
    request = SourceGapRequest({"feed.a": 5}, link_through=18)  # saw all the link carried
    out = frames(service.answer_source_gap("L1", request, now=0.0))
    assert out[:-1] == [_rt(p) for p in a[5:7]]
    assert out[-1] == ReplayComplete(through={"feed.a": 7}, request=request, more=True)


def test_the_per_request_limit_is_not_spent_on_a_source_the_link_carries(
    journal: Journal,
) -> None:
    """feed.a, not named (owed from the link's start), is all carried by the link after the
    cover point; feed.b 2..3 is owed. The limit of 2 went to feed.a's 1..2, cut to nothing,
    and the answer said ``more`` having reached nothing: the subscriber gave up."""
    a = fill(journal, "feed.a", [("/w/x", None)] * 12)
    b = fill(journal, "feed.b", [("/w/y", None)] * 6)
    service = GapFillService(journal, link_bits=8, policy=RefusalPolicy(max_range=2))
    service.attach("L1", EVERYTHING, start_after={})
    link = LinkSequencer(bits=8)
    for pub in b[:3] + a + b[3:]:  # links 1..3: b1..b3, then a1..a12, b4..b6
        service.record("L1", link.stamp(pub, 0.0))
    request = SourceGapRequest({"feed.b": 1}, link_through=3)  # saw link 3, delivered b1 only
    out = frames(service.answer_source_gap("L1", request, now=0.0))
    assert out[:-1] == [_rt(p) for p in b[1:3]]
    assert out[-1] == ReplayComplete(through={"feed.a": 0, "feed.b": 3}, request=request)


def test_a_replay_carries_through_what_the_link_passed_over_past_its_cover(
    journal: Journal,
) -> None:
    """The link numbered feed.a 9 past the subscriber's cover point, but passed over 6-8
    before, never numbered, as given by an earlier replay the subscriber did not take (its
    request asks after 2): the replay must bring them, so it carries through 8
    (``carry_through``), past the cover's cut at 8, and no further than that floor."""
    a = fill(journal, "feed.a", [("/w/x", None)] * 12)
    service = GapFillService(journal, link_bits=8)
    service.attach("L1", EVERYTHING, start_after={})
    link = LinkSequencer(bits=8)
    service.record("L1", link.stamp(a[1], 0.0))  # link 1: feed.a 2, what the cover covers
    service.record("L1", link.stamp(a[8], 0.0))  # link 2: feed.a 9, numbered past it
    request = SourceGapRequest({"feed.a": 2}, link_through=1)
    cut = frames(service.answer_source_gap("L1", request, now=0.0))
    assert cut[-1].through == {"feed.a": 8}  # the cover alone: 3-8
    replay = service.answer_source_gap("L1", request, now=0.0, carry_through={"feed.a": 10})
    out = frames(replay)
    assert out[:-1] == [_rt(p) for p in a[2:10]]  # 3-10: the floor, past the link's 9
    assert out[-1].through == {"feed.a": 10}
    below = frames(service.answer_source_gap("L1", request, now=0.0,
                                             carry_through={"feed.a": 5}))
    assert below[-1].through == {"feed.a": 8}  # a floor below the cut changes nothing


def test_a_source_the_request_does_not_name_is_carried_too(journal: Journal) -> None:
    """A source a request does not name is replayed from the link's start (the subscriber
    delivered nothing of it), so the carry reaches it like a named one (``requests._not_taken``
    carries every source whose passed-over top is above the request's number for it, 0 when it
    names none): the link numbered feed.a 9 past the cover point and had passed over 10 as
    given by a replay the subscriber did not take; only this replay, of a request naming
    feed.b alone, can bring 10."""
    a = fill(journal, "feed.a", [("/w/x", None)] * 12)
    fill(journal, "feed.b", [("/w/x", None)] * 2)
    service = GapFillService(journal, link_bits=8)
    service.attach("L1", EVERYTHING, start_after={})
    link = LinkSequencer(bits=8)
    service.record("L1", link.stamp(a[1], 0.0))  # link 1: feed.a 2, what the cover covers
    service.record("L1", link.stamp(a[8], 0.0))  # link 2: feed.a 9, numbered past it
    request = SourceGapRequest({"feed.b": 2}, link_through=1)
    cut = frames(service.answer_source_gap("L1", request, now=0.0))
    assert [p.source_seq for p in cut[:-1]] == list(range(1, 9))  # feed.a from the start
    assert cut[-1].through["feed.a"] == 8
    carried = frames(service.answer_source_gap("L1", request, now=0.0,
                                               carry_through={"feed.a": 10}))
    assert [p.source_seq for p in carried[:-1]] == list(range(1, 11))
    assert carried[-1].through["feed.a"] == 10
