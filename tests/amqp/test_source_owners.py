"""A principal's new sources are counted across restarts of the component
(:mod:`seqrepair.amqp.component.sourcelimits`): the first journaling of a source records the
principal that brought it (``brought_by`` in the source's meta hash, written by the append
script). Before, the count started from zero on every start: one principal brought
``--max-sources-per-principal`` more on each run, and a few restarts filled ``--max-sources``
for every principal. And the topics kept to class a source again after a policy reload
(:mod:`seqrepair.amqp.component.sourceviews`) are shared per principal that brought the
source: one budget for all let a publisher of long topics leave every later source none.
Over a real ``seqrepair serve`` and redis-server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from proton.utils import BlockingConnection

from seqrepair.amqp.component.sourceviews import (
    MAX_KEPT_CHARS,
    MAX_KEPT_CHARS_PER_PRINCIPAL,
    MAX_TOPICS_PER_SOURCE,
    SourceViews,
)
from seqrepair.core.limits import MAX_TOPIC_BYTES
from seqrepair.core.messages import Publication
from seqrepair.core.policy import Policy
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, start_after
from .principals import MISSING, amqp_identity, serve_args
from .test_source_limits import ALICE, LIMITS_POLICY, MALLORY, RESOURCE, Sender
from .test_source_limits_hostile import _send

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


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


TOPIC_CHARS = MAX_TOPIC_BYTES
"""Characters of each of mallory's topics: the longest the component takes (1 KiB), so 64
sources of 256 make MAX_KEPT_CHARS exactly."""
KEPT_AFTER = """
[[allow]]
actors = ["*@example.com"]
operations = ["publish"]
topics = ["/weather/#"]

[[allow]]
actors = ["alice@example.com"]
operations = ["subscribe"]
topics = ["/weather/alice/#"]
"""


def _long_topic(source: int, n: int) -> str:
    head = f"/weather/m/{source}/{n}/"
    return head + "x" * (TOPIC_CHARS - len(head))


@pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")
def test_a_publisher_of_long_topics_cannot_use_up_the_topics_others_keep_for_a_reload(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    """mallory publishes more than MAX_KEPT_CHARS of distinct long topics (all of one class);
    then alice's feed.alice publishes a topic of that class, and a reload entitles alice only
    to /weather/alice/#. feed.alice must be shown to her: classed again on its own topic. With
    one budget for every principal, mallory had used it up, feed.alice kept no topic, and was
    hidden after the reload (until its next publication)."""
    sources = MAX_KEPT_CHARS // (TOPIC_CHARS * MAX_TOPICS_PER_SOURCE) + 1
    policy = tmp_path / "policy.toml"
    policy.write_text(LIMITS_POLICY)
    comp = component("--heartbeat", "0.5", *serve_args(tmp_path, ALICE, MALLORY),
                     "--policy", str(policy))
    conn = BlockingConnection(comp.url, timeout=60, **amqp_identity(MALLORY))
    try:
        sender = conn.create_sender("/weather/#")
        for s in range(sources):
            for first in range(1, MAX_TOPICS_PER_SOURCE + 1, 64):
                pubs = [Publication(_long_topic(s, n), f"long.{s}", n, fields={})
                        for n in range(first, first + 64)]
                assert _send(sender, pubs) is None
    finally:
        conn.close()
    alice = Sender(comp.url, ALICE, "/weather/#")
    try:
        assert alice.send("feed.alice", "/weather/alice/1") is None
    finally:
        alice.close()
    policy.write_text(KEPT_AFTER)
    comp.hang_up("access policy reloaded", 1)
    shown = start_after(comp.url, "/weather/alice/#", timeout=60, **amqp_identity(ALICE))
    assert "feed.alice" in shown  # failed before: mallory's topics had used up the budget
    assert not any(s.startswith("long.") for s in shown)


def test_the_topics_kept_for_a_reload_are_shared_per_principal() -> None:
    """Without processes: a principal's sources keep topics up to its share; another's, and
    sources nobody brought (the journal's, a relay's), keep theirs."""
    policy = Policy.from_json({"allow": [{"actors": ["*"], "operations": ["subscribe"],
                                          "topics": ["/w/#"]}]})
    views = SourceViews()
    owners = {"m.0": MALLORY, "m.1": MALLORY, "a.0": ALICE}
    views.owner = lambda source: owners.get(source, "")
    per_source = MAX_TOPICS_PER_SOURCE * MAX_TOPIC_BYTES
    made = 0
    for s in range(MAX_KEPT_CHARS_PER_PRINCIPAL // per_source + 1):
        owners[f"m.{s}"] = MALLORY
        for n in range(MAX_TOPICS_PER_SOURCE):
            views.learn(policy, f"m.{s}", _long_topic(s, n).replace("/weather/", "/w/"))
            made += MAX_TOPIC_BYTES
    assert made > MAX_KEPT_CHARS_PER_PRINCIPAL
    kept = sum(len(t) for source, topics in views._kept.items() if source.startswith("m.")
               for t in topics)
    assert MAX_KEPT_CHARS_PER_PRINCIPAL - MAX_TOPIC_BYTES < kept <= MAX_KEPT_CHARS_PER_PRINCIPAL
    views.learn(policy, "a.0", "/w/alice")
    views.learn(policy, "journaled", "/w/j")
    assert "/w/alice" in views._kept["a.0"]
    assert "/w/j" in views._kept["journaled"]


def test_a_starting_component_reads_who_brought_its_sources_in_its_one_pass_over_them(
    journal: Journal,
) -> None:
    # a component's start reads every journaled source (100,000 at most): the principals that
    # brought them must come in the read it already makes (bits), not in a second pass over
    # all of them (one more SMEMBERS and one more command per source: a start read of 100,000
    # sources took 3.3-3.7 s, against 2.1 s without brought_by and 2.5-3.3 s in one pass),
    # and each principal is held once, not once per source
    from seqrepair.amqp.component.journalport import RedisJournalPort

    count = 40
    for i in range(count):
        journal.append([Publication("/t", f"s.{i}", 1, fields={"n": i})], 16,
                       brought_by=("alice" if i % 2 else "bob") + "-" + "x" * 100)
    client = journal.client
    client.config_resetstat()  # type: ignore[union-attr]
    port = RedisJournalPort(journal)
    assert len(port.high_waters()) == count
    brought = port.brought_by()
    stats = client.info("commandstats")  # type: ignore[union-attr]

    def calls(name: str) -> int:
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))

    assert len(brought) == count
    assert calls("smembers") == 1
    assert calls("hget") + calls("hmget") == 2 * count  # high-water and trim, bits and owner
    assert len({id(p) for p in brought.values()}) == 2


def test_a_new_source_whose_first_append_was_lost_unwritten_still_counts_as_its_principals(
) -> None:
    # the first append of a principal's new source times out and never lands: the source is
    # in doubt, and when its publisher sends again the journal takes it as its first
    # journaling. It must record (and count) the principal then, else a journal outage gave
    # the source to nobody: not counted now, nor after a restart
    from proton import Delivery

    from .test_journal_outage import outcome
    from .test_numbering import PUBLISHER, Harness

    h = Harness()
    h.receiver.principal = ALICE
    h.journal.lost.add(PUBLISHER)
    refused = h.publish(1)
    assert outcome(refused) == (Delivery.REJECTED, "amqp:internal-error")
    h.journal.lost.clear()
    h.publish(2)
    assert h.journal.held[PUBLISHER] == [1]
    assert h.journal.recorded == {PUBLISHER: ALICE}
    assert h.component.ingest.limits.brought(ALICE) == 1
