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
