"""``--ready-file``: written whole at once (seqrepair/readyfile.py)."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from seqrepair.readyfile import write_ready


def test_the_ready_file_appears_whole_and_nothing_else_is_left(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    seen: list[bool] = []
    replace = os.replace

    def watched(src: str | Path, dst: str | Path) -> None:
        seen.append(ready.exists())  # not there before the rename: nobody reads it half made
        replace(src, dst)

    with mock.patch("seqrepair.readyfile.os.replace", watched):
        write_ready(ready, "127.0.0.1:5672")
    assert seen == [False]
    assert ready.read_text() == "127.0.0.1:5672"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready"]
    write_ready(str(ready), "127.0.0.1:5673")  # written again (a restart): replaced whole
    assert ready.read_text() == "127.0.0.1:5673"


def test_a_ready_file_in_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_ready(tmp_path / "missing" / "ready", "x")


def test_a_failed_rename_leaves_no_partial_file(tmp_path: Path) -> None:
    def refused(src: str | Path, dst: str | Path) -> None:
        raise PermissionError(13, "refused", str(dst))

    with mock.patch("seqrepair.readyfile.os.replace", refused), pytest.raises(PermissionError):
        write_ready(tmp_path / "ready", "x")
    assert list(tmp_path.iterdir()) == []
