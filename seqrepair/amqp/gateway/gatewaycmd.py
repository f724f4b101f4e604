"""``seqrepair gateway``'s body (the options are defined in :mod:`seqrepair.amqp.commands`)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys

from seqrepair.readyfile import write_ready


def gateway_command(args: argparse.Namespace) -> int:
    """``seqrepair gateway``: relay until SIGTERM or ^C; 1 when it gave up."""
    from seqrepair.amqp.gateway.gateway import Gateway
    from seqrepair.amqp.gateway.relays import Backoff
    from seqrepair.amqp.wire.security import ClientSecurity, ServerSecurity

    def ready(url: str) -> None:
        if args.ready_file:
            write_ready(args.ready_file, url)

    gateway = Gateway(args.listen, args.upstream, name=args.name, on_ready=ready,
                      idle_timeout=args.idle_timeout, hold_timeout=args.hold_timeout,
                      backoff=Backoff(max_attempts=args.max_attempts),
                      annotations=not args.rewrite,
                      security=ServerSecurity.from_args(args),
                      upstream_security=ClientSecurity.from_args(args, "upstream-"),
                      forward_principals=args.forward_principals,
                      hop_id=args.hop_id, max_hops=args.max_hops,
                      max_connections=args.max_connections, open_timeout=args.open_timeout,
                      max_links_per_connection=args.max_links_per_connection,
                      max_links_per_principal=args.max_links_per_principal,
                      max_waiting_requests=args.max_waiting_requests,
                      max_waiting_requests_per_principal=(
                          args.max_waiting_requests_per_principal))
    signal.signal(signal.SIGTERM, lambda *_: gateway.request_stop())
    with contextlib.suppress(KeyboardInterrupt):
        try:
            gateway.run()
        finally:  # its counters, as ``seqrepair serve`` logs the component's
            gateway.log.info("gateway stopped", **gateway.stats)
    if gateway.error is not None:
        print(f"seqrepair gateway: {gateway.error}", file=sys.stderr)
        return 1
    return 0
