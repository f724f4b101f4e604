"""Waiting for something another process or thread does, shared by the test packages."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
