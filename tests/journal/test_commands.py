"""``seqrepair journal info|trim|export`` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from seqrepair.cli import main
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import EmbeddedRedis, Journal

pytestmark = pytest.mark.redis


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    """The CLI configures structlog to print to the captured stderr; undo that afterwards."""
    yield
    structlog.reset_defaults()


def test_info_trim_export(
    journal: Journal,
    redis_server: EmbeddedRedis,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seq = SourceSequencer("feed.a", bits=16)
    journal.append([seq.stamp("/a", {"i": i}, timestamp=float(i)) for i in range(40)], 16)
    url = ["--redis-url", redis_server.url]
    assert main(["journal", "info", *url, "--json"]) == 0
    [info] = json.loads(capsys.readouterr().out)
    assert info["high_water"] == 40
    assert info["length"] == 40
    assert (
        main(
            [
                "journal",
                "export",
                "feed.a",
                *url,
                "--first",
                "1",
                "--last",
                "10",
                "--archive",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert "seq-00000000000000000001-00000000000000000010.parquet" in capsys.readouterr().out
    assert main(["journal", "trim", *url, "--max-count", "15", "--archive", str(tmp_path)]) == 0
    assert "trimmed through 25" in capsys.readouterr().out
    assert journal.info("feed.a").trimmed_through == 25
    assert main(["journal", "trim", *url]) == 2


def test_embedded_default_and_unreachable_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["journal", "info", "--data-dir", str(tmp_path / "redis")]) == 0
    assert "no sources journaled" in capsys.readouterr().out
    with EmbeddedRedis() as gone:
        url = gone.url
    assert main(["journal", "info", "--redis-url", url]) == 1
    assert "unavailable" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["trim", "export"])
def test_an_archive_that_cannot_be_written_is_one_clear_error_and_trims_nothing(
    journal: Journal,
    redis_server: EmbeddedRedis,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    seq = SourceSequencer("feed.a", bits=16)
    journal.append([seq.stamp("/a", {"i": i}) for i in range(5)], 16)
    blocker = tmp_path / "archive"
    blocker.write_text("a file, not a folder")
    options = ["--max-count", "1"] if command == "trim" else ["feed.a"]
    args = ["journal", command, "--redis-url", redis_server.url, *options,
            "--archive", str(blocker)]
    assert main(args) == 1
    assert "cannot write the archive file" in capsys.readouterr().err
    assert journal.info("feed.a").trimmed_through == 0
