"""The ``seqrepair`` command: help, the demo's in-process stage end to end, and argument checks."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from seqrepair.cli import main


def test_help_lists_the_demo():
    result = subprocess.run([sys.executable, "-m", "seqrepair.cli", "--help"],
                            capture_output=True, text=True, check=True)
    assert "demo" in result.stdout


def test_demo_in_memory_repairs_everything(capsys):
    code = main(["demo", "--publications", "3000", "--no-redis", "--only", "in-process"])
    out = capsys.readouterr().out
    assert code == 0
    assert "exactly once, in order                 yes" in out
    assert "unrecoverable                          0" in out


@pytest.mark.redis
def test_demo_journals_to_a_private_redis_and_stops_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the demo's private data dir
    code = main(["demo", "--publications", "3000", "--only", "in-process"])
    out = capsys.readouterr().out
    assert code == 0
    assert "embedded redis-server at redis://127.0.0.1" in out
    assert str(tmp_path) in out
    assert "journal in Redis" in out
    assert "subscriber images == publisher images  yes" in out
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True)
    assert leftover.returncode == 1  # the demo's redis-server is not left running


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_serve_refuses_a_redis_timeout_that_is_not_positive(timeout, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--redis-url", "redis://127.0.0.1:1/0", "--redis-timeout", timeout])
    assert exit_.value.code == 2
    assert "--redis-timeout: must be > 0" in capsys.readouterr().err


def test_subscribe_idle_exit_counts_only_time_connected(tmp_path, monkeypatch):
    """A subscriber waiting out a component's restart is not idle at the end of its stream:
    ``--idle-exit`` counts from when it is connected again. (The clock is the test's: a
    loaded machine's stall between two calls must not pass for idle time.)"""
    import argparse
    import time

    from seqrepair.amqp.client import subscribecmd
    from seqrepair.core.messages import Publication

    now = [1000.0]

    class Clock:  # the module's time, with the test's monotonic (nobody else's is touched)
        def __getattr__(self, name: str) -> object:
            return getattr(time, name)

        def monotonic(self) -> float:
            return now[0]

    monkeypatch.setattr(subscribecmd, "time", Clock())
    args = argparse.Namespace(count=0, duration=0.0, idle_exit=0.2,
                              output=str(tmp_path / "out.jsonl"))
    sink = subscribecmd.Sink(args, line_buffered=True)
    sink.write(Publication("/t", "feed.a", 1, "update", {}))
    now[0] += 0.3
    assert not sink.stop_when(connected=False)  # reconnecting: the idle clock starts again
    assert not sink.stop_when(connected=True)
    now[0] += 0.19
    assert not sink.stop_when(connected=True)
    now[0] += 0.02
    assert sink.stop_when(connected=True)
    sink.out.close()


@pytest.mark.redis
@pytest.mark.amqp
@pytest.mark.spark
@pytest.mark.slow
def test_the_whole_demo_runs_every_stage_and_leaves_nothing_running(tmp_path):
    """The main job, smaller: in process, over AMQP in real processes (with the component
    killed and restarted), then Spark rebuilding the images each subscriber holds."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the demo's work folder, to look for later
    result = subprocess.run(
        [sys.executable, "-m", "seqrepair.cli", "demo", "--publications", "3000",
         "--network-publications", "600", "--master", "local[1]"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "demo: all stages OK" in out
    for stage in ("in-process", "network", "spark"):
        assert f"=> {stage}: OK" in out
    assert "Spark images == the cache of the in-process subscriber" in out
    assert "Spark images == the cache of the network subscriber of /demo/#" in out
    assert " NO" not in out
    # authentication was on: the demo made its certificates (it needs openssl for them)
    assert shutil.which("openssl") is not None, "the demo would run anonymous without openssl"
    assert ("authentication: TLS with client certificates (SASL EXTERNAL) as CN=demo; REST "
            "over HTTPS with a bearer token of CN=demo") in out
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True)
    assert leftover.returncode == 1  # no redis-server, component or client left running
