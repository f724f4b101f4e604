"""A take-back that got no replay of its own still leaves nothing the link passed over to
nobody (issue 27, review of "what a replay gave, the link never sends live").

The link passes over the waiting publications a replay gave (``given``); a later source request
below them (the subscriber did not take that answer) takes ``given`` back and its replay must
carry through what the link passed over (``carry_through``), since those numbers were never
numbered and only a replay can bring them. The carry was computed from ``given`` itself, which
the take-back lowers at once: when the request that took it back got no replay (refused by
the resend budget, replaced by a newer request, continued as a repeat of one running), the
next request, still below the skipped numbers, carried nothing, its replay stopped at the
cover's cut, and the numbers between were lost without an ``Unrecoverable``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import seqrepair.amqp.component.requests as requests_module
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.component.requests import _not_taken
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.rawamqp import PackedMessage, decode_message
from seqrepair.amqp.wire.technical import SubscriptionState
from seqrepair.core.budget import RefusalPolicy, ResendBudget
from seqrepair.core.messages import Publication, SourceGapRequest

from .conftest import wait_for
from .inthread import HereComponent
from .test_given_skip import _link, _pub
from .test_relay import expected, publish


@pytest.mark.amqp
def test_a_second_request_below_the_skipped_numbers_still_carries_through_them() -> None:
    link = _link(3)
    link.route.given["l"] = {"feed.c": 30}
    link.skipped_top["feed.c"] = 30
    first = _not_taken(link, SourceGapRequest({"feed.c": 12}))
    assert first == {"feed.c": 30}
    assert link.route.given["l"] == {"feed.c": 12}
    # that request got no replay (refused, replaced): the subscriber asks again, still after 12
    again = _not_taken(link, SourceGapRequest({"feed.c": 12}))
    assert again == {"feed.c": 30}
    # one that has them carries nothing
    assert _not_taken(link, SourceGapRequest({"feed.c": 30})) == {}


@pytest.mark.amqp
def test_a_source_the_request_does_not_name_is_taken_back_and_carried() -> None:
    """Not log noise: a request that does not name feed.a says its subscriber delivered none
    of it, and the component replays feed.a from the link's start for it
    (tests/journal/test_gapfill.py), so what the link passed over of feed.a is carried."""
    link = _link(3)
    link.route.given["l"] = {"feed.a": 10}
    link.skipped_top["feed.a"] = 10
    assert _not_taken(link, SourceGapRequest({"feed.b": 2})) == {"feed.a": 10}
    assert link.route.given["l"] == {"feed.a": 0}  # sent live again from now on


@pytest.mark.amqp
def test_what_the_link_passed_over_is_carried_after_a_detach_forgot_given() -> None:
    """A replay's end went to proton and the link passed over what it gave, then the
    connection died before the answer arrived: the detach forgets ``given`` (the replays of
    the link end with it), the subscriber resumes the link and asks again after what it
    delivered, below the numbers passed over. Its replay must carry through them: they were
    never numbered, and nothing else brings them (the link resends by number only what it
    numbered)."""
    link = _link(3)
    window = link.window
    assert window is not None
    link.offer_many([(_pub("feed.c", i), None) for i in range(1, 11)], 0.0)
    link.pump(0.0)
    numbered = window.size
    assert len(link.pending) == 10 - numbered
    link.route.given["l"] = {"feed.c": 10}  # that replay's REPLAY-COMPLETE was sent
    window.ack(window.newest)
    link.pump(0.1)
    assert not link.pending
    assert link.skipped_top == {"feed.c": 10}
    link.detach(1.0)
    link.route.drop_replay("l")  # as detach.py does
    link.attach(link.sender)  # resumed
    # it had delivered feed.c 1 only: the window's other frames went with the connection
    assert _not_taken(link, SourceGapRequest({"feed.c": 1}, link_through=1)) == {"feed.c": 10}


def _acks_not_taken(comp: HereComponent, monkeypatch: pytest.MonkeyPatch
                    ) -> tuple[HereComponent, list[Publication], Subscriber]:
    """``comp``, whose ACKs are not taken (the window stays shut once full), and a subscriber
    "s" of it on /w/# started, with what it gets."""
    monkeypatch.setattr(requests_module, "receive_ack", lambda *a, **k: None)
    got: list[Publication] = []
    sub = Subscriber(comp.here_url, "/w/#", on_publication=got.append, link_name="s",
                     heartbeat_interval=0.2).start()
    return comp, got, sub


def _passed_over_after_a_replay(
    comp: HereComponent, redis_url: str, monkeypatch: pytest.MonkeyPatch,
    got: list[Publication],
) -> tuple[Any, list[tuple[str, int]], int, int, int, dict[int, Any]]:
    """Subscriber "s" of ``comp`` (its ACKs not taken) is sent the first of 200 publications of
    feed.c and takes them (into ``got``); the component's answers to source requests are
    recorded from then on; a replay of all feed.c (no cover point: to the journal's
    high-water) ends and the link is pumped, so it passes the rest over. The link, the /w/#
    numbers of feed.c, the last of them, how many the link sent, the last the subscriber
    delivered, and the recorded answers (by the request's ``id``)."""
    link = comp.call(lambda: comp.links["s"])
    publish(comp.here_url, "feed.c", 200)
    want = expected(redis_url, "feed.c", "/w/#")
    top = want[-1][1]
    assert wait_for(lambda: comp.call(
        lambda: len(link.pending) + link.stats["sent"]) >= len(want), 20)
    sent = comp.call(lambda: link.stats["sent"])
    assert wait_for(lambda: len(got) >= sent, 20)
    delivered = got[-1].source_seq
    answers: dict[int, Any] = {}  # the answers to the requests of the test
    answer = comp.gapfill.answer_source_gap

    def recorded(link_id: str, request: SourceGapRequest, *args: Any, **kwargs: Any) -> Any:
        made = answer(link_id, request, *args, **kwargs)
        answers[id(request)] = made
        return made

    monkeypatch.setattr(comp.gapfill, "answer_source_gap", recorded)
    comp.ask("s", [SourceGapRequest({"feed.c": 0}, request_id=1 << 30)])
    assert wait_for(lambda: comp.call(lambda: link.route.given.get("s")) == {
        "feed.c": 200}, 20)  # the journal's high-water (publications outside /w/# too)
    comp.call(lambda: comp._pump_link(link, comp.clock()))
    return link, want, top, sent, delivered, answers


@pytest.mark.amqp
@pytest.mark.redis
@pytest.mark.parametrize("bits", [3, 4, 5])
def test_a_take_back_refused_by_the_budget_is_carried_by_the_next_replay(
    here: Callable[..., HereComponent], redis_url: str, monkeypatch: pytest.MonkeyPatch,
    bits: int,
) -> None:
    """Over a real subscriber and redis, the component in a thread: the link numbers the
    first of feed.c (its window then shut), a replay gives all of feed.c and the link passes
    over the rest; the subscriber asks after what it delivered, below them: refused (budget
    spent), then asked again. That replay must carry feed.c through its last number."""
    comp, got, sub = _acks_not_taken(here(link_bits=bits), monkeypatch)
    try:
        assert sub.wait_connected(20)
        link, want, top, sent, delivered, answers = _passed_over_after_a_replay(
            comp, redis_url, monkeypatch, got)
        assert 0 < sent < len(want)  # the window shut: the rest waits unnumbered
        assert comp.call(lambda: (len(link.pending), dict(link.skipped_top))) == (
            0, {"feed.c": top})
        # the subscriber did not take it (an answer to nothing it asked): it asks after what
        # it delivered, from the reset frame, with the budget spent: refused
        budget = comp.gapfill.link("s").budget
        comp.call(lambda: setattr(comp.gapfill.link("s"), "budget", ResendBudget(1, 0.0)))
        refused = SourceGapRequest({"feed.c": delivered}, request_id=(1 << 30) + 1,
                                   link_through=0)
        comp.ask("s", [refused])
        assert answers[id(refused)].reason == "refused", answers[id(refused)]
        comp.call(lambda: setattr(comp.gapfill.link("s"), "budget", budget))
        again = SourceGapRequest({"feed.c": delivered}, request_id=(1 << 30) + 2,
                                 link_through=0)
        comp.ask("s", [again])
        replay = answers[id(again)]
        assert wait_for(lambda: comp.call(lambda: not link.route.busy()), 20)
    finally:
        sub.stop()
    # feed.c after what the subscriber delivered reaches it by this replay only: the link
    # passed every one of them over
    assert replay.through["feed.c"] >= top, (replay.through, delivered, top)
    assert replay.sent == len([n for _, n in want if n > delivered])


@pytest.mark.amqp
@pytest.mark.redis
@pytest.mark.parametrize("bits", [3, 4, 5])
def test_a_take_back_longer_than_the_request_limit_is_carried_to_its_end(
    here: Callable[..., HereComponent], redis_url: str, monkeypatch: pytest.MonkeyPatch,
    bits: int,
) -> None:
    """As above, but the take-back's replay is answered (not refused) and stops at the
    per-request limit (``more``): its end raises ``given`` to its ``through`` again, so the
    request for what follows asked after ``given`` and, on the old carry, carried nothing:
    its replay stopped at the cover's cut and the rest of what the link passed over was lost.
    Every request that follows must carry on until the last number passed over."""
    comp, got, sub = _acks_not_taken(here(link_bits=bits), monkeypatch)
    try:
        assert sub.wait_connected(20)
        link, want, top, _sent, delivered, answers = _passed_over_after_a_replay(
            comp, redis_url, monkeypatch, got)
        assert comp.call(lambda: dict(link.skipped_top)) == {"feed.c": top}
        # from now on a request reads at most 40 numbers
        monkeypatch.setattr(comp.gapfill, "policy", RefusalPolicy(max_range=40))
        after, replayed, asked = delivered, [], 0
        while True:
            asked += 1
            assert asked < 20, (after, replayed)
            request = SourceGapRequest({"feed.c": after}, request_id=(1 << 30) + asked,
                                       link_through=0)
            comp.ask("s", [request])
            assert wait_for(lambda: comp.call(lambda: not link.route.busy()), 20)
            replay = answers[id(request)]
            replayed.append((after, dict(replay.through), replay.sent, replay._more()))
            if not replay._more():
                break
            after = replay.through["feed.c"]
    finally:
        sub.stop()
    assert len(replayed) > 1, replayed  # the limit cut the take-back's replay
    assert replay.through["feed.c"] >= top, replayed
    assert sum(sent for *_, sent, _ in replayed) == len([n for _, n in want if n > delivered])


def _states(link: Any) -> list[tuple[str, str]]:
    """The SUBSCRIPTION states ``link`` sent and has waiting, in order."""
    decoder = Decoder()
    out = []
    for message in [*link.sender.sent, *link.route.responses]:
        if isinstance(message, PackedMessage):
            message = decode_message(message.encode())
        for frame in decoder.decode(message):
            if isinstance(frame, SubscriptionState):
                out.append((frame.status, frame.epoch))
    return out


@pytest.mark.amqp
@pytest.mark.parametrize("how", ["held", "paused"])
def test_a_restart_of_a_paused_link_does_not_announce_it_active(how: str) -> None:
    """A relay restarts every link when numbers were lost upstream, paused ones too (a
    subscription paused by its owner, a link paused for want of credit). Its SUBSCRIPTION
    ACTIVE told such a subscriber its link was live again while it stayed paused; the
    resume that ends the pause resets the link and announces its context itself."""
    link = _link(3)
    if how == "held":
        link.hold(0.0, "subscription paused")
    else:
        link.pause(0.0, "more than 0 publications waiting for credit")
    link.restart("restarted: numbers were lost upstream")
    assert [status for status, _ in _states(link)] == ["PAUSED"]
    assert link.paused
    if how == "held":
        link.release(1.0)
    else:
        link.pump(1.0)  # the PAUSED goes out
        link.pump(2.0)  # then, with credit enough, it resumes
    assert [state for state, _ in _states(link)] == ["PAUSED", "ACTIVE"]
    assert _states(link)[-1] == ("ACTIVE", link.epoch)


@pytest.mark.amqp
@pytest.mark.redis
def test_a_repeat_answered_by_the_ended_replay_takes_nothing_back(
    here: Callable[..., HereComponent], redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A repeat of a request whose replay has ended ("still going?", asked while its end was
    on its way) is answered by that replay's REPLAY-COMPLETE again, nothing replayed: the
    component holds that what it sent arrives. It asks after less than that replay gave only
    because its frames had not arrived yet, so it takes nothing back: were ``given`` lowered,
    the link would send live again (stale) what is on its way to the subscriber."""
    comp, got, sub = _acks_not_taken(here(link_bits=3), monkeypatch)
    try:
        assert sub.wait_connected(20)
        link, _want, _top, _sent, delivered, answers = _passed_over_after_a_replay(
            comp, redis_url, monkeypatch, got)
        repeat = SourceGapRequest({"feed.c": delivered}, request_id=1 << 30)
        comp.ask("s", [repeat])
        assert id(repeat) not in answers  # answered by the ended replay: nothing replayed
        assert comp.call(lambda: dict(link.route.given["s"])) == {"feed.c": 200}
    finally:
        sub.stop()
