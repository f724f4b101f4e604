"""A gateway authenticates its subscribers as a component does and proves itself upstream
(issue 25): TLS with client certificates on both hops (SASL EXTERNAL, which proton offers
without Cyrus SASL), real processes: a redis-server, ``seqrepair serve`` and ``seqrepair
gateway``, the library's capabilities query through the gateway."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.wire.errors import ConnectionFailedError
from seqrepair.amqp.wire.security import ClientSecurity, optional_client_cert_supported

from .conftest import ComponentProcess
from .pki import Pki, tls_url
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_a_gateway_takes_certificates_downstream_and_presents_its_own_upstream(
        component: Callable[..., ComponentProcess], tmp_path: Path) -> None:
    pki = Pki.make(tmp_path / "pki", with_credentials=False)
    gateway, alice = pki.person("gateway"), pki.person("alice")
    comp = component(*pki.server_args())
    upstream = ("--upstream-tls-ca", pki.pem("ca"), "--upstream-tls-cert", pki.pem("gateway"),
                "--upstream-tls-key", pki.key("gateway"))
    with gateway_process(tls_url(comp.url), tmp_path, (*pki.server_args(), *upstream)) as listen:
        url = tls_url(listen)
        caps = query_capabilities(url, timeout=10, security=pki.client("alice"))
        assert caps.link_bits == 16  # answered by the component, through the gateway
        with pytest.raises(ConnectionFailedError, match="SSL"):
            query_capabilities(url, timeout=10, security=pki.client("foreign-alice"))
    gateway_log = (tmp_path / "gateway.log").read_text()
    assert "Traceback" not in gateway_log
    assert f"principal='{gateway}'" in comp.log_text()  # upstream, the gateway is itself
    assert f"principal='{alice}'" not in comp.log_text()


def test_a_gateway_with_optional_client_certificates(
        component: Callable[..., ComponentProcess], tmp_path: Path) -> None:
    """``gateway --client-cert optional`` (EXTERNAL only, no anonymous access): a certificate
    its CA signed gets in; a client without one gets past TLS and is refused by SASL (no
    mechanism for it); another CA's certificate fails the TLS handshake."""
    if not optional_client_cert_supported():
        pytest.skip("proton lacks SSLDomain.VERIFY_PEER_IF_PRESENT: bin/setup builds it")
    pki = Pki.make(tmp_path / "pki", with_credentials=False)
    pki.person("gateway")
    pki.person("alice")
    comp = component(*pki.server_args())
    downstream = ("--tls-cert", pki.pem("server"), "--tls-key", pki.key("server"),
                  "--tls-ca", pki.pem("ca"), "--client-cert", "optional")
    upstream = ("--upstream-tls-ca", pki.pem("ca"), "--upstream-tls-cert", pki.pem("gateway"),
                "--upstream-tls-key", pki.key("gateway"))
    with gateway_process(tls_url(comp.url), tmp_path, (*downstream, *upstream)) as listen:
        url = tls_url(listen)
        assert query_capabilities(url, timeout=10, security=pki.client("alice")).link_bits == 16
        with pytest.raises(ConnectionFailedError, match="amqp:unauthorized-access"):
            query_capabilities(url, timeout=10,
                               security=ClientSecurity(ca=pki.pem("ca"), mechs="ANONYMOUS"))
        with pytest.raises(ConnectionFailedError, match="SSL"):
            query_capabilities(url, timeout=10, security=pki.client("foreign-alice"))
    assert "Traceback" not in (tmp_path / "gateway.log").read_text()
