"""A link reset with a queue of several sources sends none of it stale (issue 27: "a relay
still sends stale frames"), deterministically, over a real subscriber and redis with the
component in a thread of the test (what a relay does on a reset is the component's own).

The subscriber's window is held shut (its ACKs are not taken for a while), so what the
component fans out meanwhile waits unnumbered on the link: feed.b, feed.c and feed.d, in
that order. Then the link restarts (``SubscriberLink.restart``, as a relay restarts every
link when its upstream lost numbers; a bare reset, unannounced, left the subscriber's ACKs
naming the old context, never taken: its window stayed shut for good). The reset frame and
the window's first publications (feed.b's) go out, and the subscriber's source replay, cut
for feed.b where the link numbered it, delivers feed.c and feed.d whole. Before the fix the
link then sent every one of them again, live: stale frames the stub dropped (383-411 at 4
and 5 bits; at 3 bits not drained in 10 s), each window of them a tail probe and a source
replay. Now the link passes them over (``given_skipped``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import seqrepair.amqp.component.requests as requests_module
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication

from .conftest import wait_for
from .inthread import HereComponent
from .test_relay import expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCES = ("feed.b", "feed.c", "feed.d")


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_a_reset_link_sends_none_of_what_its_replay_gave(
    here: Callable[..., HereComponent], redis_url: str, bits: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    comp = here(link_bits=bits)
    shut = {"on": False}
    take_ack = requests_module.receive_ack

    def receive_ack(*args: Any, **kwargs: Any) -> Any:
        return None if shut["on"] else take_ack(*args, **kwargs)

    monkeypatch.setattr(requests_module, "receive_ack", receive_ack)
    got: list[Publication] = []
    sub = Subscriber(comp.here_url, "/w/#", on_publication=got.append, link_name="s",
                     heartbeat_interval=0.2).start()
    try:
        assert sub.wait_connected(20)
        publish(comp.here_url, "feed.a", 10)
        assert wait_for(lambda: len(got) >= 6, 20), sub.stats()
        shut["on"] = True  # the window shuts once full: the rest waits queued on the link
        for source in SOURCES:
            publish(comp.here_url, source, 300)
        want = {source: expected(redis_url, source, "/w/#") for source in ("feed.a", *SOURCES)}
        total = sum(len(w) for w in want.values())
        link = comp.call(lambda: comp.links["s"])
        assert wait_for(lambda: comp.call(lambda: len(link.pending)) + len(got) >= total - 8,
                        20)

        def reset() -> None:  # the ACKs count again; the link starts a new context
            shut["on"] = False
            link.restart("restarted")  # as a relay does when numbers were lost upstream
            comp._pump_link(link, comp.clock())

        comp.call(reset)

        def has_all() -> bool:
            last = {p.source: p.source_seq for p in got}
            return all(last.get(source, 0) >= w[-1][1] for source, w in want.items())

        assert wait_for(has_all, 60), (
            sub.stub.stats, comp.call(lambda: (dict(link.stats), len(link.pending))),
            {s: (len([p for p in got if p.source == s]), len(w)) for s, w in want.items()})
        # whatever the link still held for it is passed over at once, never sent
        assert wait_for(lambda: not comp.call(lambda: len(link.pending)), 10), (
            comp.call(lambda: dict(link.stats)))
        stats = comp.call(lambda: dict(link.stats))
    finally:
        sub.stop()
    for source, w in want.items():
        assert [(p.topic, p.source_seq) for p in got if p.source == source] == w, source
    assert len(got) == sum(len(w) for w in want.values())
    assert not sub.unrecoverable
    assert sub.stub.stats.resets >= 1
    assert sub.stub.stats.stale_dropped == 0, (sub.stub.stats, stats)
    assert stats["given_skipped"] > 0, stats  # the replay gave feed.c and feed.d
