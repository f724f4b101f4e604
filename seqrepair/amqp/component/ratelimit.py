"""The request allowance (``--request-rate``, ``--request-burst``: a token bucket per
connection, :class:`~.config.Bucket`), counted per forwarded principal (issue 27).

A connection's own requests are charged to its bucket. On a connection acting for others (a
gateway with ``--forward-principals``: a request whose ``seqrepair-on-behalf-of`` the
connection's principal may act for), a request is charged to a bucket of the principal it acts
for on that connection, of the same rate and burst, so one client behind the gateway uses up
its own allowance, never the gateway's nor another client's; and to one bucket for all the
principals it acts for on it, :data:`~seqrepair.amqp.wire.admission.FORWARDING_FACTOR` times
the rate and burst,
the bound on the whole connection. The per-principal buckets are bounded
(:data:`MAX_FORWARDED_BUCKETS` per connection, the least recently charged forgotten first: a
forgotten bucket starts full again, which the connection-wide bucket still bounds).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from seqrepair.amqp.component.config import Bucket
from seqrepair.amqp.wire.admission import FORWARDING_FACTOR
from seqrepair.amqp.wire.security import principal_of

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component

MAX_FORWARDED_BUCKETS = 1024
"""Buckets of principals one connection acts for that it keeps at most."""


def request_allowance(component: Component, conn: Any, principal: str, now: float) -> bool:
    """Charge one request of ``principal`` on ``conn``; False when over its allowance."""
    if principal == principal_of(conn):
        return bool(conn.bucket.take(now))
    config = component.config
    buckets: OrderedDict[str, Bucket] | None = getattr(conn, "seqrepair_forwarded_buckets",
                                                       None)
    if buckets is None:
        buckets = conn.seqrepair_forwarded_buckets = OrderedDict()
        rate, burst = FORWARDING_FACTOR * config.request_rate, FORWARDING_FACTOR * (
            config.request_burst)
        conn.seqrepair_forwarded_total = Bucket(rate, burst, burst, now)
    bucket = buckets.get(principal)
    if bucket is None:
        bucket = buckets[principal] = Bucket(config.request_rate, config.request_burst,
                                             config.request_burst, now)
        if len(buckets) > MAX_FORWARDED_BUCKETS:
            buckets.popitem(last=False)
    else:
        buckets.move_to_end(principal)
    return bool(bucket.take(now)) and bool(conn.seqrepair_forwarded_total.take(now))
