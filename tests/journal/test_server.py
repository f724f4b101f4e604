"""The embedded redis-server: starts on a free port, persists, leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from polling import wait_for

from seqrepair.journal import EmbeddedRedis, EmbeddedRedisError
from seqrepair.journal.server import (
    CLUSTER_BUS_OFFSET,
    MAX_CLUSTER_PORT,
    PORT_SHARE_ENV,
    _ephemeral_range,
    free_cluster_port,
    free_port,
)

pytestmark = pytest.mark.redis


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_start_stop_and_persistence(tmp_path: Path) -> None:
    with EmbeddedRedis(data_dir=tmp_path, appendfsync="everysec") as server:
        pid = server.pid
        assert pid is not None
        assert alive(pid)
        assert server.url.startswith("redis://127.0.0.1:")
        redis.Redis.from_url(server.url).set("k", "v")
    assert not alive(pid)
    with EmbeddedRedis(data_dir=tmp_path) as again:
        assert redis.Redis.from_url(again.url).get("k") == b"v"
    assert any(tmp_path.rglob("*.aof"))


def test_stopped_even_when_the_block_raises(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path)
    pids: list[int | None] = []

    def crash() -> None:
        with server:
            pids.append(server.pid)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        crash()
    [pid] = pids
    assert pid is not None
    assert not alive(pid)
    assert not server.running


def test_temporary_data_dir_is_removed() -> None:
    with EmbeddedRedis() as server:
        folder = server.data_dir
        assert folder.exists()
    assert not folder.exists()


def test_kill_and_restart(tmp_path: Path) -> None:
    with EmbeddedRedis(data_dir=tmp_path, appendfsync="always") as server:
        redis.Redis.from_url(server.url).set("k", "1")
        pid = server.pid
        server.kill()
        assert pid is not None
        assert not alive(pid)
        assert not server.running
        server.start()
        assert redis.Redis.from_url(server.url).get("k") == b"1"
        with pytest.raises(EmbeddedRedisError):
            server.start()


def test_dies_with_its_parent_process(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from seqrepair.journal import EmbeddedRedis\n"
        f"s = EmbeddedRedis(data_dir={str(tmp_path)!r}).start()\n"
        "print('PID', s.pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    pid = int(out.stdout.split("PID ")[1].split()[0])
    # a ceiling, free when it passes: a loaded machine can take seconds to end redis-server
    assert wait_for(lambda: not alive(pid), 30)


def test_bad_configuration_and_missing_binary(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedRedisError):
        EmbeddedRedis(data_dir=tmp_path, appendfsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(EmbeddedRedisError):
        EmbeddedRedis(data_dir=tmp_path, executable="no-such-redis-server").start()
    with pytest.raises(EmbeddedRedisError):
        EmbeddedRedis(data_dir=tmp_path).url  # noqa: B018 - never started
    broken = EmbeddedRedis(data_dir=tmp_path, extra_args=("--no-such-option", "1"))
    with pytest.raises(EmbeddedRedisError, match=r"no-such-option|Bad directive"):
        broken.start()
    assert not broken.running


def test_a_cluster_node_gets_a_port_whose_bus_port_exists(tmp_path: Path) -> None:
    """redis-server refuses cluster mode above port 55535 (its bus listens 10000 higher); the
    kernel's ephemeral range often gives such ports, which once failed a CI run."""
    ports = {free_cluster_port() for _ in range(50)}
    assert all(1024 < port <= MAX_CLUSTER_PORT for port in ports)
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    for n in range(3):
        with EmbeddedRedis(data_dir=tmp_path / str(n), extra_args=args) as srv:
            assert srv.port is not None
            assert srv.port <= MAX_CLUSTER_PORT
            info = redis.Redis(port=srv.port).execute_command("CLUSTER", "INFO")
            assert b"cluster_state" in info


@pytest.mark.parametrize(("share", "of"), [(0, 2), (1, 2), (2, 5)])
def test_free_ports_come_from_this_process_s_share_only(
    share: int, of: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test workers running at once each draw from their own share (tests/conftest.py sets it):
    no worker draws a port another's server is about to start, or start again, on."""
    monkeypatch.setenv(PORT_SHARE_ENV, f"{share}/{of}")
    assert {free_port() % of for _ in range(100)} == {share}
    cluster = [free_cluster_port() for _ in range(20)]
    assert {port % of for port in cluster} == {share}
    assert {(port + CLUSTER_BUS_OFFSET) % of for port in cluster} == {share}


@pytest.mark.parametrize("bad", ["2/2", "-1/2", "1", "a/b", "1/0"])
def test_a_port_share_that_is_no_share_is_refused(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PORT_SHARE_ENV, bad)
    with pytest.raises(EmbeddedRedisError, match=PORT_SHARE_ENV):
        free_port()


def test_free_ports_lie_below_the_ephemeral_range_and_do_not_repeat() -> None:
    """A port from the kernel's ephemeral range may be taken by any outgoing connection on the
    machine before the process it was found for listens on it: free ports come from below it
    (room permitting), and one process never hands the same port out twice in a row."""
    low, _ = _ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    cluster = [free_cluster_port() for _ in range(50)]
    assert len(set(cluster)) == len(cluster)
    if low > 12000:  # room below the range (Linux's default 32768-60999, this machine's)
        assert all(1024 < port < low for port in ports)
        assert all(port + CLUSTER_BUS_OFFSET < low for port in cluster)
