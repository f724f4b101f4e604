"""A catch-up through ``seqrepair gateway`` respects the subscriber's max-message-size.

A source replay's transfers take up to 4 times ``max_batch`` entries (up to 256 KiB) only to a
receiver that takes transfers of at least 16 MiB or of any size (component/responses.py). The
gateway attached its upstream data link advertising no limit (any size) whatever its
subscriber advertised, so the component sent it the larger transfers, which it passed on as
they came: a subscriber taking at most 200,000 bytes, whose replay direct from the component
comes in transfers of ``max_batch`` entries (about 120 KB here), was sent a transfer past its
limit through the gateway, detached it ``amqp:link:message-size-exceeded`` and stopped. Its
requests' answers come on the gateway's responses link (annotated requests), shared by all
its subscribers, or on the subscriber's own upstream data link (rewritten ones).

Real processes: redis-server, ``seqrepair serve``, ``seqrepair gateway`` and the client
``Subscriber`` over loopback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber

from .conftest import ComponentProcess, wait_for
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

N = 2_000
TAKEN = 200_000  # bytes: under 256 KiB, over max_batch (256) of these entries


@pytest.mark.parametrize("route", ["direct", "annotated", "rewritten"])
def test_a_catch_up_comes_in_transfers_the_subscriber_takes(
    component: Callable[..., ComponentProcess], tmp_path: Path, route: str,
) -> None:
    """``annotated``: the gateway's requests carry response annotations, the answers come on
    its one responses link; ``rewritten`` (``gateway --rewrite``): on the subscriber's own
    upstream data link."""
    comp = component()
    rewrite = ("--rewrite",) if route == "rewritten" else ()
    with gateway_process(comp.url, tmp_path, ("--allow-anonymous", *rewrite)) as listen:
        url = comp.url if route == "direct" else listen
        with Subscriber(url, "/sized/#", link_name="sized", max_message_size=TAKEN) as first:
            assert first.wait_connected(20)
            time.sleep(0.3)  # its position is stored on the attach
        with Publisher(comp.url, "feed.sized", address="/sized/#") as pub:
            pub.publish_many([("/sized/t", {"n": i, "pad": "x" * 400}, "update")
                              for i in range(N)])
            assert pub.flush(60)
        got: list[int] = []
        second = Subscriber(url, "/sized/#", link_name="sized", max_message_size=TAKEN,
                            on_publication=lambda p: got.append(p.source_seq))
        with second:
            wait_for(lambda: len(got) >= N or second.error is not None, 120)
            error = second.error
    assert error is None, error
    assert got == list(range(1, N + 1))  # exactly once, in order
