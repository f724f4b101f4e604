"""A client whose peer cannot be reached says so once, backs off, and gives up when told to.

``seqrepair publish`` against a port nobody listens on (or a host name that does not resolve)
tries again with the capped, jittered backoff of every client. Each failed attempt is logged
once, at info, through structlog (``reconnecting``, with the transport's error); proton's own
per-attempt printing and its narration of each connection stay out of stderr, and a name that
does not resolve is a failed attempt, not a traceback that ends the publisher. After
``--timeout`` seconds the command exits 1 with one line naming the address and the last error:
at the default log level, that line is all of stderr.

Real parts: the ``seqrepair`` command in a child process, proton over loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher

from .conftest import free_port

pytestmark = pytest.mark.amqp

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 3
UNRESOLVABLE = "nosuchhost.invalid:5672"  # .invalid never resolves (RFC 6761)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "seqrepair.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _reconnecting(lines: list[str]) -> list[str]:
    return [line for line in lines if "reconnecting" in line]


@pytest.mark.parametrize("unreachable", ["closed port", "unresolvable host"])
def test_publishing_to_an_unreachable_address_says_so_once_and_gives_up(
    unreachable: str,
) -> None:
    url = f"127.0.0.1:{free_port()}" if unreachable == "closed port" else UNRESOLVABLE
    done = _run("publish", "--url", url, "--source", "s", "--count", "3",
                "--timeout", str(TIMEOUT))
    assert done.returncode == 1, done.stderr
    # one line, the verdict: nothing from proton itself, attempts are logged at info
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"seqrepair publish: not every publication was accepted in {TIMEOUT} s: cannot reach a "
        f"component at {url} ("
    )
    assert ("Connection refused" if unreachable == "closed port" else "cannot resolve") in line
    assert '"accepted": 0' in done.stdout


def test_at_info_each_failed_attempt_is_one_line_and_the_attempts_back_off() -> None:
    url = f"127.0.0.1:{free_port()}"
    done = _run("--log-level", "info", "publish", "--url", url, "--source", "s", "--count", "1",
                "--timeout", str(TIMEOUT))
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    attempts = _reconnecting(lines)
    # delays from 0.2 s, doubling: about five attempts fit in 3 s, not hundreds
    assert 2 <= len(attempts) <= 8, lines
    assert [f"attempt={n}" in line for n, line in enumerate(attempts, 1)] == [True] * len(attempts)
    assert all("[info" in line and "Connection refused" in line for line in attempts)
    # one line per attempt and the verdict; proton's "Connecting to..." narration is not there
    assert len(lines) == len(attempts) + 1, lines
    assert "Connecting to" not in done.stderr
    assert "Traceback" not in done.stderr


def test_a_publisher_whose_host_does_not_resolve_keeps_trying_and_can_be_closed() -> None:
    publisher = Publisher(UNRESOLVABLE, "s", reconnect_delay=0.02,
                          max_reconnect_delay=0.05).start()
    publisher.publish("/a/b", {"n": 1})
    assert not publisher.flush(1)
    assert publisher.error is None  # not a stop for good: the name may resolve later
    assert publisher.last_failure is not None
    assert publisher.last_failure.startswith(f"cannot resolve {UNRESOLVABLE}")
    assert publisher._thread is not None
    assert publisher._thread.is_alive()  # proton's own resolve would have ended it
    assert not publisher.close(timeout=0)
    assert not publisher._thread.is_alive()


def test_a_subscriber_that_cannot_reach_a_component_raises_no_heartbeat_alerts() -> None:
    """Heartbeats are overdue only on a link that is attached: while a subscriber reconnects,
    the silence is the lost connection's (logged as such), not one alert per interval."""
    url = f"127.0.0.1:{free_port()}"
    done = _run("--log-level", "info", "subscribe", "--url", url, "--address", "/#",
                "--heartbeat", "0.2", "--duration", str(TIMEOUT))
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(_reconnecting(lines)) >= 2, lines
    assert not [line for line in lines if "overdue" in line], lines
    assert f"seqrepair subscribe: never connected to {url}" in lines
