"""A world of real processes for end-to-end checks of exactly-once delivery over AMQP.

:class:`World` starts a private redis-server and ``seqrepair serve`` (link width, forced loss,
heartbeat and drop seed as asked), then subscribers of several kinds:

- ``cli``: ``python -m seqrepair.cli subscribe`` as a process, its JSON lines read from its
  stdout as they come (unbuffered), its statistics from ``--stats-file`` once SIGTERM stops it;
- ``library``: :class:`seqrepair.amqp.client.Subscriber` in this process;
- ``rest``: a subscription made with ``POST /subscriptions`` (a topic pattern and a ``basic``
  filter on the source) and read by a ``cli`` subscriber attached to its queue;

and publishers of two kinds, each journaling to the world's Redis before it sends:

- ``library``: :class:`seqrepair.amqp.client.Publisher` in a thread, bursts of
  ``publish_many`` at full speed with a pause between bursts;
- ``cli``: ``seqrepair publish --file --redis-url``, everything at full speed.

The oracle is the journal: once every publisher is done, each subscriber must have received
exactly what it selects from the journal (its topic pattern, and its filter), each publication
once, in per-source order, with no ``Unrecoverable`` and (CLI) exit status 0.
:meth:`World.verdict` lists every way a subscriber's result differs from that, with the numbers
(delivered, missing, duplicated, the stub's statistics, the component's counters) needed to act
on a failure.
"""

from __future__ import annotations

import contextlib
import http.client
import inspect
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.core.topics import TopicPattern
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, FreePort, _env

TOPICS = (
    "/weather/wind/LEMD",
    "/weather/wind/LFPG",
    "/weather/rain/LFPG",
    "/flight/IB3166",
    "/ops/status",
)
"""The topics publishers draw from."""

PATTERNS = ("/weather/#", "/weather/wind/*", "/#/LFPG", "/flight/*", "/ops/status")
"""Narrower topic patterns subscribers draw from (``/#`` is always there as well)."""


@attrs.frozen
class SourcePlan:
    """One publisher: its source, the topic of each publication in order, and how it sends
    them: ``library`` in bursts (sizes summing to ``len(topics)``) with ``pause`` seconds
    between them, or ``cli`` (one ``seqrepair publish --file`` at full speed)."""

    source: str
    topics: tuple[str, ...]
    bursts: tuple[int, ...]
    pause: float = 0.0
    via: str = "library"

    def rows(self) -> list[tuple[str, dict[str, Any], str]]:
        return [(topic, {"n": n}, "update") for n, topic in enumerate(self.topics, 1)]

    def describe(self) -> str:
        counts = Counter(self.topics)
        return (f"{self.source} via {self.via}: {len(self.topics)} in bursts "
                f"{list(self.bursts)} pause {self.pause:g} s, topics {dict(counts)}")

    def __repr__(self) -> str:  # what a falsifying example prints: the shape, not every topic
        return f"SourcePlan<{self.describe()}>"


@attrs.frozen
class SubscriberPlan:
    """One subscriber: ``via`` ``cli``, ``library`` or ``rest``; its topic ``pattern``; for
    ``rest`` optionally the one ``source`` its subscription's filter lets through; ``bits``
    a link width given by hand that may disagree with the component's."""

    name: str
    pattern: str
    via: str = "cli"
    source: str | None = None
    bits: int | None = None
    """``--bits`` given by hand (``cli``), None: the world's link width."""
    ack: bool = True
    """False: a ``library`` subscriber that does not opt in to the component's window (as a
    plain AMQP client): the component may run past what its link numbers can tell apart,
    so it must deliver exactly once in order *or* name what it lost in an Unrecoverable."""

    def selects(self, pub: Publication) -> bool:
        if self.source is not None and pub.source != self.source:
            return False
        return TopicPattern(self.pattern).matches(pub.topic)


@attrs.define
class Received:
    """What one subscriber delivered, and how it ended."""

    plan: SubscriberPlan
    records: list[tuple[str, int, str]] = attrs.Factory(list)  # (source, source_seq, topic)
    stats: dict[str, Any] | None = None
    exit_code: int | None = None
    unrecoverable: list[str] = attrs.Factory(list)
    error: str | None = None


class _CliSubscriber:
    """``seqrepair subscribe`` as a process; its stdout (JSON lines) read by a thread."""

    def __init__(self, world: World, plan: SubscriberPlan, address: str) -> None:
        self.received = Received(plan)
        base = world.base
        self.stats_file = base / f"sub-{plan.name}.stats.json"
        ready = base / f"sub-{plan.name}.ready"
        self.log = open(base / f"sub-{plan.name}.log", "wb")  # noqa: SIM115
        env = _env()
        env["PYTHONUNBUFFERED"] = "1"  # each line reaches the pipe as it is written
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "seqrepair.cli", "--log-level", "warning", "subscribe",
             "--url", world.component.url, "--address", address, "--link-name",
             f"{world.tag}-{plan.name}", "--bits", str(plan.bits or world.bits), "--heartbeat",
             str(world.heartbeat), "--stats-file", str(self.stats_file), "--ready-file",
             str(ready)],
            env=env, stdout=subprocess.PIPE, stderr=self.log,
        )
        self.ready = ready
        self.terminated = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def wait_ready(self, timeout: float = 30.0, *, must_attach: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                if not must_attach:
                    return  # stop() collects its exit status and error
                raise RuntimeError(
                    f"subscriber {self.received.plan.name} exited: {self.log_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"subscriber {self.received.plan.name} did not attach: {self.log_text()}")
            time.sleep(0.02)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            record = json.loads(line)
            self.received.records.append(
                (record["source"], record["source_seq"], record["topic"]))

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def terminate(self) -> None:
        """SIGTERM, once (a second one may land after its handler is gone, mid-exit)."""
        if not self.terminated and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.terminated = True

    def stop(self) -> Received:
        self.terminate()
        try:
            self.received.exit_code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.received.exit_code = self.proc.wait(10)
            self.received.error = "did not stop within 20 s of SIGTERM (killed)"
        self.reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()
        if self.stats_file.exists():
            stats = json.loads(self.stats_file.read_text())
            self.received.unrecoverable = list(stats.pop("unrecoverable_events", []))
            self.received.stats = stats
        text = Path(self.log.name).read_text(errors="replace")
        errors = [line for line in text.splitlines()
                  if "seqrepair subscribe:" in line or "Traceback" in line]
        if errors and self.received.error is None:
            self.received.error = " | ".join(errors[-5:])[:1000]
        return self.received


class _LibrarySubscriber:
    """:class:`Subscriber` in this process."""

    def __init__(self, world: World, plan: SubscriberPlan) -> None:
        self.received = Received(plan)
        records = self.received.records
        options: dict[str, Any] = {}
        if not plan.ack and "ack" in inspect.signature(Subscriber).parameters:
            options["ack"] = False  # a client without the window never sends ACK anyway
        self.sub = Subscriber(
            world.component.url, plan.pattern, link_name=f"{world.tag}-{plan.name}",
            bits=world.bits, heartbeat_interval=world.heartbeat,
            on_publication=lambda p: records.append((p.source, p.source_seq, p.topic)),
            **options,
        ).start()

    def wait_ready(self, timeout: float = 30.0, *, must_attach: bool = True) -> None:
        if not self.sub.wait_connected(timeout) and must_attach:
            raise RuntimeError(f"library subscriber {self.received.plan.name} did not attach")

    def terminate(self) -> None:
        pass  # stop() stops it: it is in this process

    def stop(self) -> Received:
        self.sub.stop()
        self.received.stats = self.sub.stats().as_dict()
        self.received.unrecoverable = [str(u) for u in self.sub.unrecoverable]
        if self.sub.error is not None:
            self.received.error = str(self.sub.error)
        return self.received


class World:
    """Redis, the component and the clients of one example; a context manager that stops
    every process it started."""

    def __init__(
        self, base: Path, *, bits: int, loss: float, drop_seed: int, heartbeat: float = 0.2,
        rest: bool = False, tag: str = "w", extra: Sequence[str] = (),
    ) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.bits = bits
        self.loss = loss
        self.heartbeat = heartbeat
        self.tag = tag
        self.rest_port = FreePort() if rest else None  # drawn again if taken before bound
        self._stack = contextlib.ExitStack()
        self.redis = EmbeddedRedis(data_dir=base / "redis", appendfsync="everysec")
        args: list[str | FreePort] = ["--link-bits", str(bits), "--heartbeat", str(heartbeat),
                                      "--drop-seed", str(drop_seed), *extra]
        if loss:
            args += ["--drop-rate", str(loss)]
        if self.rest_port is not None:
            args += ["--rest", self.rest_port]
        self.component_args = args
        self.component: ComponentProcess
        self.subscribers: list[_CliSubscriber | _LibrarySubscriber] = []
        self.results: list[Received] = []
        self.publish_failures: list[str] = []

    # --- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> World:
        self._stack.enter_context(self.redis.start())
        self.redis_url = self.redis.url
        self.component = ComponentProcess(self.redis_url, self.base, *self.component_args)
        self._stack.callback(self.component.stop)
        self.component.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for sub in self.subscribers:
            with contextlib.suppress(Exception):
                sub.stop()
        self.subscribers.clear()
        self._stack.close()

    # --- subscribers --------------------------------------------------------------------

    def subscribe(self, plans: Sequence[SubscriberPlan], *, must_attach: bool = True) -> None:
        """Start the subscribers together; return once every link is attached (or, with
        ``must_attach`` False, once each is attached or has exited)."""
        started: list[_CliSubscriber | _LibrarySubscriber] = []
        for plan in plans:
            if plan.via == "library":
                started.append(_LibrarySubscriber(self, plan))
                continue
            address = plan.pattern
            if plan.via == "rest":
                address = self._rest_subscription(plan)
            started.append(_CliSubscriber(self, plan, address))
        self.subscribers.extend(started)
        for sub in started:
            sub.wait_ready(must_attach=must_attach)

    def cut_later(self, name: str, delay: float) -> threading.Timer:
        """Cut the connection of library subscriber ``name`` ``delay`` seconds from now
        (abruptly, both directions: it reconnects and resumes its link)."""
        (sub,) = [s for s in self.subscribers
                  if isinstance(s, _LibrarySubscriber) and s.received.plan.name == name]
        timer = threading.Timer(delay, sub.sub.drop_connection)
        timer.daemon = True
        timer.start()
        self._stack.callback(timer.cancel)
        return timer

    def _rest_subscription(self, plan: SubscriberPlan) -> str:
        assert self.rest_port is not None, "World(rest=True) serves the REST API"
        body: dict[str, Any] = {"topic": plan.pattern}
        if plan.source is not None:
            body["filters"] = [{"dialect": "basic", "type": "exact", "property": "source",
                                "value": plan.source}]
        conn = http.client.HTTPConnection("127.0.0.1", self.rest_port.number, timeout=10)
        try:
            conn.request("POST", "/subscriptions", body=json.dumps(body).encode(),
                         headers={"Content-Type": "application/json",
                                  "Accept": "application/json"})
            response = conn.getresponse()
            made = json.loads(response.read())
        finally:
            conn.close()
        if response.status != 201:
            raise RuntimeError(f"POST /subscriptions answered {response.status}: {made}")
        return str(made["queue"])

    # --- publishers ---------------------------------------------------------------------

    def publish(self, plans: Sequence[SourcePlan], timeout: float = 120.0) -> None:
        """Run every publisher at once and wait until each has everything accepted (a
        failure is kept in :attr:`publish_failures`, and is part of the verdict)."""
        runs: list[Callable[[], None]] = []
        for plan in plans:
            runs.append(self._cli_publisher(plan, timeout) if plan.via == "cli"
                        else self._library_publisher(plan, timeout))
        self.join(self.start(runs), timeout + 30)

    @staticmethod
    def start(runs: Sequence[Callable[[], None]]) -> list[threading.Thread]:
        """Each publisher run in a thread of its own, started at once."""
        threads = [threading.Thread(target=run, daemon=True) for run in runs]
        for thread in threads:
            thread.start()
        return threads

    def join(self, threads: Sequence[threading.Thread], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self.publish_failures.append(f"a publisher did not finish in {timeout:g} s")

    def _library_publisher(self, plan: SourcePlan, timeout: float) -> Callable[[], None]:
        def run() -> None:
            rows = plan.rows()
            journal = Journal.from_url(self.redis_url)
            try:
                with Publisher(self.component.url, plan.source, journal=journal) as publisher:
                    first = 0
                    for i, size in enumerate(plan.bursts):
                        if i and plan.pause:
                            time.sleep(plan.pause)
                        publisher.publish_many(rows[first : first + size])
                        first += size
                    if not publisher.flush(timeout):
                        self.publish_failures.append(
                            f"{plan.source}: flush failed, accepted {publisher.accepted}, "
                            f"error {publisher.error}")
            except Exception as exc:  # reported in the verdict, with the rest
                self.publish_failures.append(f"{plan.source}: {exc!r}")
            finally:
                journal.close()
        return run

    def _cli_publisher(self, plan: SourcePlan, timeout: float) -> Callable[[], None]:
        path = self.base / f"pub-{plan.source}.jsonl"
        path.write_text("".join(
            json.dumps({"topic": topic, "fields": fields, "ptype": ptype}) + "\n"
            for topic, fields, ptype in plan.rows()))
        return self.cli_publisher(plan.source, ["--file", str(path)], timeout)

    def cli_publisher(self, source: str, load: Sequence[str], timeout: float
                      ) -> Callable[[], None]:
        """A run of ``seqrepair publish --redis-url`` with ``load`` (``--file`` or
        ``--count``/``--rate``/``--topics``); a non-zero exit is a publish failure."""
        def run() -> None:
            done = subprocess.run(
                [sys.executable, "-m", "seqrepair.cli", "--log-level", "warning", "publish",
                 "--url", self.component.url, "--source", source, "--redis-url",
                 self.redis_url, *load, "--timeout", str(timeout)],
                env=_env(), capture_output=True, timeout=timeout + 30, check=False,
            )
            if done.returncode != 0:
                self.publish_failures.append(
                    f"{source}: seqrepair publish exited {done.returncode}: "
                    f"{done.stdout.decode(errors='replace')[-300:]} "
                    f"{done.stderr.decode(errors='replace')[-500:]}")
        return run

    # --- the end ------------------------------------------------------------------------

    def journaled(self) -> dict[str, list[Publication]]:
        """Everything the journal holds, per source, in order."""
        journal = Journal.from_url(self.redis_url)
        try:
            return {source: list(journal.iter_range(source, 1)) for source in journal.sources()}
        finally:
            journal.close()

    def expected(self, plan: SubscriberPlan, journaled: dict[str, list[Publication]]
                 ) -> list[tuple[str, int, str]]:
        return [(p.source, p.source_seq, p.topic) for pubs in journaled.values() for p in pubs
                if plan.selects(p)]

    def settle(self, journaled: dict[str, list[Publication]], *, timeout: float,
               stall: float, linger: float = 1.0) -> str:
        """Wait until every subscriber has at least as many publications as it selects,
        then ``linger`` seconds more (a duplicate would arrive then); give up when nobody
        short of its count has received anything for ``stall`` seconds, or after
        ``timeout``. Returns how it ended ("complete", "stalled ...", "timed out ...")."""
        wanted = [len(self.expected(s.received.plan, journaled)) for s in self.subscribers]
        start = last_progress = time.monotonic()
        seen = [len(s.received.records) for s in self.subscribers]
        how = "complete"
        while True:
            counts = [len(s.received.records) for s in self.subscribers]
            now = time.monotonic()
            if all(c >= w for c, w in zip(counts, wanted, strict=True)):
                break
            if any(c > p and c < w for c, p, w in zip(counts, seen, wanted, strict=True)):
                last_progress = now
            seen = counts
            if now - last_progress > stall:
                how = f"stalled: nothing new for {stall:g} s after {now - start:.1f} s"
                break
            if now - start > timeout:
                how = f"timed out after {timeout:g} s"
                break
            time.sleep(0.1)
        time.sleep(linger)
        return how

    def stop_subscribers(self) -> list[Received]:
        for sub in self.subscribers:
            sub.terminate()  # all at once: each writes its statistics as it ends
        self.results = [sub.stop() for sub in self.subscribers]
        self.subscribers.clear()
        return self.results

    def component_counters(self) -> str:
        """The component's "component stopped" line (its counters) after the last errors it
        logged, if any; stops it for that."""
        stopped = self.component.stopped_lines()
        errors = [line for line in self.component.log_text().splitlines()
                  if "Traceback" in line or "Error" in line]
        return " | ".join([*errors[-3:], *stopped])[:1500]

    def verdict(self, journaled: dict[str, list[Publication]]) -> list[str]:
        """Every way a subscriber's result differs from exactly once, in order, with
        nothing unrecoverable (empty: all exact)."""
        problems = list(self.publish_failures)
        for got in self.results:
            problems.extend(check(got, self.expected(got.plan, journaled)))
        return problems


def check(got: Received, expected: list[tuple[str, int, str]]) -> list[str]:
    """How ``got`` differs from ``expected`` (compared per source, in order)."""
    name = f"{got.plan.name} ({got.plan.via} {got.plan.pattern}"
    name += f" source={got.plan.source})" if got.plan.source else ")"
    problems: list[str] = []
    records = got.records
    per_source_got: dict[str, list[tuple[int, str]]] = {}
    for source, seq, topic in records:
        per_source_got.setdefault(source, []).append((seq, topic))
    per_source_want: dict[str, list[tuple[int, str]]] = {}
    for source, seq, topic in expected:
        per_source_want.setdefault(source, []).append((seq, topic))
    if not got.plan.ack:
        return problems + _check_no_silent_loss(got, name, per_source_got, per_source_want)
    if per_source_got != per_source_want:
        counts = Counter((s, q) for s, q, _ in records)
        dups = sum(n - 1 for n in counts.values() if n > 1)
        wanted = {(s, q) for s, q, _ in expected}
        missing = sorted(wanted - counts.keys())
        extra = sorted(counts.keys() - wanted)
        disorder = [s for s, seqs in per_source_got.items()
                    if [q for q, _ in seqs] != sorted(q for q, _ in seqs)]
        problems.append(
            f"{name}: delivered {len(records)} of {len(expected)} "
            f"(distinct {len(counts)}, duplicates {dups}, missing {len(missing)} "
            f"first {missing[:5]}, not selected {len(extra)} {extra[:5]}, "
            f"out of order in {disorder}); stats {got.stats}")
    unrecoverable = (got.stats or {}).get("unrecoverable", 0)
    lost = {(s, q) for s, q, _ in expected} - {(s, q) for s, q, _ in records}
    if lost and not unrecoverable and not got.unrecoverable:
        problems.append(f"{name}: lost {len(lost)} silently (unrecoverable 0, exit status "
                        f"{got.exit_code})")
    if got.unrecoverable or unrecoverable:
        problems.append(f"{name}: unrecoverable {got.unrecoverable[:5]} (nothing was lost: "
                        f"the journal holds every publication); stats {got.stats}")
    if got.exit_code not in (None, 0):
        problems.append(f"{name}: exit status {got.exit_code}")
    if got.error is not None:
        problems.append(f"{name}: error {got.error}")
    if got.stats is None:
        problems.append(f"{name}: no statistics (the subscriber did not end cleanly)")
    return problems



def _check_no_silent_loss(got: Received, name: str,
                          per_source_got: dict[str, list[tuple[int, str]]],
                          per_source_want: dict[str, list[tuple[int, str]]]) -> list[str]:
    """A subscriber without the window: what it delivered is its selection's, once, in
    per-source order; anything missing is owned up to (an Unrecoverable, counted)."""
    problems: list[str] = []
    missing = 0
    for source in per_source_got.keys() | per_source_want.keys():
        have = per_source_got.get(source, [])
        want = per_source_want.get(source, [])
        wanted = set(want)
        if [x for x in have if x not in wanted]:
            problems.append(f"{name}: {source}: delivered what it does not select "
                            f"{[x for x in have if x not in wanted][:5]}")
        if len(set(have)) != len(have) or have != sorted(have):
            problems.append(f"{name}: {source}: duplicates or out of order ({len(have)} "
                            f"delivered, {len(set(have))} distinct)")
        missing += len(wanted - set(have))
    unrecoverable = (got.stats or {}).get("unrecoverable", 0)
    if missing and not unrecoverable:
        problems.append(f"{name}: lost {missing} of {sum(map(len, per_source_want.values()))} "
                        f"silently (unrecoverable 0, exit status {got.exit_code}); stats "
                        f"{got.stats}")
    if got.unrecoverable and not unrecoverable:  # (the counter counts link numbers, not events)
        problems.append(f"{name}: {len(got.unrecoverable)} Unrecoverable events "
                        f"{got.unrecoverable[:3]} but the counter says 0")
    if got.error is not None:
        problems.append(f"{name}: error {got.error}")
    if got.stats is None:
        problems.append(f"{name}: no statistics (the subscriber did not end cleanly)")
    return problems
