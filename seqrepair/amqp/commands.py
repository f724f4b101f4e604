"""``seqrepair serve``, ``seqrepair publish``, ``seqrepair subscribe`` and
``seqrepair capabilities``."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import structlog

from seqrepair.amqp.client.publishcmd import file_items, generated_items, pace, publish
from seqrepair.argtypes import (
    bit_width,
    fraction,
    host_port,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from seqrepair.core.errors import InvalidConfigError, SeqRepairError
from seqrepair.core.messages import Publication
from seqrepair.core.topics import validate_topic

log = structlog.get_logger(__name__)


SUBSCRIPTIONS_WAIT = 30.0
"""Seconds ``serve`` waits for Redis to give it the stored subscriptions and topics before it
gives up."""


def register(subparsers: Any) -> None:
    """Add the AMQP subcommands to the ``seqrepair`` parser."""
    serve = subparsers.add_parser("serve", help="run the AMQP 1.0 pubsub component")
    serve.add_argument("--url", default="127.0.0.1:5672", help="listen address host:port")
    serve.add_argument("--redis-url", required=True, help="the journal's Redis")
    serve.add_argument("--redis-timeout", type=positive_float, default=2.0, metavar="SECONDS",
                       help="how long a journal call may wait for Redis before it fails; the "
                            "event loop serving every link waits with it (default 2)")
    serve.add_argument("--link-bits", type=bit_width, default=16)
    serve.add_argument("--heartbeat", type=positive_float, default=1.0,
                       help="heartbeat interval (s)")
    serve.add_argument("--idle-timeout", type=non_negative_float, default=10.0)
    serve.add_argument("--max-batch", type=positive_int, default=256, metavar="N",
                       help="most publications per transfer to a subscriber and per "
                            "gap-fill answer (default: 256)")
    serve.add_argument("--max-pending", type=positive_int, default=20_000)
    serve.add_argument("--max-publish-batch", type=positive_int, default=4_096, metavar="N",
                       help="most publications one incoming PUBLICATIONS message may carry; "
                            "a larger one is rejected (default: 4096)")
    serve.add_argument("--max-message-size", type=positive_int, default=1 << 20, metavar="BYTES",
                       help="most bytes of one incoming message (a publisher's or a request), "
                            "advertised on the links the component receives on; a larger one is "
                            "rejected as it arrives and its link detached with "
                            "amqp:link:message-size-exceeded (default: 1048576, 1 MiB)")
    serve.add_argument("--max-gap-range", type=positive_int, default=10_000)
    serve.add_argument("--context-retention", type=non_negative_float, default=30.0)
    serve.add_argument("--retain-count", type=positive_int, default=None, metavar="N",
                       help="journal retention: keep the newest N publications per source")
    serve.add_argument("--retain-age", type=positive_float, default=None, metavar="SECONDS",
                       help="journal retention: trim publications older than SECONDS")
    serve.add_argument("--archive", default=None, metavar="DIR",
                       help="export to Parquet under DIR before retention trims")
    serve.add_argument("--retention-interval", type=positive_float, default=60.0, metavar="SECONDS",
                       help="how often retention runs (with --retain-count/--retain-age)")
    serve.add_argument("--drop-rate", type=fraction, default=0.0,
                       help="forced loss: fraction of frames not sent (they are still numbered)")
    serve.add_argument("--drop-seed", type=int, default=None)
    serve.add_argument("--drop-reset-frames", action="store_true",
                       help="forced loss: never send a link's reset frame (link number 0); "
                            "subscribers learn of resets from the attach and SUBSCRIPTION")
    serve.add_argument("--request-rate", type=positive_float, default=500.0,
                       help="requests per second allowed per connection")
    serve.add_argument("--request-burst", type=positive_float, default=1_000.0)
    serve.add_argument("--subscription", action="append", default=[],
                       metavar="NAME=PATTERN[;TOKENS]",
                       help="a subscription queue /subscriptions/NAME (tokens comma-separated)")
    serve.add_argument("--rest", type=host_port, metavar="HOST:PORT",
                       help="serve the subscription REST API (/subscriptions, /topics) here; "
                            "subscriptions made through it are kept in Redis")
    serve.add_argument("--rest-token-file", metavar="PATH",
                       help="the REST API then wants 'Authorization: Bearer <the file's text>'")
    # no default here: RestServer's apply (not imported here, to keep the command line quick)
    serve.add_argument("--rest-max-connections", type=positive_int, metavar="N",
                       help="REST connections served at once; one more is answered 503 "
                            "(default 64)")
    serve.add_argument("--rest-timeout", type=positive_float, metavar="SECONDS",
                       help="a REST request must arrive whole within SECONDS of its first byte "
                            "(else 408), and a connection waits that long for a request "
                            "(default 30)")
    serve.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                       help="a topic the REST API lists under /topics before anything is "
                            "published on it (repeatable); published topics are listed "
                            "anyway, and kept in Redis")
    serve.add_argument("--max-topics", type=positive_int, default=100_000, metavar="N",
                       help="most topics /topics lists; past it new topics are not listed "
                            "(publishing is not affected; default: 100000)")
    serve.add_argument("--grant", action="append", default=[],
                       metavar="PRINCIPAL=TOKENS[;deny=TOKENS]",
                       help="permission tokens of one principal on topic-pattern links "
                            "(repeatable; tokens comma-separated, '*' = every token; deny "
                            "exceptions win). PRINCIPAL is the user the transport authenticated "
                            "when it authenticated one, else the client's AMQP container id "
                            "(self-declared: it identifies, it does not authenticate). A "
                            "subscriber's seqrepair-permtokens link property may only narrow "
                            "its grant, never widen it")
    serve.add_argument("--default-grant", default="", metavar="TOKENS[;deny=TOKENS]",
                       help="the grant of every principal without a --grant (default: none, "
                            "only publications without a permission token are visible)")
    serve.add_argument("--ready-file", help="write the listen address here once listening")
    serve.set_defaults(func=_serve)

    gateway = subparsers.add_parser(
        "gateway", help="relay subscribers of another address scope to a component")
    gateway.add_argument("--listen", default="127.0.0.1:5673", help="listen address host:port")
    gateway.add_argument("--upstream", required=True, help="the component, host:port")
    gateway.add_argument("--name", default="gw",
                         help="prefix of the upstream link names (<name>.<link name>)")
    gateway.add_argument("--idle-timeout", type=non_negative_float, default=10.0)
    gateway.add_argument("--hold-timeout", type=positive_float, default=30.0,
                         help="how long an attach waits for the component to be reachable")
    gateway.add_argument("--max-attempts", type=positive_int, default=None,
                         help="give up after this many failed connections in a row "
                              "(default: keep trying)")
    gateway.add_argument("--rewrite", action="store_true",
                         help="always rewrite requests and their answers, even when the "
                              "component takes response annotations (default: forward with "
                              "annotations then, rewrite only where the next hop lacks them)")
    gateway.add_argument("--ready-file", help="write the listen address here once listening")
    gateway.set_defaults(func=_gateway)

    pub = subparsers.add_parser("publish", help="publish through the embedded sequencer")
    pub.add_argument("--url", default="127.0.0.1:5672")
    pub.add_argument("--source", required=True)
    pub.add_argument("--bits", type=bit_width, default=32)
    pub.add_argument("--redis-url", help="journal first (recommended): numbering resumes there")
    pub.add_argument("--start-after", type=non_negative_int, default=0, metavar="N",
                     help="without --redis-url: number after N, the source's high-water (a "
                          "restarted publisher must not reuse numbers; default 0)")
    pub.add_argument("--address", default="/#", help="target address (topic or pattern)")
    pub.add_argument("--file", help="JSON lines: {topic, fields, ptype?, permtoken?}, at most "
                     "4 MiB a line, each checked as it is read: the lines before a bad one are "
                     "published, then the command exits 2 naming it")
    pub.add_argument("--count", type=non_negative_int, default=0, help="generated load: how many")
    pub.add_argument("--topics", default="/load/a,/load/b", help="generated load: topics")
    pub.add_argument("--rate", type=non_negative_float, default=0.0,
                     help="generated load: per second (0=max)")
    pub.add_argument("--batch", type=positive_int, default=256, metavar="N",
                     help="publications per transfer and per journal append; brokered "
                          "mode: per journal append (default: 256)")
    pub.add_argument("--broker", metavar="URL",
                     help="brokered mode: publish through this AMQP 1.0 broker (RabbitMQ) to "
                          "--address (/queue/NAME, /exchange/NAME[/KEY]); needs --redis-url")
    pub.add_argument("--drop-rate", type=fraction, default=0.0,
                     help="brokered mode, forced loss: fraction journaled but not sent")
    pub.add_argument("--drop-seed", type=int, default=None)
    pub.add_argument("--timeout", type=positive_float, default=60.0, metavar="SECONDS",
                     help="give up (exit 1) when not everything is accepted this long after the "
                          "last publication was handed over, e.g. while the component cannot "
                          "be reached, or when the journal (--redis-url) stays out this long: "
                          "shorter outages are ridden out (default: 60)")
    pub.set_defaults(func=_publish)

    sub = subparsers.add_parser("subscribe", help="subscribe and print the ordered stream")
    sub.add_argument("--url", default="127.0.0.1:5672")
    sub.add_argument("--address", required=True, help="topic pattern or /subscriptions/NAME")
    sub.add_argument("--link-name",
                     help="link identity (resumption; a durable position, see --no-durable); "
                          "default random")
    sub.add_argument("--bits", type=bit_width, default=None,
                     help="link bits; default: the component's (its attach reply). A value "
                          "the component contradicts stops the subscriber with an error")
    sub.add_argument("--heartbeat", type=positive_float, default=None,
                     help="heartbeat interval (s); default: the component's (brokered mode: "
                          "1). A value the component contradicts stops the subscriber")
    sub.add_argument("--permtokens", default="",
                     help="comma-separated permission tokens: in component mode they narrow "
                          "what the component grants (never widen it); in brokered mode they "
                          "are the subscriber's own entitlement for journal repair")
    sub.add_argument("--count", type=non_negative_int, default=0,
                     help="stop after this many deliveries")
    sub.add_argument("--duration", type=non_negative_float, default=0.0,
                     help="stop after this many seconds")
    sub.add_argument("--idle-exit", type=non_negative_float, default=0.0,
                     help="stop after this many seconds connected without a delivery (after "
                          "the first)")
    sub.add_argument("--output", help="write JSON lines here instead of stdout")
    sub.add_argument("--stats-file", help="write the repair statistics (JSON) here at the end")
    sub.add_argument("--ready-file",
                     help="write this file once the subscription link is attached")
    sub.add_argument("--no-batch", action="store_true", help="one publication per transfer")
    sub.add_argument("--no-durable", action="store_true",
                     help="no durable position for --link-name or a /subscriptions/ queue (by "
                          "default the component keeps, per source, the last number flushed to "
                          "--output, and a restart resumes after it)")
    sub.add_argument("--broker", metavar="URL",
                     help="brokered mode: receive from --address on this AMQP 1.0 broker and "
                          "repair per source from the journal at --redis-url")
    sub.add_argument("--redis-url", help="brokered mode: the journal (the repair authority)")
    sub.add_argument("--entitled", default="/#",
                     help="brokered mode: comma-separated topic patterns this subscriber may see "
                          "(match the queue's binding)")
    sub.add_argument("--resume", action="store_true",
                     help="continue after what --output already holds: brokered mode starts "
                          "there (sources it lacks from their first number); a durable "
                          "subscriber drops what the file already has, so a restart after a "
                          "kill -9 writes each publication once")
    sub.set_defaults(func=_subscribe)

    caps = subparsers.add_parser(
        "capabilities",
        help="ask a component what it offers (XEP-0040 source query) and print it as JSON",
    )
    caps.add_argument("--url", default="127.0.0.1:5672", help="the component, host:port")
    caps.add_argument("--timeout", type=positive_float, default=10.0, metavar="SECONDS")
    caps.set_defaults(func=_capabilities)


def _capabilities(args: argparse.Namespace) -> int:
    import attrs

    from seqrepair.amqp.client.query import query_capabilities

    caps = query_capabilities(args.url, timeout=args.timeout)
    print(json.dumps(attrs.asdict(caps), sort_keys=True))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from seqrepair.amqp.component.component import Component, ComponentConfig
    from seqrepair.amqp.component.grants import GrantTable
    from seqrepair.amqp.wire.guard import Guarded
    from seqrepair.amqp.wire.reactor import make_container
    from seqrepair.core.subscriptions import Subscription
    from seqrepair.journal.journal import Journal
    from seqrepair.journal.retainer import RetentionWorker
    from seqrepair.journal.retention import RetentionPolicy

    try:
        token = _rest_token(args)
        grants = GrantTable.parse(args.grant, args.default_grant)
        policy = RetentionPolicy(
            max_count=args.retain_count, max_age=args.retain_age, archive_root=args.archive
        )
        retention = (
            RetentionWorker(Journal.from_url(args.redis_url), policy, args.retention_interval)
            if args.retain_count is not None or args.retain_age is not None
            else None
        )
        declared = [_declared_topic(topic) for topic in args.topic]
        subs = {}
        for spec in args.subscription:
            name, _, rest = spec.partition("=")
            pattern, _, tokens = rest.partition(";")
            if not name or not rest:
                raise InvalidConfigError(f"--subscription wants NAME=PATTERN, got {spec!r}")
            subs[name] = Subscription(name, pattern, permtokens=[t for t in tokens.split(",") if t],
                                      configured=True)
    except SeqRepairError as exc:  # a bad grant, subscription, topic or retention setting
        print(f"seqrepair serve: {exc.message}", file=sys.stderr)
        return 2
    config = ComponentConfig(
        url=args.url,
        link_bits=args.link_bits,
        heartbeat_interval=args.heartbeat,
        idle_timeout=args.idle_timeout,
        max_batch=args.max_batch,
        max_pending=args.max_pending,
        max_publish_batch=args.max_publish_batch,
        max_message_size=args.max_message_size,
        max_gap_range=args.max_gap_range,
        context_retention=args.context_retention,
        journal_retention=args.retain_age,
        journal_retention_count=args.retain_count,
        drop_rate=args.drop_rate,
        drop_seed=args.drop_seed,
        drop_reset_frames=args.drop_reset_frames,
        request_rate=args.request_rate,
        request_burst=args.request_burst,
        subscriptions=subs,
        grants=grants,
    )

    def ready(url: str) -> None:
        if args.ready_file:
            Path(args.ready_file).write_text(url)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    journal = Journal.from_url(args.redis_url, socket_timeout=args.redis_timeout,
                               socket_connect_timeout=min(args.redis_timeout, 5.0))
    stored = _stored_state(args, subs.values(), declared)
    if stored is None:
        return 1
    manager, topics = stored
    component = Component(config, journal, on_ready=ready, subscriptions=manager,
                          topics=topics)
    # from here SIGTERM stops the component at its next tick; before, it exits at once
    signal.signal(signal.SIGTERM, lambda *_: component.request_stop())
    with contextlib.ExitStack() as stack, contextlib.suppress(KeyboardInterrupt):
        stack.enter_context(topics)  # on the way out: store what is still unsaved
        if args.rest is not None:
            try:
                stack.enter_context(_rest_server(args, manager, token, topics))
            except (SeqRepairError, OSError) as exc:
                print(f"seqrepair serve: --rest: {getattr(exc, 'message', exc)}",
                      file=sys.stderr)
                return 2 if isinstance(exc, SeqRepairError) else 1
        if retention is not None:
            stack.enter_context(retention)
        stack.callback(lambda: log.info("component stopped", **component.stats))
        make_container(Guarded(component, component.stats)).run()  # a bad peer ends its own
    return 0


def _stored_state(args: argparse.Namespace, configured: Any, declared: list[str]) -> Any:
    """The subscription manager (the operator's subscriptions and those kept in Redis) and the
    topic catalog (the declared topics and those kept in Redis); None (after saying why) when
    Redis did not answer for ``SUBSCRIPTIONS_WAIT`` seconds: without the subscriptions an
    attach to a subscription queue would be refused for good."""
    import redis

    from seqrepair.core.catalog import TopicCatalog
    from seqrepair.journal.substore import RedisSubscriptionStore
    from seqrepair.journal.topicstore import RedisTopicStore
    from seqrepair.rest.catalog import SharedCatalog
    from seqrepair.rest.manager import SubscriptionManager

    store = RedisSubscriptionStore.from_url(args.redis_url, socket_timeout=args.redis_timeout)
    topic_store = RedisTopicStore.from_url(args.redis_url, socket_timeout=args.redis_timeout)
    deadline = time.monotonic() + SUBSCRIPTIONS_WAIT
    while True:
        try:
            manager = SubscriptionManager(configured=configured, store=store)
            topics = SharedCatalog(TopicCatalog(max_topics=args.max_topics),
                                   declared=declared, store=topic_store)
            return manager, topics
        except redis.RedisError as exc:
            if time.monotonic() >= deadline:
                print(f"seqrepair serve: cannot read the subscriptions and topics from Redis: "
                      f"{exc}", file=sys.stderr)
                return None
            log.warning("subscriptions and topics not read from Redis yet; trying again",
                        error=str(exc))
            time.sleep(1.0)


def _declared_topic(text: str) -> str:
    """A ``--topic`` value, checked (InvalidConfigError naming the option)."""
    try:
        return validate_topic(text)
    except SeqRepairError as exc:
        raise InvalidConfigError(f"--topic: {exc.message}", expected=exc.expected,
                                 got=text) from None


def _rest_token(args: argparse.Namespace) -> str | None:
    """The bearer token of ``--rest-token-file`` (None without one)."""
    if not args.rest_token_file:
        return None
    try:
        token = Path(args.rest_token_file).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError(f"--rest-token-file: {exc}", got=args.rest_token_file) from None
    if not token:
        raise InvalidConfigError("--rest-token-file is empty", got=args.rest_token_file)
    return token


def _rest_server(args: argparse.Namespace, manager: Any, token: str | None,
                 topics: Any) -> Any:
    """The REST API's server, listening (SeqRepairError: a bad token; OSError: no bind)."""
    import redis

    from seqrepair.rest.api import SubscriptionApi
    from seqrepair.rest.server import RestServer

    api = SubscriptionApi(manager, token=token, unavailable=(OSError, redis.RedisError),
                          topics=topics)
    host, port = args.rest
    limits = {"request_timeout": args.rest_timeout, "max_connections": args.rest_max_connections}
    server = RestServer(api, host=host, port=port,
                        **{name: value for name, value in limits.items() if value is not None})
    server.start()
    log.info("subscription REST API listening", url=server.url, authenticated=bool(token))
    return server


def _gateway(args: argparse.Namespace) -> int:
    from seqrepair.amqp.gateway.gateway import Gateway
    from seqrepair.amqp.gateway.relays import Backoff

    def ready(url: str) -> None:
        if args.ready_file:
            Path(args.ready_file).write_text(url)

    gateway = Gateway(args.listen, args.upstream, name=args.name, on_ready=ready,
                      idle_timeout=args.idle_timeout, hold_timeout=args.hold_timeout,
                      backoff=Backoff(max_attempts=args.max_attempts),
                      annotations=not args.rewrite)
    signal.signal(signal.SIGTERM, lambda *_: gateway.request_stop())
    with contextlib.suppress(KeyboardInterrupt):
        gateway.run()
    if gateway.error is not None:
        print(f"seqrepair gateway: {gateway.error}", file=sys.stderr)
        return 1
    return 0


def _publish(args: argparse.Namespace) -> int:
    if not args.file and not args.count:
        print("seqrepair publish: give --file PATH or --count N", file=sys.stderr)
        return 2
    if args.start_after and (args.redis_url or args.broker):
        print("seqrepair publish: --start-after is for a publisher without a journal; with "
              "--redis-url numbering resumes after the journal's high-water", file=sys.stderr)
        return 2
    if args.broker:
        return _publish_brokered(args)
    return publish(args)


def _report_error(command: str, error: SeqRepairError | None) -> None:
    """A client stopped by a condition a reconnect cannot cure: say which, on stderr."""
    if error is not None:
        print(f"seqrepair {command}: {error.message}", file=sys.stderr)


def publication_record(pub: Publication) -> dict[str, Any]:
    """A delivered publication as one JSON line."""
    return {
        "source": pub.source,
        "source_seq": pub.source_seq,
        "topic": pub.topic,
        "ptype": pub.ptype.value,
        "fields": {k: (v.hex() if isinstance(v, bytes) else v) for k, v in pub.fields.items()},
        "permtoken": pub.permtoken,
        "retransmit": pub.retransmit,
    }


def _subscribe(args: argparse.Namespace) -> int:
    if args.broker:
        return _subscribe_brokered(args)
    from seqrepair.amqp.client.subscriber import Subscriber
    from seqrepair.amqp.wire.errors import AmqpAdapterError

    sink = _Sink(args, line_buffered=False)
    subscriber = Subscriber(
        args.url, args.address, link_name=args.link_name, on_publication=sink.write,
        bits=args.bits, heartbeat_interval=args.heartbeat,
        permtokens=[t for t in args.permtokens.split(",") if t], batch=not args.no_batch,
        acknowledge=False,  # taken once flushed to --output (see _Sink.flush)
        durable=False if args.no_durable else None,
    )
    sink.taken = subscriber.acknowledge if subscriber.durable else None
    if args.resume and args.output and Path(args.output).exists():
        sink.written = resume_after(Path(args.output))  # the output is the position file
    if args.ready_file:
        ready_file = Path(args.ready_file)

        def announce() -> None:
            with contextlib.suppress(AmqpAdapterError):  # reported when the subscriber returns
                if subscriber.wait_connected():
                    ready_file.write_text(args.address)

        threading.Thread(target=announce, name="ready-file", daemon=True).start()
    _run_subscriber(subscriber, sink, args)
    _report_error("subscribe", subscriber.error)
    if subscriber.error is None and not subscriber.report.connections:
        print(f"seqrepair subscribe: never connected to {args.url}", file=sys.stderr)
        return 1
    return 1 if subscriber.error is not None else 0


class _Sink:
    """Where ``seqrepair subscribe`` writes deliveries (JSON lines), and when it stops."""

    def __init__(self, args: argparse.Namespace, *, line_buffered: bool) -> None:
        self.args = args
        self.out: TextIO = (
            open(args.output, "a", encoding="utf-8",  # noqa: SIM115
                 buffering=1 if line_buffered else -1)
            if args.output else sys.stdout
        )
        self.n = 0
        self.last = time.monotonic()
        self.started = time.monotonic()
        self.taken: Callable[[dict[str, int]], None] | None = None
        """Told, after each flush, the last number per source the output now holds (the
        subscriber's acknowledgement: a kill -9 after it loses none of those lines)."""
        self._unflushed: dict[str, int] = {}
        self.written: dict[str, int] = {}
        self.already_written = 0
        """Per source, the last number the output held when it started (``--resume``):
        deliveries at or below it are in the file already (a restart's repeats)."""

    def write(self, pub: Publication) -> None:
        """One delivery as one JSON line (none for one the output holds already)."""
        if pub.source_seq <= self.written.get(pub.source, 0):
            self._unflushed[pub.source] = pub.source_seq  # taken: acknowledged with the rest
            self.already_written += 1
            return
        self.out.write(json.dumps(publication_record(pub)) + "\n")
        self._unflushed[pub.source] = pub.source_seq
        self.n += 1
        self.last = time.monotonic()

    def flush(self) -> None:
        """Hand what was written to the operating system, then acknowledge it."""
        if not self._unflushed:
            return
        self.out.flush()
        written, self._unflushed = self._unflushed, {}
        if self.taken is not None:
            self.taken(written)

    def stop_when(self, connected: bool = True) -> bool:
        """``--count``, ``--duration`` or ``--idle-exit`` reached. Idle time counts only while
        ``connected``: a subscriber waiting out a component's restart is not at the end of
        its stream."""
        args = self.args
        now = time.monotonic()
        if not connected:
            self.last = now
        if args.count and self.n >= args.count:
            return True
        if args.duration and now - self.started >= args.duration:
            return True
        return bool(args.idle_exit and self.n and now - self.last >= args.idle_exit)


def _run_subscriber(subscriber: Any, sink: _Sink, args: argparse.Namespace) -> None:
    """Run until the sink says stop (or SIGTERM / ^C), then report the statistics."""
    # the handler only sets a flag: the subscriber's tick (stop_when) acts on it, in proton's
    # thread, not in the middle of whatever the signal interrupted
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    with contextlib.suppress(KeyboardInterrupt):
        connected = getattr(subscriber, "connected", None)

        def stop() -> bool:
            sink.flush()  # every tick: what the output holds is acknowledged
            return terminated.is_set() or sink.stop_when(connected is None or connected.is_set())

        subscriber.run(stop_when=stop)
    sink.out.flush()
    stats: dict[str, Any] = dict(subscriber.stats().as_dict())
    stats["unrecoverable_events"] = [str(u) for u in subscriber.unrecoverable]
    if args.resume:
        stats["already_written"] = sink.already_written  # repeats --output held already
    if args.stats_file:
        Path(args.stats_file).write_text(json.dumps(stats))
    print(json.dumps(stats), file=sys.stderr)
    if sink.out is not sys.stdout:
        sink.out.close()


# ------------------------------------------------------------------------------ brokered mode


def _publish_brokered(args: argparse.Namespace) -> int:
    import random

    from seqrepair.amqp.client.brokered import BrokerPublisher
    from seqrepair.journal.journal import Journal

    if not args.redis_url:
        print("seqrepair publish --broker needs --redis-url (the journal repairs losses)",
              file=sys.stderr)
        return 2
    rng = random.Random(args.drop_seed)
    drop = (lambda _pub: rng.random() < args.drop_rate) if args.drop_rate > 0 else None
    publisher = BrokerPublisher(args.broker, args.source, Journal.from_url(args.redis_url),
                                address=args.address, bits=args.bits, batch_size=args.batch,
                                drop=drop).start()
    count = 0
    start = time.monotonic()
    try:
        for batch in itertools.chain(file_items(args), generated_items(args)):
            publisher.publish_many(batch)
            count += len(batch)
            pace(start, count, args.rate)
    except BaseException:  # as in component mode
        publisher.close(timeout=5)
        raise
    ok = publisher.close(timeout=args.timeout)
    print(json.dumps({"published": count, "sent": publisher.sent, "dropped": publisher.dropped,
                      "accepted": publisher.accepted, "rejected": publisher.rejected,
                      "flushed": ok}))
    _report_error("publish", publisher.error)
    return 0 if ok else 1


def resume_after(path: Path) -> dict[str, int]:
    """The last ``source_seq`` per source in a JSON-lines output (a torn last line is cut off)."""
    after: dict[str, int] = {}
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):  # killed mid-write: drop the partial line so appends stay well-formed
        with open(path, "r+b") as fh:
            fh.truncate(end)
    for line in data[:end].splitlines():
        if line.strip():
            record = json.loads(line)
            after[record["source"]] = max(after.get(record["source"], 0), record["source_seq"])
    return after


def _subscribe_brokered(args: argparse.Namespace) -> int:
    from seqrepair.amqp.client.brokered import BrokerSubscriber
    from seqrepair.journal.journal import Journal

    if not args.redis_url:
        print("seqrepair subscribe --broker needs --redis-url (the repair authority)",
              file=sys.stderr)
        return 2
    start_after = None
    if args.resume and args.output and Path(args.output).exists():
        start_after = resume_after(Path(args.output))
    # line-buffered: what a crash leaves in the file is whole lines, and --resume reads them
    sink = _Sink(args, line_buffered=True)
    subscriber = BrokerSubscriber(
        args.broker, args.address, Journal.from_url(args.redis_url), start_after=start_after,
        topics=[t for t in args.entitled.split(",") if t],
        permtokens=[t for t in args.permtokens.split(",") if t],
        on_publication=sink.write, probe_interval=args.heartbeat or 1.0,
        link_name=args.link_name,
    )
    _run_subscriber(subscriber, sink, args)
    _report_error("subscribe", subscriber.error)
    if subscriber.error is None and not subscriber.report.connections:
        print(f"seqrepair subscribe: never connected to {args.url}", file=sys.stderr)
        return 1
    return 1 if subscriber.error is not None else 0
