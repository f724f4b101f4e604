"""Where the embedded redis-server keeps its data by default (here, apart from
:mod:`seqrepair.journal.server`, so the ``journal`` commands' options import no redis)."""

from pathlib import Path

DEFAULT_DATA_DIR = Path(".seqrepair") / "redis"
