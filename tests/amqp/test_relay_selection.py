"""The relay's selection bookkeeping (pure) and the ``seqrepair-selection`` attach property at
a real component: one link, several patterns."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.relay.selection import (
    NOTHING,
    Selection,
    SelectionTable,
    covered,
    normal,
    upstream_properties,
)
from seqrepair.amqp.wire.vocabulary import PROP_GRANTS, PROP_SELECTION
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


def sel(*texts: str, tokens: set[str] | None = None) -> Selection:
    return Selection(pats(*texts), None if tokens is None else frozenset(tokens))


def test_upstream_properties_name_the_selection_and_the_tokens_asked_for() -> None:
    assert upstream_properties(sel("/w/#")) == {}
    assert upstream_properties(sel("/a/#", "/b/*")) == {PROP_SELECTION: "/a/#,/b/*"}
    assert upstream_properties(sel("/a/#", tokens={"t2", "t1"})) == {PROP_GRANTS: "t1,t2"}
    assert upstream_properties(sel("/a/#", tokens=set())) == {PROP_GRANTS: ""}


def test_selections_cover_and_unite_patterns_and_tokens() -> None:
    assert Selection.of_link(pats("/a/#"), frozenset({"*", "x"})).tokens is None
    assert sel("/a/#").covers(sel("/a/b", tokens={"x"}))
    assert sel("/a/#", tokens={"x", "y"}).covers(sel("/a/b", tokens={"x"}))
    assert not sel("/a/#", tokens={"x"}).covers(sel("/a/b", tokens={"x", "y"}))
    assert not sel("/a/#", tokens={"x"}).covers(sel("/a/b"))
    assert sel("/a/*", tokens={"x"}).union(sel("/b/#", tokens={"y"})) == sel(
        "/a/*", "/b/#", tokens={"x", "y"})
    assert sel("/a/*", tokens={"x"}).union(sel("/a/b")) == sel("/a/*")
    assert sel("/a/#", tokens={"y", "x"}).marker_text() == "/a/#;tokens=x,y"
    # no patterns selects nothing, whatever its tokens say
    assert sel("/a/#", tokens=set()).covers(NOTHING)
    assert sel("/a/#", tokens=set()).union(NOTHING) == sel("/a/#", tokens=set())
    assert NOTHING.union(sel("/a/#", tokens=set())) == sel("/a/#", tokens=set())


def test_a_selection_waiting_subscribers_asked_for_stays_until_they_attach() -> None:
    """Switched for a waiting subscriber that has not attached again yet: no switch back and
    forth (its tokens must not turn into "every token" meanwhile)."""
    table = SelectionTable((), aggregate=True, linger=5.0)
    table.current = sel("/w/b/#", tokens=set())
    assert table.next_selection({}, (), now=0.0) is None
    assert table.next_selection({"b": sel("/w/b/#", tokens=set())}, (), now=1.0) is None


def test_a_standing_selection_carries_only_what_lies_inside_it() -> None:
    table = SelectionTable(pats("/w/#"))
    assert table.current == sel("/w/#")
    assert table.carries(sel("/w/a/*", tokens={"t"}))
    assert table.may_carry(pats("/w/a/*"))
    assert not table.may_carry(pats("/x/#"))
    assert table.next_selection({"s": sel("/w/a/*", tokens={"t"})}, (), now=0.0) is None


def test_aggregation_widens_at_once_and_narrows_after_lingering() -> None:
    table = SelectionTable((), aggregate=True, linger=1.0)
    assert table.current == NOTHING
    assert table.may_carry(pats("/x/#"))
    assert not table.carries(sel("/x/#"))
    # a subscriber waits for /a/#: wider at once
    wanted = table.next_selection({}, [sel("/a/#", tokens={"x"})], now=0.0)
    assert wanted == sel("/a/#", tokens={"x"})
    table.current = wanted
    # a second one on /b/* granted y: the union of patterns and tokens, keeping /a/#
    table.current = table.next_selection({"one": sel("/a/#", tokens={"x"})},
                                         [sel("/b/*", tokens={"y"})], now=1.0)
    assert table.current == sel("/a/#", "/b/*", tokens={"x", "y"})
    # the /b/* subscriber leaves: narrower only once it has lingered
    one = {"one": sel("/a/#", tokens={"x"})}
    assert table.next_selection(one, (), now=2.0) is None
    assert table.next_selection(one, (), now=2.5) is None
    assert table.next_selection(one, (), now=3.1) == sel("/a/#", tokens={"x"})
    # one that comes back before the linger ends keeps the selection as it is
    table.current = sel("/a/#", "/b/*", tokens={"x", "y"})
    assert table.next_selection(one, (), now=10.0) is None
    assert table.next_selection({**one, "two": sel("/b/*", tokens={"y"})}, (), 10.5) is None
    assert table.next_selection(one, (), now=11.0) is None
    assert table.next_selection(one, (), now=11.9) is None
    # one granted every token: the tokens are not narrowed any more
    assert table.next_selection({**one, "all": sel("/a/b")}, (), now=12.0) == sel(
        "/a/#", "/b/*")


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
