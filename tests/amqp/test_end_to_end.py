"""End to end over loopback: a real component process, real redis-server, real proton clients.

Losses are forced at the component's send path (``--drop-rate``), a subscriber's connection
is cut, and the component process is SIGKILLed and restarted. Every subscriber must end with
exactly the publications it is entitled to, in order, once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest
from proton import Message
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPICS = ["/weather/wind/LEMD", "/weather/rain/LFPG", "/flight/IB3166", "/weather/wind/LFPG"]


def workload(first: int, n: int) -> list[tuple[str, dict, str, str | None]]:
    """Publications first..first+n-1: four topics, every 7th carries permission token 'gold'."""
    return [
        (TOPICS[i % 4], {"n": i, "gust": None}, "update", "gold" if i % 7 == 0 else None)
        for i in range(first, first + n)
    ]


def entitled(all_items: list[tuple[str, dict, str, str | None]], ent: Entitlement) -> list[int]:
    """Source numbers (1-based) a subscriber with ``ent`` must receive, in order."""
    return [
        i + 1
        for i, (topic, fields, ptype, token) in enumerate(all_items)
        if ent.allows(Publication(topic, "s", i + 1, ptype, fields, permtoken=token))
    ]


def seqs(pubs: list[Publication]) -> list[int]:
    return [p.source_seq for p in pubs]


def test_losses_connection_cut_and_component_kill(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--drop-rate", "0.02", "--drop-seed", "7", "--heartbeat", "0.2",
                     "--subscription", "vip=/#;gold;*")  # anyone may attach
    specs = {
        "all": ("/weather/#", Entitlement(topics=("/weather/#",))),
        "wind": ("/weather/wind/*", Entitlement(topics=("/weather/wind/*",))),
        "vip": ("/subscriptions/vip", Entitlement(topics=("/#",), grant={"gold"})),
    }
    got: dict[str, list[Publication]] = {k: [] for k in specs}
    items: list[tuple[str, dict, str, str | None]] = []
    with contextlib.ExitStack() as running:
        subs = {
            k: running.enter_context(
                Subscriber(comp.url, addr, on_publication=got[k].append, heartbeat_interval=0.2,
                           link_name=f"test-{k}")
            )
            for k, (addr, _) in specs.items()
        }
        for sub in subs.values():
            assert sub.connected.wait(10)
        time.sleep(0.3)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.a", journal=Journal.from_url(redis_url))
        )

        def publish(n: int) -> None:
            batch = workload(len(items), n)
            items.extend(batch)
            for k in range(0, n, 50):
                publisher.publish_many(batch[k : k + 50])

        publish(1500)
        assert publisher.flush(30)
        # cut one subscriber's connection: it reattaches with its link name and resumes
        subs["wind"].drop_connection()
        publish(500)
        assert publisher.flush(30)
        # SIGKILL the component and restart it: links come back with context lost (reset)
        comp.kill()
        publish(300)  # journaled by the publisher while the component is down
        comp.start()
        publish(700)
        assert publisher.flush(60)
        expected = {k: entitled(items, ent) for k, (_, ent) in specs.items()}
        done = wait_for(lambda: all(len(got[k]) >= len(expected[k]) for k in specs), 60)
        time.sleep(0.5)  # anything extra (a duplicate) would arrive now
    report = {k: subs[k].stats().as_dict() for k in specs}
    assert done, (report, {k: len(got[k]) for k in got}, comp.log_text()[-3000:])
    for k in specs:
        assert seqs(got[k]) == expected[k], k
    assert report["all"]["repaired"] > 0  # the forced losses were repaired
    assert all(r["resets"] >= 1 for r in report.values())  # the restart reset every link
    assert report["wind"]["disconnections"] >= 1  # the cut (the kill shows as resets)
    assert report["all"]["disconnections"] >= 1
    assert all(r["unrecoverable"] == 0 for r in report.values())


def test_a_stopped_component_logs_its_counters(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component()
    items = workload(0, 10)
    got: list[Publication] = []
    with Subscriber(comp.url, "/#", on_publication=got.append, link_name="counted") as sub:
        assert sub.connected.wait(10)
        with Publisher(comp.url, "feed.a", journal=Journal.from_url(redis_url)) as publisher:
            publisher.publish_many(items)
            assert publisher.flush(timeout=20)
        expected = entitled(items, Entitlement(topics=("/#",)))  # no grant of 'gold'
        assert wait_for(lambda: seqs(got) == expected)
    stopped = comp.stopped_lines()
    assert len(stopped) == 1, comp.log_text()
    assert "ingested=10" in stopped[0], stopped[0]
    assert "trimmed_unsent=0" in stopped[0], stopped[0]


def test_sigterm_while_serving_stops_the_component_cleanly_every_time(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    """SIGTERM (what ``ComponentProcess.stop`` and service managers send) while links are open
    and publications flow: the component stops at its next tick, logs its counters and exits
    0. It used to raise SystemExit from the signal handler, which Python ignores when it lands
    in a finalizer (seen in proton's ``Wrapper.__del__``): the component then ran on."""
    for round_ in range(3):
        comp = component("--heartbeat", "0.2")
        with Subscriber(comp.url, "/#", link_name=f"sigterm-{round_}") as sub:
            assert sub.connected.wait(10)
            with Publisher(comp.url, f"feed.t{round_}",
                           journal=Journal.from_url(redis_url)) as publisher:
                publisher.publish_many(workload(0, 200))
                assert publisher.flush(timeout=20)
                assert comp.proc is not None
                comp.proc.terminate()
                assert comp.proc.wait(10) == 0
        stopped = comp.stopped_lines()
        assert len(stopped) == 1, comp.log_text()


def test_what_a_publisher_journaled_and_died_before_sending_reaches_subscribers_in_order(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    got: list[Publication] = []
    with Subscriber(comp.url, "/#", on_publication=got.append, heartbeat_interval=0.2,
                    link_name="watcher") as sub:
        assert sub.connected.wait(10)
        with Publisher(comp.url, "feed.a", journal=journal) as publisher:
            publisher.publish_many([(TOPICS[0], {"n": n}, "update") for n in range(1, 11)])
            assert publisher.flush(timeout=20)
        # the next publisher process journals 11..15, then dies before it sends them
        dying = SourceSequencer(source="feed.a", bits=32, start_after=journal.high_water("feed.a"))
        journal.append([dying.stamp(TOPICS[0], {"n": n}) for n in range(11, 16)], 32)
        with Publisher(comp.url, "feed.a", journal=journal) as restarted:  # resumes after 15
            restarted.publish_many([(TOPICS[0], {"n": n}, "update") for n in range(16, 21)])
            assert restarted.flush(timeout=20)
        assert wait_for(lambda: len(got) >= 20)
        time.sleep(0.5)  # anything extra (a duplicate) would arrive now
    assert seqs(got) == list(range(1, 21))  # the journaled, never sent 11..15 included, in order
    assert [p.fields["n"] for p in got] == list(range(1, 21))


def test_a_filtered_subscriber_of_a_narrow_source_gets_its_absolute_numbers(
    component: Callable[..., ComponentProcess],
) -> None:
    # an 8-bit source wraps every 255 numbers; the filter skips 199 between two publications,
    # more than half the publisher's space, which in that space would unwrap backwards
    comp = component("--heartbeat", "0.2")
    weather: list[int] = []
    everything: list[int] = []
    rows = []
    for _ in range(3):
        rows.append(("/weather/a", {"x": 1}, "update"))
        rows.extend(("/other/b", {"x": 2}, "update") for _ in range(199))
    with contextlib.ExitStack() as running:
        subs = [
            running.enter_context(Subscriber(
                comp.url, pattern, link_name=name, heartbeat_interval=0.2,
                on_publication=lambda p, out=out: out.append(p.source_seq)))  # type: ignore[misc]
            for name, pattern, out in (("weather", "/weather/#", weather),
                                       ("all", "/#", everything))
        ]
        for sub in subs:
            assert sub.connected.wait(10)
        publisher = running.enter_context(Publisher(comp.url, "feed.8", bits=8))
        publisher.publish_many(rows)
        assert publisher.flush(20)
        assert wait_for(lambda: len(everything) >= 600, 20)
        time.sleep(0.3)
    assert weather == [1, 201, 401]
    assert everything == list(range(1, 601))


def test_live_subscribers_get_the_fields_as_the_journal_holds_them(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    # an AMQP map may have non-string keys; the journal's JSON turns them into text, and what a
    # subscriber gets live must be what a replay (or Spark's rebuild) gives it
    comp = component("--heartbeat", "0.2")
    live: list[Publication] = []
    with Subscriber(comp.url, "/weather/#", link_name="live", heartbeat_interval=0.2,
                    on_publication=live.append) as sub:
        assert sub.connected.wait(10)
        connection = BlockingConnection(comp.url, timeout=10, container_id="plainpub")
        try:
            connection.create_sender("/weather/#").send(Message(
                properties={"message-type": "PUBLICATION", "topic": "/weather/a"},
                body={"m": {1: "one", 2.5: [True, None]}, "n": 3}))
        finally:
            connection.close()
        assert wait_for(lambda: live, 10)
    journaled = list(Journal.from_url(redis_url).iter_range("plainpub", 1, 1))
    expected = {"m": {"1": "one", "2.5": [True, None]}, "n": 3}
    assert [dict(p.fields) for p in live] == [dict(p.fields) for p in journaled] == [expected]
