"""A relay's upstream fetches (``seqrepair.amqp.relay.fetch``) under a hostile subscriber
(review of issue 27): what they hold is bounded relay-wide, not per stalled replay; one
fetch's silence is its own (others are not failed for it), a fetch answering slowly is kept
going, and what could not be fetched is never passed over."""

from __future__ import annotations

import threading
from typing import Any

from seqrepair.amqp.relay.fetch import DOWN_HOLD, UpstreamFetch, UpstreamFetches
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement

ENT = Entitlement(topics=["/w/#"])


class Answering:
    """A fetch link whose upstream answers the whole range at once (as fast as it can)."""

    def __init__(self, fetch: UpstreamFetch) -> None:
        self.fetch, self.error = fetch, None
        self.connected = threading.Event()

    def start(self) -> Answering:
        self.connected.set()
        f = self.fetch
        f.request()
        for seq in range(f.first, f.last + 1):
            f.bytes += 100
            f.take(Publication(source=f.source, source_seq=seq, topic="/w/a/x",
                               fields={"n": seq}))
            if f.done:
                break
        return self

    def stop(self) -> None:
        pass


class Silent(Answering):
    """Attached, and nothing comes (a sparse selection the upstream scans for long)."""

    def start(self) -> Silent:
        self.connected.set()
        return self


class Unattached(Answering):
    """The upstream never takes the link (it is down)."""

    def start(self) -> Unattached:
        return self


def fetches(kind: Any, now: list[float], **options: Any) -> UpstreamFetches:
    return UpstreamFetches(lambda fetch, tag: kind(fetch), lambda: now[0], {},  # type: ignore[arg-type, return-value]
                           **options)


def test_stalled_replays_hold_at_most_limit_fetches_of_publications_relay_wide() -> None:
    """16 replays of a subscriber that gives no credit each ask a range the relay lacks: at
    most ``limit`` fetches run or hold what came, the rest wait; before, each finished fetch
    freed its slot with its publications still held (16 x the bound)."""
    now = [0.0]
    fx = fetches(Answering, now, limit=4, held=100, timeout=30.0)
    made = [fx(ENT, "feed.a", 1 + i * 1000, 500 + i * 1000) for i in range(16)]
    for _ in range(10):
        fx.poll()
    held = sum(len(f.publications) for f in made)
    assert held <= 4 * 100, held
    assert len(fx.running) == 4
    assert len(fx.waiting) == 12
    # the replay takes what came: its slot goes to the next waiting fetch
    taken = made[0].arrived()
    assert [p.source_seq for p in taken] == list(range(1, 101))
    fx.poll()
    assert len(fx.waiting) == 11
    assert sum(len(f.publications) for f in made) <= 4 * 100


def test_what_a_stalled_replay_never_takes_is_dropped_and_said_not_passed_over() -> None:
    now = [0.0]
    fx = fetches(Answering, now, limit=1, held=10, timeout=30.0)
    stalled = fx(ENT, "feed.a", 1, 50)
    other = fx(ENT, "feed.a", 100, 120)
    fx.poll()
    assert stalled.done
    assert [p.source_seq for p in stalled.publications[:2]] == [1, 2]
    stalled.arrived()  # it took 1..10, then stalls on what comes next
    now[0] = 1.0
    fx.poll()  # the slot freed: the other fetch answers, and its replay takes nothing
    assert other.done
    assert other.publications
    now[0] = 2.0
    fx.poll()  # what came is progress: the timeout counts from here
    now[0] = 20.0
    fx.poll()
    assert other.publications  # held while within the timeout
    now[0] = 40.0
    fx.poll()
    assert other.publications == []
    assert other.error is not None
    assert "took nothing" in other.error
    assert other.through == 99  # before the first untaken number: asked again, not passed over
    assert other.lost is None
    assert not fx.running


def test_one_fetch_s_silence_fails_no_other_and_answers_keep_a_fetch_going() -> None:
    """A hostile fetch whose selection brings nothing for the timeout ends alone; a fetch of
    another subscriber a second later is asked upstream, not failed at once."""
    now = [0.0]
    fx = fetches(Silent, now, timeout=30.0)
    hostile = fx(Entitlement(topics=["/w/zzz/nothing"]), "feed.a", 1, 100_000)
    now[0] = 30.0
    fx.poll()
    assert hostile.done
    assert hostile.error is not None
    now[0] = 31.0
    honest = fx(Entitlement(topics=["/w/a/*"]), "feed.a", 500, 600)
    assert not honest.done  # asked, not failed for the other's silence
    # answers keep coming, each within the timeout: the fetch is not cut at a fixed deadline
    for step in range(1, 5):
        now[0] = 31.0 + step * 20.0
        honest.take(Publication(source="feed.a", source_seq=500 + step, topic="/w/a/x",
                                fields={}))
        fx.poll()
        assert not honest.done, honest.error
    now[0] += 31.0
    fx.poll()
    assert honest.done
    assert honest.error is not None


def test_an_upstream_that_takes_no_fetch_link_fails_the_next_fetches_at_once() -> None:
    now = [0.0]
    fx = fetches(Unattached, now, connect_timeout=10.0)
    first = fx(ENT, "feed.a", 1, 10)
    now[0] = 10.0
    fx.poll()
    assert first.error is not None
    assert "did not take the fetch link" in first.error
    now[0] = 10.0 + DOWN_HOLD / 2
    assert fx(ENT, "feed.a", 20, 30).error is not None  # the upstream is down: said at once
    now[0] = 10.0 + DOWN_HOLD + 1
    assert not fx(ENT, "feed.a", 20, 30).done
