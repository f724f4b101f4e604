"""Who a connection is (issue 25, "Authentication"): TLS with client certificates (SASL
EXTERNAL) required or optional, SCRAM-SHA-256 against the credentials file, anonymous only
where allowed, and the principal is the proven identity, never the claimed container id nor a
requested authorization id.

Real parts only: certificates made by ``openssl``, credentials by ``seqrepair credentials``
(Cyrus ``saslpasswd2``), ``seqrepair serve`` as a process with a private redis-server, the
library's clients over loopback TLS.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton.handlers import MessagingHandler
from proton.reactor import Container

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.errors import ConnectionFailedError
from seqrepair.amqp.wire.security import ClientSecurity, optional_client_cert_supported
from seqrepair.core.messages import Publication
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess
from .pki import PASSWORDS, Pki, scram_missing, tls_url

MISSING = scram_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

ALICE_SUBJECT = "O=Example,CN=alice"
"""alice's certificate subject as proton reports it: her principal under EXTERNAL."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"), with_credentials=True)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with EmbeddedRedis() as server:
        yield server.url


def _component(redis_url: str, folder: Path, *args: str) -> Iterator[ComponentProcess]:
    folder.mkdir()
    comp = ComponentProcess(redis_url, folder, "--heartbeat", "0.2", *args).start()
    try:
        yield comp
    finally:
        comp.stop()


@pytest.fixture(scope="module")
def cert_required(pki: Pki, redis_url: str, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ComponentProcess]:
    """TLS, a client certificate required (EXTERNAL), SCRAM too."""
    yield from _component(redis_url, tmp_path_factory.mktemp("c1") / "c",
                          "--tls-cert", pki.pem("server"), "--tls-key", pki.key("server"),
                          "--tls-ca", pki.pem("ca"), "--client-cert", "required",
                          "--credentials", pki.credentials)


def _optional(redis_url: str, folder: Path, pki: Pki, *more: str) -> Iterator[ComponentProcess]:
    if not optional_client_cert_supported():
        pytest.skip("proton lacks SSLDomain.VERIFY_PEER_IF_PRESENT: bin/setup builds it with "
                    "bin/patches/proton-optional-client-cert.patch")
    yield from _component(redis_url, folder,
                          "--tls-cert", pki.pem("server"), "--tls-key", pki.key("server"),
                          "--tls-ca", pki.pem("ca"), "--client-cert", "optional",
                          "--credentials", pki.credentials, *more)


@pytest.fixture(scope="module")
def cert_optional(pki: Pki, redis_url: str, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ComponentProcess]:
    """TLS, a client certificate optional (EXTERNAL when one is presented), SCRAM for the
    others, no anonymous access."""
    yield from _optional(redis_url, tmp_path_factory.mktemp("c4") / "c", pki)


@pytest.fixture(scope="module")
def cert_optional_open(pki: Pki, redis_url: str, tmp_path_factory: pytest.TempPathFactory
                       ) -> Iterator[ComponentProcess]:
    """As :func:`cert_optional`, and anonymous access allowed."""
    yield from _optional(redis_url, tmp_path_factory.mktemp("c5") / "c", pki,
                         "--allow-anonymous")


@pytest.fixture(scope="module")
def passwords(pki: Pki, redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[ComponentProcess]:
    """TLS, SCRAM only, no anonymous access."""
    yield from _component(redis_url, tmp_path_factory.mktemp("c2") / "c",
                          "--tls-cert", pki.pem("server"), "--tls-key", pki.key("server"),
                          "--credentials", pki.credentials)


@pytest.fixture(scope="module")
def open_door(pki: Pki, redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[ComponentProcess]:
    """TLS, SCRAM, and anonymous access allowed; alice is granted the token "gold"."""
    yield from _component(redis_url, tmp_path_factory.mktemp("c3") / "c",
                          "--tls-cert", pki.pem("server"), "--tls-key", pki.key("server"),
                          "--credentials", pki.credentials, "--allow-anonymous",
                          "--grant", "alice=gold")


def _security(pki: Pki, who: str) -> ClientSecurity:
    ca = pki.pem("ca")
    if who in ("alice-cert", "foreign-cert", "expired-cert"):
        return pki.client({"alice-cert": "example-alice", "foreign-cert": "foreign-alice",
                           "expired-cert": "expired-alice"}[who])
    if who == "right-password":
        return ClientSecurity(ca=ca, user="alice", password=PASSWORDS["alice"])
    if who == "wrong-password":
        return ClientSecurity(ca=ca, user="alice", password="not-" + PASSWORDS["alice"])
    if who == "unknown-user":
        return ClientSecurity(ca=ca, user="carol", password="whatever-1")
    if who == "external-without-cert":
        return ClientSecurity(ca=ca, mechs="EXTERNAL")
    if who == "cert-and-password":
        return ClientSecurity(ca=ca, cert=pki.pem("example-alice"),
                              key=pki.key("example-alice"), user="bob",
                              password=PASSWORDS["bob"], mechs="SCRAM-SHA-256")
    assert who == "anonymous"
    return ClientSecurity(ca=ca, mechs="ANONYMOUS")


def _attempt(comp: ComponentProcess, security: ClientSecurity) -> str:
    """``ok`` when a capabilities query (a connection, two links) succeeds, else the error."""
    try:
        query_capabilities(tls_url(comp.url), timeout=10, security=security)
    except ConnectionFailedError as exc:
        return exc.message
    return "ok"


def _principals(comp: ComponentProcess) -> list[str]:
    """The principals the component logged, in connection order."""
    return [found.strip("'") for found in re.findall(r"principal=('[^']*'|\S+)",
                                                      comp.log_text())]


TLS_REFUSED = "SSL Failure"
SASL_REFUSED = "amqp:unauthorized-access"

CASES = [
    # listener, client, outcome (ok, or a fragment of the error), principal logged
    ("cert_required", "alice-cert", "ok", ALICE_SUBJECT),
    ("cert_required", "cert-and-password", "ok", "bob"),
    ("cert_required", "foreign-cert", TLS_REFUSED, None),
    ("cert_required", "expired-cert", TLS_REFUSED, None),
    ("cert_required", "right-password", TLS_REFUSED, None),  # no certificate at all
    ("cert_required", "anonymous", TLS_REFUSED, None),
    ("passwords", "right-password", "ok", "alice"),
    ("passwords", "wrong-password", SASL_REFUSED, None),
    ("passwords", "unknown-user", SASL_REFUSED, None),
    ("passwords", "anonymous", SASL_REFUSED, None),
    ("passwords", "alice-cert", SASL_REFUSED, None),  # not asked for: no EXTERNAL offered
    ("open_door", "anonymous", "ok", "anonymous"),
    ("open_door", "right-password", "ok", "alice"),
    ("open_door", "wrong-password", SASL_REFUSED, None),
    # optional: a certificate presented is verified (never a fall back to passwords when it
    # fails) and names the connection; without one, the other mechanisms
    ("cert_optional", "alice-cert", "ok", ALICE_SUBJECT),
    ("cert_optional", "right-password", "ok", "alice"),
    ("cert_optional", "wrong-password", SASL_REFUSED, None),
    ("cert_optional", "unknown-user", SASL_REFUSED, None),
    ("cert_optional", "anonymous", SASL_REFUSED, None),  # no --allow-anonymous
    ("cert_optional", "external-without-cert", SASL_REFUSED, None),  # no EXTERNAL offered
    ("cert_optional", "expired-cert", TLS_REFUSED, None),
    ("cert_optional", "foreign-cert", TLS_REFUSED, None),
    ("cert_optional", "cert-and-password", "ok", "bob"),  # proved bob's password
    ("cert_optional_open", "anonymous", "ok", "anonymous"),
    ("cert_optional_open", "alice-cert", "ok", ALICE_SUBJECT),
    ("cert_optional_open", "right-password", "ok", "alice"),
    ("cert_optional_open", "wrong-password", SASL_REFUSED, None),
    ("cert_optional_open", "expired-cert", TLS_REFUSED, None),  # not let in as anonymous
    ("cert_optional_open", "foreign-cert", TLS_REFUSED, None),
]


@pytest.mark.parametrize(("listener", "who", "outcome", "principal"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_who_gets_in_and_as_whom(listener: str, who: str, outcome: str,
                                 principal: str | None, pki: Pki,
                                 request: pytest.FixtureRequest) -> None:
    comp: ComponentProcess = request.getfixturevalue(listener)
    before = len(_principals(comp))
    got = _attempt(comp, _security(pki, who))
    if outcome == "ok":
        assert got == "ok"
    else:
        assert outcome in got, got
    deadline = time.monotonic() + 5
    while principal is not None and len(_principals(comp)) == before:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    logged = _principals(comp)[before:]
    assert logged == ([] if principal is None else [principal])


def test_a_claimed_container_id_gets_nothing_of_whom_it_names(open_door: ComponentProcess,
                                                               pki: Pki) -> None:
    """Container id ``alice`` without alice's password is ``anonymous``: it gets no
    publication alice's grant (``gold``) covers; alice, proven by SCRAM, gets them all."""
    url = tls_url(open_door.url)
    got: dict[str, list[Publication]] = {"claimed": [], "proven": []}
    subs = {
        "claimed": Subscriber(url, "/vault/#", link_name="claims-alice", container_id="alice",
                              security=_security(pki, "anonymous"),
                              on_publication=got["claimed"].append),
        "proven": Subscriber(url, "/vault/#", link_name="proves-alice",
                             security=_security(pki, "right-password"),
                             on_publication=got["proven"].append),
    }
    for sub in subs.values():
        sub.start()
    publisher = Publisher(url, "vault.feed", security=_security(pki, "anonymous")).start()
    try:
        for sub in subs.values():
            assert sub.connected.wait(10)
        time.sleep(0.3)
        for n in range(20):
            publisher.publish("/vault/x", {"n": n}, permtoken="gold" if n % 2 else None)
        assert publisher.flush(30)
        deadline = time.monotonic() + 20
        while len(got["proven"]) < 20 or len(got["claimed"]) < 10:
            assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
            time.sleep(0.05)
        time.sleep(0.5)  # anything not entitled that was on its way would arrive now
    finally:
        for sub in subs.values():
            sub.stop()
        publisher.close()
    assert [p.fields["n"] for p in got["proven"]] == list(range(20))
    assert [p.fields["n"] for p in got["claimed"]] == list(range(0, 20, 2))
    assert {p.permtoken for p in got["claimed"]} == {None}
    assert "principal=anonymous" in open_door.log_text()  # the claimed one, as it logged


def test_a_listener_nobody_could_authenticate_to_refuses_to_start(
        pki: Pki, redis_url: str, tmp_path: Path) -> None:
    comp = ComponentProcess(redis_url, tmp_path, "--tls-cert", pki.pem("server"),
                            "--tls-key", pki.key("server"))  # TLS alone proves no one
    with pytest.raises(RuntimeError, match="nobody could authenticate"):
        comp.start()


class _Claimer(MessagingHandler):
    """Connects with ``kwargs`` asking SASL for authorization id ``authzid``; ``outcome``:
    ``ok`` when the server opened the connection, else the transport's error."""

    def __init__(self, url: str, kwargs: dict[str, Any], authzid: str) -> None:
        super().__init__()
        self.url, self.kwargs, self.authzid = url, kwargs, authzid
        self.outcome = "no answer"

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url, reconnect=False, **self.kwargs)
        conn.authorization = self.authzid  # before the transport binds (the reactor's turn)

    def on_connection_opened(self, event: Any) -> None:
        self.outcome = "ok"
        event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        cond = event.transport.condition
        self.outcome = f"{cond.name}: {cond.description}" if cond else "transport error"


@pytest.mark.parametrize(("who", "principal"), [("alice-cert", ALICE_SUBJECT),
                                                ("right-password", "alice")])
def test_an_authorization_id_names_nobody_else(who: str, principal: str,
                                               cert_optional: ComponentProcess,
                                               pki: Pki) -> None:
    """alice (by certificate under EXTERNAL, or by password under SCRAM) asking SASL to act as
    ``bob`` (the authzid proton sends and Cyrus, under proton's permissive proxy policy,
    accepts): the connection is alice's, never bob's."""
    security = _security(pki, who)
    url = security.url(tls_url(cert_optional.url))
    before = len(_principals(cert_optional))
    claimer = _Claimer(url, security.connect_kwargs(url), "bob")
    Container(claimer).run()
    assert claimer.outcome == "ok"
    deadline = time.monotonic() + 5
    while len(_principals(cert_optional)) == before:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _principals(cert_optional)[before:] == [principal]


def test_under_optional_certificates_each_gets_its_own_grant(
        pki: Pki, redis_url: str, tmp_path: Path) -> None:
    """One optional-certificate listener, a grant per principal: alice by certificate (her
    subject) gets the ``gold`` publications, alice by password (principal ``alice``) the
    ``silver`` ones, an anonymous subscriber neither; each also gets the untagged ones. (Its
    own source and topics: the module's redis-server holds the other tests' journals.)"""
    for comp in _optional(redis_url, tmp_path / "c", pki, "--allow-anonymous",
                          "--grant", f"{ALICE_SUBJECT}=gold", "--grant", "alice=silver"):
        url = tls_url(comp.url)
        got: dict[str, list[Publication]] = {"alice-cert": [], "right-password": [],
                                             "anonymous": []}
        subs = [Subscriber(url, "/optional/#", link_name=f"sub-{who}",
                           security=_security(pki, who), on_publication=got[who].append)
                for who in got]
        for sub in subs:
            sub.start()
        publisher = Publisher(url, "vault.optional", security=_security(pki, "anonymous")).start()
        tokens = [None, "gold", "silver"]
        try:
            for sub in subs:
                assert sub.connected.wait(10)
            time.sleep(0.3)
            for n in range(30):
                publisher.publish("/optional/x", {"n": n}, permtoken=tokens[n % 3])
            assert publisher.flush(30)
            deadline = time.monotonic() + 20
            while (len(got["alice-cert"]) < 20 or len(got["right-password"]) < 20
                   or len(got["anonymous"]) < 10):
                assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
                time.sleep(0.05)
            time.sleep(0.5)  # anything not entitled that was on its way would arrive now
        finally:
            for sub in subs:
                sub.stop()
            publisher.close()
        for who, allowed in (("alice-cert", {None, "gold"}),
                             ("right-password", {None, "silver"}), ("anonymous", {None})):
            assert [p.fields["n"] for p in got[who]] == [
                n for n in range(30) if tokens[n % 3] in allowed], who
