"""A subscriber of a relay claiming a made-up ``seqrepair-path-hops`` (review of issue 27):
only its own attach is refused, never an honest link's, over real processes (an origin, an
aggregating relay, a gateway in front of it, an honest subscriber behind the gateway)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from proton import ulong
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.wire.vocabulary import PROP_PATH, PROP_PATH_HOPS
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, wait_for
from .test_authz import _Properties
from .test_gateway_publish import gateway_process
from .test_relay import RelayProcess, expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

HB = ("--heartbeat", "0.2")


def _hostile(conn: BlockingConnection, name: str, hops: int) -> str | None:
    """A made-up path of one identity claiming ``hops``: the condition it is refused with."""
    try:
        conn.create_receiver(f"/w/{name}/#", name=name, credit=10,
                             options=_Properties({PROP_PATH: [name], PROP_PATH_HOPS: ulong(hops)}))
    except LinkDetached as exc:
        return str(exc)
    return None


def test_forged_hops_end_no_honest_link(redises: list[str], tmp_path: Path) -> None:
    """The origin takes 3 hops at most. A hostile attach claiming 8 hops is refused by the
    relay itself (8 + its own hop is past its limit); one claiming 5 is past the origin's:
    waiting for the widening, it makes the relay's upstream attach too deep, and only it is
    dropped (the deepest route), never the honest gateway client (1 hop), which gets every
    publication once, in order, and no error."""
    a = ComponentProcess(redises[0], tmp_path, "--hop-id", "origin", "--max-hops", "3",
                         *HB).start()
    relay = RelayProcess(redises[1], tmp_path, a.url, "R", "--aggregate", "--linger", "0.3",
                         "--context-retention", "0.3", "--hop-id", "hop-r", *HB).start()
    got: list[Publication] = []
    conn: Any = None
    try:
        with gateway_process(relay.url, tmp_path,
                             ("--allow-anonymous", "--hop-id", "gw-honest")) as gw:
            sub = Subscriber(gw, "/w/a/*", on_publication=got.append, link_name="honest",
                             heartbeat_interval=0.2, max_reconnect_delay=0.5).start()
            try:
                assert sub.wait_connected(30)
                assert wait_for(lambda: "gw-honest" in relay.log_text(), 20)
                publish(a.url, "feed.a", 50)
                assert wait_for(lambda: len(got) >= len(
                    expected(redises[0], "feed.a", "/w/a/*")), 30)
                mark = len(relay.log_text())
                conn = BlockingConnection(relay.url, timeout=10)
                past_relay = _hostile(conn, "evil8", 8)
                assert past_relay is not None
                assert "seqrepair:hop-limit-exceeded" in past_relay
                assert "9 hops, more than 8" in past_relay, past_relay
                past_origin = _hostile(conn, "evil5", 5)  # waits for the widening
                assert past_origin is not None
                assert "amqp:precondition-failed" in past_origin
                assert wait_for(lambda: "relay upstream refused for its path"
                                in relay.log_text()[mark:], 30), relay.log_text()[mark:]
                time.sleep(2)  # the relay attaches again without it
                publish(a.url, "feed.a", 50, after=50)
                want = expected(redises[0], "feed.a", "/w/a/*")
                assert wait_for(lambda: len(got) >= len(want), 30), (len(got), len(want))
                time.sleep(0.5)
                assert sub.error is None, sub.error
            finally:
                sub.stop()
    finally:
        if conn is not None:
            conn.close()
        relay.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable
    tail = relay.log_text()[mark:]
    refused = [line for line in tail.splitlines() if "relay upstream refused" in line]
    assert refused
    # only the waiting route was dropped (and its path barred), no attached link ended
    assert all("links=[]" in line for line in refused), refused
    assert "barred=[('evil5',)]" in refused[0], refused[0]
    assert "link detached: the relay's upstream attach was refused" not in tail
    assert "Traceback" not in tail
