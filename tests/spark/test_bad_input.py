"""Bad input to the Spark readers and to ``seqrepair rebuild|audit`` gets a clear, typed error
(DESIGN.md: bad input raises a SeqRepairError), and an output folder never costs data."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from seqrepair.argtypes import spark_master
from seqrepair.cli import main
from seqrepair.core.errors import InvalidConfigError
from seqrepair.journal.errors import JournalUnavailableError
from seqrepair.spark.reading import read_journal, read_journals

from .test_commands import write_archive

pytestmark = pytest.mark.spark


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def rebuild(*args: str) -> int:
    return main(["rebuild", "--master", "local[2]", "--no-progress", "--show", "0", *args])


def test_an_unreachable_journal_is_a_journal_unavailable_error(spark):
    with pytest.raises(JournalUnavailableError, match="redis unavailable"):
        read_journal(spark, closed_port_url())
    with pytest.raises(JournalUnavailableError):
        read_journals(spark, url=closed_port_url())


def test_a_journal_address_that_is_no_redis_url_is_invalid_config(spark):
    with pytest.raises(InvalidConfigError, match="not a Redis URL"):
        read_journal(spark, "localhost:6379")


@pytest.mark.parametrize("option", ["page_size", "partition_size"])
def test_read_sizes_below_one_are_refused_before_any_read(spark, redis_url, option):
    with pytest.raises(InvalidConfigError, match=option):
        read_journal(spark, redis_url, **{option: 0})


def test_the_commands_report_an_unreachable_journal_in_one_line(spark, capsys):
    url = closed_port_url()
    assert rebuild("--journal", url) == 1
    assert main(["audit", "--master", "local[2]", "--no-progress", "--journal", url]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[0] for line in err] == ["seqrepair rebuild", "seqrepair audit"]
    assert all("redis unavailable" in line for line in err)


def test_the_commands_refuse_a_journal_address_that_is_no_url(spark, capsys):
    assert rebuild("--journal", "localhost:6379") == 2
    assert "not a Redis URL" in capsys.readouterr().err


def test_an_archive_alone_that_does_not_exist_is_refused(tmp_path, capsys):
    assert rebuild("--archive", str(tmp_path / "no-such-dir")) == 2
    assert "no archive folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"),
    [("--partition-size", "0"), ("--partition-size", "x"), ("--master", "bogus"),
     ("--master", "local[0]")],
)
def test_invalid_options_stop_at_parsing(tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as exited:
        main(["rebuild", "--archive", str(tmp_path), option, value])
    assert exited.value.code == 2
    assert option in capsys.readouterr().err


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]", "local[2,3]",
                                    "spark://host:7077", "yarn", "k8s://https://h:443"])
def test_spark_master_urls_are_accepted(master):
    assert spark_master(master) == master


def test_rebuild_refuses_an_output_folder_holding_other_files(spark, tmp_path, capsys):
    write_archive(tmp_path / "archive")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert rebuild("--archive", str(tmp_path / "archive"), "--output", str(out)) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("inside", ["", "feed.a", ".."])
def test_rebuild_refuses_an_output_that_overlaps_its_archive(spark, tmp_path, capsys, inside):
    archive = tmp_path / "data" / "archive"
    write_archive(archive)
    before = sorted(p.name for p in archive.rglob("*.parquet"))
    out = (archive / inside) if inside else archive
    assert rebuild("--archive", str(archive), "--output", str(out)) == 2
    assert "overlaps the input" in capsys.readouterr().err
    assert sorted(p.name for p in archive.rglob("*.parquet")) == before


def test_rebuild_and_audit_replace_their_own_earlier_output(spark, tmp_path, capsys):
    write_archive(tmp_path / "archive")
    images, report = tmp_path / "images", tmp_path / "audit"
    for _ in range(2):
        assert rebuild("--archive", str(tmp_path / "archive"), "--output", str(images)) == 0
        assert main(["audit", "--master", "local[2]", "--no-progress",
                     "--archive", str(tmp_path / "archive"), "--output", str(report)]) == 0
    rebuilt = [json.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith('{"fields"')]
    assert [r["items"] for r in rebuilt] == [4, 4]
    assert spark.read.parquet(str(images)).count() == 4
    assert json.loads((report / "summary.json").read_text())["sources"]
    assert {p.name for p in Path(report).iterdir()} >= {"summary.json", "gaps", "items"}
