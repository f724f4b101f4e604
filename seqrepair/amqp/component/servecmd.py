"""``seqrepair serve``'s body: read the options into a :class:`ComponentConfig`, load the stored
subscriptions and topics from Redis, start the REST API and retention beside it, and run the
component until SIGTERM or ^C (the options are defined in :mod:`seqrepair.amqp.commands`)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from seqrepair.core.errors import InvalidConfigError, SeqRepairError
from seqrepair.core.topics import validate_topic
from seqrepair.logs import get_logger
from seqrepair.readyfile import write_ready

log = get_logger(__name__)


SUBSCRIPTIONS_WAIT = 30.0
"""Seconds ``serve`` waits for Redis to give it the stored subscriptions and topics before it
gives up."""


def serve(args: argparse.Namespace) -> int:
    """``seqrepair serve``: 0 once stopped, 2 on a bad option, 1 when Redis or the REST port
    fails it."""
    from seqrepair.access import Access
    from seqrepair.amqp.component.component import Component
    from seqrepair.amqp.component.grants import GrantTable
    from seqrepair.amqp.wire.guard import Guarded
    from seqrepair.amqp.wire.reactor import make_container
    from seqrepair.amqp.wire.security import ServerSecurity
    from seqrepair.core.subscriptions import Subscription
    from seqrepair.journal.journal import Journal

    try:
        token, principal_tokens = _rest_tokens(args)
        access = Access(args.policy)
        grants = GrantTable.parse(args.grant, args.default_grant)
        retention = retention_worker(args)
        declared = [_declared_topic(topic) for topic in args.topic]
        subs = {}
        for spec in args.subscription:
            name, _, rest = spec.partition("=")
            pattern, _, tail = rest.partition(";")
            tokens, _, attachers = tail.partition(";")
            if not name or not rest:
                raise InvalidConfigError(f"--subscription wants NAME=PATTERN, got {spec!r}")
            subs[name] = Subscription(name, pattern, permtokens=[t for t in tokens.split(",") if t],
                                      configured=True,
                                      attachers=[p for p in attachers.split(",") if p])
        security = ServerSecurity.from_args(args)
        security.check(args.url)
    except SeqRepairError as exc:  # a bad grant, subscription, topic, policy, retention or security
        print(f"seqrepair serve: {exc.message}", file=sys.stderr)
        return 2
    reloads: list[Callable[[], None]] = []  # the REST tokens' reload, once it listens
    watch_policy(access, reloads)  # SIGHUP reads the policy file (and the tokens) again
    config = component_config(
        args,
        url=args.url,
        max_publish_batch=args.max_publish_batch,
        contribution_rate=args.contribution_rate,
        contribution_burst=args.contribution_burst,
        contribution_timeout=args.contribution_timeout,
        max_pending_contributions=args.max_pending_contributions,
        subscriptions=subs,
        grants=grants,
        security=security,
    )

    def ready(url: str) -> None:
        if args.ready_file:
            write_ready(args.ready_file, url)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    journal = Journal.from_url(args.redis_url, socket_timeout=args.redis_timeout,
                               socket_connect_timeout=min(args.redis_timeout, 5.0))
    stored = _stored_state(args, subs.values(), declared, access)
    if stored is None:
        return 1
    manager, topics = stored
    component = Component(config, journal, on_ready=ready, subscriptions=manager,
                          topics=topics)
    access.on_change(component.policy_changed)  # a reload re-checks the attached links
    access.announce()
    # from here SIGTERM stops the component at its next tick; before, it exits at once
    signal.signal(signal.SIGTERM, lambda *_: component.request_stop())
    with contextlib.ExitStack() as stack, contextlib.suppress(KeyboardInterrupt):
        stack.enter_context(topics)  # on the way out: store what is still unsaved
        if args.rest is not None:
            try:
                stack.enter_context(_rest_server(args, manager, token, topics,
                                                 principal_tokens, reloads))
            except (SeqRepairError, OSError) as exc:
                print(f"seqrepair serve: --rest: {getattr(exc, 'message', exc)}",
                      file=sys.stderr)
                return 2 if isinstance(exc, SeqRepairError) else 1
        if retention is not None:
            stack.enter_context(retention)
        stack.callback(lambda: log.info("component stopped", **component.stats))
        make_container(Guarded(component, component.stats)).run()  # a bad peer ends its own
    if component.listen_error is not None:
        print(f"seqrepair serve: {component.listen_error}", file=sys.stderr)
        return 1
    return 0


def component_config(args: argparse.Namespace, **fields: Any) -> Any:
    """The :class:`ComponentConfig` of a component that serves subscribers, from the options
    :func:`~seqrepair.amqp.commands.add_component_options` defines (``serve``, ``relay``), and
    ``fields`` (its address, security, grants and what only one of them has)."""
    from seqrepair.amqp.component.config import ComponentConfig

    return ComponentConfig(
        link_bits=args.link_bits,
        heartbeat_interval=args.heartbeat,
        idle_timeout=args.idle_timeout,
        max_batch=args.max_batch,
        max_pending=args.max_pending,
        link_context_bytes=args.link_context_bytes,
        link_unsent_bytes=args.link_unsent_bytes,
        connection_bytes=args.connection_bytes,
        principal_bytes=args.principal_bytes,
        component_bytes=args.component_bytes,
        memory_grace=args.memory_grace,
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
        repair_turn=args.repair_turn,
        replay_page=args.replay_page,
        replay_cache_bytes=args.replay_cache_bytes,
        max_replays_per_connection=args.max_replays_per_connection,
        max_replays_per_principal=args.max_replays_per_principal,
        max_connections=args.max_connections,
        max_connections_per_principal=args.max_connections_per_principal,
        max_links_per_connection=args.max_links_per_connection,
        max_links_per_principal=args.max_links_per_principal,
        max_sources=args.max_sources,
        max_sources_per_principal=args.max_sources_per_principal,
        open_timeout=args.open_timeout,
        hop_id=args.hop_id,
        max_hops=args.max_hops,
        **fields,
    )


def retention_worker(args: argparse.Namespace) -> Any:
    """The journal's retention (``--retain-count``/``--retain-age``), None without them
    (InvalidConfigError for a bad combination)."""
    from seqrepair.journal.journal import Journal
    from seqrepair.journal.retainer import RetentionWorker
    from seqrepair.journal.retention import RetentionPolicy

    if args.retain_count is None and args.retain_age is None:
        return None
    policy = RetentionPolicy(
        max_count=args.retain_count, max_age=args.retain_age, archive_root=args.archive
    )
    return RetentionWorker(Journal.from_url(args.redis_url), policy, args.retention_interval)


def watch_policy(access: Any, also: Sequence[Callable[[], None]] = ()) -> None:
    """Reload the access policy at each SIGHUP, off the signal handler (in a thread), then
    run ``also`` (read at each SIGHUP: callers may add to it later)."""
    hangups = threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: hangups.set())
    threading.Thread(target=_reloader, args=(access, hangups, also), name="policy-reload",
                     daemon=True).start()


def _reloader(access: Any, hangups: threading.Event,
              also: Sequence[Callable[[], None]]) -> None:
    """Reload the access policy at each SIGHUP (forever: a daemon thread)."""
    while True:
        hangups.wait()
        hangups.clear()
        access.reload()
        for reload in list(also):
            try:
                reload()
            except Exception:  # one reload must not end the thread for the next SIGHUP
                log.exception("reload failed")


def _stored_state(args: argparse.Namespace, configured: Any, declared: list[str],
                  access: Any) -> Any:
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
            manager = SubscriptionManager(configured=configured, store=store, policy=access)
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


def _rest_tokens(args: argparse.Namespace, *, starting: bool = True
                 ) -> tuple[str | None, dict[str, str]]:
    """The bearer tokens of ``--rest-token-file``: the operator's (a line holding only a
    token, the principal ``--rest-token-principal``; None without one) and, by principal,
    those of ``PRINCIPAL TOKEN`` lines (plaintext; ``--rest-tokens`` keeps only hashes). An
    empty file is refused at start (``starting``); on a reload it revokes them all."""
    if not args.rest_token_file:
        return None, {}
    try:
        lines = Path(args.rest_token_file).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError(f"--rest-token-file: {exc}", got=args.rest_token_file) from None
    token = None
    principals = {}
    for line in filter(None, (line.strip() for line in lines)):
        principal, _, secret = line.rpartition(" ")
        if principal.strip():
            principals[principal.strip()] = secret
        elif token is None:
            token = secret
        else:
            raise InvalidConfigError("--rest-token-file: two operator tokens",
                                     got=args.rest_token_file)
    if token is None and not principals and starting:
        raise InvalidConfigError("--rest-token-file is empty", got=args.rest_token_file)
    return token, principals


def _rest_server(args: argparse.Namespace, manager: Any, token: str | None,
                 topics: Any, principal_tokens: dict[str, str],
                 reloads: list[Callable[[], None]] | None = None) -> Any:
    """The REST API's server, listening (SeqRepairError: a bad token; OSError: no bind);
    its bearer tokens reloaded by what it adds to ``reloads`` (run at each SIGHUP)."""
    import redis

    from seqrepair.rest.api import SubscriptionApi
    from seqrepair.rest.server import RestServer, tls_context

    host, port = args.rest
    auth = _rest_auth(args, token, principal_tokens, host)
    api = SubscriptionApi(manager, auth=auth, token=token,
                          token_principal=args.rest_token_principal,
                          unavailable=(OSError, redis.RedisError), topics=topics)
    limits = {"request_timeout": args.rest_timeout, "max_connections": args.rest_max_connections}
    tls = tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    server = RestServer(api, host=host, port=port, tls=tls,
                        **{name: value for name, value in limits.items() if value is not None})
    server.start()
    if reloads is not None:
        reloads.append(lambda: _reload_rest_tokens(args, api, host))
    log.info("subscription REST API listening", url=server.url,
             anonymous=auth.allow_anonymous, tokens=len(api.auth.tokens),
             basic=auth.credentials is not None)
    return server


def _reload_rest_tokens(args: argparse.Namespace, api: Any, host: str) -> None:
    """Read ``--rest-tokens`` and ``--rest-token-file`` again (SIGHUP) and decide again, by
    the rule applied at start, who may go without a token (``--allow-anonymous`` and no bearer
    token configured: :func:`_rest_auth`): the whole of it replaces what was in force in one
    assignment, from the next request on (a request reads it once). A file that cannot be
    read, names nobody, or would open a non-loopback API to anyone without ``--insecure`` is
    logged and what is in force stays."""
    if not (args.rest_tokens or args.rest_token_file):
        return  # nothing read from a file: who may come in cannot have changed
    try:
        token, principal_tokens = _rest_tokens(args, starting=False)
        auth = _rest_auth(args, token, principal_tokens, host, starting=False)
    except SeqRepairError as exc:
        log.error("REST tokens not reloaded; those in force stay", error=exc.message,
                  anonymous=api.auth.allow_anonymous)
        return
    api.auth = rest_access(auth, token, args.rest_token_principal)
    if not api.auth.anyone_can_authenticate:
        # the last token was taken out (revoked): it must stop working, so nobody is let in
        # until one is added again (not the old tokens kept, as for a file that cannot be read)
        log.warning("REST tokens reloaded: none is left and nothing else names a principal; "
                    "every request is 401 until a token is added and SIGHUP sent")
    log.info("REST tokens reloaded", tokens=len(api.auth.tokens),
             anonymous=api.auth.allow_anonymous)


def rest_access(auth: Any, token: str | None, token_principal: str) -> Any:
    """``auth`` with the ``--rest-token-file`` operator token (when there is one) among its
    tokens, as :class:`~seqrepair.rest.api.SubscriptionApi` adds it at start."""
    import attrs

    from seqrepair.auth.restauth import token_hash

    if token is None:
        return auth
    return attrs.evolve(auth, tokens={**auth.tokens, token_hash(token): token_principal})


def _rest_auth(args: argparse.Namespace, token: str | None, principal_tokens: dict[str, str],
               host: str, *, starting: bool = True) -> Any:
    """How the REST API establishes principals (InvalidConfigError when nobody could at start
    (``starting``; on a reload that is the last token revoked, applied), or when a
    non-loopback API would go without TLS or let anyone in, unless --insecure)."""
    from seqrepair.amqp.wire.security import is_loopback
    from seqrepair.auth.credentials import CredentialStore
    from seqrepair.auth.restauth import RestAuth, read_tokens, token_hash

    tokens = read_tokens(args.rest_tokens) if args.rest_tokens else {}
    tokens.update({token_hash(secret): who for who, secret in principal_tokens.items()})
    # --allow-anonymous covers the REST API too, unless bearer tokens are configured: an API
    # with tokens wants one (or Basic), as --rest-token-file always did
    auth = RestAuth(
        tokens=tokens,
        credentials=CredentialStore(args.credentials) if args.credentials else None,
        allow_anonymous=args.allow_anonymous and not tokens and token is None,
    )
    if starting and not auth.anyone_can_authenticate and token is None:
        raise InvalidConfigError("--rest: nobody could authenticate: give --rest-tokens, "
                                 "--rest-token-file, --credentials or --allow-anonymous")
    if not is_loopback(host) and (auth.allow_anonymous or not args.tls_cert) and not args.insecure:
        raise InvalidConfigError(
            f"--rest {host} is not a loopback address and the API "
            + ("allows anonymous access" if auth.allow_anonymous else "has no TLS")
            + ": refused unless --insecure", got=host)
    return auth
