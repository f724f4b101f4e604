"""The publisher and subscriber processes of ``bench_peers.py``, one system each.

Run by the benchmark, never by hand: ``python benchmarks/peer_clients.py ROLE SYSTEM URL ...``
(see :func:`main`). A client prints one JSON line ``{"ready": ...}`` once it is connected (or
imported, for a catch-up subscriber: connecting is part of catching up), waits for a line on
stdin (the go), does its work and prints one JSON line ``{"result": ...}``.

Systems: ``seqrepair`` (the library ``Publisher`` journaling to Redis and a durable
``Subscriber``), ``jetstream`` (nats-py: stream ``PEERS`` on file storage, a durable push
consumer with ``AckPolicy.ALL``) and ``streams`` (redis-py: ``XADD`` / ``XREAD`` on one
stream). Every publication carries ``{"n": 1..N, "t": time.time() at the publish call, "pad":
...}``; the subscriber checks exactness with :class:`Exactness` (1..N, once each, in order).

CPU: each client reports its own user+system seconds (``resource.getrusage(RUSAGE_SELF)``, all
threads) over its work only, from the go to its last delivery (subscriber) or to its flush
(publisher): interpreter start-up and imports are left out for every system alike.

Only the standard library is imported at module level, so the tests can import
:class:`Exactness` without any client library.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import threading
import time
from typing import Any

SUBJECT = "peers.a"  # JetStream
STREAM = "PEERS"
DURABLE = "peers"
TOPIC = "/peers/a"  # seqrepair
REDIS_STREAM = "peers"
BATCH = 256  # publications per publish_many / pipeline; JetStream's async window is its own
GRACE = 0.3  # seconds a subscriber keeps listening after the N-th delivery, for late extras


class Exactness:
    """Checks that the numbers seen are exactly 1..N, each once, in order.

    Streaming: constant memory, one comparison per number. ``exact(n)`` is true only when the
    numbers seen were 1, 2, ..., n and nothing else.
    """

    def __init__(self) -> None:
        self.count = 0  # numbers seen, extras included
        self.next = 1  # the number expected next
        self.duplicates = 0  # at or below one already passed
        self.skipped = 0  # numbers jumped over (a later one came first)
        self.first_wrong: tuple[int, int] | None = None  # (position, number) of the first fault

    def see(self, number: int) -> None:
        """One delivery, in the order delivered."""
        self.count += 1
        if number == self.next:
            self.next += 1
            return
        if self.first_wrong is None:
            self.first_wrong = (self.count, number)
        if number < self.next:
            self.duplicates += 1
        else:
            self.skipped += number - self.next
            self.next = number + 1

    def exact(self, n: int) -> bool:
        """Whether exactly 1..n were seen, once each, in order."""
        return self.count == n and self.next == n + 1 and self.first_wrong is None

    def report(self, n: int) -> dict[str, Any]:
        """The verdict and its counters, for the JSON result."""
        return {"exact": self.exact(n), "seen": self.count, "through": self.next - 1,
                "duplicates": self.duplicates, "skipped": self.skipped,
                "first_wrong": self.first_wrong}


def cpu_now() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def say(**record: Any) -> None:
    print(json.dumps(record), flush=True)


def wait_go() -> None:
    if sys.stdin.readline() == "":
        raise SystemExit("the benchmark went away before the go")


def payload_fields(n: int, pad: str) -> dict[str, Any]:
    return {"n": n, "t": time.time(), "pad": pad}


class Receipt:
    """What a subscriber records: exactness, the last delivery's time and, for the latency
    workload, publish-call-to-delivery latency of every delivery."""

    def __init__(self, n: int, latencies: bool) -> None:
        self.n = n
        self.check = Exactness()
        self.latencies: list[float] | None = [] if latencies else None
        self.last = 0.0
        self.done = threading.Event()

    def got(self, number: int, sent: float) -> None:
        now = time.time()
        self.check.see(number)
        if self.latencies is not None:
            self.latencies.append(now - sent)
        if self.check.count == self.n:
            self.last = now
            self.done.set()

    def result(self, go: float, cpu: float, **extra: Any) -> dict[str, Any]:
        out = {"go": go, "last": self.last, "cpu_s": cpu, **self.check.report(self.n), **extra}
        if self.latencies is not None:
            out["latencies"] = self.latencies
        return out


# --- seqrepair ---------------------------------------------------------------------------

def seqrepair_sub(args: argparse.Namespace) -> None:
    from seqrepair.amqp.client.subscriber import Subscriber

    receipt = Receipt(args.n, args.mode == "latency")

    def on_pub(pub: Any) -> None:
        receipt.got(pub.fields["n"], pub.fields["t"])

    def make() -> Subscriber:
        # durable: the position the component keeps under the link name is what a user
        # relies on to catch up after being away (JetStream: a durable consumer)
        return Subscriber(args.url, "/peers/#", link_name="peers-sub", durable=True,
                          on_publication=on_pub)

    if args.mode == "prepare":  # the first attach makes the position: nothing owed yet
        sub = make().start()
        ok = sub.wait_connected(20)
        time.sleep(0.3)  # the durable's position is written before the attach is answered
        sub.stop()
        say(result={"prepared": ok})
        return
    if args.mode == "catchup":
        say(ready=True)
        wait_go()
        go, cpu = time.time(), cpu_now()
        sub = make().start()
    else:
        sub = make().start()
        if not sub.wait_connected(20):
            raise SystemExit("seqrepair subscriber: not connected in 20 s")
        say(ready=True)
        wait_go()
        go, cpu = time.time(), cpu_now()
    receipt.done.wait(args.timeout)
    cpu = cpu_now() - cpu
    time.sleep(GRACE)
    sub.stop()
    say(result=receipt.result(go, cpu, stats=sub.stats().as_dict()))


def seqrepair_pub(args: argparse.Namespace) -> None:
    from seqrepair.amqp.client.subscriber import Publisher
    from seqrepair.journal.journal import Journal

    publisher = Publisher(args.url, "peers", address="/peers/#",
                          journal=Journal.from_url(args.redis_url), max_batch=BATCH).start()
    deadline = time.monotonic() + 20
    # no public "connected" on the publisher: wait for its sender link's credit, so the
    # connect is not inside the timed window (the other systems connect before ready too)
    while getattr(publisher._sender, "credit", 0) <= 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    say(ready=True)
    wait_go()
    cpu = cpu_now()
    pad = "x" * args.pad
    first = time.time()
    report: dict[str, Any] = {}
    if args.mode == "latency":  # one publish() per record: journaled, then sent
        pace = Pacer(args.rate)
        for i in range(1, args.n + 1):
            pace.wait(i)
            publisher.publish(TOPIC, payload_fields(i, pad))
        pace.done()
        report = pace.report()
    else:
        for start in range(1, args.n + 1, BATCH):
            stop = min(args.n + 1, start + BATCH)
            publisher.publish_many([(TOPIC, payload_fields(i, pad), "update")
                                    for i in range(start, stop)])
    ok = publisher.close(timeout=args.timeout)
    say(result={"first": first, "flushed": ok, "cpu_s": cpu_now() - cpu,
                "accepted": publisher.accepted, **report})


# --- NATS JetStream ----------------------------------------------------------------------

def jetstream_sub(args: argparse.Namespace) -> None:
    import asyncio

    asyncio.run(_jetstream_sub(args))


async def _jetstream_consumer(js: Any) -> None:
    """The stream (file storage, the defaults) and a durable push consumer from the start."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    await js.add_stream(name=STREAM, subjects=["peers.>"])
    await js.add_consumer(STREAM, ConsumerConfig(
        durable_name=DURABLE, deliver_subject="_peers.deliver", ack_policy=AckPolicy.ALL,
        deliver_policy=DeliverPolicy.ALL))


async def _jetstream_sub(args: argparse.Namespace) -> None:
    import asyncio

    import nats

    receipt = Receipt(args.n, args.mode == "latency")
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        body = json.loads(msg.data)
        receipt.got(body["n"], body["t"])
        # AckPolicy.ALL: one ack covers everything before it; one per BATCH keeps the
        # consumer under its default max_ack_pending (1000)
        if receipt.check.count % BATCH == 0 or receipt.check.count >= args.n:
            await msg.ack()
        if receipt.done.is_set():
            done.set()

    if args.mode == "prepare":
        nc = await nats.connect(args.url)
        await _jetstream_consumer(nc.jetstream())
        await nc.close()
        say(result={"prepared": True})
        return
    if args.mode == "catchup":
        say(ready=True)
        await asyncio.get_running_loop().run_in_executor(None, wait_go)
        go, cpu = time.time(), cpu_now()
        nc = await nats.connect(args.url)
        js = nc.jetstream()
        sub = await js.subscribe(SUBJECT, durable=DURABLE, stream=STREAM, cb=on_msg,
                                 manual_ack=True)
    else:
        nc = await nats.connect(args.url)
        js = nc.jetstream()
        await _jetstream_consumer(js)
        sub = await js.subscribe(SUBJECT, durable=DURABLE, stream=STREAM, cb=on_msg,
                                 manual_ack=True)
        say(ready=True)
        await asyncio.get_running_loop().run_in_executor(None, wait_go)
        go, cpu = time.time(), cpu_now()
    with contextlib.suppress(TimeoutError):  # not all came: the result says it was not exact
        await asyncio.wait_for(done.wait(), args.timeout)
    cpu = cpu_now() - cpu
    await asyncio.sleep(GRACE)
    await sub.unsubscribe()
    await nc.close()
    say(result=receipt.result(go, cpu))


def jetstream_pub(args: argparse.Namespace) -> None:
    import asyncio

    asyncio.run(_jetstream_pub(args))


async def _jetstream_pub(args: argparse.Namespace) -> None:
    import asyncio

    import nats

    nc = await nats.connect(args.url)
    js = nc.jetstream()
    say(ready=True)
    await asyncio.get_running_loop().run_in_executor(None, wait_go)
    cpu = cpu_now()
    pad = "x" * args.pad
    first = time.time()
    acked = 0
    report: dict[str, Any] = {}
    if args.mode == "latency":
        pace = Pacer(args.rate)
        for i in range(1, args.n + 1):
            await pace.async_wait(i)
            await js.publish(SUBJECT, json.dumps(payload_fields(i, pad)).encode())
            acked += 1
        pace.done()
        report = pace.report()
    else:  # the async publish window (publish_async_max_pending, 4000 by default)
        futures = [await js.publish_async(SUBJECT, json.dumps(payload_fields(i, pad)).encode())
                   for i in range(1, args.n + 1)]
        for ack in await asyncio.gather(*futures, return_exceptions=True):
            acked += not isinstance(ack, BaseException)
    await nc.flush()
    cpu = cpu_now() - cpu
    await nc.close()
    say(result={"first": first, "flushed": acked == args.n, "cpu_s": cpu, "accepted": acked,
                **report})


# --- Redis Streams -----------------------------------------------------------------------

def streams_sub(args: argparse.Namespace) -> None:
    import redis

    receipt = Receipt(args.n, args.mode == "latency")
    if args.mode == "prepare":
        say(result={"prepared": True})  # the position is the client's: "0-0", from the start
        return
    say(ready=True)
    wait_go()
    go, cpu = time.time(), cpu_now()
    client = redis.Redis.from_url(args.redis_url)
    last = "0-0"
    deadline = time.monotonic() + args.timeout
    grace_end: float | None = None
    while time.monotonic() < deadline:
        if receipt.done.is_set():
            if grace_end is None:
                cpu = cpu_now() - cpu
                grace_end = time.monotonic() + GRACE
            elif time.monotonic() >= grace_end:
                break
        reply = client.xread({REDIS_STREAM: last}, count=1000, block=100)
        for _stream, entries in reply:
            for entry_id, fields in entries:
                body = json.loads(fields[b"d"])
                receipt.got(body["n"], body["t"])
                last = entry_id
    if grace_end is None:
        cpu = cpu_now() - cpu
    client.close()
    say(result=receipt.result(go, cpu))


def streams_pub(args: argparse.Namespace) -> None:
    import redis

    client = redis.Redis.from_url(args.redis_url)
    client.ping()
    say(ready=True)
    wait_go()
    cpu = cpu_now()
    pad = "x" * args.pad
    first = time.time()
    report: dict[str, Any] = {}
    if args.mode == "latency":
        pace = Pacer(args.rate)
        for i in range(1, args.n + 1):
            pace.wait(i)
            client.xadd(REDIS_STREAM, {"d": json.dumps(payload_fields(i, pad))})
        pace.done()
        report = pace.report()
    else:
        for start in range(1, args.n + 1, BATCH):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(args.n + 1, start + BATCH)):
                pipe.xadd(REDIS_STREAM, {"d": json.dumps(payload_fields(i, pad))})
            pipe.execute()
    cpu = cpu_now() - cpu
    client.close()
    say(result={"first": first, "flushed": True, "cpu_s": cpu, "accepted": args.n, **report})


# --- pacing ------------------------------------------------------------------------------

class Pacer:
    """One publication per 1/rate s on a fixed schedule from the first: a publish that comes
    late does not move the schedule (the next ones go at once until it is caught up)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.behind = 0.0  # the most a publish call started after its slot
        self.end = self.start

    def _delay(self, i: int) -> float:
        delay = self.start + (i - 1) / self.rate - time.monotonic()
        self.behind = max(self.behind, -delay)
        return delay

    def wait(self, i: int) -> None:
        delay = self._delay(i)
        if delay > 0:
            time.sleep(delay)

    async def async_wait(self, i: int) -> None:
        import asyncio

        delay = self._delay(i)
        if delay > 0:
            await asyncio.sleep(delay)

    def done(self) -> None:
        self.end = time.monotonic()

    def report(self) -> dict[str, float]:
        return {"paced_s": self.end - self.start, "max_behind_s": self.behind}


ROLES = {
    ("sub", "seqrepair"): seqrepair_sub, ("pub", "seqrepair"): seqrepair_pub,
    ("sub", "jetstream"): jetstream_sub, ("pub", "jetstream"): jetstream_pub,
    ("sub", "streams"): streams_sub, ("pub", "streams"): streams_pub,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("role", choices=["sub", "pub"])
    parser.add_argument("system", choices=["seqrepair", "jetstream", "streams"])
    parser.add_argument("mode", choices=["throughput", "latency", "catchup", "prepare"])
    parser.add_argument("--url", default="", help="component / nats-server address")
    parser.add_argument("--redis-url", default="", help="the journal's / the stream's Redis")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--pad", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    ROLES[args.role, args.system](args)


if __name__ == "__main__":
    main()
