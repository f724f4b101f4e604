"""The transiting side of response routing: a gateway that forwards requests with response
annotations when the next hop takes them (respann §2.3) and rewrites them where it does not
(§2.5).

Both cores are pure and property-tested; the integration tests run subscribers behind a gateway
(and behind a gateway behind a gateway) in front of a real component whose send path drops
frames: the gap fills are answered back through the gateways.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.gateway.gateway import Gateway
from seqrepair.amqp.gateway.relays import upstream_name
from seqrepair.amqp.gateway.rewrite import (
    RESPONSES_ADDRESS,
    Addressing,
    PendingReply,
    ReplyTable,
    annotate_request,
    answer_route,
    restore_response,
    rewrite_request,
)
from seqrepair.amqp.wire.respann import ADDRESS_COOKIE, RESPONSE_COOKIE, RESPONSE_TARGET
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER
from seqrepair.amqp.wire.vocabulary import LINK_PREFIX
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, wait_for

names = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=12)
ids = st.one_of(st.integers(0, 2**64 - 1), names, st.binary(min_size=1, max_size=8))
requests = st.builds(
    Addressing,
    message_id=ids,
    reply_to=st.none() | names.map(lambda n: LINK_PREFIX + n) | names,
    correlation_id=st.none() | ids,
    link=st.none() | names,
)


@given(requests, names)
def test_rewritten_request_names_only_upstream_addresses(request: Addressing, gw: str) -> None:
    new_id = f"{gw}:1"
    out, pending = rewrite_request(request, new_id=new_id, gateway=gw)
    assert out.message_id == new_id
    link = request.link or (
        request.reply_to[len(LINK_PREFIX):]
        if request.reply_to and request.reply_to.startswith(LINK_PREFIX) else None
    )
    if link is None:
        assert (out.reply_to, out.link) == (None, None)
    else:
        assert out.link == upstream_name(gw, link)
        assert out.reply_to == LINK_PREFIX + upstream_name(gw, link)
    assert out.correlation_id == request.correlation_id
    assert pending == PendingReply(request.message_id, request.reply_to, request.link)


@given(requests, names, st.lists(st.none() | ids, max_size=5))
def test_restoring_inverts_the_rewriting_and_ignores_strangers(
    request: Addressing, gw: str, others: list[object]
) -> None:
    table = ReplyTable(capacity=4)
    new_id = f"{gw}:7"
    _out, pending = rewrite_request(request, new_id=new_id, gateway=gw)
    table.remember(new_id, pending)
    answer = Addressing(message_id="answer", correlation_id=new_id)
    restored = restore_response(answer, table)
    assert restored is not None
    back, destination = restored
    assert back.correlation_id == request.message_id
    assert destination == request.reply_to
    assert back.message_id == "answer"
    # a source replay answers one request many times: the entry stays
    assert restore_response(answer, table) == restored
    for other in others:
        if other != new_id:
            assert restore_response(Addressing(correlation_id=other), table) is None


@given(requests, names)
def test_an_annotated_request_keeps_its_id_and_its_answers_find_the_link_by_the_cookie(
    request: Addressing, gw: str
) -> None:
    link = request.link or (
        request.reply_to[len(LINK_PREFIX):]
        if request.reply_to and request.reply_to.startswith(LINK_PREFIX) else None
    )
    annotated = annotate_request(request, gateway=gw)
    if link is None:
        assert annotated is None  # nothing to route answers to: it is rewritten instead
        return
    assert annotated is not None
    out, annotations = annotated
    assert out == Addressing(request.message_id, request.reply_to, request.correlation_id,
                             upstream_name(gw, link))
    assert annotations[RESPONSE_TARGET] == RESPONSES_ADDRESS
    # the component echoes the cookie on every answer as address-cookie
    assert answer_route({ADDRESS_COOKIE: annotations[RESPONSE_COOKIE]}) == link


@pytest.mark.parametrize("annotations", [None, {}, {ADDRESS_COOKIE: "text"},
                                         {ADDRESS_COOKIE: b"\xff\xfe"}, {"other": b"x"}])
def test_an_answer_without_a_cookie_of_ours_has_no_route(annotations: object) -> None:
    assert answer_route(annotations) is None  # type: ignore[arg-type]


def test_reply_table_is_bounded_oldest_first() -> None:
    table = ReplyTable(capacity=3)
    for i in range(5):
        table.remember(i, PendingReply(f"orig{i}", None, None))
    assert list(table) == [2, 3, 4]
    assert table[4].original_id == "orig4"


@pytest.mark.amqp
@pytest.mark.redis
@pytest.mark.parametrize("annotations", [True, False], ids=["annotated", "rewritten"])
def test_gap_fills_find_their_way_back_through_a_gateway(
    component: Callable[..., ComponentProcess], redis_url: str, annotations: bool
) -> None:
    """The component takes response annotations: the gateway forwards requests with them and
    routes the answers by their cookie; told not to, it rewrites requests and restores answers
    (what it does for a next hop without the capability)."""
    comp = component("--drop-rate", "0.03", "--drop-seed", "3", "--heartbeat", "0.2")
    gateway = Gateway("127.0.0.1:0", comp.url,
                      security=ANONYMOUS_LISTENER, name="edge",
                      annotations=annotations).start()
    assert gateway.ready.wait(10)
    got: list[Publication] = []
    sub = Subscriber(gateway.listening, "/gw/#", on_publication=got.append,
                     heartbeat_interval=0.2, link_name="behind-gw").start()
    try:
        assert sub.connected.wait(10)
        time.sleep(0.3)
        publisher = Publisher(comp.url, "feed.gw").start()
        publisher.publish_many([("/gw/a", {"n": i, "x": None}, "update") for i in range(600)])
        assert publisher.flush(30)
        publisher.close()
        assert wait_for(lambda: len(got) >= 600, 30), (len(got), gateway.stats)
        time.sleep(0.3)
        # while the subscriber is there (an answer that comes after it left is dropped)
        unroutable = gateway.stats["unroutable"]
    finally:
        sub.stop()
        gateway.close()
    assert [p.source_seq for p in got] == list(range(1, 601))
    assert [p.fields["n"] for p in got] == list(range(600))
    stats = sub.stats()
    assert stats.repaired > 0
    assert stats.unrecoverable == 0
    if annotations:
        assert gateway.stats["annotated"] >= 1
        assert gateway.stats["routed"] >= 1  # answers carried the cookie back
        assert gateway.stats["rewritten"] == gateway.stats["restored"] == 0
    else:
        assert gateway.stats["rewritten"] >= 1
        assert gateway.stats["restored"] >= 1  # answers carried the rewritten id back
        assert gateway.stats["annotated"] == gateway.stats["routed"] == 0
    assert unroutable == 0


@pytest.mark.amqp
@pytest.mark.redis
def test_a_gateway_behind_a_gateway_rewrites_where_its_next_hop_lacks_annotations(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    """subscriber -> outer gateway -> inner gateway -> component: the inner gateway offers no
    response annotations, so the outer one rewrites; the inner one, before a component that
    takes them, annotates. Every gap fill still finds its way back, twice transited."""
    comp = component("--drop-rate", "0.03", "--drop-seed", "5", "--heartbeat", "0.2")
    inner = Gateway("127.0.0.1:0", comp.url,
                    security=ANONYMOUS_LISTENER, name="inner").start()
    assert inner.ready.wait(10)
    outer = Gateway("127.0.0.1:0", inner.listening,
                    security=ANONYMOUS_LISTENER, name="outer").start()
    assert outer.ready.wait(10)
    got: list[Publication] = []
    sub = Subscriber(outer.listening, "/gw/#", on_publication=got.append,
                     heartbeat_interval=0.2, link_name="far").start()
    try:
        assert sub.connected.wait(10)
        time.sleep(0.3)
        publisher = Publisher(comp.url, "feed.far").start()
        publisher.publish_many([("/gw/b", {"n": i}, "update") for i in range(600)])
        assert publisher.flush(30)
        publisher.close()
        assert wait_for(lambda: len(got) >= 600, 30), (len(got), outer.stats, inner.stats)
    finally:
        sub.stop()
        outer.close()
        inner.close()
    assert [p.source_seq for p in got] == list(range(1, 601))
    assert sub.stats().repaired > 0
    assert sub.stats().unrecoverable == 0
    assert outer.stats["rewritten"] >= 1
    assert outer.stats["annotated"] == 0
    assert inner.stats["annotated"] >= 1
    assert inner.stats["rewritten"] == 0
