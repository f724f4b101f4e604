"""Durable subscriptions (issue 22 §2): a subscriber that goes away and comes back, as a new
process, gets everything published while it was away, from the position the component keeps
in Redis for it.

Real parts only: a redis-server, ``seqrepair serve`` and ``seqrepair subscribe`` /
``seqrepair publish`` as processes (kill -9 is SIGKILL of the process), the REST API over HTTP.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from seqrepair.amqp.client.subscribecmd import UNRECOVERABLE_EXIT
from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal import EmbeddedRedis
from seqrepair.journal.journal import Journal
from seqrepair.journal.positions import CREATED_FIELD, link_durable, position_key

from .conftest import ComponentProcess, FreePort, _env, wait_for
from .test_gateway_publish import gateway_process
from .test_rest_serve import Rest

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", *args]


def subscribe(comp: ComponentProcess, tmp: Path, tag: str, *args: str,
              output: Path | None = None) -> subprocess.Popen[bytes]:
    """``seqrepair subscribe`` writing its deliveries to ``output`` (``out-<tag>.jsonl``)."""
    log = open(tmp / f"sub-{tag}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        _cli("--log-level", "info", "subscribe", "--url", comp.url, "--heartbeat", "0.2",
             "--output", str(output or tmp / f"out-{tag}.jsonl"),
             "--ready-file", str(tmp / f"ready-sub-{tag}"),
             "--stats-file", str(tmp / f"stats-{tag}.json"), *args),
        env=_env(), stdout=log, stderr=subprocess.STDOUT,
    )


def publish(comp: ComponentProcess, redis_url: str, source: str, count: int,
            rate: float = 0.0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _cli("publish", "--url", comp.url, "--redis-url", redis_url, "--source", source,
             "--count", str(count), "--rate", str(rate), "--topics", "/load/a,/load/b",
             "--batch", "16"),
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def finished(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def records(path: Path) -> list[dict[str, Any]]:
    """The whole lines of a JSON-lines output (a kill -9 may leave a torn last line)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def numbers(recs: list[dict[str, Any]], source: str) -> list[int]:
    return [r["source_seq"] for r in recs if r["source"] == source]


def ready(tmp: Path, tag: str, proc: subprocess.Popen[bytes]) -> None:
    assert wait_for(lambda: (tmp / f"ready-sub-{tag}").exists() or proc.poll() is not None, 60)
    assert proc.poll() is None, (tmp / f"sub-{tag}.log").read_text()


def test_a_rest_subscription_gets_what_was_published_before_its_first_attach(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    rest_port = FreePort()
    comp = component("--heartbeat", "0.2", "--rest", rest_port)
    port = rest_port.number
    assert finished(publish(comp, redis_url, "feed.old", 50)) == 0  # before: not owed
    status, made = Rest(port)("POST", "/subscriptions", {"topic": "/load/#"})
    assert status == 201, made
    # published between the creation and the first attach: all of it is owed
    assert finished(publish(comp, redis_url, "feed.a", 300)) == 0
    assert finished(publish(comp, redis_url, "feed.old", 20)) == 0
    assert finished(publish(comp, redis_url, "feed.new", 40)) == 0  # a source born meanwhile
    sub = subscribe(comp, tmp_path, "q", "--address", made["queue"], "--count", "360")
    assert finished(sub) == 0, (tmp_path / "sub-q.log").read_text()
    got = records(tmp_path / "out-q.jsonl")
    assert numbers(got, "feed.a") == list(range(1, 301))
    assert numbers(got, "feed.old") == list(range(51, 71))
    assert numbers(got, "feed.new") == list(range(1, 41))
    assert len(got) == 360


def test_a_position_behind_retention_is_unrecoverable_trimmed_then_everything_after(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2", "--retain-count", "100",
                     "--retention-interval", "0.2")
    # the first attach makes the durable position: the journal's high-water, nothing yet
    first = subscribe(comp, tmp_path, "1", "--address", "/load/#", "--link-name", "late")
    ready(tmp_path, "1", first)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    client = redis.Redis.from_url(redis_url)
    assert client.hexists(position_key(link_durable("late")), CREATED_FIELD)
    # while it is away: 400 published, retention keeps the newest 100
    assert finished(publish(comp, redis_url, "feed.a", 400)) == 0
    journal = Journal.from_url(redis_url)
    assert wait_for(lambda: journal.info("feed.a").trimmed_through == 300, 20)
    again = subscribe(comp, tmp_path, "2", "--address", "/load/#", "--link-name", "late",
                      "--count", "100")
    # it stopped as told, but lost numbers: the exit status says so (was 0)
    assert finished(again) == UNRECOVERABLE_EXIT, (tmp_path / "sub-2.log").read_text()
    assert numbers(records(tmp_path / "out-2.jsonl"), "feed.a") == list(range(301, 401))
    stats = json.loads((tmp_path / "stats-2.json").read_text())
    assert any("trimmed" in u and "feed.a" in u for u in stats["unrecoverable_events"]), stats
    journal.close()
    client.close()


def _position(client: redis.Redis, durable: str) -> dict[str, int]:
    raw = client.hgetall(position_key(durable))
    return {k.decode(): int(v) for k, v in raw.items() if k.decode() != CREATED_FIELD}


def test_kill_9_three_times_mid_stream_loses_nothing_and_repeats_only_the_unacknowledged(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    client = redis.Redis.from_url(redis_url)
    durable = link_durable("dur")
    name = ("--address", "/load/#", "--link-name", "dur")
    subs = [subscribe(comp, tmp_path, "0", *name)]
    ready(tmp_path, "0", subs[0])
    counts = {"feed.a": 6000, "feed.b": 4000}
    # about 9 s of publishing: three rounds of kill -9 and a new subscriber process (its
    # start alone takes 2-3 s on a loaded machine) must all fall inside it
    publishers = [publish(comp, redis_url, "feed.a", counts["feed.a"], rate=650),
                  publish(comp, redis_url, "feed.b", counts["feed.b"], rate=450)]
    positions: list[dict[str, int]] = []
    for k in range(1, 4):
        # mid-stream: once this process has written some
        assert wait_for(lambda k=k: len(records(tmp_path / f"out-{k - 1}.jsonl")) >= 300, 30)
        time.sleep(0.1 * k)
        assert all(proc.poll() is None for proc in publishers)  # still publishing
        subs[-1].send_signal(signal.SIGKILL)
        subs[-1].wait(10)
        time.sleep(0.4)  # the component writes the position when the link goes
        positions.append(_position(client, durable))
        subs.append(subscribe(comp, tmp_path, str(k), *name))
        ready(tmp_path, str(k), subs[-1])
    for proc in publishers:
        assert finished(proc) == 0, proc.stderr.read() if proc.stderr else ""

    def outputs() -> list[list[dict[str, Any]]]:
        return [records(tmp_path / f"out-{k}.jsonl") for k in range(4)]

    def complete() -> bool:
        union = {(r["source"], r["source_seq"]) for out in outputs() for r in out}
        return len(union) >= sum(counts.values())

    wait_for(complete, 60)
    time.sleep(0.5)  # a duplicate would come now
    subs[-1].terminate()  # SIGTERM: it writes what it has and exits 0
    assert finished(subs[-1]) == 0, (tmp_path / "sub-3.log").read_text()
    for source, count in counts.items():
        seen: list[int] = []
        for k, out in enumerate(outputs()):
            mine = numbers(out, source)
            assert mine == sorted(set(mine)), f"{source}: process {k} out of order"
            if k:
                # what comes again is only what process k-1 had not acknowledged
                acked = positions[k - 1].get(source, 0)
                again = [n for n in mine if n <= max(seen, default=0)]
                assert all(n > acked for n in again), (source, k, acked, again[:5])
                assert len(again) <= max(seen, default=0) - acked
            seen.extend(mine)
        assert sorted(set(seen)) == list(range(1, count + 1)), f"{source}: lost some"
        # the position did advance as the application took publications
        assert positions[-1].get(source, 0) > 0, positions
    client.close()


def _items(n: int) -> list[tuple[str, dict[str, Any], str]]:
    return [("/load/a", {"n": i}, "update") for i in range(n)]


def test_the_library_iterator_acknowledges_what_the_loop_is_done_with_and_a_restart_resumes_there(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2")
    client = redis.Redis.from_url(redis_url)
    journal = Journal.from_url(redis_url)
    with Publisher(comp.url, "feed.i", journal=journal) as publisher:
        sub = Subscriber(comp.url, "/load/#", link_name="iter", heartbeat_interval=0.2).start()
        assert sub.connected.wait(20)
        publisher.publish_many(_items(500))
        assert publisher.flush(30)
        first: list[int] = []
        for pub in sub:
            first.append(pub.source_seq)
            if len(first) == 150:
                break  # the loop is not done with the 150th: it never asks for the 151st
        # what the loop was done with reaches the component (an ACK within ~20 ms)
        assert wait_for(lambda: _position(client, link_durable("iter")).get("feed.i") == 149)
        sub.stop()
        assert first == list(range(1, 151))
        time.sleep(0.3)
        assert _position(client, link_durable("iter")) == {"feed.i": 149}
        # a new subscriber under the same name: from the 150th on, published while it was away
        publisher.publish_many(_items(100))
        assert publisher.flush(30)
        again: list[int] = []
        with Subscriber(comp.url, "/load/#", link_name="iter", heartbeat_interval=0.2,
                        on_publication=lambda p: again.append(p.source_seq)) as resumed:
            assert wait_for(lambda: len(again) >= 451, 30)
            time.sleep(0.3)
        assert again == list(range(150, 601))
        assert resumed.stats().delivered == 451
    # the callback returned for all of them: all taken, flushed when the link went
    assert wait_for(lambda: _position(client, link_durable("iter")) == {"feed.i": 600})
    journal.close()
    client.close()


def test_a_plain_subscriber_and_a_declined_one_keep_no_position(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2")
    client = redis.Redis.from_url(redis_url)
    with Subscriber(comp.url, "/load/#") as plain, \
            Subscriber(comp.url, "/load/#", link_name="declined", durable=False) as declined:
        assert plain.connected.wait(20)
        assert declined.connected.wait(20)
        assert not plain.durable
        assert not declined.durable
    assert client.keys("seqrepair:position:*") == []
    client.close()


def test_a_rest_queue_killed_and_restarted_under_another_link_name_resumes_after_its_position(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    rest_port = FreePort()
    comp = component("--heartbeat", "0.2", "--rest", rest_port)
    port = rest_port.number
    status, made = Rest(port)("POST", "/subscriptions", {"topic": "/load/#"})
    assert status == 201, made
    client = redis.Redis.from_url(redis_url)
    first = subscribe(comp, tmp_path, "a", "--address", made["queue"])  # a random link name
    ready(tmp_path, "a", first)
    assert finished(publish(comp, redis_url, "feed.q", 400)) == 0
    assert wait_for(lambda: len(records(tmp_path / "out-a.jsonl")) >= 400, 30)
    # acknowledged (flushed, then ACK, then written by the component's tick)
    assert wait_for(lambda: _position(client, f"sub/{made['id']}") == {"feed.q": 400}, 10)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert finished(publish(comp, redis_url, "feed.q", 300)) == 0  # while nobody is attached
    again = subscribe(comp, tmp_path, "b", "--address", made["queue"], "--count", "300")
    assert finished(again) == 0, (tmp_path / "sub-b.log").read_text()
    # everything it had acknowledged is not sent again: exactly the rest
    assert numbers(records(tmp_path / "out-b.jsonl"), "feed.q") == list(range(401, 701))
    client.close()


def test_a_durable_subscriber_behind_a_gateway_resumes_after_what_it_took(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    client = redis.Redis.from_url(redis_url)
    journal = Journal.from_url(redis_url)
    try:
        with gateway_process(comp.url, tmp_path) as listen:  # --name edge, port retried
            got: list[int] = []
            with Publisher(comp.url, "feed.g", journal=journal) as publisher:
                with Subscriber(listen, "/load/#", link_name="far", heartbeat_interval=0.2,
                                on_publication=lambda p: got.append(p.source_seq)) as sub:
                    assert sub.connected.wait(20)
                    publisher.publish_many(_items(120))
                    assert publisher.flush(30)
                    assert wait_for(lambda: len(got) >= 120, 30)
                    # the gateway forwards the ACKs; the durable is the upstream link's name
                    assert wait_for(
                        lambda: _position(client, link_durable("edge.far")) == {"feed.g": 120}, 10)
                publisher.publish_many(_items(80))  # while it is away
                assert publisher.flush(30)
                again: list[int] = []
                with Subscriber(listen, "/load/#", link_name="far", heartbeat_interval=0.2,
                                on_publication=lambda p: again.append(p.source_seq)):
                    assert wait_for(lambda: len(again) >= 80, 30)
                    time.sleep(0.3)
            assert got == list(range(1, 121))
            assert again == list(range(121, 201))
    finally:
        journal.close()
        client.close()


def test_with_resume_the_output_file_holds_each_publication_once_across_three_kill_9(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    out = tmp_path / "out-same.jsonl"
    name = ("--address", "/load/#", "--link-name", "once", "--resume")

    def start(k: int) -> subprocess.Popen[bytes]:
        proc = subscribe(comp, tmp_path, str(k), *name, output=out)
        ready(tmp_path, str(k), proc)
        return proc

    def written() -> int:
        return len(records(out))

    counts = {"feed.a": 4000, "feed.b": 3000}
    proc = start(0)
    # about 8 s of publishing: three rounds of kill -9 and a new subscriber process (its
    # start alone takes 2-3 s on a loaded machine) must all fall inside it
    publishers = [publish(comp, redis_url, "feed.a", counts["feed.a"], rate=500),
                  publish(comp, redis_url, "feed.b", counts["feed.b"], rate=375)]
    for k in range(1, 4):
        before = written()
        assert wait_for(lambda before=before: written() >= before + 300, 30)
        assert all(p.poll() is None for p in publishers)  # mid-stream
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = start(k)  # the same --output: what it holds is not written again
    for p in publishers:
        assert finished(p) == 0
    assert wait_for(lambda: written() >= sum(counts.values()), 60)
    time.sleep(0.5)  # a repeat would be written now
    proc.terminate()
    assert finished(proc) == 0
    got = records(out)
    for source, count in counts.items():
        assert numbers(got, source) == list(range(1, count + 1)), source
    assert len(got) == sum(counts.values())


def test_a_redis_outage_while_positions_advance_loses_none_of_them(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    comp = ComponentProcess(private_server.url, tmp_path, "--heartbeat", "0.2",
                            "--redis-timeout", "0.5").start()
    journal = Journal.from_url(private_server.url)
    got: list[int] = []

    def slowly(p: Publication) -> None:
        got.append(p.source_seq)
        time.sleep(0.002)  # about 2 s to take them all: Redis goes away meanwhile

    try:
        with Publisher(comp.url, "feed.r", journal=journal) as publisher, \
                Subscriber(comp.url, "/load/#", link_name="outage", heartbeat_interval=0.2,
                           on_publication=slowly) as sub:
            assert sub.connected.wait(20)
            publisher.publish_many(_items(1000))
            assert publisher.flush(30)
            assert wait_for(lambda: len(got) >= 100, 10)
            private_server.stop()  # positions cannot be written now; ACKs go on
            assert wait_for(lambda: len(got) >= 600, 20)
            private_server.start()
            assert wait_for(lambda: len(got) >= 1000, 30)
            client = redis.Redis.from_url(private_server.url)
            # kept through the outage and written once Redis is back
            assert wait_for(lambda: _position(client, link_durable("outage")) == {"feed.r": 1000},
                            20)
            client.close()
        assert got == list(range(1, 1001))
        assert "positions not written; kept and tried again" in comp.log_text()
    finally:
        comp.stop()
        journal.close()


def test_positions_outlive_a_kill_9_of_the_component_and_the_subscriber_together(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    client = redis.Redis.from_url(redis_url)
    name = ("--address", "/load/#", "--link-name", "both")
    first = subscribe(comp, tmp_path, "x", *name)
    ready(tmp_path, "x", first)
    assert finished(publish(comp, redis_url, "feed.k", 400)) == 0
    assert wait_for(lambda: _position(client, link_durable("both")) == {"feed.k": 400}, 20)
    first.send_signal(signal.SIGKILL)
    comp.kill()
    first.wait(10)
    comp.start()  # a new process on the same port: it knows nothing but what Redis holds
    assert finished(publish(comp, redis_url, "feed.k", 100)) == 0
    again = subscribe(comp, tmp_path, "y", *name, "--count", "100")
    assert finished(again) == 0, (tmp_path / "sub-y.log").read_text()
    assert numbers(records(tmp_path / "out-y.jsonl"), "feed.k") == list(range(401, 501))
    client.close()
