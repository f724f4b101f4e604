"""Hop limits and loop detection over real processes (APEX §4.7.2; WIRE.md "Hops, paths and
loops"): ``seqrepair gateway`` processes pointed at each other, chained past a limit and under
it, and hostile ``seqrepair-path`` values from a raw connection."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message, symbol, ulong
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.contributor import ContributionLinkError, Contributor
from seqrepair.amqp.client.publisher import Publisher
from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.wire.hops import (
    HOP_LIMIT_CONDITION,
    HOPS_PROPERTY,
    LOOP_CONDITION,
    PROP_PATH,
    HopLimitError,
    RelayLoopError,
)
from seqrepair.amqp.wire.vocabulary import CONTRIBUTIONS_PREFIX
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, FreePort, _env, free_port, start_binding, wait_for

pytestmark = [pytest.mark.amqp]

DEADLINE = 30.0
"""A generous bound on how long a refusal may take to reach the client (it takes well under a
second on an idle machine: one attach per gateway)."""
RSS_CEILING_KIB = 200 * 1024
"""Far above what a gateway needs (about 40 MiB) and far below what a loop cost before hop
paths: 767 MiB each in 12 s."""


class GatewayProcess:
    """``seqrepair gateway`` in a child process, logging at info to a file of its own."""

    def __init__(self, tmp: Path, hop_id: str, upstream: str, *args: str,
                 listen: str | None = None) -> None:
        self.hop_id = hop_id
        # a listen address its peers were given (a loop) is tried again as it is; one drawn
        # here is drawn again when another process took it before the gateway bound it
        port = FreePort()
        self.listen = listen or str(port)
        self.log = tmp / f"gateway-{hop_id}.log"
        attempts = itertools.count(1)

        def start_once() -> bool:
            if listen is None:
                self.listen = str(port)
            ready = tmp / f"gateway-{hop_id}-{next(attempts)}.ready"
            with open(self.log, "wb") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "gateway",
                     "--listen", self.listen, "--upstream", upstream, "--name", hop_id,
                     "--hop-id", hop_id, "--ready-file", str(ready), "--allow-anonymous",
                     *args],
                    env=_env(), stdout=out, stderr=subprocess.STDOUT,
                )
            assert wait_for(lambda: ready.exists() or self.proc.poll() is not None, 60), (
                self.text())
            return self.proc.poll() is None

        start_binding(start_once, self.text, [] if listen else [port], what="gateway",
                      sleep_first=listen is not None)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def count(self, event: str) -> int:
        """Log lines of ``event`` (structlog's event text)."""
        return sum(event in line for line in self.text().splitlines())

    def upstream_connected(self) -> bool:
        return self.count("upstream connected") > 0

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    started: list[GatewayProcess] = []

    def start(hop_id: str, upstream: str, *args: str, listen: str | None = None
              ) -> GatewayProcess:
        gw = GatewayProcess(tmp_path, hop_id, upstream, *args, listen=listen)
        started.append(gw)
        return gw

    yield start
    for gw in reversed(started):
        gw.stop()


class _Props(LinkOption):
    def __init__(self, props: dict[symbol, Any]) -> None:
        self.props = props

    def apply(self, link: Any) -> None:
        link.properties = self.props


def _attach_outcome(url: str, address: str, name: str, options: Any = None) -> tuple[str, str]:
    """Attach a receiver over a raw connection: the refusal's (condition, description), or
    ("attached", "") when it was not refused."""
    conn = BlockingConnection(url, timeout=DEADLINE)
    try:
        conn.create_receiver(address, name=name, options=options)
        return "attached", ""
    except LinkDetached as exc:
        cond = exc.link.remote_condition
        return str(cond.name), str(cond.description)
    finally:
        conn.close()


def raw_attach(url: str, name: str, path: Any, address: str = "/weather/#") -> tuple[str, str]:
    """Attach a receiver with ``seqrepair-path`` = ``path``: as :func:`_attach_outcome`."""
    return _attach_outcome(url, address, name, _Props({PROP_PATH: path}))


def _chain(component: ComponentProcess, gateways: Callable[..., GatewayProcess], *args: str
           ) -> list[GatewayProcess]:
    """Three gateways g1 -> component, g2 -> g1, g3 -> g2, all connected upstream."""
    chain: list[GatewayProcess] = []
    upstream = component.url
    for hop_id in ("g1", "g2", "g3"):
        chain.append(gateways(hop_id, upstream, *args))
        upstream = chain[-1].listen
    assert wait_for(lambda: all(gw.upstream_connected() for gw in chain), DEADLINE)
    return chain


# --- a loop ------------------------------------------------------------------------------------


def test_a_loop_of_two_gateways_is_refused_to_the_subscriber_naming_the_path(
    gateways: Callable[..., GatewayProcess],
) -> None:
    a_listen, b_listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    a = gateways("gw-a", b_listen, listen=a_listen)
    b = gateways("gw-b", a_listen, listen=b_listen)
    assert wait_for(lambda: a.upstream_connected() and b.upstream_connected(), DEADLINE)
    with contextlib.ExitStack() as running:
        sub = running.enter_context(Subscriber(a.listen, "/weather/#", link_name="victim",
                                               reconnect_delay=0.05))
        publisher = running.enter_context(Publisher(b.listen, "feed.loop", address="/weather/#",
                                                    reconnect_delay=0.05))
        publisher.publish("/weather/x", {"n": 1})
        assert wait_for(lambda: sub.error is not None and publisher.error is not None, DEADLINE)
        assert not publisher.flush(1)
    for client, first in ((sub, "gw-a"), (publisher, "gw-b")):
        error = client.error
        assert isinstance(error, RelayLoopError), error
        assert error.message.startswith(LOOP_CONDITION)
        second = "gw-b" if first == "gw-a" else "gw-a"
        assert f"{first} -> {second} -> {first}" in error.message  # the path, in order
    # the loop went round once and stopped: at most one attach upstream per gateway per
    # client (the subscriber's, the publisher's: once a gateway has learnt that the loop runs
    # through it, an attach that comes later is refused at once, as it would come back), one
    # refusal per client where the loop closed (or where it was barred), and the memory of a
    # gateway that did nothing (767 MiB each before)
    for gw in (a, b):
        assert 1 <= gw.count("attaching upstream") <= 2, gw.text()
        assert gw.rss_kib() < RSS_CEILING_KIB
    assert a.count("attach refused for its path") + b.count(
        "attach refused for its path") == 2, (a.text(), b.text())


def test_a_request_sent_into_a_loop_of_gateways_stops_at_the_hop_limit(
    gateways: Callable[..., GatewayProcess],
) -> None:
    """A request carries no path but a count: forwarded back and forth, it is refused by the
    gateway it would take past ``--max-hops`` (3 here), once, and goes no further; the refusal
    comes back hop by hop to the client (each gateway settles its delivery with the outcome
    of the one it forwarded)."""
    a_listen, b_listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    a = gateways("gw-a", b_listen, "--max-hops", "3", listen=a_listen)
    b = gateways("gw-b", a_listen, "--max-hops", "3", listen=b_listen)
    assert wait_for(lambda: a.upstream_connected() and b.upstream_connected(), DEADLINE)
    conn = BlockingConnection(a.listen, timeout=DEADLINE)
    try:
        sender = conn.create_sender("$seqrepair")
        delivery = sender.send(Message(id="q1", properties={"message-type": "CAPABILITIES"}),
                               error_states=[])
        cond = delivery.remote.condition
        assert (delivery.remote_state, cond and cond.name) == (
            Delivery.REJECTED, HOP_LIMIT_CONDITION), cond
    finally:
        conn.close()

    def refusals() -> int:
        return a.count("request refused for its hop count") + b.count(
            "request refused for its hop count")

    # a (hops 1) -> b (2) -> a (3) -> b refuses the 4th
    assert wait_for(lambda: refusals() >= 1, DEADLINE)
    assert b.count("request refused for its hop count") == 1, b.text()
    assert "would cross 4 hops, more than 3, at gw-b" in b.text()
    wait_for(lambda: refusals() > 1, 2)  # nothing more comes round
    assert refusals() == 1


# --- chains --------------------------------------------------------------------------------


@pytest.mark.redis
@pytest.mark.parametrize("where", ["gateways", "component"])
def test_a_chain_of_gateways_over_the_limit_is_refused_naming_the_path(
    component: Callable[..., ComponentProcess], gateways: Callable[..., GatewayProcess],
    where: str,
) -> None:
    """Three gateways with ``--max-hops 2``: the first one (g1) refuses the path g3 -> g2 ->
    g1; with the limit on the component instead, the component refuses g3 -> g2 -> g1."""
    comp = component(*(("--max-hops", "2") if where == "component" else ()))
    chain = _chain(comp, gateways, *(("--max-hops", "2") if where == "gateways" else ()))
    sub = Subscriber(chain[-1].listen, "/weather/#", link_name="far", reconnect_delay=0.05)
    with sub:
        assert wait_for(lambda: sub.error is not None, DEADLINE)
    error = sub.error
    assert isinstance(error, HopLimitError), error
    assert error.message.startswith(HOP_LIMIT_CONDITION)
    assert "g3 -> g2 -> g1" in error.message
    assert "more than 2" in error.message
    if where == "gateways":  # g1 refused it: nothing reached the component
        assert chain[0].count("attaching upstream") == 0
        assert chain[0].count("attach refused for its path") == 1
    else:
        assert chain[0].count("attaching upstream") == 1
        assert "g3 -> g2 -> g1" in comp.log_text()
        assert query_capabilities(comp.url).limits["max-hops"] == 2  # CAPABILITIES says so


@pytest.mark.redis
def test_a_chain_under_the_limit_carries_the_stream_and_counts_its_hops(
    component: Callable[..., ComponentProcess], gateways: Callable[..., GatewayProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    chain = _chain(comp, gateways, "--max-hops", "3")
    got: list[Publication] = []
    raw = BlockingConnection(chain[-1].listen, timeout=DEADLINE)
    try:
        receiver = raw.create_receiver("/weather/#", name="counted", credit=100)
        with contextlib.ExitStack() as running:
            sub = running.enter_context(Subscriber(chain[-1].listen, "/weather/#",
                                                   on_publication=got.append,
                                                   heartbeat_interval=0.2, link_name="near"))
            assert sub.wait_connected(DEADLINE)
            publisher = running.enter_context(Publisher(comp.url, "feed.chain"))
            publisher.publish_many([("/weather/wind/LEMD", {"n": i}, "update")
                                    for i in range(30)])
            assert publisher.flush(DEADLINE)
            assert wait_for(lambda: len(got) >= 30, DEADLINE)
        assert [p.source_seq for p in got] == list(range(1, 31))
        assert sub.error is None
        # a request crosses the chain both ways: the component's answer, its default limit
        assert query_capabilities(chain[-1].listen).limits["max-hops"] == 8
        # every frame says how many gateways it crossed
        message: Message = receiver.receive(timeout=DEADLINE)
        assert message.properties[HOPS_PROPERTY] == ulong(3)
    finally:
        raw.close()
    # the path the component was given is the chain's, nearest the subscriber first
    # the library subscriber, the raw one and the capabilities query's reply link
    assert chain[0].count("attaching upstream") == 3
    assert "path=['g3', 'g2', 'g1']" in chain[0].text()


# --- hostile paths ---------------------------------------------------------------------------


HOSTILE = [
    ("a string", "g-honest,x", "amqp:invalid-field"),
    ("numbers", [1, 2, 3], "amqp:invalid-field"),
    ("an empty hop", ["x", ""], "amqp:invalid-field"),
    ("a hop too long", ["x" * 2_000], "amqp:invalid-field"),  # bigger: a frame too large
    ("a control character", ["evil\n[error] forged"], "amqp:invalid-field"),
    ("too many hops to be any path", [f"h{i}" for i in range(1_000)], "amqp:invalid-field"),
    ("past the limit (8)", [f"h{i}" for i in range(9)], HOP_LIMIT_CONDITION),
    ("a loop through the gateway", ["x", "honest-gw"], LOOP_CONDITION),
]


@pytest.mark.redis
def test_hostile_paths_are_refused_typed_and_leave_an_honest_pair_alone(
    component: Callable[..., ComponentProcess], gateways: Callable[..., GatewayProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    gw = gateways("honest-gw", comp.url)
    assert wait_for(gw.upstream_connected, DEADLINE)
    got: list[Publication] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(Subscriber(gw.listen, "/weather/#", on_publication=got.append,
                                               heartbeat_interval=0.2, link_name="honest"))
        assert sub.wait_connected(DEADLINE)
        publisher = running.enter_context(Publisher(comp.url, "feed.honest"))
        publisher.publish_many([("/weather/a", {"n": i}, "update") for i in range(20)])
        for i, (what, path, condition) in enumerate(HOSTILE):
            # at the gateway, also under the honest link's name: refused, it takes nothing over
            for url, name in ((gw.listen, f"hostile-{i}"), (gw.listen, "honest"),
                              (comp.url, f"hostile-{i}")):
                if url == comp.url and condition == LOOP_CONDITION:
                    continue  # the component's identity is not honest-gw
                refused, description = raw_attach(url, name, path)
                assert refused == condition, (what, url, name, description)
                assert description
        publisher.publish_many([("/weather/a", {"n": i}, "update") for i in range(20, 40)])
        assert publisher.flush(DEADLINE)
        assert wait_for(lambda: len(got) >= 40, DEADLINE)
    # the honest subscriber got everything once, in order, and was never detached
    assert [p.source_seq for p in got] == list(range(1, 41))
    assert sub.error is None
    # nothing hostile went upstream: the only upstream attach is the honest one, relayed once
    assert gw.count("attaching upstream") == 1
    assert gw.count("link relayed") == 1
    assert gw.count("attach refused for its path") == 2 * len(HOSTILE)
    assert gw.proc.poll() is None
    assert comp.proc is not None
    assert comp.proc.poll() is None


def test_a_loop_of_two_gateways_is_barred_so_attaches_again_do_not_go_round(
    gateways: Callable[..., GatewayProcess],
) -> None:
    """A client that attaches again and again into a loop of two gateways (a new link name
    each time; the library's clients stop, others may not): the first goes round once, is
    refused naming the path, and the gateway in the loop bars it (cut off, a circuit breaker:
    2 s, doubled while it keeps coming, at most 8 s): the next attaches are refused at once,
    naming the same path, without going upstream again (before, each went round: two
    upstream attaches per gateway each). Memory stays flat."""
    a_listen, b_listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    a = gateways("gw-a", b_listen, listen=a_listen)
    b = gateways("gw-b", a_listen, listen=b_listen)
    assert wait_for(lambda: a.upstream_connected() and b.upstream_connected(), DEADLINE)
    refusals = [raw_attach(a.listen, f"storm-{i}", None) for i in range(20)]
    rss = [gw.rss_kib() for gw in (a, b)]
    refusals += [raw_attach(a.listen, f"storm-more-{i}", None) for i in range(20)]
    assert all(cond == LOOP_CONDITION for cond, _ in refusals), refusals
    assert all("gw-a -> gw-b -> gw-a" in text for _, text in refusals), refusals
    # the loop is reported by the gateway in it, once per time it went round
    assert 1 <= a.count("a loop runs through this gateway") <= 5, a.text()
    # at most once per time the bar ran out (2 s, 4 s, 8 s...), never once per attach
    assert a.count("attaching upstream") <= 5, a.text()
    assert b.count("attaching upstream") <= 5, b.text()
    for gw, before in zip((a, b), rss, strict=True):
        assert gw.rss_kib() < before + 16 * 1024, (before, gw.rss_kib())


def _owner_attach(url: str, name: str, source: str) -> tuple[str, str]:
    """An owner's ``$contributions/<source>`` link: as :func:`_attach_outcome`."""
    return _attach_outcome(url, CONTRIBUTIONS_PREFIX + source, name)


def test_contribution_links_into_a_loop_of_gateways_are_refused_and_barred(
    gateways: Callable[..., GatewayProcess],
) -> None:
    """Contribution links (a contributor's ``$contribute/<source>``, an owner's
    ``$contributions/<source>``) into two gateways pointed at each other: each is refused
    naming the path it went round, within seconds, and obeys the gateway's loop bars as
    subscriber and publishing links do: once the loop was learnt, an owner's attach is
    refused at once at the gateway, without going upstream (before, every owner's attach
    went round; a contributor's refusal said nothing of the path). Nothing runs away."""
    a_listen, b_listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    a = gateways("gw-a", b_listen, listen=a_listen)
    b = gateways("gw-b", a_listen, listen=b_listen)
    assert wait_for(lambda: a.upstream_connected() and b.upstream_connected(), DEADLINE)
    first = _owner_attach(a.listen, "own-0", "feed.x")
    assert first[0] == LOOP_CONDITION, first
    assert "gw-a -> gw-b -> gw-a" in first[1], first
    attaches = 1
    for i in range(1, 6):
        for gw, loop in ((a, "gw-a -> gw-b -> gw-a"), (b, "gw-b -> gw-a -> gw-b")):
            started = time.monotonic()
            condition, text = _owner_attach(gw.listen, f"own-{i}", "feed.x")
            assert condition == LOOP_CONDITION, (condition, text)
            assert loop in text, text
            with pytest.raises(ContributionLinkError) as refused:
                Contributor(gw.listen, "feed.x", timeout=DEADLINE)
            assert refused.value.condition == LOOP_CONDITION
            assert loop in refused.value.message, refused.value.message
            assert time.monotonic() - started < DEADLINE
            attaches += 2

    def at_once(gw: GatewayProcess, prefix: str) -> int:
        """Attaches the gateway refused for its path as they came (their own link names:
        a refusal that came back from upstream names the upstream link)."""
        return sum("attach refused for its path" in line and f" link={prefix}" in line
                   for line in gw.text().splitlines())

    # the loop's bars held owners' links back as they hold the others: refused at once
    assert at_once(a, "own-") >= 1, a.text()
    assert at_once(a, "contrib-") >= 1, a.text()
    # nothing runs away: at most one upstream attach per client attach, none once idle
    counts = [gw.count("attaching upstream") for gw in (a, b)]
    assert all(count <= attaches for count in counts), counts
    wait_for(lambda: [gw.count("attaching upstream") for gw in (a, b)] != counts, 3)
    assert [gw.count("attaching upstream") for gw in (a, b)] == counts
    for gw in (a, b):
        assert gw.rss_kib() < RSS_CEILING_KIB
        assert gw.proc.poll() is None
