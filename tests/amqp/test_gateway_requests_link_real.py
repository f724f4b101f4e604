"""The gateway's one requests link upstream, detached by the component while the connection
stays up: the gateway attaches it again.

Every client of a gateway shares that link. No input reaches the real component that makes it
detach a requests link today besides an oversized request (refused at the gateway since), so
the component runs in a thread of the test (:class:`.inthread.HereComponent`, the real
component) and the test detaches the link there, as the component would for a link-level
error or its own limits; the gateway (``seqrepair gateway``), redis-server and the clients are
real processes and connections."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.wire.errors import ConnectionFailedError

from .inthread import HereComponent, _close
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

DEADLINE = 15.0


class ControlsKept(HereComponent):
    """The component, keeping the requests links it attached (``$seqrepair``); with
    ``detach_every`` it detaches each at once, as one refusing them would."""

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        self.controls: list[Any] = []
        self.detach_every = False

    def on_link_opened(self, event: Any) -> None:
        super().on_link_opened(event)
        link = event.link
        if link.is_receiver and getattr(link, "kind", None) == "control":
            self.controls.append(link)
            if self.detach_every:
                _close(link, "amqp:resource-limit-exceeded")

    def detach_controls(self) -> int:
        def detach() -> int:
            live = [c for c in self.controls if not c.state & c.LOCAL_CLOSED]
            for link in live:
                _close(link, "amqp:link:detach-forced")
            return len(live)

        return int(self.call(detach))


def _answered(gw: str, within: float) -> bool:
    """Whether a CAPABILITIES request through the gateway is answered within ``within`` s
    (asked again, as a stub does, while it is rejected)."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        try:
            return bool(query_capabilities(gw, timeout=3).limits)
        except ConnectionFailedError:
            time.sleep(0.2)
    return False


@contextlib.contextmanager
def _behind_gateway(redis_url: str, tmp_path: Path) -> Iterator[tuple[ControlsKept, str]]:
    """The component in this thread, a real ``seqrepair gateway`` in front of it, its requests
    link attached (a CAPABILITIES request answered through it): (component, gateway address)."""
    comp = ControlsKept(redis_url).start()
    try:
        with gateway_process(comp.here_url, tmp_path) as listen:
            gw = f"127.0.0.1:{listen}" if ":" not in listen else listen
            assert query_capabilities(gw, timeout=DEADLINE).limits
            yield comp, gw
    finally:
        comp.shut()


def test_the_requests_link_detached_by_the_component_is_attached_again(
    redis_url: str, tmp_path: Path,
) -> None:
    with _behind_gateway(redis_url, tmp_path) as (comp, gw):
        assert comp.detach_controls() == 1
        # before: rejected amqp:internal-error 'upstream out of reach' until the
        # connection dropped (never, here)
        assert _answered(gw, DEADLINE), (tmp_path / "gateway.log").read_text()[-3000:]
        assert comp.call(lambda: len(comp.controls)) == 2
    log = (tmp_path / "gateway.log").read_text()
    assert "amqp:link:detach-forced" in log  # the detach logged with its condition


def test_a_component_detaching_the_requests_link_every_time_is_not_spun_on(
    redis_url: str, tmp_path: Path,
) -> None:
    with _behind_gateway(redis_url, tmp_path) as (comp, gw):
        comp.call(lambda: setattr(comp, "detach_every", True))
        comp.detach_controls()
        time.sleep(4)
        attached = comp.call(lambda: len(comp.controls))
        # a few attaches after backoff, a new connection after some: never a spin
        assert 2 <= attached <= 12, attached
        comp.call(lambda: setattr(comp, "detach_every", False))
        assert _answered(gw, DEADLINE), (tmp_path / "gateway.log").read_text()[-3000:]
