"""Server-side permission grants: the component decides a subscriber's tokens, never the client.

Unit tests of :mod:`seqrepair.amqp.component.grants`, then a real component process: a subscriber
that claims a token it is not granted gets neither live publications nor repairs (gap fills, source
replays after a component restart) carrying it; a granted one gets them all.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from proton import Delivery, Message, symbol

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.component.grants import (
    Grant,
    GrantTable,
    InvalidGrantError,
    narrow,
    parse_grant,
    principal_of,
)
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.security import ClientSecurity
from seqrepair.core.messages import Publication, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.core.topics import TopicPattern
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .pki import Pki, tls_url
from .test_protocol import Session

pytestmark = [pytest.mark.amqp]

WEATHER = (TopicPattern("/weather/#"),)


# --- the grant table ------------------------------------------------------------------------


def test_parse_grant_reads_tokens_and_deny_exceptions() -> None:
    assert parse_grant("alice=gold, silver;deny=secret") == (
        "alice", Grant(frozenset({"gold", "silver"}), frozenset({"secret"}))
    )
    assert parse_grant("bob=") == ("bob", Grant())
    assert Grant.parse("*") == Grant(frozenset({"*"}))


@pytest.mark.parametrize("spec", ["alice", "=gold", "alice=gold;allow=x", "alice=gold;deny"])
def test_parse_grant_refuses_a_malformed_spec(spec: str) -> None:
    with pytest.raises(InvalidGrantError) as info:
        parse_grant(spec)
    assert info.value.got == spec


@pytest.mark.parametrize(
    ("granted", "claimed", "result"),
    [
        ({"gold"}, None, {"gold"}),  # no claim: the whole grant
        ({"gold"}, {"gold", "silver"}, {"gold"}),  # a claim never widens
        (set(), {"gold"}, set()),  # the old leak: a claim alone grants nothing
        ({"gold", "silver"}, {"silver"}, {"silver"}),  # a claim narrows
        ({"gold"}, set(), set()),  # an empty claim: no tokens at all
        ({"gold"}, {"*"}, {"gold"}),  # a claimed wildcard is the grant, no more
        ({"*"}, {"gold"}, {"gold"}),  # a granted wildcard lets the claim through
        ({"*"}, None, {"*"}),
    ],
)
def test_a_claim_only_narrows_the_grant(
    granted: set[str], claimed: set[str] | None, result: set[str]
) -> None:
    assert narrow(frozenset(granted), claimed) == frozenset(result)


def test_the_table_gives_each_principal_its_grant_and_everyone_else_the_default() -> None:
    table = GrantTable.parse(["alice=*;deny=secret", "bob=gold"], default="public")
    alice = table.entitlement("alice", WEATHER, None)
    assert alice == Entitlement(WEATHER, grant={"*"}, deny={"secret"})
    assert not alice.allows_token("secret")  # the server's deny holds whatever the claim
    assert table.entitlement("alice", WEATHER, {"secret"}).allows_token("secret") is False
    assert table.entitlement("bob", WEATHER, {"gold", "silver"}).grant == {"gold"}
    assert table.entitlement("mallory", WEATHER, {"gold"}).grant == frozenset()
    assert table.entitlement("mallory", WEATHER, None).grant == {"public"}
    assert GrantTable().entitlement("anyone", WEATHER, {"gold"}) == Entitlement(WEATHER)


class _Transport:
    def __init__(self, user: str | None) -> None:
        self.user = user


class _Connection:
    def __init__(self, user: str | None, container: str | None) -> None:
        self.transport = _Transport(user)
        self.remote_container = container


def test_the_principal_is_the_proven_identity_never_the_container_id() -> None:
    assert principal_of(_Connection("alice", "c-1")) == "alice"
    assert principal_of(_Connection("O=Example,CN=alice", "c-1")) == "O=Example,CN=alice"
    assert principal_of(_Connection("anonymous", "alice")) == "anonymous"
    assert principal_of(_Connection(None, "alice")) == "anonymous"
    assert principal_of(_Connection("", None)) == "anonymous"


def test_a_grant_may_name_a_certificate_subject() -> None:
    assert parse_grant("O=Example,CN=alice=gold;deny=x") == (
        "O=Example,CN=alice", Grant(frozenset({"gold"}), frozenset({"x"})))


# --- a real component -----------------------------------------------------------------------

TOPICS = ["/weather/wind/LEMD", "/weather/rain/LFPG"]


def workload(first: int, n: int) -> list[tuple[str, dict[str, int], str, str | None]]:
    """Every 3rd publication carries token 'gold', every 5th (not 3rd) 'silver'."""
    def token(i: int) -> str | None:
        return "gold" if i % 3 == 0 else "silver" if i % 5 == 0 else None

    return [(TOPICS[i % 2], {"n": i}, "update", token(i)) for i in range(first, first + n)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    made = Pki.make(tmp_path_factory.mktemp("pki"), with_credentials=False)
    for name in ("alice", "mallory", "carol", "publisher"):
        made.person(name)
    return made


def test_the_component_decides_grants_for_live_delivery_gap_fills_and_replays(
    component: Callable[..., ComponentProcess], redis_url: str, pki: Pki
) -> None:
    # principals are proven by client certificates (SASL EXTERNAL): CN=<name>
    comp = component("--heartbeat", "0.2", "--drop-rate", "0.05", "--drop-seed", "11",
                     *pki.server_args(),
                     "--grant", "CN=alice=gold,silver", "--grant", "CN=carol=*;deny=silver")
    claims: dict[str, tuple[str, list[str]]] = {
        # whose certificate, claimed tokens
        "mallory": ("mallory", ["gold", "silver"]),  # granted nothing: claims are ignored
        "alice": ("alice", []),  # no claim: the whole grant
        "alice-narrow": ("alice", ["silver", "platinum"]),  # narrows to silver
        "carol": ("carol", ["gold", "silver"]),  # '*' narrowed to gold+silver, silver denied
    }
    visible = {
        "mallory": {None},
        "alice": {None, "gold", "silver"},
        "alice-narrow": {None, "silver"},
        "carol": {None, "gold"},
    }
    got: dict[str, list[Publication]] = {k: [] for k in claims}
    subs = {
        k: Subscriber(tls_url(comp.url), "/weather/#", link_name=f"grants-{k}",
                      container_id="alice",  # claimed by all: it decides nothing
                      security=pki.client(who), permtokens=tokens,
                      on_publication=got[k].append, heartbeat_interval=0.2).start()
        for k, (who, tokens) in claims.items()
    }
    for sub in subs.values():
        assert sub.connected.wait(10)
    time.sleep(0.3)
    publisher = Publisher(tls_url(comp.url), "feed.g", journal=Journal.from_url(redis_url),
                          security=pki.client("publisher")).start()
    items: list[tuple[str, dict[str, int], str, str | None]] = []

    def publish(n: int) -> None:
        batch = workload(len(items), n)
        items.extend(batch)
        for k in range(0, n, 50):
            publisher.publish_many(batch[k : k + 50])

    publish(600)  # live, with forced losses: gap fills
    assert publisher.flush(30)
    comp.kill()
    publish(150)  # journaled while the component is down: only a source replay brings these
    comp.start()
    publish(150)
    assert publisher.flush(60)
    expected = {
        k: [i + 1 for i, item in enumerate(items) if item[3] in visible[k]] for k in claims
    }
    done = wait_for(lambda: all(len(got[k]) >= len(expected[k]) for k in claims), 60)
    time.sleep(0.5)  # anything not entitled that was on its way would arrive now
    for sub in subs.values():
        sub.stop()
    publisher.close()
    report = {k: subs[k].stats().as_dict() for k in claims}
    # the old leak: a claimed token used to be granted as claimed
    assert {p.permtoken for p in got["mallory"]} <= {None}, "claimed tokens were honoured"
    assert done, (report, {k: len(v) for k, v in got.items()}, comp.log_text()[-3000:])
    for k in claims:
        assert [p.source_seq for p in got[k]] == expected[k], k
        assert {p.permtoken for p in got[k]} == visible[k], k
    # the repair paths ran and carried tokened publications to the granted only
    repaired = {k: [p for p in got[k] if p.retransmit] for k in claims}
    assert all(report[k]["repaired"] > 0 for k in claims), report
    assert all(report[k]["resets"] >= 1 for k in claims), report  # the restart: replays
    assert {p.permtoken for p in repaired["alice"]} >= {"gold", "silver"}
    assert {p.permtoken for p in repaired["mallory"]} == {None}
    assert "gold" not in {p.permtoken for p in repaired["alice-narrow"]}


class _Asker(Session):
    """Sends one request to ``$seqrepair`` from a connection that proves who it is with a
    client certificate (and claims the container id ``alice``, which decides nothing)."""

    def __init__(self, url: str, message: Message, security: ClientSecurity) -> None:
        super().__init__(url, send="$seqrepair", messages=[message])
        self.security = security

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(15, self)
        self.conn = event.container.connect(self.security.url(self.url), reconnect=False,
                                            container_id="alice",
                                            **self.security.connect_kwargs(self.url))
        event.container.create_sender(self.conn, "$seqrepair")


def test_a_routed_request_is_answered_only_for_a_link_of_the_same_principal(
    component: Callable[..., ComponentProcess], pki: Pki
) -> None:
    comp = component(*pki.server_args(), "--grant", "CN=alice=gold")
    url = tls_url(comp.url)
    victim = Subscriber(url, "/weather/#", link_name="grants-victim",
                        security=pki.client("alice")).start()
    try:
        assert victim.connected.wait(10)

        def ask(who: str) -> list[tuple[Any, Any]]:
            message = encode(SourceGapRequest(after={"feed.g": 0}))
            message.id = uuid.uuid4().hex
            message.properties = {**(message.properties or {}), "link": "grants-victim"}
            message.instructions = {
                symbol("response-link-target-address"): "gw/responses",
                symbol("response-address-cookie"): b"\x01cookie",
            }
            return _Asker(url, message, pki.client(who)).run().outcomes

        # another principal naming alice's link, answers routed to its own target: refused
        assert ask("mallory") == [(Delivery.REJECTED, "amqp:not-found")]
        # alice herself, from another connection (a gateway's habit): served
        assert ask("alice") == [(Delivery.ACCEPTED, None)]
    finally:
        victim.stop()
