"""``seqrepair publish`` as a user runs it (issue 22 §3): it rides out a short Redis restart
and loses nothing, never calls journaled publications unjournaled, publishes the good lines of
a ``--file`` before a bad one and reads the file in bounded pieces.

Real parts: a real redis-server (stopped and started again on the same port and data), the
component (``seqrepair serve``) and the publish command as child processes, a subscriber.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from seqrepair.journal.journal import Journal

from .conftest import _env, wait_for
from .test_journaling_publisher_outage import Watched, watched

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPIC = "/weather/wind/LEMD"


def publish_command(w: Watched, source: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "seqrepair.cli", "publish", "--url", w.url, "--source",
            source, "--address", "/weather/#", *args]


def journaled_ns(w: Watched, source: str, count: int) -> list[int]:
    journal = Journal.from_url(w.server.url)
    assert journal.high_water(source) == count
    return [p.fields["n"] for p in journal.read_range(source, 1, count)]


def wait_journaling(w: Watched, source: str, proc: subprocess.Popen[str]) -> None:
    """Until the command has journaled some of ``source`` (it registered it and publishes):
    a loaded machine can take seconds to start it, and Redis stopped before its first call
    fails it at once ("redis unavailable during register"), which is not the outage under
    test. The command must still be running then."""
    journal = Journal.from_url(w.server.url)
    try:
        assert wait_for(lambda: journal.high_water(source) > 0 or proc.poll() is not None, 60)
    finally:
        journal.close()
    assert proc.poll() is None, proc.communicate()[1][-3000:]


def test_a_two_second_redis_restart_loses_nothing_and_publishes_nothing_twice(
    tmp_path: Path,
) -> None:
    count = 20_000
    with watched(tmp_path) as w:
        proc = subprocess.Popen(
            publish_command(w, "feed.cli", "--redis-url", w.server.url, "--topics", TOPIC,
                            "--count", str(count), "--rate", "4000", "--timeout", "60"),
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        wait_journaling(w, "feed.cli", proc)  # well inside the run (about 5 s at 4,000/s)
        w.server.stop()
        time.sleep(2.0)
        w.server.start()  # same port, same data
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        record = json.loads(out.strip().splitlines()[-1])
        assert (record["published"], record["journaled"], record["not_journaled"]) == (
            count, count, 0)
        assert journaled_ns(w, "feed.cli", count) == list(range(count))  # each once, in order
        assert wait_for(lambda: len(w.got) >= count, 60), len(w.got)
        time.sleep(0.5)  # a duplicate would arrive now
        assert w.numbers() == list(range(1, count + 1))
        assert w.subscriber.stats().unrecoverable == 0


def test_an_outage_longer_than_the_timeout_is_reported_exactly_and_resumed_without_duplicates(
    tmp_path: Path,
) -> None:
    with watched(tmp_path) as w:
        first = subprocess.Popen(
            publish_command(w, "feed.out", "--redis-url", w.server.url, "--topics", TOPIC,
                            "--count", "5000", "--rate", "2000", "--timeout", "2"),
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        wait_journaling(w, "feed.out", first)  # inside the run (about 2.5 s at 2,000/s)
        w.server.stop()  # and it stays down past the command's --timeout
        out, err = first.communicate(timeout=60)
        assert first.returncode == 1, err[-3000:]
        last = err.strip().splitlines()[-1]
        # the journal cannot be read: never "not journaled", only "not known to be"
        assert "are not known to be journaled" in last, err[-3000:]
        record = json.loads(out.strip().splitlines()[-1])
        assert record["not_journaled"] > 0
        w.server.start()
        held = Journal.from_url(w.server.url).high_water("feed.out")
        assert held >= record["journaled"]  # what it reported journaled is
        # published again: numbering resumes after what the journal holds, nothing twice
        again = subprocess.run(
            publish_command(w, "feed.out", "--redis-url", w.server.url, "--topics", TOPIC,
                            "--count", "10", "--timeout", "30"),
            env=_env(), capture_output=True, text=True, timeout=120, check=False,
        )
        assert again.returncode == 0, again.stderr
        assert Journal.from_url(w.server.url).high_water("feed.out") == held + 10
        assert wait_for(lambda: len(w.got) >= held + 10, 60), (
            len(w.got), held, w.numbers()[:5], w.subscriber.stats())
        time.sleep(0.5)
        assert w.numbers() == list(range(1, held + 11))


def test_the_good_lines_before_a_bad_one_are_published_and_the_bad_one_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pubs.jsonl"
    good = [json.dumps({"topic": TOPIC, "fields": {"n": n}}) for n in range(200)]
    after = [json.dumps({"topic": TOPIC, "fields": {"n": n}}) for n in range(200, 250)]
    path.write_text("\n".join([*good, '{"topic": "/weather/a", "fields": ', *after]) + "\n")
    with watched(tmp_path) as w:
        for source, journal in (("feed.file", ["--redis-url", w.server.url]), ("feed.plain", [])):
            done = subprocess.run(
                publish_command(w, source, "--file", str(path), "--batch", "256", *journal),
                env=_env(), capture_output=True, text=True, timeout=120, check=False,
            )
            assert done.returncode == 2, done.stderr
            [line] = done.stderr.strip().splitlines()
            assert f"{path} line 201:" in line
            assert "none from it on" in line
            assert json.loads(done.stdout)["accepted"] == 200
        assert wait_for(lambda: len(w.got) >= 400, 30)
        time.sleep(0.3)
        for source in ("feed.file", "feed.plain"):
            assert [p.fields["n"] for p in w.got if p.source == source] == list(range(200))
            assert journaled_ns(w, source, 200) == list(range(200))


def _max_rss_kib(argv: list[str]) -> tuple[int, str]:
    """Run ``argv``; its exit status and the most memory it held (KiB), from wait4."""
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    stderr: list[bytes] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()))  # type: ignore[union-attr]
    reader.start()
    _pid, status, usage = os.wait4(proc.pid, 0)
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss, f"{proc.returncode}: {b''.join(stderr).decode(errors='replace')}"


def test_a_file_without_newlines_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"[" * 1000)
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as fh:
        for _ in range(64):
            fh.write(b"x" * (1 << 20))  # 64 MiB, no newline
    with watched(tmp_path) as w:
        base, said = _max_rss_kib(publish_command(w, "feed.s", "--file", str(small)))
        assert said.startswith("2: "), said
        assert "line 1: maximum recursion depth" in said  # a line, not a traceback
        used, said = _max_rss_kib(publish_command(w, "feed.h", "--file", str(huge)))
        assert said.startswith("2: "), said
        assert "line 1: longer than 4194304 bytes" in said
    # reading it whole would take 64 MiB and more; a bounded read takes one piece of 4 MiB
    assert used - base < 24 * 1024, (used, base)
