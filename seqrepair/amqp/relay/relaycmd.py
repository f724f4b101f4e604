"""``seqrepair relay``'s body (the options are defined in :mod:`seqrepair.amqp.commands`)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import signal
import sys

from seqrepair.logs import get_logger
from seqrepair.readyfile import write_ready

log = get_logger(__name__)

GC_THRESHOLDS = (50_000, 20, 100)
"""The relay's cyclic garbage collector thresholds (Python's are 700, 10, 10).

A relay allocates a few objects per publication it relays (the decoded publication, its
fields, the entries handed to the event loop) and keeps thousands alive at once (the handover,
link queues, contexts kept for gap fill). With the defaults a young collection ran every ~100
publications and full ones walked every object of the process, modules included: measured
with ``gc.callbacks`` over 50,000 relayed publications (``benchmarks/bench_relay.py``), 0.24 s
of the relay's 1.6 s of CPU (start-up included), 0.06 s with these thresholds and start-up
frozen. Nothing the relay builds relies on the cycle collector to be freed in time (it is
freed by reference counting); a larger first threshold only lets cycles wait longer."""


def _tune_gc() -> None:
    """Everything built while starting (modules, the configuration) moves out of the
    collector's sight (``gc.freeze``), and collections run less often (:data:`GC_THRESHOLDS`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def relay_command(args: argparse.Namespace) -> int:
    """``seqrepair relay``: serve until SIGTERM or ^C; 2 on a bad option, 1 when its journal
    refused what came from upstream (it holds other publications under those numbers)."""
    from seqrepair.access import Access
    from seqrepair.amqp.component.grants import GrantTable
    from seqrepair.amqp.component.servecmd import (
        component_config,
        retention_worker,
        watch_policy,
    )
    from seqrepair.amqp.relay.relay import RelayComponent
    from seqrepair.amqp.relay.selection import SelectionTable
    from seqrepair.amqp.wire.guard import Guarded
    from seqrepair.amqp.wire.reactor import make_container
    from seqrepair.amqp.wire.security import ClientSecurity, ServerSecurity
    from seqrepair.core.errors import InvalidConfigError, SeqRepairError
    from seqrepair.core.topics import TopicPattern
    from seqrepair.journal.journal import Journal
    from seqrepair.rest.manager import SubscriptionManager

    try:
        standing = tuple(TopicPattern(p) for p in args.subscribe)
        if not standing and not args.aggregate:
            raise InvalidConfigError("give --subscribe PATTERN..., --aggregate, or both")
        access = Access(args.policy)
        security = ServerSecurity.from_args(args)
        security.check(args.listen)
        upstream_security = ClientSecurity.from_args(args, "upstream-")
        grants = GrantTable.parse(args.grant, args.default_grant)
        retention = retention_worker(args)
    except SeqRepairError as exc:
        print(f"seqrepair relay: {exc.message}", file=sys.stderr)
        return 2
    watch_policy(access)  # SIGHUP reads the policy file again
    config = component_config(args, url=args.listen, grants=grants, security=security)

    def ready(url: str) -> None:
        if args.ready_file:
            write_ready(args.ready_file, url)

    journal = Journal.from_url(args.redis_url, socket_timeout=args.redis_timeout,
                               socket_connect_timeout=min(args.redis_timeout, 5.0))
    table = SelectionTable(standing, aggregate=args.aggregate, linger=args.linger)
    relay = RelayComponent(config, journal, upstream=args.upstream, name=args.name, table=table,
                           security=upstream_security, on_ready=ready,
                           subscriptions=SubscriptionManager(policy=access))
    access.on_change(relay.policy_changed)  # a reload re-checks the attached links
    access.announce()
    signal.signal(signal.SIGTERM, lambda *_: relay.request_stop())
    with contextlib.ExitStack() as stack, contextlib.suppress(KeyboardInterrupt):
        if retention is not None:
            stack.enter_context(retention)
        _tune_gc()
        stack.callback(lambda: log.info("relay stopped", **relay.stats))  # as serve's counters
        make_container(Guarded(relay, relay.stats)).run()
    if relay.listen_error is not None:
        print(f"seqrepair relay: {relay.listen_error}", file=sys.stderr)
        return 1
    if relay.error is not None:
        print(f"seqrepair relay: {relay.error.message}", file=sys.stderr)
        return 1
    return 0
