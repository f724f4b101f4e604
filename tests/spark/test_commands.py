"""``seqrepair rebuild|audit`` in process, and spark-submit on a local standalone cluster."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from seqrepair.cli import main
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.format import archive_path, encode_archive_table
from seqrepair.journal.server import free_port

from .journals import actual_images, expected_images

pytestmark = pytest.mark.spark

SUBMIT = Path(__file__).resolve().parents[2] / "seqrepair" / "spark" / "submit.py"
SPARK_HOME = Path(pyspark.__file__).parent


def write_archive(root: Path) -> list[Publication]:
    pubs = []
    for source, bits in (("feed.a", 3), ("feed.b", 16)):
        chunk = [
            Publication(
                topic=f"/item/{n % 4}",
                source=source,
                source_seq=n,
                ptype=[PublishType.UPDATE, PublishType.IMAGE, PublishType.CORRECTION][n % 3],
                fields={"n": n, source: None},
                timestamp=float(n) + (0.5 if source == "feed.b" else 0.0),
            )
            for n in range(1, 21)
        ]
        # two files per source, with a hole 11..12 in feed.a
        for first, last in ((1, 10), (11 if source == "feed.b" else 13, 20)):
            path = archive_path(root, source, first, last)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(encode_archive_table(chunk[first - 1 : last], bits), path)
        pubs += [p for p in chunk if not (source == "feed.a" and p.source_seq in (11, 12))]
    return pubs


def test_cli_rebuild_writes_parquet_images(spark, tmp_path, capsys):
    pubs = write_archive(tmp_path / "archive")
    out = tmp_path / "images"
    code = main(
        [
            "rebuild",
            "--master",
            "local[2]",
            "--archive",
            str(tmp_path / "archive"),
            "--output",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["items"] == 4
    assert actual_images(spark.read.parquet(str(out))) == expected_images(pubs)


def test_cli_rebuild_as_of(spark, tmp_path, capsys):
    pubs = write_archive(tmp_path / "archive")
    out = tmp_path / "images"
    code = main(
        [
            "rebuild",
            "--archive",
            str(tmp_path / "archive"),
            "--output",
            str(out),
            "--as-of-seq",
            "feed.a=5",
            "--as-of-seq",
            "feed.b=3",
            "--no-progress",
        ]
    )
    assert code == 0
    keep = {"feed.a": 5, "feed.b": 3}
    expected = expected_images([p for p in pubs if p.source_seq <= keep[p.source]])
    assert actual_images(spark.read.parquet(str(out))) == expected


def test_cli_audit_prints_and_writes(spark, tmp_path, capsys):
    write_archive(tmp_path / "archive")
    out = tmp_path / "audit"
    code = main(
        ["audit", "--archive", str(tmp_path / "archive"), "--output", str(out), "--no-progress"]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "feed.a: 11..12 (2, gap)" in text
    digest = json.loads((out / "summary.json").read_text())
    gaps = [(g["source"], g["first"], g["last"]) for g in digest["gaps"]]
    assert gaps == [("feed.a", 11, 12)]


def test_cli_rejects_missing_input(capsys):
    assert main(["rebuild", "--no-progress"]) == 2
    assert "--journal" in capsys.readouterr().err
    assert main(["rebuild", "--archive", "x", "--as-of-seq", "nope"]) == 2
    for no_time in ("nan", "inf"):
        with pytest.raises(SystemExit) as exited:
            main(["rebuild", "--archive", "x", "--as-of-time", no_time])
        assert exited.value.code == 2
        assert "--as-of-time" in capsys.readouterr().err


def _free_port() -> int:
    return free_port()  # outside the ephemeral range: no connect() takes it meanwhile


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace")):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} not seen in {log}:\n{log.read_text(errors='replace')}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
def test_spark_submit_on_a_standalone_cluster(spark, tmp_path):
    """A master and a worker from pyspark's own scripts; the rebuild runs on them."""
    pubs = write_archive(tmp_path / "archive")
    env = dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(tmp_path / "logs"),
        SPARK_WORKER_DIR=str(tmp_path / "work"),
    )
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(_free_port()),
        ],
        tmp_path / "master.log",
        env,
    )
    worker = None
    try:
        _wait_for(tmp_path / "master.log", r"I have been elected leader", master, 90)
        worker = _start(
            [
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "2",
                "--memory",
                "1g",
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                str(tmp_path / "work"),
            ],
            tmp_path / "worker.log",
            env,
        )
        _wait_for(tmp_path / "worker.log", r"Successfully registered with master", worker, 90)
        out = tmp_path / "images"
        done = subprocess.run(
            [
                str(SPARK_HOME / "bin" / "spark-submit"),
                "--master",
                url,
                "--conf",
                f"spark.pyspark.python={sys.executable}",
                "--conf",
                "spark.executor.memory=512m",
                str(SUBMIT),
                "--log-level",
                "warning",
                "rebuild",
                "--archive",
                str(tmp_path / "archive"),
                "--output",
                str(out),
                "--no-progress",
            ],
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-5000:]
        summary = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert summary["items"] == 4
        assert actual_images(spark.read.parquet(str(out))) == expected_images(pubs)
        assert "app-" in (tmp_path / "master.log").read_text()  # the job ran on the cluster
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)
    assert master.poll() is not None
    assert worker is not None
    assert worker.poll() is not None


@pytest.mark.slow
def test_spark_submit_settings_win_over_the_session_defaults(tmp_path):
    """Under spark-submit the session takes its settings from the launcher (``--conf``),
    and seqrepair's own defaults only fill what it left unset."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from seqrepair.spark.session import spark_session\n"
        "s = spark_session(None)\n"
        "print('SETTINGS', s.conf.get('spark.sql.shuffle.partitions'),"
        " s.conf.get('spark.sql.adaptive.enabled'), s.conf.get('spark.sql.session.timeZone'))\n"
        "s.stop()\n"
    )
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=str(SUBMIT.parents[2]))
    done = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[1]",
         "--conf", "spark.sql.shuffle.partitions=200",
         "--conf", "spark.sql.adaptive.enabled=false", str(probe)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("SETTINGS")]
    assert line == "SETTINGS 200 false UTC"  # the time zone is still seqrepair's default


def test_cli_rebuild_as_of_time(spark, tmp_path, capsys):
    pubs = write_archive(tmp_path / "archive")
    out = tmp_path / "images"
    code = main(["rebuild", "--archive", str(tmp_path / "archive"), "--output", str(out),
                 "--as-of-time", "5.5", "--no-progress"])
    assert code == 0
    # feed.a is stamped at n, feed.b at n + 0.5: both as of their fifth publication
    expected = expected_images([p for p in pubs if p.timestamp <= 5.5])
    assert actual_images(spark.read.parquet(str(out))) == expected


def test_cli_shows_spark_console_progress_unless_told_not_to(tmp_path):
    write_archive(tmp_path / "archive")
    result = subprocess.run(
        [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "audit",
         "--master", "local[1]", "--archive", str(tmp_path / "archive")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    logged = result.stdout + result.stderr
    # the session the command ran in, as Spark itself reports its setting
    assert re.search(r"spark session .*master=local\[1\].*progress=True", logged), logged
