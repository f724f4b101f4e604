"""Link ranges answered from a lossless link's context over real processes, at narrow widths.

A component without ``--drop-rate`` numbers a batch link's live runs by position
(``SubscriberLink._send_numbered``): its context holds the publications bare, and a
``GAP-REQUEST`` numbers them as it reads them (``Resend``). The narrow-link suites force loss
with ``--drop-rate``, which turns that path off; here the loss is the subscriber's own: it
drops some of the live frames it receives before its stub sees them, so the stub asks for
them by link range and the component answers from the numbered context.

Checked: every retransmitted frame is one the component sent live with that very link number
(a publication by source number, topic, fields and timestamp; a heartbeat by its
timestamp), and the subscriber ends with exactly its selection, once, in order, without an
``Unrecoverable``. Over ``seqrepair serve --link-bits 3`` and ``5``, and over a relay
(``--link-bits 4``) whose upstream (``--link-bits 3``) is lossless too."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Heartbeat, Publication

from .conftest import ComponentProcess, wait_for
from .test_relay import RelayProcess, expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def _key(frame: Publication | Heartbeat) -> tuple[Any, ...]:
    if isinstance(frame, Heartbeat):
        return ("heartbeat", frame.link_seq, frame.timestamp)
    return (frame.link_seq, frame.source, frame.source_seq, frame.topic, frame.ptype,
            tuple(sorted(frame.fields.items())), frame.permtoken, frame.timestamp)


class LossySubscriber(Subscriber):
    """Drops every ``every``-th live frame it receives (never a reset's frame 0, never a
    retransmission) before its stub sees it, and checks each retransmitted frame against the
    live ones (received or dropped)."""

    def __init__(self, *args: Any, every: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.every = every
        self.live: set[tuple[Any, ...]] = set()
        self.received = 0
        self.dropped = 0
        self.resent = 0
        self.strangers: list[tuple[Any, ...]] = []

    def _take(self, frames: Sequence[object], now: float) -> None:
        kept = []
        for frame in frames:
            if isinstance(frame, Publication | Heartbeat) and frame.link_seq is not None:
                key = _key(frame)
                if frame.retransmit:
                    self.resent += 1
                    if key not in self.live:
                        self.strangers.append(key)
                else:
                    self.live.add(key)
                    self.received += 1
                    if frame.link_seq != 0 and self.received % self.every == 0:
                        self.dropped += 1
                        continue
            kept.append(frame)
        if kept:
            super()._take(kept, now)


def _until_through(got: list[Publication], want: list[tuple[str, int]], sub: Subscriber
                   ) -> None:
    """Until ``got`` reached the last of ``want``."""
    assert wait_for(lambda: bool(got) and got[-1].source_seq >= want[-1][1], 90), (
        f"{len(got)} of {len(want)} taken; {sub.stats()!r}")


def _stop(sub: Subscriber, procs: Sequence[ComponentProcess]) -> None:
    """The subscriber, then every process."""
    sub.stop()
    for proc in procs:
        proc.stop()


def _assert_resends_went_out_live(url: str, redis_url: str, every: int, count: int,
                                  procs: list[ComponentProcess],
                                  wait_upstream: RelayProcess | None = None,
                                  cut: bool = False, bits: int = 0) -> None:
    got: list[Publication] = []
    sub = LossySubscriber(url, "/w/#", on_publication=got.append, link_name="lossy",
                          heartbeat_interval=0.2, every=every)
    sub.start()
    try:
        assert sub.wait_connected(30)
        if wait_upstream is not None:
            wait_upstream.wait_upstream()
        publisher = threading.Thread(target=publish, args=(procs[0].url, "feed.a", count, 0.05))
        publisher.start()
        if cut:  # the connection lost mid-stream: the link resumes its kept context
            assert wait_for(lambda: len(got) >= 30, 60), f"{len(got)} taken; {sub.stats()!r}"
            sub.drop_connection()
        publisher.join(120)
        want = expected(redis_url, "feed.a", "/w/#")
        assert want, "nothing journaled"
        _until_through(got, want, sub)
    finally:
        _stop(sub, procs)
    assert sub.dropped > 0
    assert sub.resent > 0, "no link range was answered"
    strangers = sub.strangers
    if cut and strangers:
        strangers = _lost_in_the_cut(strangers, sub.live, want, bits)
    assert not strangers, f"resent frames never sent live with that number: {strangers[:5]}"
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable
    if cut:
        assert sub.stats().disconnections >= 1


def _lost_in_the_cut(strangers: list[tuple[Any, ...]], live: set[tuple[Any, ...]],
                     want: list[tuple[str, int]], bits: int) -> list[tuple[Any, ...]]:
    """``strangers`` less the frames that went out live but were lost with the cut
    connection (in flight when it dropped: the subscriber never received them live, so it
    cannot compare them). Those form one run: the publications that follow, in the
    journal's order of the selection, the last live frame received before them, numbered
    on from its link number by position (wrapping after the top to 1), each with its
    topic and fields. Whatever is not that run is returned (a stranger)."""
    top = (1 << bits) - 1
    lost = sorted({k for k in strangers if k[0] != "heartbeat"}, key=lambda k: k[2])
    if not lost:
        return strangers
    before = [k for k in live if k[0] != "heartbeat" and k[2] < lost[0][2]]
    if not before:
        return strangers
    last = max(before, key=lambda k: k[2])
    order = [seq for _topic, seq in want]
    at = order.index(last[2])
    topics = dict((seq, topic) for topic, seq in want)
    fine = set()
    link = last[0]
    for i, key in enumerate(lost):
        link = link + 1 if link < top else 1
        seq = key[2]
        if (at + 1 + i < len(order) and order[at + 1 + i] == seq and key[0] == link
                and key[3] == topics[seq] and key[5] == (("n", seq - 1),)
                and not any(k[0] != "heartbeat" and k[2] == seq for k in live)):
            fine.add(key)
        else:
            break
    return [k for k in strangers if k not in fine]


@pytest.mark.parametrize("cut", [False, True])
@pytest.mark.parametrize("bits", [3, 5])
def test_link_ranges_of_a_lossless_narrow_link_resend_what_went_out_live(
    bits: int, cut: bool, redis_url: str, tmp_path: Path
) -> None:
    a = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                         str(bits)).start()
    _assert_resends_went_out_live(a.url, redis_url, every=5, count=150, procs=[a], cut=cut,
                                  bits=bits)


def test_link_ranges_of_a_lossless_relay_resend_what_went_out_live(
    redis_pair: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis = redis_pair
    a = ComponentProcess(a_redis, tmp_path, "--heartbeat", "0.2", "--link-bits", "3").start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--heartbeat",
                     "0.2", "--link-bits", "4").start()
    _assert_resends_went_out_live(b.url, a_redis, every=4, count=150, procs=[a, b],
                                  wait_upstream=b)


@pytest.mark.parametrize("relay", [False, True])
def test_forced_loss_still_drops_on_a_batch_link(
    relay: bool, redis_pair: list[str], tmp_path: Path
) -> None:
    """``--drop-rate`` turns the numbered path off (``Component._lossless``): a batch link
    of ``serve`` (or of a relay, its upstream lossless) loses frames, which its subscriber
    repairs by link range. Were the link taken for lossless, nothing would be lost and no
    request made."""
    a_redis, b_redis = redis_pair
    loss = ("--drop-rate", "0.2", "--drop-seed", "3")
    a = ComponentProcess(a_redis, tmp_path, "--heartbeat", "0.2",
                         *(() if relay else loss)).start()
    procs: list[ComponentProcess] = [a]
    b = None
    if relay:
        b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--heartbeat",
                         "0.2", *loss).start()
        procs.append(b)
    got: list[Publication] = []
    sub = Subscriber((b or a).url, "/w/#", on_publication=got.append, link_name="lossy",
                     heartbeat_interval=0.2)
    sub.start()
    try:
        assert sub.wait_connected(30)
        if b is not None:
            b.wait_upstream()
        publish(a.url, "feed.a", 200, 0.05)
        want = expected(a_redis, "feed.a", "/w/#")
        _until_through(got, want, sub)
    finally:
        _stop(sub, procs)
    assert [(p.topic, p.source_seq) for p in got] == want
    assert sub.stats().requests_sent > 0, "no frame was lost: the drop rate did nothing"
    assert not sub.unrecoverable
