"""``seqrepair publish --file`` and ``seqrepair subscribe`` as an operator runs them: separate
processes over AMQP to a ``seqrepair serve``, the journal in a real redis-server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

ROWS = [
    {"topic": "/weather/wind/LEMD", "fields": {"speed": 12, "gust": None}, "ptype": "add"},
    {"topic": "/weather/wind/LEMD", "fields": {"speed": 14}},
    {"topic": "/traffic/A6", "fields": {"jam": True}},  # not under the subscriber's pattern
    {"topic": "/weather/wind/LEMD", "fields": {"speed": 99}, "permtoken": "secret"},  # not granted
    {"topic": "/weather/wind/LEMD", "fields": {"speed": 13}, "ptype": "correction"},
    {"topic": "/weather/rain/LFPG", "fields": {"mm": 0.4}, "permtoken": "public"},
]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", *args]


def test_a_file_published_is_printed_by_a_subscriber_in_order_with_its_statistics(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--default-grant", "public")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in ROWS) + "\n")  # a blank line too
    out, stats, ready = tmp_path / "out.jsonl", tmp_path / "stats.json", tmp_path / "ready"
    subscriber = subprocess.Popen(
        cli("subscribe", "--url", comp.url, "--address", "/weather/#", "--count", "4",
            "--output", str(out), "--stats-file", str(stats), "--ready-file", str(ready)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_for(ready.exists, 60), "the subscriber did not attach"
        published = subprocess.run(
            cli("publish", "--url", comp.url, "--source", "feed.cli", "--redis-url", redis_url,
                "--file", str(rows)),
            capture_output=True, text=True, timeout=60,
        )
        assert published.returncode == 0, published.stderr
        assert json.loads(published.stdout) == {
            "published": 6, "accepted": 6, "rejected": 0, "flushed": True, "journaled": 6,
            "not_journaled": 0,
        }
        assert subscriber.wait(30) == 0
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
            subscriber.wait()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["source"], r["source_seq"], r["topic"], r["ptype"], r["fields"], r["permtoken"])
            for r in records] == [
        ("feed.cli", 1, "/weather/wind/LEMD", "image", {"speed": 12, "gust": None}, None),
        ("feed.cli", 2, "/weather/wind/LEMD", "update", {"speed": 14}, None),
        ("feed.cli", 5, "/weather/wind/LEMD", "correction", {"speed": 13}, None),
        ("feed.cli", 6, "/weather/rain/LFPG", "update", {"mm": 0.4}, "public"),
    ]
    report = json.loads(stats.read_text())
    assert report["delivered"] == 4
    assert report["duplicates"] == 0
    assert report["unrecoverable"] == 0
    assert report["unrecoverable_events"] == []


def test_sigterm_ends_a_subscriber_with_its_output_and_statistics_written(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component()
    out, stats, ready = tmp_path / "out.jsonl", tmp_path / "stats.json", tmp_path / "ready"
    subscriber = subprocess.Popen(
        cli("subscribe", "--url", comp.url, "--address", "/weather/#", "--output", str(out),
            "--stats-file", str(stats), "--ready-file", str(ready)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_for(ready.exists, 60), "the subscriber did not attach"
        rows = tmp_path / "rows.jsonl"
        rows.write_text("".join(json.dumps(row) + "\n" for row in ROWS[:2]))
        subprocess.run(cli("publish", "--url", comp.url, "--source", "feed.term",
                           "--redis-url", redis_url, "--file", str(rows)),
                       check=True, capture_output=True, timeout=60)
        # delivered: the output is flushed every tick (then acknowledged), not only at the end
        assert wait_for(lambda: out.exists() and out.read_text().count("\n") >= 2, 30), (
            subscriber.poll(), out.exists() and out.read_text())
        subscriber.terminate()
        assert subscriber.wait(30) == 0
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
            subscriber.wait()
    assert [json.loads(line)["source_seq"] for line in out.read_text().splitlines()] == [1, 2]
    assert json.loads(stats.read_text())["delivered"] == 2
