"""A principal's new sources are counted across restarts of the component
(:mod:`seqrepair.amqp.component.sourcelimits`): the first journaling of a source records the
principal that brought it (``brought_by`` in the source's meta hash, written by the append
script). Before, the count started from zero on every start: one principal brought
``--max-sources-per-principal`` more on each run, and a few restarts filled ``--max-sources``
for every principal. Over a real ``seqrepair serve`` and redis-server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess
from .principals import MISSING, serve_args
from .test_source_limits import ALICE, LIMITS_POLICY, MALLORY, RESOURCE, Sender

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


@pytest.fixture
def journal(redis_url: str) -> Iterator[Journal]:
    j = Journal.from_url(redis_url)
    yield j
    j.close()


@pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")
def test_a_principals_new_sources_count_across_restarts(
    component: Callable[..., ComponentProcess], journal: Journal, tmp_path: Path,
) -> None:
    # a source journaled before principals were recorded (a publisher's own journal): nobody's
    journal.append([Publication("/weather/l", "legacy.0", 1, fields={"n": 1})], 16)
    policy = tmp_path / "policy.toml"
    policy.write_text(LIMITS_POLICY)
    comp = component("--heartbeat", "0.2", *serve_args(tmp_path, ALICE, MALLORY),
                     "--policy", str(policy), "--max-sources-per-principal", "3",
                     "--max-sources", "10")
    mallory = Sender(comp.url, MALLORY, "/weather/#")
    try:
        assert [mallory.send(f"made.{i}", "/weather/m") for i in range(3)] == [None] * 3
    finally:
        mallory.close()
    assert journal.brought_by(["made.0", "made.1", "made.2", "legacy.0"]) == {
        f"made.{i}": MALLORY for i in range(3)}
    comp.stop()
    comp.start()  # a new run: mallory's allowance is still used up
    mallory = Sender(comp.url, MALLORY, "/weather/#")
    alice = Sender(comp.url, ALICE, "/weather/#")
    try:
        assert mallory.send("made.3", "/weather/m") == RESOURCE  # failed before: accepted
        assert journal.high_water("made.3") == 0
        mallory.numbers["made.0"] = journal.high_water("made.0")
        assert mallory.send("made.0", "/weather/m") is None  # its own sources go on
        # alice's allowance is her own, the legacy source counts against nobody
        assert [alice.send(f"feed.{i}", "/weather/a") for i in range(3)] == [None] * 3
        assert alice.send("feed.3", "/weather/a") == RESOURCE
    finally:
        mallory.close()
        alice.close()
    assert journal.brought_by(["made.0", "feed.0"]) == {"made.0": MALLORY, "feed.0": ALICE}
    comp.stop()
    assert comp.stop_counters()["sources_refused"] == 2
