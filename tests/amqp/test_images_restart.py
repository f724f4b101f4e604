"""``seqrepair subscribe --images FILE`` across restarts of a durable subscriber (killed with
SIGKILL mid-stream, stopped with SIGTERM): the file survives, so it ends equal to the image
built from the whole stream. Real processes over loopback: redis-server, ``seqrepair serve``,
``seqrepair subscribe``; the publisher is the library's, journaling to the same Redis."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from seqrepair.amqp.client import imagesfile
from seqrepair.amqp.client.imagesfile import ImagesFile, position_path, read_images, write_images
from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.core.image import ImageCache
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, _env, wait_for
from .test_images import items

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

DEADLINE = 60.0


class Run:
    """One ``seqrepair subscribe --images`` process, logging at info to a file of its own."""

    def __init__(self, comp: ComponentProcess, tmp: Path, tag: str, images: Path,
                 link_name: str = "keeper", address: str = "/weather/#") -> None:
        self.log = tmp / f"sub-{tag}.log"
        ready = tmp / f"ready-{tag}"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "subscribe",
                 "--url", comp.url, "--address", address, "--link-name", link_name,
                 "--heartbeat", "0.2", "--output", str(tmp / f"out-{tag}.jsonl"),
                 "--ready-file", str(ready), "--images", str(images)],
                env=_env(), stdout=out, stderr=subprocess.STDOUT)
        assert wait_for(lambda: ready.exists() or self.proc.poll() is not None, DEADLINE)
        assert self.proc.poll() is None, self.text()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def end(self, how: signal.Signals) -> int:
        self.proc.send_signal(how)
        try:
            return self.proc.wait(DEADLINE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(10)


def through(images: Path) -> dict[str, int]:
    """The position the images file's position file says it is current through ({} before it
    is written, or while it names other bytes than the file's: between the two renames)."""
    try:
        head = json.loads(position_path(images).read_text())
        if head["images_sha256"] != hashlib.sha256(images.read_bytes()).hexdigest():
            return {}
    except (OSError, KeyError, ValueError):
        return {}
    return {str(k): int(v) for k, v in head["current_through"].items()}


def expected(published: list[Publication], path: Path) -> str:
    """The images file the whole stream makes."""
    whole = ImageCache()
    for pub in published:
        whole.apply(pub)
    write_images(whole, path)
    return path.read_text()


def items_only(images: Path) -> bool:
    """Every line of the file is an item, exactly as before positions: ``{"topic", "fields",
    "partial"}``."""
    return all(set(json.loads(line)) == {"topic", "fields", "partial"}
               for line in images.read_text().splitlines())


def test_the_images_file_survives_sigkill_and_sigterm_of_a_durable_subscriber(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path,
    runs: list[Run],
) -> None:
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    images = tmp_path / "images.jsonl"
    published: list[Publication] = []
    publisher = Publisher(comp.url, "feed.a", journal=journal).start()
    try:
        runs.append(Run(comp, tmp_path, "1", images))
        published += publisher.publish_many(items(1, 40))
        assert publisher.flush(DEADLINE)
        assert wait_for(lambda: through(images).get("feed.a", 0) >= 20, DEADLINE)

        # killed while the stream goes on: the file holds what it held at its last write
        def more() -> None:
            for first in range(41, 121, 5):
                published.extend(publisher.publish_many(items(first, 5)))

        going = threading.Thread(target=more)
        going.start()
        assert runs[0].end(signal.SIGKILL) == -signal.SIGKILL
        going.join(DEADLINE)
        assert publisher.flush(DEADLINE)
        runs.append(Run(comp, tmp_path, "2", images))
        assert wait_for(lambda: through(images).get("feed.a") == 120, DEADLINE), runs[1].text()
        assert "images file loaded" in runs[1].text()
        assert runs[1].end(signal.SIGTERM) == 0, runs[1].text()

        published += publisher.publish_many(items(121, 40))  # while it is stopped
        assert publisher.flush(DEADLINE)
        runs.append(Run(comp, tmp_path, "3", images))
        assert wait_for(lambda: through(images).get("feed.a") == 160, DEADLINE), runs[2].text()
        assert "images file loaded" in runs[2].text()
        assert "images file discarded" not in "".join(run.text() for run in runs)
        assert images.read_text() == expected(published, tmp_path / "whole.jsonl")
        assert items_only(images)
        assert runs[2].end(signal.SIGTERM) == 0, runs[2].text()
        assert images.read_text() == expected(published, tmp_path / "whole.jsonl")
        assert through(images) == {"feed.a": 160}

        # another subscription (a new durable, starting now) does not take this file: it says
        # so and starts its images empty where it starts
        runs.append(Run(comp, tmp_path, "4", images, link_name="stranger"))
        assert wait_for(lambda: "images file discarded" in runs[3].text(), DEADLINE)
        assert wait_for(lambda: images.read_text() == ""
                        and through(images) == {"feed.a": 160}, DEADLINE), images.read_text()
        assert runs[3].end(signal.SIGTERM) == 0, runs[3].text()
    finally:
        publisher.close(timeout=0.0)
        journal.close()


def test_a_file_of_another_position_is_discarded_and_said_so(tmp_path: Path) -> None:
    """The rule, without processes: loaded only when resuming a durable position the file is
    current through (per source)."""
    images = tmp_path / "images.jsonl"
    write_images(cache_of(1, 2, 3), images, {"feed.a": 3})
    assert items_only(images)
    for start, resumed, loaded in (({"feed.a": 3}, True, True), ({"feed.a": 2}, True, True),
                                   ({"feed.a": 4}, True, False), ({"feed.b": 1}, True, False),
                                   ({"feed.a": 3}, False, False)):
        kept = ImagesFile(images)
        assert kept.begin(start, resumed) is loaded, (start, resumed)
        assert len(kept.cache) == (1 if loaded else 0)
        if loaded:  # delivered again up to the file's position: not folded in twice
            kept.apply(Publication(topic="/weather/x", source="feed.a", source_seq=3,
                                   fields={"n": 99}))
            assert kept.cache.get("/weather/x") == {"n": 3}


def cache_of(*numbers: int) -> ImageCache:
    cache = ImageCache()
    for n in numbers:
        cache.apply(Publication(topic="/weather/x", source="feed.a", source_seq=n,
                                fields={"n": n}))
    return cache


def discarded(images: Path) -> list[dict[str, Any]]:
    """Begin ``images`` resuming after 3 of feed.a: it must be discarded; the log lines."""
    with structlog.testing.capture_logs() as logs:
        kept = ImagesFile(images)
        assert kept.begin({"feed.a": 3}, True) is False
    assert len(kept.cache) == 0
    assert kept.through == {"feed.a": 3}
    return [dict(e) for e in logs if e["event"].startswith("images file discarded")]


def test_a_file_its_position_file_does_not_name_is_discarded(tmp_path: Path) -> None:
    """The images file goes with its position file only when that names its bytes: one
    without (the format before positions, or a process ended before the first position was
    written) or with another's (ended between writing the file and its position) is
    discarded, said so, and the next save writes both again."""
    images = tmp_path / "images.jsonl"
    write_images(cache_of(1, 2, 3), images)  # items only: no position file
    [line] = discarded(images)
    assert "position file" in line["error"]
    assert "images.jsonl.position" in line["error"]

    write_images(cache_of(1, 2), images, {"feed.a": 2})
    write_images(cache_of(1, 2, 3), images)  # the file renamed, its position not yet
    assert json.loads(position_path(images).read_text())["current_through"] == {"feed.a": 2}
    [line] = discarded(images)
    assert "other bytes" in line["error"]

    write_images(cache_of(1, 2, 3), images, {"feed.a": 3})
    images.write_bytes(images.read_bytes().replace(b'"n": 3', b'"n": 4'))  # same length
    [line] = discarded(images)
    assert "other bytes" in line["error"]

    kept = ImagesFile(images)
    kept.begin({"feed.a": 3}, True)
    kept.hold({"feed.a": 3})
    assert kept.save(force=True) == {"feed.a": 3}  # acknowledged once both are written
    assert images.read_text() == ""
    assert through(images) == {"feed.a": 3}
    assert ImagesFile(images).begin({"feed.a": 3}, True) is True


def test_a_file_of_another_subscription_is_not_loaded(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path,
    runs: list[Run],
) -> None:
    """Two durable subscriptions, one ``--images`` path: ``keeper`` (``/weather/#``) wrote the
    file through 120; ``temps`` (``/weather/temp/#``), whose durable position is 40, starts with
    the same FILE. The file is current through 40 for it by the numbers, but it is another
    subscription's: loaded, it would hand ``temps`` items outside its selection and count
    as folded in what ``temps`` never saw. It must be discarded (said so), and the file end
    as the image of ``temps``' own deliveries after its position."""
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    images = tmp_path / "images.jsonl"
    published: list[Publication] = []
    publisher = Publisher(comp.url, "feed.a", journal=journal).start()
    try:
        runs.append(Run(comp, tmp_path, "t1", tmp_path / "temps-own.jsonl", link_name="temps",
                        address="/weather/temp/#"))
        published += publisher.publish_many(items(1, 40))
        assert publisher.flush(DEADLINE)
        last = max(pub.source_seq for pub in published if pub.topic.startswith("/weather/temp/"))
        assert wait_for(lambda: through(tmp_path / "temps-own.jsonl").get("feed.a") == last,
                        DEADLINE), runs[0].text()
        assert runs[0].end(signal.SIGTERM) == 0, runs[0].text()

        runs.append(Run(comp, tmp_path, "k1", images))  # keeper: a new durable, from here
        published += publisher.publish_many(items(41, 80))
        assert publisher.flush(DEADLINE)
        assert wait_for(lambda: through(images).get("feed.a") == 120, DEADLINE), runs[1].text()
        assert runs[1].end(signal.SIGTERM) == 0, runs[1].text()
        assert any("/weather/wind/" in line for line in images.read_text().splitlines())

        runs.append(Run(comp, tmp_path, "t2", images, link_name="temps",
                        address="/weather/temp/#"))
        last = max(pub.source_seq for pub in published if pub.topic.startswith("/weather/temp/"))
        assert wait_for(lambda: through(images).get("feed.a", 0) >= last
                        and "images file" in runs[2].text(), DEADLINE), runs[2].text()
        assert runs[2].end(signal.SIGTERM) == 0, runs[2].text()
        assert "images file discarded" in runs[2].text(), runs[2].text()
        own = [pub for pub in published[40:] if pub.topic.startswith("/weather/temp/")]
        assert images.read_text() == expected(own, tmp_path / "temps-whole.jsonl")
    finally:
        publisher.close(timeout=0.0)
        journal.close()


class Ended(Exception):
    """The process ended here (a kill between two steps of a save)."""


@pytest.mark.parametrize("step", range(4))
def test_a_save_ended_at_any_step_leaves_images_that_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """A save is four file operations (write and rename of FILE's bytes and of its position):
    a process killed after any of them (here: the next one raises) leaves FILE and
    FILE.position that load on restart, current through the old position (nothing of the
    new acknowledged yet) or the new one, never a discarded file (before: killed between
    FILE's rename and its position's, the images were discarded and started empty, every
    item not published again lost from them)."""
    images = tmp_path / "images.jsonl"
    kept = ImagesFile(images)
    kept.begin({"feed.a": 0}, True)
    for n in (1, 2, 3):
        kept.apply(Publication(topic="/weather/x", source="feed.a", source_seq=n,
                               fields={"n": n}))
    kept.hold({"feed.a": 3})
    assert kept.save(force=True) == {"feed.a": 3}
    kept.apply(Publication(topic="/weather/y", source="feed.a", source_seq=4, fields={"m": 4}))
    kept.hold({"feed.a": 4})

    done = [0]

    def counted(real: Callable[..., Any]) -> Callable[..., Any]:
        def op(self: Path, *args: Any) -> Any:
            if done[0] == step:
                raise Ended(f"ended before operation {step}")
            done[0] += 1
            return real(self, *args)
        return op

    # the save's writes and renames (each fsynced: test_a_save_is_on_disk_before_...)
    monkeypatch.setattr(imagesfile, "_write_synced", counted(imagesfile._write_synced))
    monkeypatch.setattr(imagesfile, "_rename_synced", counted(imagesfile._rename_synced))
    with pytest.raises(Ended):
        kept.save(force=True)
    monkeypatch.undo()

    again = ImagesFile(images)
    assert again.begin({"feed.a": 3}, True) is True  # resumes where 3 was acknowledged
    assert again.through in ({"feed.a": 3}, {"feed.a": 4})
    snapshot = again.cache.snapshot()
    if again.through == {"feed.a": 3}:
        assert snapshot == {"/weather/x": {"n": 3}}
    else:
        assert snapshot == {"/weather/x": {"n": 3}, "/weather/y": {"m": 4}}
        assert json.loads(images.read_text().splitlines()[-1])["topic"] == "/weather/y"


def _fsyncs_and_renames(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What reaches the disk, in order: ("fsync", name) of a file or ("fsync", "<dir>") of the
    folder, ("rename", "src>dst")."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        events.append(("fsync", "<dir>" if target.is_dir() else target.name))
        real_fsync(fd)

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        events.append(("rename", f"{Path(src).name}>{Path(dst).name}"))
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fd by /proc/self/fd")
def test_a_save_is_on_disk_before_it_hands_back_what_may_be_acknowledged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A power loss, unlike a kill, loses what was written but not fsynced: a rename may
    reach the disk before the bytes it names (an empty FILE.position, or one naming bytes
    FILE.tmp does not hold: discarded on start), and an acknowledgement sent after an
    unsynced save names a position the disk may not hold. Each file is fsynced before the
    rename that publishes it, and the folder after each rename, before the save returns (before:
    nothing was fsynced)."""
    images = tmp_path / "images.jsonl"
    kept = ImagesFile(images)
    kept.begin({"feed.a": 0}, True)
    kept.apply(Publication(topic="/weather/x", source="feed.a", source_seq=1, fields={"n": 1}))
    kept.hold({"feed.a": 1})
    events = _fsyncs_and_renames(monkeypatch)
    assert kept.save(force=True) == {"feed.a": 1}
    assert events == [
        ("fsync", "images.jsonl.tmp"),  # the bytes, before the position names them
        ("fsync", "images.jsonl.position.tmp"),
        ("rename", "images.jsonl.position.tmp>images.jsonl.position"),
        ("fsync", "<dir>"),  # the position on disk: what it names may be acknowledged
        ("rename", "images.jsonl.tmp>images.jsonl"),
        ("fsync", "<dir>"),
    ]
    # a start that finishes a save ended before its last rename syncs that rename too
    kept.apply(Publication(topic="/weather/y", source="feed.a", source_seq=2, fields={"n": 2}))
    real_rename = imagesfile._rename_synced

    def rename(src: Path, dst: Path) -> None:
        if dst == images:
            raise Ended("ended before the last rename")
        real_rename(src, dst)

    monkeypatch.setattr(imagesfile, "_rename_synced", rename)
    with pytest.raises(Ended):
        kept.save(force=True)
    monkeypatch.setattr(imagesfile, "_rename_synced", real_rename)
    events.clear()
    through, _ = read_images(images)
    assert through == {"feed.a": 2}
    assert events == [("rename", "images.jsonl.tmp>images.jsonl"), ("fsync", "<dir>")]


def test_a_start_hashes_each_file_once(tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the images back hashes FILE's bytes (and FILE.tmp's, when FILE is not the
    ones its position names) once each (before: up to three times, a large file's start
    paying for it)."""
    images = tmp_path / "images.jsonl"
    write_images(cache_of(1, 2, 3), images, {"feed.a": 3})
    hashed: list[int] = []
    real = hashlib.sha256

    def sha256(data: bytes = b"") -> Any:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(imagesfile.hashlib, "sha256", sha256)
    assert read_images(images)[0] == {"feed.a": 3}
    assert hashed == [images.stat().st_size]
    # FILE.tmp holds what the position names, FILE older bytes: each hashed once
    staged = images.with_name(images.name + ".tmp")
    staged.write_bytes(images.read_bytes())
    images.write_bytes(b"")
    hashed.clear()
    assert read_images(images)[0] == {"feed.a": 3}
    assert sorted(hashed) == sorted([0, staged.stat().st_size if staged.exists()
                                     else images.stat().st_size])


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fd by /proc/self/fd")
def test_a_loaded_position_is_on_disk_before_what_it_holds_is_acknowledged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A save killed between its position's rename and the folder's fsync leaves a position
    a start reads but the disk may not hold yet. Publications delivered again after the start
    (up to what the images are current through) are acknowledged with no write: the position
    they rely on must be on disk first, else a power loss then takes it back behind what was
    acknowledged and the images are discarded (before: nothing synced on a load)."""
    images = tmp_path / "images.jsonl"
    first = ImagesFile(images)
    first.begin({"feed.a": 0}, True)
    first.apply(Publication(topic="/weather/x", source="feed.a", source_seq=1, fields={"n": 1}))
    first.save(force=True)
    # the same images, current through one more: FILE's bytes are what the new position names
    first.apply(Publication(topic="/weather/x", source="feed.a", source_seq=2, fields={"n": 1}))
    real_sync = imagesfile._sync_dir

    def killed(path: Path) -> None:
        raise Ended("killed before the folder's fsync")

    monkeypatch.setattr(imagesfile, "_sync_dir", killed)
    with pytest.raises(Ended):
        first.save(force=True)
    monkeypatch.setattr(imagesfile, "_sync_dir", real_sync)
    events = _fsyncs_and_renames(monkeypatch)
    again = ImagesFile(images)
    assert again.begin({"feed.a": 0}, True)
    again.apply(Publication(topic="/weather/x", source="feed.a", source_seq=2, fields={"n": 1}))
    again.hold({"feed.a": 2})  # delivered again, written to the output: acknowledged now
    assert again.save(force=True) == {"feed.a": 2}
    assert ("fsync", "<dir>") in events, events
