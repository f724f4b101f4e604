"""The relay's selection bookkeeping (pure) and the ``seqrepair-selection`` attach property at
a real component: one link, several patterns."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.relay.selection import (
    SelectionTable,
    covered,
    normal,
    upstream_properties,
)
from seqrepair.amqp.wire.vocabulary import PROP_SELECTION
from seqrepair.core.messages import Publication
from seqrepair.core.topics import TopicPattern

from .conftest import ComponentProcess, wait_for


def pats(*texts: str) -> tuple[TopicPattern, ...]:
    return tuple(TopicPattern(t) for t in texts)


def test_normal_drops_covered_patterns_and_sorts() -> None:
    assert normal(pats("/w/b/#", "/w/#", "/x/*", "/w/a/1")) == pats("/w/#", "/x/*")
    assert normal(pats("/a/#", "/a/#")) == pats("/a/#")
    assert normal(()) == ()
    assert covered(pats("/w/#"), pats("/w/a/*", "/w/b"))
    assert not covered(pats("/w/a/#"), pats("/w/#"))


def test_upstream_properties_name_the_selection_only_when_it_has_several_patterns() -> None:
    assert upstream_properties(pats("/w/#")) == {}
    assert upstream_properties(pats("/a/#", "/b/*")) == {PROP_SELECTION: "/a/#,/b/*"}


def test_a_standing_selection_carries_only_what_lies_inside_it() -> None:
    table = SelectionTable(pats("/w/#"))
    assert table.current == pats("/w/#")
    assert table.carries(pats("/w/a/*"))
    assert table.may_carry(pats("/w/a/*"))
    assert not table.may_carry(pats("/x/#"))
    assert table.next_selection({"s": pats("/w/a/*")}, (), now=0.0) is None


def test_aggregation_widens_at_once_and_narrows_after_lingering() -> None:
    table = SelectionTable((), aggregate=True, linger=1.0)
    assert table.current == ()
    assert table.may_carry(pats("/x/#"))
    assert not table.carries(pats("/x/#"))
    # a subscriber waits for /a/#: wider at once
    wanted = table.next_selection({}, pats("/a/#"), now=0.0)
    assert wanted == pats("/a/#")
    table.current = wanted
    # a second one on /b/*: the union, keeping /a/#
    table.current = table.next_selection({"one": pats("/a/#")}, pats("/b/*"), now=1.0)
    assert table.current == pats("/a/#", "/b/*")
    # the /b/* subscriber leaves: narrower only once it has lingered
    assert table.next_selection({"one": pats("/a/#")}, (), now=2.0) is None
    assert table.next_selection({"one": pats("/a/#")}, (), now=2.5) is None
    assert table.next_selection({"one": pats("/a/#")}, (), now=3.1) == pats("/a/#")
    # one that comes back before the linger ends keeps the selection as it is
    table.current = pats("/a/#", "/b/*")
    assert table.next_selection({"one": pats("/a/#")}, (), now=10.0) is None
    assert table.next_selection({"one": pats("/a/#"), "two": pats("/b/*")}, (), 10.5) is None
    assert table.next_selection({"one": pats("/a/#")}, (), now=11.0) is None
    assert table.next_selection({"one": pats("/a/#")}, (), now=11.9) is None


@pytest.mark.amqp
@pytest.mark.redis
def test_one_link_subscribes_to_every_pattern_of_its_selection(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    got: list[Publication] = []
    sub = Subscriber(comp.url, "/a/#", on_publication=got.append, link_name="several",
                     link_properties={PROP_SELECTION: "/a/#,/b/*"}).start()
    bad = Subscriber(comp.url, "/a/#", link_name="bad",
                     link_properties={PROP_SELECTION: "/b/*"}, max_reconnect_delay=0.5).start()
    try:
        assert sub.wait_connected(20)
        time.sleep(0.3)
        publisher = Publisher(comp.url, "feed.s").start()
        publisher.publish_many([(t, {"n": i}, "update") for i, t in
                                enumerate(["/a/1", "/b/2", "/c/3", "/b/2/x", "/a/4/y"])])
        assert publisher.flush(30)
        publisher.close()
        assert wait_for(lambda: len(got) >= 3, 20), got
        time.sleep(0.3)
        assert not bad.connected.is_set()  # its selection lacks its address: refused
    finally:
        sub.stop()
        bad.stop()
    assert [p.topic for p in got] == ["/a/1", "/b/2", "/a/4/y"]
    assert "seqrepair-selection must name the link's address" in comp.log_text()
