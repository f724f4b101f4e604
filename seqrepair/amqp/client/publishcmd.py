"""``seqrepair publish`` (component mode) and what it publishes: ``--file`` lines and the
generated ``--count`` load, and brokered mode (``--broker``), which reads the same.

**A journal outage is ridden out.** With ``--redis-url`` every publication is journaled before
it is sent. When Redis does not answer, what was stamped stays queued in the publisher (its
numbers are taken; the publisher journals them once Redis is back, never under other numbers)
and the command tries again after a backoff (50 ms doubled up to 1 s), for as long as
``--timeout`` allows per outage. Only an outage longer than that stops it (exit 1).

**It never misreports.** An append whose answer was lost may have landed: the journal
publisher reads the journal's high-water before it appends again, and the command's last word
on what is not journaled comes from reading it too; when the journal cannot be read, it says
the publications are *not known* to be journaled, not that they are unjournaled.

**--file** (JSON lines ``{topic, fields?, ptype?, permtoken?}``) is read in bounded pieces: a
line longer than :data:`MAX_LINE_BYTES` is an error, not unbounded memory. Lines are
validated as they are read (also against :mod:`seqrepair.core.limits`), and the good lines
before a bad one are published: the command then exits 2 naming the bad line (nothing after it
is sent).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from seqrepair.amqp.wire.backoff import Backoff
from seqrepair.core.errors import InvalidConfigError, InvalidMessageError, SeqRepairError
from seqrepair.core.limits import check_deliverable
from seqrepair.core.messages import PublishType
from seqrepair.core.topics import validate_topic
from seqrepair.journal.errors import (
    JournalError,
    JournalResponseError,
    JournalUnavailableError,
    PublicationQueuedError,
)
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.amqp.client.subscriber import Publisher
    from seqrepair.journal.journal import Journal

log = get_logger(__name__)

MAX_LINE_BYTES = 4 << 20
"""The longest ``--file`` line (4 MiB): a publication takes at most
:data:`~seqrepair.core.limits.MAX_PUBLICATION_SIZE` (512 KiB) encoded, and its JSON text may
take several times that (escapes)."""

Item = tuple[str, dict[str, Any], str, str | None]


def publish_command(args: argparse.Namespace) -> int:
    """``seqrepair publish``: to a component, or through a broker with ``--broker``."""
    if not args.file and not args.count:
        print("seqrepair publish: give --file PATH or --count N", file=sys.stderr)
        return 2
    if args.start_after and (args.redis_url or args.broker):
        print("seqrepair publish: --start-after is for a publisher without a journal; with "
              "--redis-url numbering resumes after the journal's high-water", file=sys.stderr)
        return 2
    if args.broker:
        return publish_brokered(args)
    return publish(args)


def report_error(command: str, error: SeqRepairError | None) -> None:
    """A client stopped by a condition a reconnect cannot cure: say which, on stderr."""
    if error is not None:
        print(f"seqrepair {command}: {error.message}", file=sys.stderr)


def publish_brokered(args: argparse.Namespace) -> int:
    """``seqrepair publish --broker``: journal first, then send through the broker."""
    import random

    from seqrepair.amqp.client.brokered import BrokerPublisher
    from seqrepair.amqp.wire.security import ClientSecurity
    from seqrepair.journal.journal import Journal

    if not args.redis_url:
        print("seqrepair publish --broker needs --redis-url (the journal repairs losses)",
              file=sys.stderr)
        return 2
    rng = random.Random(args.drop_seed)
    drop = (lambda _pub: rng.random() < args.drop_rate) if args.drop_rate > 0 else None
    publisher = BrokerPublisher(args.broker, args.source, Journal.from_url(args.redis_url),
                                address=args.address, bits=args.bits, batch_size=args.batch,
                                drop=drop, security=ClientSecurity.from_args(args)).start()
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
    report_error("publish", publisher.error)
    if not ok and publisher.error is None:
        reach = (f"cannot reach the broker at {args.broker} ({publisher.last_failure})"
                 if publisher.last_failure is not None
                 else f"is a broker listening at {args.broker}?")
        print(f"seqrepair publish: not every publication was accepted in {args.timeout:g} s: "
              f"{reach}", file=sys.stderr)
    return 0 if ok else 1


def publish(args: argparse.Namespace) -> int:
    """``seqrepair publish`` to a component (see the module docstring)."""
    from seqrepair.amqp.client.subscriber import Publisher
    from seqrepair.amqp.wire.errors import PublishRejectedError
    from seqrepair.amqp.wire.security import ClientSecurity
    from seqrepair.journal.journal import Journal

    journal = Journal.from_url(args.redis_url) if args.redis_url else None
    publisher = Publisher(args.url, args.source, bits=args.bits, address=args.address,
                          journal=journal, max_batch=args.batch,
                          start_after=args.start_after,
                          security=ClientSecurity.from_args(args),
                          on_contribution=_contributions(args)).start()
    first = publisher.embedded.published_through if publisher.embedded is not None else 0
    count = 0
    bad: InvalidMessageError | None = None
    outage: JournalError | None = None
    try:
        try:
            for batch in file_items(args):  # as fast as it goes; --rate paces generated load
                if publisher.error is not None:
                    break  # stopped (see below): the rest would only queue
                hand_over(publisher, batch, args.timeout)
                count += len(batch)
            start = time.monotonic()
            for batch in generated_items(args):
                if publisher.error is not None:
                    break
                hand_over(publisher, batch, args.timeout)
                count += len(batch)
                pace(start, count, args.rate)
        except InvalidMessageError as exc:  # a bad line: what came before it goes
            bad = exc
        except JournalError as exc:  # an outage longer than --timeout
            outage = exc
    except BaseException:  # ^C: send what was published before it, then stop
        publisher.close(timeout=5)
        raise
    ok = publisher.close(timeout=args.timeout if outage is None else 1.0)
    record = {"published": count, "accepted": publisher.accepted,
              "rejected": publisher.rejected, "flushed": ok}
    if publisher.embedded is not None:
        record["journaled"] = publisher.embedded.published_through - first
        record["not_journaled"] = publisher.embedded.pending
    print(json.dumps(record))
    error = publisher.error
    if error is not None:
        print(f"seqrepair publish: {error.message}", file=sys.stderr)
    if outage is not None:
        print(f"seqrepair publish: the journal was out for more than {args.timeout:g} s "
              f"(--timeout): stopped after {count} publications were handed over "
              f"({outage.message})", file=sys.stderr)
    unjournaled = None
    if journal is not None and publisher.embedded is not None and publisher.embedded.pending:
        unjournaled = not_journaled(publisher, journal)
        print(f"seqrepair publish: {unjournaled}", file=sys.stderr)
    if isinstance(error, PublishRejectedError) and isinstance(error.expected, int):
        print(f"seqrepair publish: the journal holds {args.source!r} through "
              f"{error.expected - 1}: publish with --redis-url (numbering resumes there) or "
              f"--start-after {error.expected - 1}", file=sys.stderr)
    elif not ok and error is None and unjournaled is None:
        reach = (f"cannot reach a component at {args.url} ({publisher.last_failure})"
                 if publisher.last_failure is not None
                 else f"is a component listening at {args.url}?")
        print(f"seqrepair publish: not every publication was accepted in {args.timeout:g} s: "
              f"{reach}", file=sys.stderr)
    if bad is not None:
        print(f"seqrepair publish: {bad.message}", file=sys.stderr)
        return 2
    return 0 if ok and not publisher.rejected and outage is None else 1


def hand_over(
    publisher: Publisher,
    items: list[Item],
    patience: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """``publisher.publish_many(items)``, riding out a journal outage: what a failed call
    stamped stays queued in the publisher (never handed over again: that would publish it
    twice), the rest is handed over again after a backoff. Raises the journal's error once it
    has been out ``patience`` seconds in a row, and any other error at once."""
    backoff = Backoff(initial=0.05, maximum=1.0)
    rng = random.Random()
    since: float | None = None
    while True:
        try:
            publisher.publish_many(items)
            return
        except PublicationQueuedError as exc:
            items = items[len(exc.stamped):]
            cause: JournalError = exc
            if not items:
                return  # all stamped and queued: the publisher journals them when it can
        except (JournalUnavailableError, JournalResponseError) as exc:  # nothing stamped
            cause = exc
        now = clock()
        if since is None:
            since = now
            log.warning("journal out: publications wait", error=cause.message,
                        waiting=len(items))
        if now - since >= patience:
            raise cause
        delay = backoff.next_delay(rng)
        assert delay is not None  # no max_attempts
        sleep(min(delay, max(0.0, since + patience - now)))


def not_journaled(publisher: Publisher, journal: Journal) -> str:
    """What the command says of the publications its publisher still holds, after reading the
    journal's high-water (an append whose answer was lost may have landed)."""
    embedded = publisher.embedded
    assert embedded is not None
    source = embedded.source
    first = embedded.published_through + 1
    last = first + embedded.pending - 1
    try:
        held = journal.high_water(source)
    except JournalError as exc:
        return (f"{source!r} {first}..{last} are not known to be journaled: the journal could "
                f"not be read to find out ({exc.message}); publishing again with --redis-url "
                f"resumes after what it holds, so nothing is published twice")
    if held >= first:
        return (f"the journal holds {source!r} through {held}: {first}..{min(held, last)} are "
                f"journaled (an append whose answer was lost; the component fans them out from "
                f"the journal)" + (f", {held + 1}..{last} are not" if held < last else ""))
    return f"{source!r} {first}..{last} are not journaled (it holds through {held})"


def _contributions(args: argparse.Namespace) -> Callable[[Any], bool | str] | None:
    """``--contributions``: take each into the stream, or refuse each (None: no link)."""
    choice = getattr(args, "contributions", None)
    if choice is None:
        return None
    if choice == "take":
        return lambda _contribution: True
    return lambda _contribution: "this publisher takes no contributions"


def file_items(args: argparse.Namespace) -> Iterator[list[Item]]:
    """Batches of ``--batch`` items from the JSON lines of ``--file`` (blank lines skipped),
    read in pieces of at most :data:`MAX_LINE_BYTES` + 1 bytes. A bad line raises
    InvalidMessageError naming it, after the batch of the good lines before it is yielded."""
    if not args.file:
        return
    with open(args.file, "rb") as fh:
        batch: list[Item] = []
        number = 0
        while line := fh.readline(MAX_LINE_BYTES + 1):
            number += 1
            try:
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    raise InvalidMessageError(
                        f"longer than {MAX_LINE_BYTES} bytes (a line is one publication)",
                        expected=f"<= {MAX_LINE_BYTES} bytes", got=f"> {MAX_LINE_BYTES}",
                    )
                if line.strip():
                    batch.append(_item(json.loads(line.decode("utf-8"))))
            except (ValueError, RecursionError, SeqRepairError) as exc:  # JSON, UTF-8, limits
                if batch:
                    yield batch  # the good lines before it are published
                text = exc.message if isinstance(exc, SeqRepairError) else str(exc)
                raise InvalidMessageError(
                    f"{args.file} line {number}: {text} (the lines before it are sent, "
                    "none from it on)",
                    expected=getattr(exc, "expected", None), got=number,
                ) from exc
            if len(batch) >= args.batch:
                yield batch
                batch = []
        if batch:
            yield batch


def _item(obj: object) -> Item:
    if not isinstance(obj, dict) or not isinstance(obj.get("topic"), str):
        raise InvalidMessageError("a line is a JSON object with a string topic")
    fields = obj.get("fields", {})
    ptype = obj.get("ptype", "update")
    token = obj.get("permtoken")
    if not isinstance(fields, dict) or not isinstance(ptype, str):
        raise InvalidMessageError("fields is a JSON object and ptype a string")
    if token is not None and not isinstance(token, str):
        raise InvalidMessageError("permtoken is a string")
    validate_topic(obj["topic"])
    PublishType.parse(ptype)
    check_deliverable(obj["topic"], fields, token)
    return obj["topic"], fields, ptype, token


def generated_items(args: argparse.Namespace) -> Iterator[list[Item]]:
    """Batches of the generated load: ``--count`` updates round-robin over ``--topics``."""
    topics = [validate_topic(t) for t in args.topics.split(",") if t]
    if not topics and args.count:
        raise InvalidConfigError("--topics names no topic")
    step = args.batch
    for first in range(0, args.count, step):
        n = min(step, args.count - first)
        yield [(topics[(first + i) % len(topics)], {"n": first + i, "t": time.time()}, "update",
                None) for i in range(n)]


def pace(start: float, count: int, rate: float) -> None:
    """Sleep until ``count`` items at ``rate`` per second since ``start`` are due (0: no pacing)."""
    if rate > 0:
        delay = start + count / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
