"""A relay's restart of its links for numbers lost upstream, over narrow links (issue 27):
the scenario of test_relay.py's live subscriber told of numbers lost upstream, with B at 3, 4
and 5 link bits. The subscriber acknowledges (the window discipline); B restarts its link
when it journals the loss and names the new context (``SUBSCRIPTION`` ``ACTIVE``), so the
subscriber's ``ACK``s are taken and its window opens again. Was a bare reset: its ``ACK``s named
the old context, were never taken, and at these widths the window shut for good (the
subscriber got nothing after the loss)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_relay import lost_upstream_while_live

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_a_narrow_link_restarted_for_numbers_lost_upstream_opens_its_window_again(
    bits: int, redises: list[str], tmp_path: Path
) -> None:
    got, before, after, live, b = lost_upstream_while_live(
        redises, tmp_path, ("--heartbeat", "0.2"),
        ("--heartbeat", "0.2", "--link-bits", str(bits)))
    assert [(p.topic, p.source_seq) for p in got] == before + after
    lost = [(u.source, u.reason) for u in live.unrecoverable]
    assert ("feed.t", "trimmed") in lost, (lost, b.log_text()[-2000:])
    assert "numbers lost upstream: every link restarts its context" in b.log_text()
