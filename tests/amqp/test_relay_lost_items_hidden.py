"""Items a relay names as lost upstream are never ones its subscriber may not see (issue 27
audit): over real processes (``seqrepair serve`` A granting every token, ``seqrepair relay``
B denying ``secret`` to its subscribers), numbers B's upstream link lost held an item whose
publications carry the token ``secret``. B's lost-upstream marker keeps the items by topic
only (as its upstream named them for B's own, wider, view), so for a link that sees fewer
tokens than that view it cannot tell which it may see: the link's ``Unrecoverable`` names
none (unknown: the resync asks for every item) rather than the hidden one. Was: the hidden
item's topic was named."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqrepair.core.messages import Publication

from .test_relay import lost_upstream_while_live
from .test_relay_fetch import FAST

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

HIDDEN = "/w/z/9"


def test_items_lost_upstream_name_nothing_a_narrower_link_may_not_see(
    redises: list[str], tmp_path: Path
) -> None:
    got, before, after, live, b = lost_upstream_while_live(
        redises, tmp_path, (*FAST, "--default-grant", "*"),
        ("--default-grant", "*;deny=secret", *FAST),
        [Publication(HIDDEN if i % 2 else "/w/a/1", "feed.t", i + 1, fields={"n": i},
                     permtoken="secret" if i % 2 else None) for i in range(10, 40)]
        + [Publication("/w/a/1", "feed.t", i + 1, fields={"n": i}) for i in range(40, 60)],
        summarize=True)
    assert [(p.topic, p.source_seq) for p in got] == before + after
    lost = [u for u in live.unrecoverable if u.source == "feed.t"]
    assert [u.reason for u in lost] == ["trimmed"], (lost, b.log_text()[-2000:])
    assert lost[0].items is None, lost  # not which of them it may see
