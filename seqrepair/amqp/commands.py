"""``seqrepair serve``, ``gateway``, ``publish``, ``contribute``, ``subscribe`` and
``capabilities``: their options, and one-line dispatchers to their bodies in the AMQP parts
(:mod:`~seqrepair.amqp.component.servecmd`, :mod:`~seqrepair.amqp.gateway.gatewaycmd`,
:mod:`~seqrepair.amqp.client.publishcmd`, :mod:`~seqrepair.amqp.client.contributecmd`,
:mod:`~seqrepair.amqp.client.subscribecmd`).

Building the parser imports no AMQP part and no proton or redis: a body is imported when its
command runs, and a missing extra is then one line (:mod:`seqrepair.extras`).
"""

from __future__ import annotations

import argparse
from typing import Any

from seqrepair.argtypes import (
    bit_width,
    fraction,
    host_port,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from seqrepair.extras import run_body


def register(subparsers: Any) -> None:
    """Add the AMQP subcommands to the ``seqrepair`` parser."""
    serve = subparsers.add_parser("serve", help="run the AMQP 1.0 pubsub component")
    serve.add_argument("--url", default="127.0.0.1:5672", help="listen address host:port")
    serve.add_argument("--redis-url", required=True, help="the journal's Redis")
    serve.add_argument("--max-publish-batch", type=positive_int, default=4_096, metavar="N",
                       help="most publications one incoming PUBLICATIONS message may carry; "
                            "a larger one is rejected (default: 4096)")
    serve.add_argument("--contribution-rate", type=positive_float, default=10.0,
                       metavar="PER_SECOND",
                       help="contributions per second one principal may send (token bucket; "
                            "over it: amqp:resource-limit-exceeded; default 10)")
    serve.add_argument("--contribution-burst", type=positive_float, default=20.0, metavar="N",
                       help="contributions one principal may send at once (default 20)")
    serve.add_argument("--contribution-timeout", type=positive_float, default=10.0,
                       metavar="SECONDS",
                       help="how long a source's owner has to take or refuse a contribution "
                            "(default 10)")
    serve.add_argument("--max-pending-contributions", type=positive_int, default=256,
                       metavar="N", help="contributions one owner may leave unanswered "
                                         "(default 256)")
    serve.add_argument("--subscription", action="append", default=[],
                       metavar="NAME=PATTERN[;TOKENS[;PRINCIPALS]]",
                       help="a subscription queue /subscriptions/NAME (tokens comma-separated); "
                            "who may attach to it: the PRINCIPALS named (comma-separated, "
                            "'*' = any characters, anonymous included) and the --policy "
                            "file's attach-queue rules; nobody else")
    serve.add_argument("--rest", type=host_port, metavar="HOST:PORT",
                       help="serve the subscription REST API (/subscriptions, /topics) here; "
                            "subscriptions made through it are kept in Redis")
    serve.add_argument("--rest-token-file", metavar="PATH",
                       help="the REST API then wants 'Authorization: Bearer <token>': a line "
                            "holding only a token authenticates the principal "
                            "--rest-token-principal names (default 'operator'), a line "
                            "'PRINCIPAL TOKEN' that principal (plaintext: prefer --rest-tokens)")
    serve.add_argument("--rest-token-principal", default="operator", metavar="NAME",
                       help="the principal of a --rest-token-file line holding only a token "
                            "(default operator)")
    serve.add_argument("--rest-tokens", metavar="PATH",
                       help="bearer tokens per principal, hashed: 'PRINCIPAL SHA256-HEX' lines "
                            "(seqrepair credentials token). The REST API also takes HTTP Basic "
                            "against --credentials, serves HTTPS with --tls-cert/--tls-key, and "
                            "anonymous requests only with --allow-anonymous; reloaded on SIGHUP")
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
                            "published on it (repeatable; not kept in Redis, and DELETE "
                            "/topics refuses it: the command line is its home); published "
                            "topics are listed anyway, and kept in Redis")
    serve.add_argument("--max-topics", type=positive_int, default=100_000, metavar="N",
                       help="most topics /topics lists; past it new topics are not listed "
                            "(publishing is not affected; default: 100000)")
    add_component_options(serve)
    add_server_security(serve)
    add_hop_options(serve, "serve")
    serve.set_defaults(func=_serve)

    gateway = subparsers.add_parser(
        "gateway", help="relay subscribers of another address scope to a component")
    gateway.add_argument("--listen", default="127.0.0.1:5673", help="listen address host:port")
    gateway.add_argument("--upstream", required=True, help="the component, host:port")
    gateway.add_argument("--name", default="gw",
                         help="prefix of the upstream link names (<name>.<link name>)")
    gateway.add_argument("--idle-timeout", type=non_negative_float, default=10.0)
    gateway.add_argument("--hold-timeout", type=positive_float, default=30.0,
                         help="how long an attach (a subscriber's, a publisher's, a "
                              "contributions owner's) waits for the component's answer")
    gateway.add_argument("--max-attempts", type=positive_int, default=None,
                         help="give up after this many failed connections in a row "
                              "(default: keep trying)")
    gateway.add_argument("--rewrite", action="store_true",
                         help="always rewrite requests and their answers, even when the "
                              "component takes response annotations (default: forward with "
                              "annotations then, rewrite only where the next hop lacks them)")
    gateway.add_argument("--forward-principals", action="store_true",
                         help="attach and ask upstream on behalf of the principal each client "
                              "proved (the component's policy must grant this gateway's "
                              "principal act-for on them)")
    gateway.add_argument("--ready-file", help="write the listen address here once listening")
    gateway.add_argument("--max-connections", type=positive_int, default=800, metavar="N",
                         help="client connections held at once, opened or not; one more is "
                              "closed at once (amqp:resource-limit-exceeded); the gateway's "
                              "own connections to the component are not counted")
    gateway.add_argument("--open-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                         help="a client connection that has not completed the AMQP open (and "
                              "SASL) this long after it was accepted is closed")
    gateway.add_argument("--max-links-per-connection", type=positive_int, default=1_000,
                         metavar="N", help="links one client connection may hold attached; "
                                           "one more is refused (amqp:resource-limit-exceeded) "
                                           "(default 1000; a downstream gateway or relay "
                                           "carries all its subscribers' links on one)")
    gateway.add_argument("--max-links-per-principal", type=positive_int, default=4_000,
                         metavar="N", help="links the client connections of one principal may "
                                           "hold (the one each proved; anonymous clients are "
                                           "one principal; default 4000). Without "
                                           "--forward-principals the component counts every "
                                           "client's links as the gateway's: set both below "
                                           "its allowance (the defaults are serve's own) so "
                                           "one client cannot use it up")
    gateway.add_argument("--max-waiting-requests", type=positive_int, default=4_096,
                         metavar="N", help="client requests waiting for the component's "
                                           "outcome at once; one more is rejected "
                                           "amqp:resource-limit-exceeded (asked again; "
                                           "default 4096)")
    gateway.add_argument("--max-waiting-requests-per-principal", type=positive_int,
                         default=1_024, metavar="N",
                         help="of those, from the connections of one principal (the one each "
                              "client proved; anonymous clients are one principal), so one "
                              "principal's flood refuses its own requests, not others' "
                              "(default 1024; a downstream gateway or relay connecting as "
                              "one principal counts once for all its subscribers)")
    add_hop_options(gateway, "gateway")
    add_server_security(gateway)
    add_client_security(gateway, "upstream-")
    gateway.set_defaults(func=_gateway)

    relay = subparsers.add_parser(
        "relay", help="a component that subscribes to another and re-serves it (fractal relay)")
    relay.add_argument("--upstream", required=True, help="the upstream component, host:port")
    relay.add_argument("--listen", default="127.0.0.1:5674", help="listen address host:port")
    relay.add_argument("--redis-url", required=True, help="the relay's own journal's Redis")
    relay.add_argument("--subscribe", nargs="+", default=[], metavar="PATTERN",
                       help="topic patterns the relay always carries; with no --aggregate its "
                            "subscribers must lie inside them")
    relay.add_argument("--aggregate", action="store_true",
                       help="carry the union of --subscribe and the attached subscribers' "
                            "patterns, on one upstream link changed as they come and go")
    relay.add_argument("--linger", type=non_negative_float, default=1.0, metavar="SECONDS",
                       help="with --aggregate: how long a pattern no subscriber needs stays "
                            "carried (default 1)")
    relay.add_argument("--name", default="relay",
                       help="the relay's name: its upstream link is relay.NAME, where the "
                            "upstream component keeps its durable position")
    add_component_options(relay)
    add_hop_options(relay, "relay")
    add_server_security(relay)
    add_client_security(relay, "upstream-")
    relay.set_defaults(func=_relay)

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
    pub.add_argument("--contributions", choices=("take", "refuse"), default=None,
                     help="take this source's contributions into its stream, or refuse each "
                          "(its principal must own the source; default: no contributions "
                          "link, contributors are told the owner is not connected)")
    add_client_security(pub)
    pub.set_defaults(func=_publish)

    con = subparsers.add_parser(
        "contribute", help="send contributions to a source another principal owns and print "
                           "each answer (accepted with its source number, or refused)")
    con.add_argument("--url", default="127.0.0.1:5672")
    con.add_argument("--source", required=True, help="the source to contribute to")
    con.add_argument("--file", help="JSON lines: {topic, fields, ptype?, permtoken?}")
    con.add_argument("--topic", help="one contribution's topic (instead of --file)")
    con.add_argument("--fields", default="{}", help="its fields, a JSON object")
    con.add_argument("--ptype", default="update")
    con.add_argument("--permtoken", default=None)
    con.add_argument("--timeout", type=positive_float, default=30.0, metavar="SECONDS",
                     help="how long to wait for the component and each answer")
    add_client_security(con)
    con.set_defaults(func=_contribute, batch=64)

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
    sub.add_argument("--on-overdue", choices=["request", "wait", "disconnect"],
                     default="request",
                     help="when heartbeats are overdue, besides alerting: request the next "
                          "number (a probe), wait, or disconnect and attach again (default: "
                          "request)")
    sub.add_argument("--resync-on-unrecoverable", action="store_true",
                     help="on an Unrecoverable, ask for the current images of the items it "
                          "names, else of every item of its source (images go to the output "
                          "as lines with \"image\": true); a resync the component refuses "
                          "or never answers is named on stderr and in the statistics "
                          "(images_refused_events; one still unanswered when the run "
                          "stops, resyncs_unanswered_events), and the exit status is 3")
    sub.add_argument("--images", metavar="FILE",
                     help="keep the item images of what is delivered and write them here (JSON "
                          "lines: topic, fields, partial) every second and at the end, then "
                          "FILE.position (the position they are current through); a durable "
                          "subscriber's restart loads it when it resumes where it is current")
    add_client_security(sub)
    sub.set_defaults(func=_subscribe)

    caps = subparsers.add_parser(
        "capabilities",
        help="ask a component what it offers (XEP-0040 source query) and print it as JSON",
    )
    caps.add_argument("--url", default="127.0.0.1:5672", help="the component, host:port")
    caps.add_argument("--timeout", type=positive_float, default=10.0, metavar="SECONDS")
    add_client_security(caps)
    caps.set_defaults(func=_capabilities)


def add_server_security(parser: argparse.ArgumentParser) -> None:
    """A listener's authentication options (:class:`~seqrepair.amqp.wire.security.ServerSecurity`,
    WIRE.md "Authentication")."""
    from seqrepair.amqp.wire.security import CLIENT_CERT_MODES  # attrs only, no proton

    group = parser.add_argument_group("authentication")
    group.add_argument("--tls-cert", metavar="PEM", help="TLS: this listener's certificate")
    group.add_argument("--tls-key", metavar="PEM", help="TLS: its private key")
    group.add_argument("--tls-ca", metavar="PEM",
                       help="TLS: the CA that signs client certificates")
    group.add_argument("--client-cert", choices=CLIENT_CERT_MODES, default="none",
                       help="required: every client presents a certificate --tls-ca signed and "
                            "SASL EXTERNAL names it by the certificate's subject; optional: a "
                            "certificate presented is verified so (else the TLS handshake "
                            "fails), a client without one uses another mechanism (default "
                            "none: not asked for)")
    group.add_argument("--credentials", metavar="SASLDB",
                       help="SCRAM-SHA-256 against this credentials file (seqrepair "
                            "credentials add; salted secrets only)")
    group.add_argument("--allow-anonymous", action="store_true",
                       help="let clients in without authentication, as principal 'anonymous'")
    group.add_argument("--insecure", action="store_true",
                       help="allow a non-loopback listener without TLS or with anonymous "
                            "access (refused otherwise)")


def add_client_security(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """A client's authentication options (:class:`~seqrepair.amqp.wire.security.ClientSecurity`);
    ``prefix`` (``"upstream-"``) for a gateway's connection to its component."""
    group = parser.add_argument_group(f"{prefix}authentication")
    group.add_argument(f"--{prefix}tls-ca", metavar="PEM",
                       help="TLS: the CA that signed the server's certificate (turns TLS on, as "
                            "an amqps:// URL does)")
    group.add_argument(f"--{prefix}tls-cert", metavar="PEM",
                       help="TLS: a client certificate (SASL EXTERNAL)")
    group.add_argument(f"--{prefix}tls-key", metavar="PEM", help="its private key")
    group.add_argument(f"--{prefix}user", help="SASL user (SCRAM-SHA-256)")
    group.add_argument(f"--{prefix}password-file", metavar="PATH",
                       help="the user's password (default: $SEQREPAIR_PASSWORD)")
    group.add_argument(f"--{prefix}sasl-mechs", metavar="MECHS",
                       help="SASL mechanisms to allow, space-separated (default: what the "
                            "options above call for)")


def _serve(args: argparse.Namespace) -> int:
    archive = ("pyarrow",) if args.archive else ()
    return run_body(args, "seqrepair.amqp.component.servecmd:serve", "proton", "redis", *archive)


MAX_HOPS_LIMIT = 255
"""The highest ``--max-hops`` (:data:`seqrepair.amqp.wire.hops.MAX_HOPS_LIMIT`, not imported:
building the parser imports no AMQP part)."""


def add_component_options(parser: argparse.ArgumentParser) -> None:
    """The options of a component that serves subscribers (``serve`` and ``relay``): its links,
    the bounds a peer can cost it (WIRE.md "Resource model"), its access policy and grants, its
    journal's retention and forced loss for tests."""
    parser.add_argument("--redis-timeout", type=positive_float, default=2.0, metavar="SECONDS",
                        help="how long a journal call may wait for Redis before it fails; the "
                             "event loop serving every link waits with it (default 2)")
    parser.add_argument("--link-bits", type=bit_width, default=16)
    parser.add_argument("--heartbeat", type=positive_float, default=1.0,
                        help="heartbeat interval (s)")
    parser.add_argument("--idle-timeout", type=non_negative_float, default=10.0)
    parser.add_argument("--max-batch", type=positive_int, default=256, metavar="N",
                        help="most publications per transfer to a subscriber and per "
                             "gap-fill answer (default: 256); a source replay's transfers "
                             "take up to 4 times as many while they stay under 256 KiB")
    parser.add_argument("--max-pending", type=positive_int, default=20_000)
    parser.add_argument("--max-message-size", type=positive_int, default=1 << 20, metavar="BYTES",
                        help="most bytes of one incoming message (a publisher's or a request), "
                             "advertised on the links the component receives on; a larger one is "
                             "rejected as it arrives and its link detached with "
                             "amqp:link:message-size-exceeded (default: 1048576, 1 MiB)")
    parser.add_argument("--max-gap-range", type=positive_int, default=10_000)
    parser.add_argument("--link-context-bytes", type=positive_int, default=16 << 20,
                        metavar="BYTES",
                        help="most bytes of frames one link's context keeps for gap fill (older "
                             "gaps repair by source; default: 16 MiB)")
    parser.add_argument("--link-unsent-bytes", type=positive_int, default=4 << 20, metavar="BYTES",
                        help="most bytes sent on one link that its peer has not taken; past it "
                             "the link is paused (default: 4 MiB)")
    parser.add_argument("--connection-bytes", type=positive_int, default=64 << 20,
                        metavar="BYTES",
                        help="most bytes the links of one connection hold, unsent and in "
                             "contexts (default: 64 MiB)")
    parser.add_argument("--principal-bytes", type=positive_int, default=256 << 20,
                        metavar="BYTES",
                        help="most bytes the links of one principal hold (default: 256 MiB)")
    parser.add_argument("--component-bytes", type=positive_int, default=512 << 20,
                        metavar="BYTES",
                        help="most bytes all links together hold (default: 512 MiB)")
    parser.add_argument("--memory-grace", type=positive_float, default=10.0, metavar="SECONDS",
                        help="a link over its bytes this long is detached and its connection "
                             "closed with amqp:resource-limit-exceeded (default: 10)")
    parser.add_argument("--context-retention", type=non_negative_float, default=30.0)
    parser.add_argument("--retain-count", type=positive_int, default=None, metavar="N",
                        help="journal retention: keep the newest N publications per source")
    parser.add_argument("--retain-age", type=positive_float, default=None, metavar="SECONDS",
                        help="journal retention: trim publications older than SECONDS")
    parser.add_argument("--archive", default=None, metavar="DIR",
                        help="export to Parquet under DIR before retention trims")
    parser.add_argument("--retention-interval", type=positive_float, default=60.0,
                        metavar="SECONDS",
                        help="how often retention runs (with --retain-count/--retain-age)")
    parser.add_argument("--drop-rate", type=fraction, default=0.0,
                        help="forced loss: fraction of frames not sent (they are still numbered)")
    parser.add_argument("--drop-seed", type=int, default=None)
    parser.add_argument("--drop-reset-frames", action="store_true",
                        help="forced loss: never send a link's reset frame (link number 0); "
                             "subscribers learn of resets from the attach and SUBSCRIPTION")
    parser.add_argument("--request-rate", type=positive_float, default=500.0,
                        help="requests per second allowed per connection")
    parser.add_argument("--request-burst", type=positive_float, default=1_000.0)
    parser.add_argument("--max-connections", type=positive_int, default=800, metavar="N",
                        help="connections held at once, opened or not; one more is closed at "
                             "once (amqp:resource-limit-exceeded)")
    parser.add_argument("--max-connections-per-principal", type=positive_int, default=100,
                        metavar="N", help="connections of one principal (--grant) at once")
    parser.add_argument("--max-links-per-connection", type=positive_int, default=1_000,
                        metavar="N", help="links one connection may hold attached (a gateway "
                                          "carries all its subscribers' links on one)")
    parser.add_argument("--max-links-per-principal", type=positive_int, default=4_000,
                        metavar="N", help="links the connections of one principal may hold")
    parser.add_argument("--max-sources", type=positive_int, default=100_000, metavar="N",
                        help="sources the component keeps (those its journal holds included); "
                             "a publication of a new one past it is refused "
                             "(amqp:resource-limit-exceeded)")
    parser.add_argument("--max-sources-per-principal", type=positive_int, default=10_000,
                        metavar="N", help="new sources one principal may bring, counted across "
                                          "restarts (the journal records who brought each); a "
                                          "publication of another is refused")
    parser.add_argument("--open-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                        help="a connection that has not completed the AMQP open (and SASL) "
                             "this long after it was accepted is closed")
    parser.add_argument("--repair-turn", type=positive_float, default=0.01, metavar="SECONDS",
                        help="event-loop time one repair turn may take (journal reads and "
                             "encoding for replays and resends, round-robin by connection) "
                             "before live delivery and other peers are served (default 0.01)")
    parser.add_argument("--replay-page", type=positive_int, default=1_000, metavar="N",
                        help="journal entries a replay reads per step, sent or skipped by the "
                             "link's filters: one step of a repair turn (default 1000)")
    parser.add_argument("--replay-cache-bytes", type=non_negative_int, default=64 << 20,
                        metavar="BYTES",
                        help="most bytes of recently fanned-out publications kept encoded, "
                             "so a source replay of recent history sends them without reading "
                             "the journal (0: none; default: 64 MiB)")
    parser.add_argument("--max-replays-per-connection", type=positive_int, default=16,
                        metavar="N",
                        help="source replays one connection may have in progress; a "
                             "SOURCE-GAP-REQUEST past it is rejected "
                             "amqp:resource-limit-exceeded (default 16; a gateway's one "
                             "connection carries all its subscribers' replays)")
    parser.add_argument("--max-replays-per-principal", type=positive_int, default=64,
                        metavar="N",
                        help="source replays all connections of one principal may have in "
                             "progress (default 64)")
    parser.add_argument("--policy", metavar="FILE",
                        help="the access policy (TOML, or JSON when FILE ends in .json): who may "
                             "publish, subscribe, attach to queues, manage subscriptions and "
                             "list topics; reloaded on SIGHUP (a bad file keeps the policy in "
                             "force). Without one every principal may do everything but admin")
    parser.add_argument("--grant", action="append", default=[],
                        metavar="PRINCIPAL=TOKENS[;deny=TOKENS]",
                        help="permission tokens of one principal on topic-pattern links "
                             "(repeatable; tokens comma-separated, '*' = every token; deny "
                             "exceptions win). PRINCIPAL is the identity the connection proved "
                             "(the SCRAM user, or the client certificate's subject with "
                             "EXTERNAL; 'anonymous' with --allow-anonymous), never the client's "
                             "container id. A "
                             "subscriber's seqrepair-permtokens link property may only narrow "
                             "its grant, never widen it")
    parser.add_argument("--default-grant", default="", metavar="TOKENS[;deny=TOKENS]",
                        help="the grant of every principal without a --grant (default: none, "
                             "only publications without a permission token are visible)")
    parser.add_argument("--ready-file", help="write the listen address here once listening")


def _max_hops(text: str) -> int:
    value = positive_int(text)
    if value > MAX_HOPS_LIMIT:
        raise argparse.ArgumentTypeError(f"at most {MAX_HOPS_LIMIT}, got {value}")
    return value


def add_hop_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--hop-id`` and ``--max-hops`` (WIRE.md "Hops, paths and loops")."""
    parser.add_argument("--hop-id", metavar="ID",
                        help=f"this {what}'s identity on the seqrepair-path of attaches, "
                             "named in loop and hop-limit errors; unique among the "
                             "components, gateways and relays that may forward to each other "
                             "(default: NAME@HOST:PORT~random, new each start)")
    parser.add_argument("--max-hops", type=_max_hops, default=8, metavar="N",
                        help="most gateways and relays an attach may cross (1..255); a longer "
                             "path is refused seqrepair:hop-limit-exceeded, a path holding "
                             "this process twice seqrepair:relay-loop (default 8)")


def _gateway(args: argparse.Namespace) -> int:
    return run_body(args, "seqrepair.amqp.gateway.gatewaycmd:gateway_command", "proton")


def _relay(args: argparse.Namespace) -> int:
    return run_body(args, "seqrepair.amqp.relay.relaycmd:relay_command", "proton", "redis")


def _publish(args: argparse.Namespace) -> int:
    journal = ("redis",) if args.redis_url or args.broker else ()
    return run_body(args, "seqrepair.amqp.client.publishcmd:publish_command", "proton", *journal)


def _contribute(args: argparse.Namespace) -> int:
    return run_body(args, "seqrepair.amqp.client.contributecmd:contribute_command", "proton")


def _subscribe(args: argparse.Namespace) -> int:
    journal = ("redis",) if args.broker else ()  # only brokered mode reads the journal
    return run_body(args, "seqrepair.amqp.client.subscribecmd:subscribe_command", "proton",
                    *journal)


def _capabilities(args: argparse.Namespace) -> int:
    return run_body(args, "seqrepair.amqp.commands:capabilities", "proton")


def capabilities(args: argparse.Namespace) -> int:
    """``seqrepair capabilities``: the component's answer as one JSON object."""
    import json

    import attrs

    from seqrepair.amqp.client.query import query_capabilities
    from seqrepair.amqp.wire.security import ClientSecurity

    caps = query_capabilities(args.url, timeout=args.timeout,
                              security=ClientSecurity.from_args(args))
    print(json.dumps(attrs.asdict(caps), sort_keys=True))
    return 0
