"""Loading for the relay-bound analysis scripts: the files ``bench_relay.py --trace DIR`` writes.

``NN-relay.json`` (``benchmarks/relaytrace.py``): ``{"rows": [...], "threads": {...}}``, rows
of ``[time, thread, stage, count, first source number, last source number]``.
``NN-sub-*.json``: ``[clock offset, [delivery times], [source numbers]]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Row = list[Any]


def relay_trace(path: str | Path) -> tuple[list[Row], dict[str, float]]:
    """The rows and the per-thread CPU seconds of one relay trace."""
    with open(path) as f:
        trace = json.load(f)
    return trace["rows"], trace["threads"]


def relay_rows(path: str | Path) -> list[Row]:
    """The rows of one relay trace."""
    return relay_trace(path)[0]


def subscriber_trace(path: str | Path) -> tuple[list[float], list[int]]:
    """One subscriber's delivery times (on the shared clock) and source numbers."""
    with open(path) as f:
        offset, times, nums = json.load(f)
    return [t + offset for t in times], nums
