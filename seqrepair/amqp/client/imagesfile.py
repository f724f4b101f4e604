"""``seqrepair subscribe --images FILE``: the item images of what was delivered, kept in a
file that survives a restart of a durable subscriber.

``FILE`` is JSON lines, one per item in topic order, ``{"topic", "fields", "partial"}`` (the
format it always had: byte fields as hex strings). Beside it, ``FILE.position`` is one JSON
object ``{"current_through": {source: number}, "images_sha256": hex}``: the position per
source the images are current through and the SHA-256 of the bytes of ``FILE`` it goes with,
and (``"subscription"``) the link name and address of the subscription that wrote them.
Each is written whole, beside itself then renamed, so neither is ever torn: ``FILE``'s bytes
beside it (``FILE.tmp``), then its position, then ``FILE.tmp`` renamed over ``FILE`` (a
position naming ``FILE.tmp``'s bytes finishes that rename when it is read). Each write is
fsynced before the rename that publishes it, and the directory after each rename (as SQLite's
and LMDB's writers do), so what a save left survives a power loss as it survives a kill: the
position names bytes that are on disk, and it is on disk itself before the save hands back
what may be acknowledged.

Kept in step with the durable position: what the subscriber acknowledges (its position at the
component) is only what the position file holds; both are written, then the acknowledgement
sent (:meth:`ImagesFile.save` hands back what may now be acknowledged). So where a durable
subscription resumes is never past the file, and at most behind it by what was in flight when
the process ended. On start, the file is loaded when its position file is there and names
its bytes, or those of ``FILE.tmp`` (a process ended before the last rename: the save is
finished; a file its position names neither way, e.g. edited, is discarded: neither applied
twice nor skipped) and the subscription resumes a
durable position (the attach reply's ``seqrepair-durable``) of the subscription that wrote
it (its link name and address: another's file is of another selection, its numbers say
nothing of this one's deliveries) that it is current through,
source by source (what is delivered again up to the file's positions is not folded in twice);
otherwise it is discarded, with a log line saying why, and the images start empty from where
the subscription starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from seqrepair.core.image import ImageCache
from seqrepair.core.messages import Publication
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.client.images")

IMAGES_EVERY = 1.0
"""Seconds between writes of ``--images`` (and so between acknowledgements with it)."""
THROUGH = "current_through"
"""The position file's key: the position per source the images are current through."""
SHA256 = "images_sha256"
"""The position file's key: the SHA-256 (hex) of the bytes of the images file it goes with."""
SUBSCRIPTION = "subscription"
"""The position file's key: the subscription that wrote it (``{"link_name", "address"}``)."""


class UnmatchedImages(ValueError):
    """The images file has no position file, or one written for other bytes."""


def position_path(path: Path) -> Path:
    """The position file of the images file ``path``: ``FILE.position``."""
    return path.with_name(path.name + ".position")


def _plain(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def _staged(path: Path) -> Path:
    """Where ``path``'s next bytes are written before they are renamed over it."""
    return path.with_name(path.name + ".tmp")


def _write_synced(path: Path, data: bytes) -> None:
    """``path`` written whole with ``data`` and fsynced: on disk before it is renamed (a rename
    that reached the disk before the bytes it names would leave an empty or torn file)."""
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _sync_dir(path: Path) -> None:
    """fsync the directory holding ``path``: a rename in it is on disk once this returns."""
    fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename_synced(src: Path, dst: Path) -> None:
    """``src`` renamed over ``dst``, the rename on disk when this returns."""
    os.replace(src, dst)
    _sync_dir(dst)


def _replace(path: Path, data: bytes) -> None:
    """``path`` replaced whole by ``data``: written beside it and fsynced, then renamed."""
    tmp = _staged(path)
    _write_synced(tmp, data)
    _rename_synced(tmp, path)


def images_bytes(cache: ImageCache) -> bytes:
    """``cache`` as the images file's JSON lines (the module's format)."""
    lines = []
    for topic in cache:
        entry = cache.entry(topic)
        assert entry is not None
        lines.append(json.dumps({"topic": topic,
                                 "fields": {k: _plain(v) for k, v in entry.fields.items()},
                                 "partial": entry.partial}) + "\n")
    return "".join(lines).encode("utf-8")


def write_images(cache: ImageCache, path: Path, through: dict[str, int] | None = None,
                 subscription: dict[str, str] | None = None) -> None:
    """``cache`` as JSON lines ``{"topic", "fields", "partial"}`` in topic order, replacing
    ``path`` whole (written beside it, then renamed); then, when ``through`` is given, its
    position file (:func:`position_path`) naming ``through``, those bytes and
    ``subscription`` (when given). Byte fields are written as hex strings."""
    data = images_bytes(cache)
    if through is None:
        _replace(path, data)
        return
    # staged, then its position, then renamed over FILE: a process ended at any step leaves
    # FILE and FILE.position that go together, or FILE.position naming the staged bytes
    # (read_images finishes that rename); FILE renamed first would leave FILE's old images
    # gone and the new ones without a position, to be discarded. The staged bytes are fsynced
    # before the position naming them is written, the position (and the directory) before
    # this returns and its caller acknowledges what it names
    _write_synced(_staged(path), data)
    position: dict[str, Any] = {THROUGH: dict(sorted(through.items())),
                                SHA256: hashlib.sha256(data).hexdigest()}
    if subscription is not None:
        position[SUBSCRIPTION] = dict(sorted(subscription.items()))
    _replace(position_path(path), (json.dumps(position) + "\n").encode("utf-8"))
    _rename_synced(_staged(path), path)


def read_images(path: Path, subscription: dict[str, str] | None = None
                ) -> tuple[dict[str, int], ImageCache]:
    """The position and the images a file holds: :class:`UnmatchedImages` when its position
    file is missing, names other bytes or another subscription than ``subscription``,
    ValueError naming what is wrong when either file is not of the module's format."""
    data = path.read_bytes() if path.exists() else None
    try:
        head = json.loads(position_path(path).read_bytes())
    except FileNotFoundError:
        raise UnmatchedImages(f"it has no position file ({position_path(path).name})") from None
    if (not isinstance(head, dict) or not isinstance(head.get(THROUGH), dict)
            or not isinstance(head.get(SHA256), str)):
        raise ValueError(f"its position file names no {THROUGH} and {SHA256}")
    wanted = head[SHA256]
    if data is None or hashlib.sha256(data).hexdigest() != wanted:  # each file hashed once
        staged = _staged(path)
        pending = staged.read_bytes() if staged.exists() else None
        if pending is None or hashlib.sha256(pending).hexdigest() != wanted:
            if data is None:
                raise UnmatchedImages(f"its position file names bytes neither it nor "
                                      f"{staged.name} holds")
            raise UnmatchedImages("its position file was written for other bytes (ended "
                                  "between writing the file and its position)")
        _rename_synced(staged, path)  # a save that ended before its last rename: finished
        data = pending
    else:  # a save killed before its folder's fsync left a position the disk may not hold:
        _sync_dir(path)  # on disk before what it names is acknowledged again
    if head.get(SUBSCRIPTION) != (None if subscription is None else dict(subscription)):
        raise UnmatchedImages(f"it was written by another subscription "
                              f"({head.get(SUBSCRIPTION)}, not {subscription})")
    through = {str(k): int(v) for k, v in head[THROUGH].items()}
    cache = ImageCache()
    for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
        record = json.loads(line)
        if (not isinstance(record, dict) or not isinstance(record.get("topic"), str)
                or not isinstance(record.get("fields"), dict)):
            raise ValueError(f"line {number} is not an item")
        cache.restore(record["topic"], record["fields"], partial=bool(record.get("partial")))
    return through, cache


class ImagesFile:
    """The images ``seqrepair subscribe`` keeps (see the module): nothing is folded in or
    written before :meth:`begin` says where the subscription starts."""

    def __init__(self, path: Path, subscription: dict[str, str] | None = None) -> None:
        self.path = path
        self.subscription = subscription
        """Who keeps the file (``{"link_name", "address"}``): a file another wrote is not
        loaded."""
        self.cache = ImageCache()
        self.through: dict[str, int] | None = None
        """The position per source the images are current through (None: not begun)."""
        self._held: dict[str, int] = {}
        """Positions flushed to the output, acknowledged once the file holds them."""
        self._saved = time.monotonic()
        self._dirty = False

    @property
    def begun(self) -> bool:
        return self.through is not None

    def begin(self, start: dict[str, int], resumed: bool) -> bool:
        """The subscription starts after ``start`` (per source), resuming a durable position
        when ``resumed``: load the file when it is current through at least that, source by
        source, else start empty there (saying why). True when loaded."""
        self.through = dict(start)
        self._dirty = True
        if not self.path.exists() and not _staged(self.path).exists():
            return False
        try:
            through, cache = read_images(self.path, self.subscription)
        except UnmatchedImages as exc:
            log.warning("images file discarded: its position file is missing or was written "
                        "for other bytes or by another subscription; images start empty",
                        file=str(self.path),
                        error=str(exc))
            return False
        except (OSError, ValueError) as exc:
            log.warning("images file discarded: it cannot be read; images start empty",
                        file=str(self.path), error=str(exc))
            return False
        if not resumed:
            log.warning("images file discarded: the subscription does not resume a durable "
                        "position (a new one, or none kept); images start empty",
                        file=str(self.path), current_through=through, starts_after=start)
            return False
        behind = {s: n for s, n in start.items() if through.get(s, 0) < n}
        if behind:
            log.warning("images file discarded: it is not current through where the durable "
                        "subscription resumes; images start empty", file=str(self.path),
                        current_through=through, resumes_after=start)
            return False
        self.cache = cache
        self.through = {s: max(n, start.get(s, 0)) for s, n in through.items()}
        for source, n in start.items():
            self.through.setdefault(source, n)
        self._dirty = False
        log.info("images file loaded", file=str(self.path), items=len(cache),
                 current_through=self.through, resumes_after=start)
        return True

    def apply(self, pub: Publication) -> None:
        """A delivered publication, folded in unless the images are current past it (one
        delivered again after a restart)."""
        if self.through is None or pub.source_seq <= self.through.get(pub.source, 0):
            return
        self.cache.apply(pub)
        self.through[pub.source] = pub.source_seq
        self._dirty = True

    def apply_image(self, pub: Publication) -> None:
        """An image the subscriber asked for (its number is no position: not recorded)."""
        if self.through is None:
            return
        self.cache.apply(pub)
        self._dirty = True

    def hold(self, written: dict[str, int]) -> None:
        """``written`` is flushed to the output: acknowledged once the position file holds
        it."""
        for source, n in written.items():
            self._held[source] = max(n, self._held.get(source, 0))

    def save(self, force: bool = False) -> dict[str, int]:
        """Write the file, then its position file, when due (every :data:`IMAGES_EVERY` s)
        or ``force`` and return what may now be acknowledged (empty: nothing yet)."""
        if self.through is None:
            return {}
        now = time.monotonic()
        if not force and now - self._saved < IMAGES_EVERY:
            return {}
        self._saved = now
        if self._dirty or not self.path.exists() or not position_path(self.path).exists():
            write_images(self.cache, self.path, self.through, self.subscription)
            self._dirty = False
        held, self._held = self._held, {}
        # never past what the file holds (a held number above it: not folded in yet)
        return {s: min(n, self.through.get(s, n)) for s, n in held.items()}


__all__ = ["IMAGES_EVERY", "SHA256", "SUBSCRIPTION", "THROUGH", "ImagesFile", "UnmatchedImages",
           "images_bytes", "position_path", "read_images", "write_images"]
