"""Hostile AMQP peers (issue 24): the attacks the chaos test and ``bench_attacks.py`` run.

Each attack is a plain proton *engine* (``Connection`` + ``Transport``, no reactor) over a
socket this module drives itself, so an attacker decides exactly when it reads: a reactor
client always drains its socket. Run one as its own process (the attacker then costs the
component, not the process that measures the honest subscriber)::

    python tests/amqp/attacks.py flood --url HOST:PORT --sources a,b --connections 4 --requests 32
    python tests/amqp/attacks.py dead --url HOST:PORT --connections 4
    python tests/amqp/attacks.py hoard --url HOST:PORT --idle-links 300 --busy-links 30
    python tests/amqp/attacks.py never-open --url HOST:PORT --connections 500
    python tests/amqp/attacks.py all --url HOST:PORT --sources a,b
    python tests/amqp/attacks.py mix --parts flood,hoard --url HOST:PORT --sources a,b

Every attack runs ``--duration`` seconds (or until SIGTERM), then prints one JSON line of what
it saw (requests accepted/rejected, links attached/refused, connections the component closed
and after how long, bytes read) and exits 0. Only the standard library and proton are
imported: the file runs as a script from anywhere.

* ``flood``: N connections, each with K data links (``/#``, batches, credit) and one
  ``$seqrepair`` sender; as soon as the links are attached each connection sends M
  ``SOURCE-GAP-REQUEST`` "after 0" (every named source from its first number), round-robin over
  its links, and reads whatever comes (discarded). ``--every S`` sends another M each S seconds.
* ``dead``: N connections, each with K data links granting 10,000,000 credit; after the attach
  they never read again (socket receive buffer shrunk to 4 KiB first), while the AMQP
  connection is kept alive by empty frames every few seconds: what the component sends stays
  in the component.
* ``hoard``: one connection (``--hoard-connections``) attaching ``--idle-links`` links
  without credit and ``--busy-links`` links with credit, read and discarded.
* ``never-open``: N TCP connections, half sending nothing, half only the AMQP protocol
  header; none ever sends an ``open``.
* ``all``: the four at once (4 flooding connections, 4 x 2 dead links, the hoarder,
  ``--never-open`` connections); ``mix --parts a,b``: some of them, sized as in ``all``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import select
import selectors
import signal
import socket
import sys
import time
import uuid
from collections import Counter
from typing import Any

from proton import Collector, Connection, Delivery, Event, Message, Transport, ulong
from proton import symbol as sym

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
DEAD_CREDIT = 10_000_000
DEAD_RCVBUF = 4096


def split_url(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("amqp://").rpartition(":")
    return host or "127.0.0.1", int(port)


class EnginePeer:
    """One AMQP connection: proton's engine over a non-blocking socket driven by :meth:`pump`.

    ``reading`` False stops reading the socket for good (the bytes the component sends stay in
    its buffers and in a 4 KiB kernel receive buffer); output (attaches, requests, the empty
    frames that keep the connection alive) still goes out.
    """

    def __init__(self, url: str, container: str, *, rcvbuf: int | None = None) -> None:
        self.url = url
        self.conn = Connection()
        self.conn.container = container
        self.conn.hostname = split_url(url)[0]
        self.transport = Transport()
        self.transport.bind(self.conn)
        self.collector = Collector()
        self.conn.collect(self.collector)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect: the window the kernel advertises follows it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.connect(split_url(url))
        sock.setblocking(False)
        self.sock = sock
        self.reading = True
        self.closed: str | None = None  # why the connection ended, once it has
        self.opened_at = time.monotonic()
        self.session = self.conn.session()
        self.conn.open()
        self.session.open()
        self.received = 0  # transfers read
        self.bytes_in = 0
        self.attached: set[str] = set()
        self.refused: Counter[str] = Counter()  # link closed by the component: condition -> n
        self.outcomes: Counter[str] = Counter()  # request outcomes: state or condition -> n

    def receiver(self, name: str, address: str, credit: int, batch: bool = True) -> Any:
        link = self.session.receiver(name)
        link.source.address = address
        link.target.address = name
        link.snd_settle_mode = link.SND_SETTLED
        if batch:
            link.properties = {sym("seqrepair-batch"): True}
        link.open()
        if credit:
            link.flow(credit)
        return link

    def sender(self, address: str) -> Any:
        link = self.session.sender("req-" + uuid.uuid4().hex[:8])
        link.target.address = address
        link.source.address = link.name
        link.open()
        return link

    def fileno(self) -> int:
        return self.sock.fileno()

    def pump(self) -> None:
        """Read what the socket has (when reading), run the engine, write what it has."""
        if self.closed is not None:
            return
        now = time.monotonic()
        if self.reading:
            while True:
                room = self.transport.capacity()
                if room <= 0:
                    break  # proton takes no more until it has processed what it holds
                try:
                    data = self.sock.recv(min(room, 1 << 16))
                except BlockingIOError:
                    break
                except OSError as exc:
                    self._end(f"socket error {exc.errno}")
                    return
                if not data:
                    self._end("closed by the component")
                    return
                self.bytes_in += len(data)
                try:
                    self.transport.push(data)
                except Exception as exc:  # the engine refused the bytes (a framing error)
                    self._end(f"transport error {exc}")
                    return
        self.transport.tick(now)
        self._events()
        self._write()

    def _write(self) -> None:
        while self.closed is None:
            pending = self.transport.pending()
            if pending <= 0:
                return
            try:
                sent = self.sock.send(self.transport.peek(pending))
            except BlockingIOError:
                return
            except OSError as exc:
                self._end(f"socket error {exc.errno}")
                return
            self.transport.pop(sent)

    def _delivery(self, delivery: Any) -> None:
        """Incoming deliveries are read and dropped; outgoing ones record their outcome."""
        link = delivery.link
        if link.is_receiver:
            current = link.current
            while current is not None and current.readable and not current.partial:
                link.recv(current.pending)
                link.advance()
                current.settle()
                self.received += 1
                current = link.current
        elif delivery.updated and delivery.remote_state:
            cond = delivery.remote.condition
            state = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
                     Delivery.RELEASED: "released"}.get(delivery.remote_state, "other")
            self.outcomes[cond.name if cond is not None else state] += 1
            delivery.settle()

    def _events(self) -> None:
        while True:
            event = self.collector.peek()
            if event is None:
                return
            kind = event.type
            if kind == Event.LINK_REMOTE_OPEN and event.link.is_receiver:
                self.attached.add(event.link.name)
            elif kind == Event.LINK_REMOTE_CLOSE:
                cond = event.link.remote_condition
                self.refused[cond.name if cond is not None else "closed"] += 1
                self.attached.discard(event.link.name)
                event.link.close()
            elif kind == Event.DELIVERY:
                self._delivery(event.delivery)
            elif kind == Event.CONNECTION_REMOTE_CLOSE:
                cond = event.connection.remote_condition
                self._end(f"closed by the component: {cond.name if cond else 'no condition'}")
            self.collector.pop()

    def send_request(self, sender: Any, message: Message) -> None:
        delivery = sender.delivery(uuid.uuid4().bytes)
        sender.send(message.encode())
        sender.advance()
        del delivery

    def _end(self, why: str) -> None:
        if self.closed is None:
            self.closed = why
            self.closed_after = time.monotonic() - self.opened_at
            with contextlib.suppress(OSError):
                self.sock.close()

    def close(self) -> None:
        if self.closed is None:
            self.conn.close()
            with contextlib.suppress(Exception):
                self._write()
            self._end("closed by the attacker")


def source_request(link: str, sources: list[str]) -> Message:
    """A SOURCE-GAP-REQUEST "after 0" for every source named: a replay from the start."""
    return Message(
        id=uuid.uuid4().hex, reply_to=f"$link/{link}",
        properties={"message-type": "SOURCE-GAP-REQUEST", "link": link},
        body={source: ulong(0) for source in sources},
    )


class Attack:
    """Peers plus what to do to them as time goes (:meth:`step`), summed up by :meth:`report`."""

    name = "attack"

    def __init__(self) -> None:
        self.peers: list[EnginePeer] = []

    def step(self, now: float) -> None:
        """Called every loop turn after the peers were pumped."""

    def report(self) -> dict[str, Any]:
        closed = [p for p in self.peers if p.closed is not None
                  and p.closed != "closed by the attacker"]
        refused: Counter[str] = Counter()
        outcomes: Counter[str] = Counter()
        for peer in self.peers:
            refused.update(peer.refused)
            outcomes.update(peer.outcomes)
        return {
            "attack": self.name,
            "connections": len(self.peers),
            "connections_closed_by_component": len(closed),
            "closed_after_s": sorted(round(p.closed_after, 2) for p in closed)[:3]
            + (["..."] if len(closed) > 6 else [])
            + sorted(round(p.closed_after, 2) for p in closed)[3:][-3:],
            "close_reasons": dict(Counter(p.closed for p in closed)),
            "links_attached": sum(len(p.attached) for p in self.peers),
            "links_refused_or_detached": dict(refused),
            "request_outcomes": dict(outcomes),
            "transfers_read": sum(p.received for p in self.peers),
            "bytes_read": sum(p.bytes_in for p in self.peers),
        }


class Flood(Attack):
    """N connections x M SOURCE-GAP-REQUESTs "after 0" (see the module docstring)."""

    name = "flood"

    def __init__(self, url: str, sources: list[str], connections: int, requests: int,
                 links: int, credit: int, every: float) -> None:
        super().__init__()
        self.sources, self.requests, self.every = sources, requests, every
        self.state: list[dict[str, Any]] = []
        for n in range(connections):
            peer = EnginePeer(url, f"flood-{n}-{uuid.uuid4().hex[:6]}")
            names = [f"flood-{n}-{k}-{uuid.uuid4().hex[:6]}" for k in range(links)]
            for name in names:
                peer.receiver(name, "/#", credit)
            self.state.append({"peer": peer, "names": names, "sender": peer.sender("$seqrepair"),
                               "next": 0.0, "sent": 0})
            self.peers.append(peer)

    def step(self, now: float) -> None:
        for st in self.state:
            peer, sender = st["peer"], st["sender"]
            ready = all(name in peer.attached for name in st["names"])
            if peer.closed is not None or not ready or sender.credit <= 0 or now < st["next"]:
                continue
            for i in range(self.requests):
                peer.send_request(sender, source_request(st["names"][i % len(st["names"])],
                                                         self.sources))
            st["sent"] += self.requests
            st["next"] = now + self.every if self.every > 0 else float("inf")

    def report(self) -> dict[str, Any]:
        return {**super().report(), "requests_sent": sum(st["sent"] for st in self.state)}


class Dead(Attack):
    """Data links that grant 10,000,000 credit and are never read (see the module docstring)."""

    name = "dead"

    def __init__(self, url: str, connections: int, links: int, address: str) -> None:
        super().__init__()
        self.names: list[list[str]] = []
        for n in range(connections):
            peer = EnginePeer(url, f"dead-{n}-{uuid.uuid4().hex[:6]}", rcvbuf=DEAD_RCVBUF)
            names = [f"dead-{n}-{k}-{uuid.uuid4().hex[:6]}" for k in range(links)]
            for name in names:
                peer.receiver(name, address, DEAD_CREDIT)
            self.peers.append(peer)
            self.names.append(names)

    def step(self, now: float) -> None:
        for peer, names in zip(self.peers, self.names, strict=True):
            # stop reading once the attach is answered: from then on the component's bytes
            # stay on its side (the empty frames proton's tick writes keep the link alive)
            if peer.reading and all(name in peer.attached for name in names):
                peer.reading = False
                peer.stopped_reading_at = now

    def report(self) -> dict[str, Any]:
        return {**super().report(),
                "links_dead": sum(len(n) for p, n in zip(self.peers, self.names, strict=True)
                                  if not p.reading)}


class Hoard(Attack):
    """Hundreds of links on few connections, idle (no credit) and busy (credit, read)."""

    name = "hoard"

    def __init__(self, url: str, connections: int, idle_links: int, busy_links: int,
                 address: str) -> None:
        super().__init__()
        for n in range(connections):
            peer = EnginePeer(url, f"hoard-{n}-{uuid.uuid4().hex[:6]}")
            # the busy ones first: a limit on links per connection leaves the idle ones out
            for k in range(busy_links):
                peer.receiver(f"hoard-busy-{n}-{k}-{uuid.uuid4().hex[:6]}", address, 1_000_000)
            for k in range(idle_links):
                peer.receiver(f"hoard-idle-{n}-{k}-{uuid.uuid4().hex[:6]}", address, 0)
            self.peers.append(peer)


class NeverOpen(Attack):
    """TCP connections that never send an AMQP open (half send the protocol header).

    Connected without blocking (the component accepts at its own pace: a blocking connect past
    its listen backlog would wait for SYN retries); each one's life is timed from its
    ``connect`` until the component closes it."""

    name = "never-open"

    def __init__(self, url: str, connections: int, rate: float) -> None:
        super().__init__()
        self.address = split_url(url)
        self.to_open, self.rate, self.started = connections, rate, time.monotonic()
        self.made = 0
        self.pending: dict[socket.socket, tuple[float, bool]] = {}  # not yet connected
        self.open: dict[socket.socket, float] = {}
        self.closed_after: list[float] = []
        self.failed = 0
        self.open_at_end: int | None = None  # still open when the attack's duration ended

    def _connect(self, now: float) -> None:
        """Open the connections due by now at ``rate``/s: a burst past the component's listen
        backlog only has the kernel drop SYNs (the peer retries seconds later)."""
        due = min(self.to_open, int((now - self.started) * self.rate) + 1)
        while self.made < due:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex(self.address)
            self.pending[sock] = (time.monotonic(), bool(self.made % 2))
            self.made += 1

    def poll(self, now: float, connect: bool = True) -> None:
        if connect:
            self._connect(now)
        if self.pending:
            _, writable, _ = select.select([], list(self.pending), [], 0)
            for sock in writable:
                started, header = self.pending.pop(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    self.failed += 1
                    sock.close()
                    continue
                if header:
                    with contextlib.suppress(OSError):
                        sock.send(AMQP_HEADER)
                self.open[sock] = started
        readable, _, _ = select.select(list(self.open), [], [], 0) if self.open else ([], [], [])
        for sock in readable:
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:  # the component closed it
                self.closed_after.append(now - self.open.pop(sock))
                sock.close()

    def report(self) -> dict[str, Any]:
        after = sorted(self.closed_after)
        return {
            "attack": self.name,
            "connections": self.made,
            "connected": len(self.open) + len(after),
            "connect_failed": self.failed,
            "never_connected": len(self.pending),
            "connections_closed_by_component": len(after),
            "closed_after_s": [round(a, 2) for a in (after[:1] + after[-1:])],
            "open_at_end": self.open_at_end,
            "still_open": len(self.open),
        }

    def close(self) -> None:
        for sock in [*self.pending, *self.open]:
            sock.close()


def run(attacks: list[Attack], duration: float, tick: float = 0.05,
        close_grace: float = 0.0) -> list[dict[str, Any]]:
    """Drive the attacks for ``duration`` seconds (or until SIGTERM), then wait at most
    ``close_grace`` more for the component to close the never-open connections; their
    reports."""
    stop = time.monotonic() + duration
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sel = selectors.DefaultSelector()
    for attack in attacks:
        for peer in attack.peers:
            sel.register(peer.sock, selectors.EVENT_READ, peer)
    while time.monotonic() < stop and not stopping:
        for key, _ in sel.select(timeout=tick):
            peer = key.data
            if peer.reading and peer.closed is None:
                peer.pump()
        now = time.monotonic()
        for attack in attacks:
            for peer in attack.peers:
                if peer.closed is None:
                    peer.pump()  # writes, ticks (keep-alive frames), steps without input
                    if not peer.reading or peer.closed is not None:
                        with contextlib.suppress(KeyError, ValueError):
                            sel.unregister(peer.sock)
            attack.step(now)
            if isinstance(attack, NeverOpen):
                attack.poll(now)
    for attack in attacks:
        for peer in attack.peers:
            peer.close()
    never_open = [a for a in attacks if isinstance(a, NeverOpen)]
    for attack in never_open:
        attack.open_at_end = len(attack.open)
    # a starved component accepts and times out late: wait for it (a liveness bound), the
    # report says how many were open when the attack ended and how many never were closed
    until = time.monotonic() + close_grace
    while any(a.open or a.pending for a in never_open) and time.monotonic() < until \
            and not stopping:
        time.sleep(tick)
        for attack in never_open:
            attack.poll(time.monotonic(), connect=False)
    reports = [attack.report() for attack in attacks]
    for attack in never_open:
        attack.close()
    return reports


def build(args: argparse.Namespace) -> list[Attack]:
    """The attacks asked for: one, ``all`` four, or a ``mix`` of some sized as in ``all``."""
    sources = [s for s in args.sources.split(",") if s]
    together = args.attack in ("all", "mix")
    if args.attack == "mix":
        wanted = [p for p in args.parts.split(",") if p]
    elif args.attack == "all":
        wanted = ["flood", "dead", "hoard", "never-open"]
    else:
        wanted = [args.attack]
    made: list[Attack] = []
    if "flood" in wanted:
        made.append(Flood(args.url, sources, 4 if together else args.connections,
                          args.requests, args.links, args.credit, args.every))
    if "dead" in wanted:
        made.append(Dead(args.url, 4 if together else args.connections,
                         2 if together else args.links, args.address))
    if "hoard" in wanted:
        made.append(Hoard(args.url, args.hoard_connections, args.idle_links, args.busy_links,
                          args.address))
    if "never-open" in wanted:
        made.append(NeverOpen(args.url, args.never_open if together else args.connections,
                              args.open_rate))
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("attack", choices=["flood", "dead", "hoard", "never-open", "all", "mix"])
    parser.add_argument("--parts", default="", help="mix: the attacks to run at once")
    parser.add_argument("--url", required=True)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--sources", default="", help="flood: the sources to ask 'after 0'")
    parser.add_argument("--requests", type=int, default=32, help="flood: per connection")
    parser.add_argument("--links", type=int, default=1, help="flood, dead: per connection")
    parser.add_argument("--credit", type=int, default=100_000, help="flood: per data link")
    parser.add_argument("--every", type=float, default=0.0,
                        help="flood: send another --requests every S seconds (0: once)")
    parser.add_argument("--address", default="/#", help="dead, hoard: the links' source")
    parser.add_argument("--hoard-connections", type=int, default=1)
    parser.add_argument("--idle-links", type=int, default=300)
    parser.add_argument("--busy-links", type=int, default=30)
    parser.add_argument("--never-open", type=int, default=300, help="all: how many")
    parser.add_argument("--open-rate", type=float, default=100.0,
                        help="never-open: connections opened per second")
    parser.add_argument("--close-grace", type=float, default=0.0,
                        help="never-open: seconds more to wait for the component to close "
                             "what is still open when the duration ends")
    args = parser.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.monotonic()
    attacks = build(args)
    reports = run(attacks, args.duration, close_grace=args.close_grace)
    print(json.dumps({"attack": args.attack, "ran_s": round(time.monotonic() - started, 2),
                      "parts": reports}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
