"""Open the journal: on a given Redis URL, or on a private embedded redis-server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from seqrepair.journal.datadir import DEFAULT_DATA_DIR
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import AppendFsync, EmbeddedRedis


@contextmanager
def open_journal(
    redis_url: str | None = None,
    *,
    data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR,
    appendfsync: AppendFsync = "everysec",
) -> Iterator[Journal]:
    """A :class:`Journal` for the block: on ``redis_url``, or when it is None on an
    :class:`EmbeddedRedis` with its data in ``data_dir``, stopped when the block ends."""
    if redis_url is not None:
        with Journal.from_url(redis_url) as journal:
            yield journal
        return
    with (
        EmbeddedRedis(data_dir, appendfsync=appendfsync) as server,
        Journal.from_url(server.url) as journal,
    ):
        yield journal
