"""An anonymous client behind a ``--forward-principals`` gateway publishes and contributes as
``anonymous``, never as the gateway (review of issue 27), over real processes: a
redis-server, ``seqrepair serve`` with a policy that lets the gateway itself publish and
contribute, ``seqrepair gateway`` accepting anonymous clients."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.contributor import ContributionLinkError, Contributor
from seqrepair.amqp.wire.security import ANONYMOUS

from .conftest import ComponentProcess
from .principals import (
    GATEWAY_ACTS_FOR_EXAMPLE_COM,
    MISSING,
    client_security,
    policy_args,
    serve_args,
    upstream_args,
)
from .test_authz import publish_as
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

ALICE, GW = "alice@example.com", "gw@example.net"
SOURCE = "feed.alice"

# the gateway may publish and contribute itself: an anonymous client acting as it would too
POLICY = f"""
[[allow]]
actors = ["{ALICE}", "{GW}"]
operations = ["publish", "subscribe"]
topics = ["/weather/#"]

[[allow]]
actors = ["{ALICE}"]
operations = ["own-source"]
sources = ["{SOURCE}"]

[[allow]]
actors = ["{GW}"]
operations = ["contribute"]
sources = ["{SOURCE}"]
topics = ["/weather/#"]
""" + GATEWAY_ACTS_FOR_EXAMPLE_COM


@pytest.fixture
def forwarding(component: Callable[..., ComponentProcess],
               tmp_path: Path) -> tuple[ComponentProcess, tuple[str, ...]]:
    """The component and the options of a gateway forwarding principals, anonymous allowed."""
    auth = serve_args(tmp_path, ALICE, GW)
    comp = component("--heartbeat", "0.2", *auth, *policy_args(tmp_path, POLICY))
    return comp, (*auth, *upstream_args(tmp_path, GW), "--forward-principals")


def test_an_anonymous_publisher_behind_a_forwarding_gateway_is_not_the_gateway(
    forwarding: tuple[ComponentProcess, tuple[str, ...]], tmp_path: Path,
) -> None:
    comp, gateway_args = forwarding
    # control: the gateway's own principal may publish there
    assert publish_as(comp.url, GW, "/weather/wind/LEMD") == [None]
    # directly, anonymous may not
    direct = publish_as(comp.url, ANONYMOUS, "/weather/wind/LEMD")
    assert direct in ("amqp:unauthorized-access", ["amqp:unauthorized-access"]), direct
    with gateway_process(comp.url, tmp_path, gateway_args) as url:
        through = publish_as(url, ANONYMOUS, "/weather/wind/LEMD")
    assert through == direct, through
    assert "Traceback" not in (tmp_path / "gateway.log").read_text()


def test_an_anonymous_contributor_behind_a_forwarding_gateway_is_not_the_gateway(
    forwarding: tuple[ComponentProcess, tuple[str, ...]], tmp_path: Path,
) -> None:
    comp, gateway_args = forwarding
    with pytest.raises(ContributionLinkError) as direct:
        Contributor(comp.url, SOURCE, security=client_security(ANONYMOUS), timeout=10)
    with (gateway_process(comp.url, tmp_path, gateway_args) as url,
          pytest.raises(ContributionLinkError) as through):
        Contributor(url, SOURCE, security=client_security(ANONYMOUS), timeout=10)
    assert "amqp:unauthorized-access" in str(direct.value)
    assert "amqp:unauthorized-access" in str(through.value), through.value
