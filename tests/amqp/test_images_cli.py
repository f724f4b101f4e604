"""``seqrepair subscribe --resync-on-unrecoverable --images FILE`` and ``--on-overdue`` as an
operator runs them: separate processes over loopback, a real component and redis-server."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.core.image import ImageCache
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .test_images import items

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", *args]


def test_subscribe_resyncs_an_unrecoverable_gap_and_keeps_the_images_file(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    out, stats, ready, images = (tmp_path / "out.jsonl", tmp_path / "stats.json",
                                 tmp_path / "ready", tmp_path / "images.jsonl")
    subscriber = subprocess.Popen(
        cli("subscribe", "--url", comp.url, "--address", "/weather/#", "--link-name", "cli-away",
            "--count", "30", "--output", str(out), "--stats-file", str(stats),
            "--ready-file", str(ready), "--resync-on-unrecoverable", "--images", str(images)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_for(ready.exists, 60), "the subscriber did not attach"
        publisher = Publisher(comp.url, "feed.a", journal=journal).start()
        try:
            published = publisher.publish_many(items(1, 10))
            assert publisher.flush(30)
            assert wait_for(lambda: images.exists() and len(images.read_text().splitlines())
                            == 4, 30)  # written every second: the four items
            comp.kill()
            published += publisher.publish_many(items(11, 100))
        finally:
            publisher.close(timeout=0.0)
        journal.trim_through("feed.a", 90, now=0.0)
        comp.start()
        assert wait_for(lambda: '"image": true' in out.read_text(), 30)
        with Publisher(comp.url, "feed.a", journal=journal) as publisher:
            published += publisher.publish_many(items(111, 20))
            assert publisher.flush(30)
        assert subscriber.wait(60) == 0, subscriber.stderr.read() if subscriber.stderr else ""
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
            subscriber.wait()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    delivered = [r["source_seq"] for r in records if not r.get("image")]
    imaged = [r for r in records if r.get("image")]
    assert delivered == list(range(1, 11)) + list(range(111, 131))
    assert {r["source_seq"] for r in imaged} == {110}
    assert records.index(imaged[-1]) < [r["source_seq"] for r in records].index(111)
    whole = ImageCache()
    for pub in published:
        whole.apply(pub)
    kept: dict[str, Any] = {}
    for line in images.read_text().splitlines():
        entry = json.loads(line)
        kept[entry["topic"]] = entry["fields"]
    assert kept == whole.snapshot()
    # the position is beside the file, naming its bytes
    assert json.loads((tmp_path / "images.jsonl.position").read_text()) == {
        "current_through": {"feed.a": 130},
        "images_sha256": hashlib.sha256(images.read_bytes()).hexdigest(),
        "subscription": {"address": "/weather/#", "link_name": "cli-away"}}
    report = json.loads(stats.read_text())
    assert report["images_delivered"] == len(imaged)
    assert len(report["unrecoverable_events"]) == 1
    journal.close()


def _silent_component(comp: ComponentProcess, seconds: float) -> None:
    assert comp.proc is not None
    comp.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        comp.proc.send_signal(signal.SIGCONT)


@pytest.mark.parametrize(("policy", "reconnects", "probes"), [
    ("wait", False, False), ("request", False, True), ("disconnect", True, None)])
def test_on_overdue_decides_what_a_silent_link_does(
    component: Callable[..., ComponentProcess], tmp_path: Path, policy: str, reconnects: bool,
    probes: bool | None,
) -> None:
    """``wait`` only alerts; ``request`` probes for the next number; ``disconnect`` drops the
    connection and attaches again (whose new context may itself ask for repair)."""
    comp = component("--heartbeat", "0.2")
    stats, ready, log = tmp_path / "stats.json", tmp_path / "ready", tmp_path / "sub.log"
    # ended by SIGTERM once what the policy does is done, not by a --duration counted from
    # its start: a loaded machine can take seconds to start it, and it ended before or during
    # the silence (no reconnect seen, no probe sent)
    with open(log, "wb") as err:
        subscriber = subprocess.Popen(
            cli("--log-level", "info", "subscribe", "--url", comp.url, "--address",
                "/weather/#", "--duration", "120", "--stats-file", str(stats), "--ready-file",
                str(ready), "--on-overdue", policy),
            stdout=subprocess.PIPE, stderr=err, text=True,
        )

    def connections() -> int:
        return len(re.findall(r"\] connected ", log.read_text(errors="replace")))

    try:
        assert wait_for(ready.exists, 60), "the subscriber did not attach"
        time.sleep(0.5)
        _silent_component(comp, 2.0)  # ten heartbeat intervals without a frame
        if reconnects:
            assert wait_for(lambda: connections() >= 2, 30), log.read_text()
        time.sleep(1.5)  # a reconnect or a probe that should not come would come by now
        subscriber.terminate()
        assert subscriber.wait(30) == 0, log.read_text()[-3000:]
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
            subscriber.wait()
    report = json.loads(stats.read_text())
    assert (report["connections"] > 1) is reconnects, report
    if probes is not None:
        assert (report["requests_sent"] > 0) is probes, report


def test_on_overdue_takes_only_the_three_policies(tmp_path: Path) -> None:
    run = subprocess.run(cli("subscribe", "--address", "/#", "--on-overdue", "panic"),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "--on-overdue" in run.stderr


@pytest.mark.parametrize("option", [("--resync-on-unrecoverable",),
                                    ("--on-overdue", "disconnect"), ("--on-overdue", "wait")])
def test_a_brokered_subscriber_refuses_what_only_a_component_does(option: tuple[str, ...]) -> None:
    run = subprocess.run(cli("subscribe", "--address", "/#", "--broker", "127.0.0.1:1",
                             "--redis-url", "redis://127.0.0.1:1", *option),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert f"seqrepair subscribe --broker: {' '.join(option)} needs a component" in run.stderr


def test_the_library_subscriber_takes_the_overdue_policy_and_refuses_others() -> None:
    from seqrepair.amqp.client.subscriber import Subscriber
    from seqrepair.core.errors import InvalidConfigError
    from seqrepair.core.overdue import OverduePolicy

    sub = Subscriber("127.0.0.1:1", "/weather/#", overdue_policy="disconnect")
    assert sub.stub.overdue_policy is OverduePolicy.DISCONNECT
    with pytest.raises(InvalidConfigError) as refused:
        Subscriber("127.0.0.1:1", "/weather/#", overdue_policy="panic")
    assert refused.value.got == "panic"
