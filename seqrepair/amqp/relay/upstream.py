"""The relay's upstream subscriber: a :class:`~seqrepair.amqp.client.subscriber.Subscriber`
that keeps, for each publication it decodes, the entry bytes it came in (a ``PUBLICATIONS``
entry without link number or retransmit flag, WIRE.md), so the relay sends its own
subscribers those bytes rather than encoding the publication again (the component does the
same for a publisher's batch entries: :func:`seqrepair.amqp.component.ingest._regular_entry`).

The entry bytes are held from decoding until the publication is delivered
(:meth:`UpstreamSubscriber.entry_of`), at most :data:`MAX_KEPT`: a publication the stub drops
(a duplicate) leaves its bytes behind, so past that many they are all forgotten (the relay
then encodes those publications itself).

A transfer's run of publications delivered in order (the stub's usual
:class:`~seqrepair.core.events.DeliveredRun`) goes to ``on_run`` at once with its entries, so
the relay hands them to its event loop as one batch (one lock, one wake-up per transfer
rather than per publication); anything else goes through ``on_publication`` one by one, in
the same order.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.rawamqp import RawIncomingHandler, decode_message
from seqrepair.core.events import DeliveredRun, Event, Unrecoverable
from seqrepair.core.messages import Publication, unlink_own

MAX_KEPT = 100_000
"""Entries kept at most between decoding and delivery."""

NO_ENTRY = b"\x00"
"""Stands for "encode it": not a publication entry."""


def _regular(entry: bytes) -> bool:
    """A publication entry of 8 elements (list8 or list32), as a component sends."""
    if entry[0] == 0xC0:
        return entry[2] == 8
    return entry[0] == 0xD0 and entry[5:9] == b"\x00\x00\x00\x08"


def _same(pubs: list[Publication], frames: list[Any]) -> bool:
    """Whether ``pubs`` are ``frames``, the very objects in the same order."""
    if len(pubs) != len(frames):
        return False
    return all(map(operator.is_, pubs, frames))


class _KeepingEntries:
    """A :class:`Decoder` that also keeps each decoded publication's entry bytes: the last
    message's frames and entries as they are (:attr:`last`; :attr:`regular` when every entry
    is a regular publication entry), and, once :meth:`keep` is asked (the stub did not deliver
    that message's run as it came), by source and number.

    The upstream subscriber's messages come with their list body unread
    (:attr:`~seqrepair.amqp.wire.rawamqp.RawIncomingHandler.lazy_body`): a usual transfer is
    read straight into publications (:func:`~seqrepair.amqp.wire.batchread.read_publications`,
    one pass instead of a read and a decode), anything else the usual way."""

    def __init__(self, inner: Decoder, kept: dict[tuple[str, int], bytes]) -> None:
        self.inner = inner
        self.kept = kept
        self.last: tuple[list[Any], list[bytes]] | None = None
        self.regular = False

    def decode(self, message: Any, **kwargs: Any) -> list[Any]:
        self.last = None
        self.regular = False
        if getattr(message, "body_at", None) is not None:
            read = None if kwargs else read_publications(message, self.inner)
            if read is not None:
                self.last = read
                self.regular = True
                return list(read[0])
            message = decode_message(message._raw)  # read (or refused) the usual way
        frames = self.inner.decode(message, **kwargs)
        items: list[bytes] | None = getattr(message, "items", None)
        if items is not None and len(items) == len(frames):
            self.last = (frames, items)
        return frames

    def keep(self) -> None:
        """The last message's publication entries, by source and number (once)."""
        last, self.last = self.last, None
        if last is None:
            return
        kept = self.kept
        if len(kept) > MAX_KEPT:
            kept.clear()
        for frame, item in zip(*last, strict=True):
            if type(frame) is Publication and _regular(item):
                kept[(frame.source, frame.source_seq)] = item

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class UpstreamSubscriber(Subscriber):
    """A :class:`Subscriber` whose deliveries carry the entry bytes they came in
    (:meth:`entry_of`, from the subscriber's thread, as its ``on_publication`` runs; with
    ``on_run``, a run delivered in order is handed over at once with its entries)."""

    def __init__(self, *args: Any, on_lost: Callable[[Unrecoverable], None] | None = None,
                 on_run: Callable[[list[Publication], list[bytes]], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_lost = on_lost
        self.on_run = on_run
        self._kept: dict[tuple[str, int], bytes] = {}
        self.decoder = _KeepingEntries(self.decoder, self._kept)  # type: ignore[assignment]
        handlers: list[Any] = self.handlers  # type: ignore[assignment]  # read_raw's list
        for handler in handlers:  # list bodies read by the decoder, in one pass
            if isinstance(handler, RawIncomingHandler):
                handler.lazy_body = True

    def on_link_opened(self, event: Any) -> None:
        super().on_link_opened(event)
        if event.link == self._receiver and self.connected.is_set():
            # from here on upstream routes every publication to this link: what a test (or
            # an operator) waits for before publishing what the relay must carry
            self.log.info("upstream link attached")

    def _follow(self, props: Any) -> None:
        super()._follow(props)
        if not isinstance(self.decoder, _KeepingEntries):  # a new stub: a new decoder
            self.decoder = _KeepingEntries(self.decoder, self._kept)  # type: ignore[assignment]

    def _take(self, frames: Sequence[object], now: float) -> None:
        on_run = self.on_run
        decoder = self.decoder
        if on_run is None or self.on_event is not None or not isinstance(
                decoder, _KeepingEntries):
            self._keep()
            super()._take(frames, now)
            return
        events = self.stub.receive_many(frames, now)
        if len(events) == 1 and type(events[0]) is DeliveredRun:  # the usual outcome
            pubs = list(events[0].publications)
            last = decoder.last
            if last is not None and _same(pubs, last[0]):  # this message's, as they came
                decoder.last = None
                unlink_own(pubs)  # the decoder's own, held by nobody else: bare in place
                on_run(pubs, last[1] if decoder.regular
                       else [item if _regular(item) else NO_ENTRY for item in last[1]])
                return
            decoder.keep()
            pop = self._kept.pop
            on_run(pubs, [pop((p.source, p.source_seq), NO_ENTRY) for p in pubs])
        else:
            decoder.keep()
            self._perform(events)

    def _keep(self) -> None:
        if isinstance(self.decoder, _KeepingEntries):
            self.decoder.keep()

    def _perform(self, events: list[Event]) -> None:
        # ``on_lost`` hears of a loss before the publications after it are delivered (the
        # relay journals what they skip as lost upstream, not as not selected)
        if self.on_lost is not None:
            for event in events:
                if isinstance(event, Unrecoverable):
                    self.on_lost(event)
        super()._perform(events)

    def started_after(self) -> dict[str, int]:
        """Per source, where this subscription started upstream (its first attach reply's
        ``seqrepair-start-after``); empty until it has attached."""
        return dict(self._start or {})

    def entry_of(self, publication: Publication) -> bytes:
        """The entry ``publication`` came in, or :data:`NO_ENTRY`; forgotten once asked."""
        return self._kept.pop((publication.source, publication.source_seq), NO_ENTRY)
