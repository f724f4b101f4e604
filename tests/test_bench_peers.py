"""The peer benchmark's exactness check (benchmarks/peer_clients.py), on synthetic sequences:
a run counts only when the subscriber saw exactly 1..N, once each, in order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from peer_clients import Exactness


def seen(numbers: list[int]) -> Exactness:
    check = Exactness()
    for number in numbers:
        check.see(number)
    return check


def test_one_to_n_in_order_is_exact() -> None:
    check = seen(list(range(1, 1001)))
    assert check.exact(1000)
    assert check.report(1000) == {"exact": True, "seen": 1000, "through": 1000,
                                  "duplicates": 0, "skipped": 0, "first_wrong": None}


@pytest.mark.parametrize(("numbers", "n", "duplicates", "skipped", "first_wrong"), [
    ([1, 2, 3, 4], 5, 0, 0, None),  # one missing at the end
    ([1, 2, 4, 5], 5, 0, 1, (3, 4)),  # one missing inside
    ([1, 2, 2, 3, 4, 5], 5, 1, 0, (3, 2)),  # a duplicate
    ([1, 3, 2, 4, 5], 5, 1, 1, (2, 3)),  # reordered: 2 comes late
    ([1, 2, 3, 4, 5, 6], 5, 0, 0, None),  # one more than published
    ([2, 3, 4, 5, 6], 5, 0, 1, (1, 2)),  # starts at 2
    ([], 5, 0, 0, None),  # nothing
])
def test_anything_else_is_not(numbers: list[int], n: int, duplicates: int, skipped: int,
                              first_wrong: tuple[int, int] | None) -> None:
    check = seen(numbers)
    assert not check.exact(n)
    report = check.report(n)
    assert report["exact"] is False
    assert (report["duplicates"], report["skipped"], report["first_wrong"]) == (
        duplicates, skipped, first_wrong)


def test_the_same_count_with_a_duplicate_for_a_missing_one_is_not_exact() -> None:
    check = seen([1, 2, 3, 3, 5])  # five seen, through 5, but 4 never came and 3 came twice
    assert check.count == 5
    assert check.next == 6
    assert not check.exact(5)
