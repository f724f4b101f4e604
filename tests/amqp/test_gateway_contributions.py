"""Contributions through a gateway (WIRE.md "Contributions", "Publishing through a gateway"),
over real processes: a redis-server, ``seqrepair serve`` with a policy, ``seqrepair gateway``,
clients authenticated by SCRAM.

With ``--forward-principals`` a contributor behind the gateway is itself at the component (its
principal is the contribution's ``$contributor``, its rate is its own) and a source's owner
behind it takes (or refuses) contributions as if connected directly; without it, the
component sees the gateway's principal, for both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.contributor import Contribution, Contributor
from seqrepair.amqp.client.publisher import Publisher
from seqrepair.core.contributions import contribution_of, contributor_of
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .principals import (
    GATEWAY_ACTS_FOR_EXAMPLE_COM,
    MISSING,
    WEATHER_FOR_EXAMPLE_COM,
    client_security,
    policy_args,
    serve_args,
    upstream_args,
)
from .test_authz import refusal
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

ALICE, BOB, CAROL, GW = ("alice@example.com", "bob@example.com", "carol@example.com",
                         "gw@example.net")
SOURCE = "feed.alice"

POLICY = WEATHER_FOR_EXAMPLE_COM + f"""
[[allow]]
actors = ["{ALICE}"]
operations = ["own-source"]
sources = ["feed.alice"]

[[allow]]
actors = ["{BOB}", "{CAROL}", "{GW}"]
operations = ["contribute"]
sources = ["feed.alice"]
topics = ["/weather/#"]
""" + GATEWAY_ACTS_FOR_EXAMPLE_COM


@pytest.fixture
def served(component: Callable[..., ComponentProcess],
           tmp_path: Path) -> tuple[ComponentProcess, tuple[str, ...]]:
    """The component (contribution rate 5/s, burst 5) and the gateway's options."""
    auth = serve_args(tmp_path, ALICE, BOB, CAROL, GW)
    comp = component("--heartbeat", "0.2", *auth, *policy_args(tmp_path, POLICY),
                     "--contribution-rate", "5", "--contribution-burst", "5",
                     "--contribution-timeout", "5")
    return comp, (*auth, *upstream_args(tmp_path, GW))


class Owner:
    """alice's publisher of ``feed.alice`` at ``url``, taking contributions but on topics
    under ``/weather/refused/``."""

    def __init__(self, url: str) -> None:
        self.seen: list[Contribution] = []
        self.publisher = Publisher(url, SOURCE, address="/weather/#",
                                   security=client_security(ALICE),
                                   on_contribution=self._decide).start()

    def _decide(self, contribution: Contribution) -> bool | str:
        self.seen.append(contribution)
        return "not that one" if contribution.topic.startswith("/weather/refused/") else True

    def wait_attached(self) -> None:
        assert wait_for(lambda: self.publisher._contributions is not None
                        and self.publisher._contributions.state & 0x10 == 0x10, 20)


def test_through_a_forwarding_gateway_contributor_and_owner_are_themselves(
    served: tuple[ComponentProcess, tuple[str, ...]], tmp_path: Path, journal: Journal,
) -> None:
    comp, gateway_args = served
    with gateway_process(comp.url, tmp_path, (*gateway_args, "--forward-principals")) as url:
        owner = Owner(url)  # the owner behind the gateway too
        try:
            owner.wait_attached()
            with Contributor(url, SOURCE, security=client_security(BOB), timeout=10) as bob:
                taken = bob.contribute("/weather/wind/LEMD", {"speed": 12})
                refused = bob.contribute("/weather/refused/x", {"speed": 1})
                over = [bob.contribute("/weather/wind/LEMD", {"n": i}) for i in range(8)]
            with Contributor(url, SOURCE, security=client_security(CAROL), timeout=10) as carol:
                hers = carol.contribute("/weather/wind/LEBL", {"speed": 3})
            assert owner.publisher.flush(10)
        finally:
            owner.publisher.close(10)
    assert taken.accepted, taken
    assert taken.source_seq is not None, taken  # the answer crossed too
    assert not refused.accepted
    assert refused.condition == "seqrepair:contribution-refused"
    assert "not that one" in refused.reason
    # bob's own rate (burst 5): past it, refused at once, and carol, behind the same
    # gateway, is not slowed by him
    throttled = [r for r in over if r.condition == "amqp:resource-limit-exceeded"]
    assert throttled, over
    assert all(bob_text(r.reason) for r in throttled), over
    assert hers.accepted, hers
    assert hers.source_seq is not None, hers
    assert [c.contributor for c in owner.seen][:2] == [BOB, BOB]
    assert owner.seen[-1].contributor == CAROL
    pubs = journal.read_range(SOURCE, 1, journal.high_water(SOURCE))
    contributed = [(contributor_of(p), p.topic) for p in pubs if contribution_of(p)]
    assert contributed[0] == (BOB, "/weather/wind/LEMD")
    assert contributed[-1] == (CAROL, "/weather/wind/LEBL")
    assert all(who in (BOB, CAROL) for who, _ in contributed)
    assert "Traceback" not in (tmp_path / "gateway.log").read_text()


def bob_text(reason: str) -> bool:
    """A rate refusal names the principal charged: bob, never the gateway."""
    return BOB in reason and GW not in reason


def test_without_forwarding_the_contributor_is_the_gateway(
    served: tuple[ComponentProcess, tuple[str, ...]], tmp_path: Path, journal: Journal,
) -> None:
    """Without ``--forward-principals`` the component sees the gateway: a contribution is the
    gateway's (``$contributor`` is its principal, its clients share its rate), and an owner
    behind it is the gateway, which owns nothing."""
    comp, gateway_args = served
    owner = Owner(comp.url)
    try:
        owner.wait_attached()
        with gateway_process(comp.url, tmp_path, gateway_args) as url:
            with Contributor(url, SOURCE, security=client_security(BOB), timeout=10) as bob:
                taken = bob.contribute("/weather/wind/LEMD", {"speed": 12})
            # alice behind it is the gateway, which owns nothing: refused, as the component
            # words it, and alice's own link (direct) keeps the source's contributions
            assert refusal(url, "$contributions/feed.alice", ALICE) == (
                "amqp:unauthorized-access")
        assert owner.publisher.flush(10)
    finally:
        owner.publisher.close(10)
    assert taken.accepted, taken
    assert owner.seen[0].contributor == GW
    pubs = journal.read_range(SOURCE, 1, journal.high_water(SOURCE))
    assert [contributor_of(p) for p in pubs if contribution_of(p)] == [GW]
