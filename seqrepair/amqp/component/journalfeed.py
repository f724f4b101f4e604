"""What the journal announces it took: a journal check without a round trip.

The journal's append script publishes, inside the same atomic script and after the append,
``"<high-water> <source>"`` on :data:`~seqrepair.journal.scripts.JOURNALED_CHANNEL`. A
journaling publisher's publications reach the component after its append returned, so the
announcement of that append is normally in the component's subscription socket before the
transfer is read: :meth:`JournaledFeed.through` then tells the journal port that the journal
holds them, where it would otherwise read the source's high-water (``HGET``: a round trip to
Redis per transfer at low rates, and two context switches on a busy machine).

What an announcement says is a fact of the journal as good as that read: only Redis writes it,
from the script that appended. What the feed cannot vouch for, it does not answer (None: the
port reads the high-water as before): an announcement not arrived yet, a subscription not
confirmed, one lost or reconnected since (everything heard before is dropped: the journal may
have restarted without it). Announcements are kept only for the sources the port asks about
(``keep``), so sources journaled by others grow nothing here.

Once subscribed over a plain socket, the announcements are read by hand
(:class:`~seqrepair.journal.resp.ReplyReader`: every reply the socket has, in one read):
redis-py's ``get_message`` (a poll, a parse through its socket buffer and a dict per
announcement) was about a fifth of the component's CPU at one publication per transfer. Over
TLS, or where redis-py's connection is not as expected, ``get_message`` reads them as before.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Container
from typing import Any

from seqrepair.journal.resp import ReplyReader
from seqrepair.journal.scripts import JOURNALED_CHANNEL
from seqrepair.logs import get_logger

log = get_logger(__name__)

RETRY = 1.0
"""Seconds before the first try to subscribe again after the subscription failed; doubled
after each failed try, up to :data:`MAX_RETRY` (a Redis that hangs holds each try for the
client's connect timeout), back to this once subscribed."""

MAX_RETRY = 30.0


class JournaledFeed:
    """The journal's append announcements, read without blocking when the port asks.

    ``open_pubsub`` makes a redis-py ``PubSub`` (``client.pubsub``); the subscription is made
    at once and again, at most every :data:`RETRY` seconds, after it failed.
    """

    def __init__(self, open_pubsub: Callable[[], Any], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._open = open_pubsub
        self._clock = clock
        self._pubsub: Any = None
        self._reader: ReplyReader | None = None
        self._confirmed = False
        self._retry_at = 0.0
        self._retry = RETRY
        self._through: dict[str, int] = {}
        self.heard = 0
        """Announcements taken (for the sources asked about)."""
        self._subscribe()

    def _subscribe(self) -> None:
        try:
            pubsub = self._open()
            pubsub.subscribe(JOURNALED_CHANNEL)
        except Exception as exc:  # Redis away: the port reads high-waters meanwhile
            self._failed(exc)
            return
        self._pubsub, self._confirmed = pubsub, False
        self._reader = _hand_reader(pubsub)

    def _failed(self, exc: BaseException) -> None:
        if self._pubsub is not None:
            log.warning("journal announcements lost: high-waters are read until subscribed "
                        "again", error=f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(Exception):  # a broken connection: nothing to add
                self._pubsub.close()
        self._pubsub, self._confirmed, self._reader = None, False, None
        self._through.clear()  # heard on a connection that failed: not vouched for any more
        self._retry_at = self._clock() + self._retry
        self._retry = min(MAX_RETRY, 2 * self._retry)

    def through(self, source: str, keep: Container[str]) -> int | None:
        """The highest number the journal announced it holds of ``source`` (None: nothing
        heard that can be vouched for), after taking every announcement waiting; announcements
        of sources not in ``keep`` (those the port asks about) are dropped."""
        if self._pubsub is None:
            if self._clock() < self._retry_at:
                return None
            self._subscribe()
            if self._pubsub is None:
                return None
        self._drain(keep)
        return self._through.get(source) if self._confirmed else None

    def _drain(self, keep: Container[str]) -> None:
        if self._reader is not None:
            self._drain_by_hand(keep)
            return
        pubsub = self._pubsub
        try:
            while True:
                message = pubsub.get_message(timeout=0.0)
                if message is None:
                    return
                kind = message.get("type")
                if kind == "subscribe":
                    self._confirmed = True  # announcements after this one are all heard
                    self._retry = RETRY
                    continue
                if kind != "message":
                    continue
                data = message.get("data")
                if isinstance(data, bytes):
                    data = data.decode()
                number, _, source = str(data).partition(" ")
                self._heard(number, source, keep)
        except Exception as exc:  # the connection broke: start over, vouch for nothing
            self._failed(exc)

    def _drain_by_hand(self, keep: Container[str]) -> None:
        """:meth:`_drain` of the replies on the subscription's socket, read by hand: the
        same announcements taken, the same confirmation, the same failures."""
        assert self._reader is not None
        try:
            for reply in self._reader.read_ready():
                if not isinstance(reply, list) or len(reply) != 3:
                    continue
                kind = reply[0]
                if kind == b"subscribe":
                    self._confirmed = True
                    self._retry = RETRY
                    continue
                data = reply[2]
                if kind != b"message" or not isinstance(data, bytes):
                    continue
                number, _, name = data.partition(b" ")
                self._heard(number, name.decode(errors="replace"), keep)
        except Exception as exc:  # the connection broke: start over, vouch for nothing
            self._failed(exc)

    def _heard(self, number: str | bytes, source: str, keep: Container[str]) -> None:
        """One announcement: ``source`` journaled through ``number`` (kept when wanted)."""
        if source not in keep or not number.isdigit():
            return
        seq = int(number)
        if seq > self._through.get(source, 0):
            self._through[source] = seq
        self.heard += 1

    def take(self, keep: Container[str]) -> None:
        """Take the announcements waiting, without subscribing again (the component's timer:
        they must not pile up in the subscription, or in Redis, between transfers)."""
        if self._pubsub is not None:
            self._drain(keep)

    def forget(self, source: str) -> None:
        """Drop what was heard of ``source``."""
        self._through.pop(source, None)

    def close(self) -> None:
        """End the subscription."""
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                self._pubsub.close()
        self._pubsub = None


def _hand_reader(pubsub: Any) -> ReplyReader | None:
    """A reader of the subscription's socket, when it is a plain socket redis-py holds
    nothing unread of (after ``subscribe``: only the confirmation is to come), made
    non-blocking; else None."""
    conn = getattr(pubsub, "connection", None)
    sock = getattr(conn, "_sock", None)
    buffer = getattr(getattr(conn, "_parser", None), "_buffer", None)
    unread = getattr(buffer, "unread_bytes", None)
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        return None
    if unread is not None and unread() != 0:
        return None
    sock.setblocking(False)  # read only by the reader from here: never to wait
    return ReplyReader(sock)


def journal_feed(journal: Any) -> JournaledFeed | None:
    """The announcements of ``journal`` when it is a Redis journal (its ``client`` makes
    subscriptions), else None."""
    client = getattr(journal, "client", None)
    if client is None or not hasattr(client, "pubsub"):
        return None
    return JournaledFeed(client.pubsub)
