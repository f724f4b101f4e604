"""The ``--ready-file`` of the long-running commands (``serve``, ``gateway``, ``relay``,
``subscribe``): written whole at once, a temporary file renamed over it, so that whoever sees
the file sees all of it (the address it names), and the writer holds no descriptor of it once
it is there (a test counting the process's descriptors from then on counts none of it)."""

from __future__ import annotations

import os
from pathlib import Path


def write_ready(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see the module)."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)  # gone once renamed; a failed write leaves nothing
