"""A request the component rejects is rejected to the client behind a gateway too, with the
component's condition (WIRE.md "Requests through a gateway"), over real processes: ``seqrepair
serve``, a private redis-server and ``seqrepair gateway`` in front of it.

The gateway used to accept each client request as it forwarded it and to send it upstream
pre-settled: the component's rejection never came back, and the fix that makes a subscriber
hear a rejected request (test_rejected_resume_real) did not hold behind a gateway: a continued
``resume_point()`` rejected for the replay room rested with no timer and what the link passed
over reached nobody. Now the gateway forwards a request unsettled and settles the client's
delivery with the component's outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ComponentProcess
from .test_gateway_publish import gateway_process
from .test_given_resume_real import BITS
from .test_rejected_resume_real import (
    LIBRARY_LIMITS,
    check_library_rejected,
    check_rejected_resume,
    library_rejected,
    rejected_resume,
)

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_a_resume_rejected_behind_a_gateway_is_rejected_to_the_client_and_asked_again(
    redis_url: str, tmp_path: Path,
) -> None:
    """test_rejected_resume_real's scenario with the subscriber behind a gateway (the hog,
    the same anonymous principal, at the component): the rejection of the continued resume
    reaches the client with the component's condition, the stub asks again, and feed.c
    1..20, which the kept link passed over, reach the application once, in order. Before,
    the gateway accepted the request: ``rejected`` stayed empty and feed.c never came."""
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                            str(BITS), "--max-replays-per-principal", "1").start()
    try:
        with gateway_process(comp.url, tmp_path) as listen:
            # before: the premise's check failed, rejected == [] (accepted by the gateway)
            run = rejected_resume(comp.url, f"amqp://{listen}")
    finally:
        comp.stop()
    check_rejected_resume(run)


def test_the_library_subscriber_behind_a_gateway_hears_its_rejected_requests(
    redis_url: str, tmp_path: Path,
) -> None:
    """The library :class:`Subscriber` behind a gateway, under forced loss and a request rate
    of 2/s at the component: its rejected range requests come back rejected through the
    gateway (before: ``rejected`` 0, the gateway accepted every request), and the
    application has the stream once."""
    comp = ComponentProcess(redis_url, tmp_path, *LIBRARY_LIMITS).start()
    try:
        with gateway_process(comp.url, tmp_path) as listen:
            outcome = library_rejected(comp.url, f"amqp://{listen}")
    finally:
        comp.stop()
    check_library_rejected(*outcome)
