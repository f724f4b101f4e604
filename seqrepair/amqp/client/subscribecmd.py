"""``seqrepair subscribe``'s body, component mode and brokered mode (the options are defined in
:mod:`seqrepair.amqp.commands`): deliveries as JSON lines on stdout or ``--output``, the
repair statistics on stderr at the end. With ``--resume`` the output is the position file."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from seqrepair.amqp.client.imagesfile import IMAGES_EVERY, ImagesFile, write_images  # noqa: F401 (re-exported: they lived here)
from seqrepair.amqp.client.publishcmd import report_error
from seqrepair.core.messages import Publication
from seqrepair.readyfile import write_ready


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


UNRECOVERABLE_EXIT = 3
"""``seqrepair subscribe``'s exit status when it stopped as told but publications were
``Unrecoverable`` (lost to it, named on stderr) and not all made good by
``--resync-on-unrecoverable`` (its image requests answered: one refused or given up, named on
stderr and in the statistics' ``images_refused_events``, is not, nor one still unanswered
when the run stopped, ``resyncs_unanswered_events``)."""


def _unanswered(subscriber: Any) -> list[Any]:
    """The image requests ``--resync-on-unrecoverable`` made that were neither answered nor
    given up when the run stopped (still asked again, e.g. rejected for now)."""
    done = {r.request for r in getattr(subscriber, "resyncs", [])}
    done |= {e.request for e in getattr(subscriber, "images_refused", [])}
    return [r for r in getattr(subscriber, "resyncs_asked", []) if r not in done]


def _outcome(subscriber: Any) -> int:
    """0, or :data:`UNRECOVERABLE_EXIT` when losses were not all resynced."""
    resynced = getattr(subscriber, "resynced", None)
    made_good = resynced() if resynced is not None else not subscriber.unrecoverable
    if made_good:
        return 0
    # not worded as an error ("seqrepair subscribe: ..."): the loss is owned up to, named
    refused = getattr(subscriber, "images_refused", [])
    unanswered = _unanswered(subscriber)
    print(f"{len(subscriber.unrecoverable)} Unrecoverable (unrecoverable_events)"
          + (", not all resynced" if getattr(subscriber, "resync_on_unrecoverable", False)
             else "")
          + (f", {len(refused)} image request(s) refused (images_refused_events): "
             + "; ".join(sorted({e.reason for e in refused})) if refused else "")
          + (f", {len(unanswered)} still unanswered at the end (resyncs_unanswered_events)"
             if unanswered else "")
          + f": exit status {UNRECOVERABLE_EXIT}", file=sys.stderr)
    return UNRECOVERABLE_EXIT


def subscribe_command(args: argparse.Namespace) -> int:
    """``seqrepair subscribe``: 0 once it stops as told, 1 when it never connected or a
    condition stopped it, :data:`UNRECOVERABLE_EXIT` when it stopped as told after
    publications were ``Unrecoverable`` and not all resynced."""
    if args.broker:
        return subscribe_brokered(args)
    from seqrepair.amqp.client.subscriber import Subscriber
    from seqrepair.amqp.wire.errors import AmqpAdapterError
    from seqrepair.amqp.wire.security import ClientSecurity

    sink = Sink(args, line_buffered=False)
    subscriber = Subscriber(
        args.url, args.address, link_name=args.link_name, on_publication=sink.write,
        bits=args.bits, heartbeat_interval=args.heartbeat,
        permtokens=[t for t in args.permtokens.split(",") if t], batch=not args.no_batch,
        acknowledge=False,  # taken once flushed to --output (see Sink.flush)
        durable=False if args.no_durable else None,
        security=ClientSecurity.from_args(args),
        overdue_policy=args.on_overdue, on_image=sink.write_image,
        resync_on_unrecoverable=args.resync_on_unrecoverable,
    )
    sink.taken = subscriber.acknowledge if subscriber.durable else None
    sink.began = lambda: subscriber.began
    if args.resume and args.output and Path(args.output).exists():
        sink.written = resume_after(Path(args.output))  # the output is the position file
    if args.ready_file:
        ready_file = Path(args.ready_file)

        def announce() -> None:
            with contextlib.suppress(AmqpAdapterError):  # reported when the subscriber returns
                if subscriber.wait_connected():
                    write_ready(ready_file, args.address)

        threading.Thread(target=announce, name="ready-file", daemon=True).start()
    run_subscriber(subscriber, sink, args)
    report_error("subscribe", subscriber.error)
    if subscriber.error is None and not subscriber.report.connections:
        print(f"seqrepair subscribe: never connected to {args.url}", file=sys.stderr)
        return 1
    return 1 if subscriber.error is not None else _outcome(subscriber)


class Sink:
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
        self._image_lines = False  # image lines written and not yet flushed
        self.images: ImagesFile | None = None
        """The item images of what was delivered (``--images``), written by :meth:`save_images`
        (:mod:`~seqrepair.amqp.client.imagesfile`): begun once :attr:`began` says where the
        subscription started, acknowledgements held until the file holds what they name."""
        if getattr(args, "images", None):
            self.images = ImagesFile(Path(args.images), subscription={
                "link_name": str(getattr(args, "link_name", None) or ""),
                "address": str(getattr(args, "address", None) or "")})
        self.began: Callable[[], tuple[dict[str, int], bool] | None] = lambda: ({}, False)
        """Where the subscription started and whether a durable position was resumed
        (:attr:`~seqrepair.amqp.client.subscriber.Subscriber.began`; brokered mode: from
        nothing kept, so the images start empty)."""
        self.written: dict[str, int] = {}
        self.already_written = 0
        """Per source, the last number the output held when it started (``--resume``):
        deliveries at or below it are in the file already (a restart's repeats)."""

    def _images(self) -> ImagesFile | None:
        """``--images``, begun (loaded or not) once the subscription's start is known."""
        images = self.images
        if images is not None and not images.begun:
            began = self.began()
            if began is None:
                return None
            images.begin(*began)
        return images

    def write(self, pub: Publication) -> None:
        """One delivery as one JSON line (none for one the output holds already)."""
        images = self._images()
        if images is not None:  # first: one the output holds may be past the images file
            images.apply(pub)
        if pub.source_seq <= self.written.get(pub.source, 0):
            self._unflushed[pub.source] = pub.source_seq  # taken: acknowledged with the rest
            self.already_written += 1
            return
        self.out.write(json.dumps(publication_record(pub)) + "\n")
        self._unflushed[pub.source] = pub.source_seq
        self.n += 1
        self.last = time.monotonic()

    def write_image(self, pub: Publication) -> None:
        """An image the subscriber asked for: a line marked ``"image": true`` (its
        ``source_seq`` the number it is current as of; not a position: ``--resume`` and the
        acknowledgements pass it over), and into ``--images``."""
        record = publication_record(pub)
        record["image"] = True
        self.out.write(json.dumps(record) + "\n")
        self._image_lines = True
        self.last = time.monotonic()
        images = self._images()
        if images is not None:
            images.apply_image(pub)

    def save_images(self, force: bool = False) -> None:
        """Write ``--images`` (at most every :data:`IMAGES_EVERY` s unless ``force``; whole:
        a temporary file renamed), then acknowledge what it now holds."""
        images = self._images()
        if images is None:
            return
        taken = images.save(force)
        if taken and self.taken is not None:
            self.taken(taken)

    def flush(self) -> None:
        """Hand what was written to the operating system, then acknowledge it (with
        ``--images``, once the images file holds it too: :meth:`save_images`)."""
        if not self._unflushed:
            if self._image_lines:
                self._image_lines = False
                self.out.flush()
            return
        self.out.flush()
        written, self._unflushed = self._unflushed, {}
        if self.images is not None:
            self.images.hold(written)
        elif self.taken is not None:
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


def run_subscriber(subscriber: Any, sink: Sink, args: argparse.Namespace) -> None:
    """Run until the sink says stop (or SIGTERM / ^C), then report the statistics."""
    # the handler only sets a flag: the subscriber's tick (stop_when) acts on it, in proton's
    # thread, not in the middle of whatever the signal interrupted
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    with contextlib.suppress(KeyboardInterrupt):
        connected = getattr(subscriber, "connected", None)

        def stop() -> bool:
            sink.flush()  # every tick: what the output holds is acknowledged
            done = terminated.is_set() or sink.stop_when(connected is None or connected.is_set())
            sink.save_images(force=done)  # the last acknowledgement goes before the close
            return done

        subscriber.run(stop_when=stop)
    sink.flush()
    sink.save_images(force=True)
    stats: dict[str, Any] = dict(subscriber.stats().as_dict())
    stats["unrecoverable_events"] = [str(u) for u in subscriber.unrecoverable]
    # the resyncs (image requests) given up: what an Unrecoverable above still lacks
    stats["images_refused_events"] = [str(e) for e in getattr(subscriber, "images_refused", [])]
    stats["resyncs_unanswered_events"] = [str(r) for r in _unanswered(subscriber)]
    if args.resume:
        stats["already_written"] = sink.already_written  # repeats --output held already
    if args.stats_file:
        Path(args.stats_file).write_text(json.dumps(stats))
    print(json.dumps(stats), file=sys.stderr)
    if sink.out is not sys.stdout:
        sink.out.close()


# ------------------------------------------------------------------------------ brokered mode


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
            if record.get("image"):
                continue  # an image's number is no position (Sink.write_image)
            after[record["source"]] = max(after.get(record["source"], 0), record["source_seq"])
    return after


def subscribe_brokered(args: argparse.Namespace) -> int:
    """``seqrepair subscribe --broker``: repair per source from the journal at --redis-url."""
    from seqrepair.amqp.client.brokered import BrokerSubscriber
    from seqrepair.amqp.wire.security import ClientSecurity
    from seqrepair.journal.journal import Journal

    if not args.redis_url:
        print("seqrepair subscribe --broker needs --redis-url (the repair authority)",
              file=sys.stderr)
        return 2
    # a broker's links have no component behind them: no image requests, no link probes
    unsupported = [option for option, given in (
        ("--resync-on-unrecoverable", args.resync_on_unrecoverable),
        (f"--on-overdue {args.on_overdue}", args.on_overdue != "request"),
    ) if given]
    if unsupported:
        print(f"seqrepair subscribe --broker: {', '.join(unsupported)} needs a component "
              "(no broker answers image requests or link probes)", file=sys.stderr)
        return 2
    start_after = None
    if args.resume and args.output and Path(args.output).exists():
        start_after = resume_after(Path(args.output))
    # line-buffered: what a crash leaves in the file is whole lines, and --resume reads them
    sink = Sink(args, line_buffered=True)
    subscriber = BrokerSubscriber(
        args.broker, args.address, Journal.from_url(args.redis_url), start_after=start_after,
        topics=[t for t in args.entitled.split(",") if t],
        permtokens=[t for t in args.permtokens.split(",") if t],
        on_publication=sink.write, probe_interval=args.heartbeat or 1.0,
        link_name=args.link_name, security=ClientSecurity.from_args(args),
    )
    run_subscriber(subscriber, sink, args)
    report_error("subscribe", subscriber.error)
    if subscriber.error is None and not subscriber.report.connections:
        why = f" ({subscriber.last_failure})" if subscriber.last_failure is not None else ""
        print(f"seqrepair subscribe: never connected to the broker at {args.broker}{why}",
              file=sys.stderr)
        return 1
    return 1 if subscriber.error is not None else _outcome(subscriber)
