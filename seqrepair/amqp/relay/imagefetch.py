"""Image requests a relay's journal cannot answer, asked of its upstream for the one link
that asks (XEP-0040 §1, §3; WIRE.md "Relays", "Image requests").

A relay answers a ``SNAPSHOT`` that names its sources from its own journal
(:mod:`seqrepair.amqp.component.images`) when the journal holds, for every source asked,
everything the asking link may see (one naming none goes upstream: the relay's journal knows
only the sources that sent it something since it subscribed): no
retention trim (an item's base may lie below it) and no *not selected* marker whose selection
does not cover the link (numbers the relay did not carry for it, lost upstream, or from before
it subscribed: :class:`~seqrepair.journal.selection.NotSelected`). It checks that first, a
journal page per repair turn (:func:`lacks`); where the journal lacks, the answer comes from
the upstream instead: one short-lived fetch link (``relay.<name>.fetch.<tag>``, on the relay's
one upstream fetch connection, :mod:`.fetchconn`; a slot of the relay's fetch links,
:mod:`seqrepair.amqp.relay.fetch`, fair by principal) on the **asking link's** patterns and
grant (never the relay's wider grant), on which the relay sends the asking link's
``SNAPSHOT`` (its topics, patterns and sources; the fetch link's own ``request_id``) and
takes the ``IMAGE`` frames and the ``IMAGE-COMPLETE``. They are passed to
the asking link as they come, with its ``request_id``, filtered again by its full entitlement;
the ``IMAGE-COMPLETE`` carries the upstream's ``as_of`` per source. The relay's journal keeps
the origin's source numbers, and everything the relay fanned out to the link before the
request came from its upstream before the upstream took the fetch's request, so it is at or
below that ``as_of``: the stub continues exactly after it. While the answer waits, nothing else
goes out on the link (answers first), and no repair turn reads it (parked).

An upstream that cannot be asked (down, refused, no answer within the fetch timeout) ends the
answer without an ``IMAGE-COMPLETE``: the subscriber asks again (its image requests are retried
and given up after four tries), as after a lost connection. At most :data:`MAX_IMAGES` images
are held of one answer; past it the answer is cut off the same way (logged).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.snapshot import ImageComplete, ImageFrame, ImageRequest
from seqrepair.journal.journal import Journal
from seqrepair.journal.selection import NotSelected
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.relay.imagefetch")

MAX_IMAGES = 100_000
"""Images one upstream answer holds at most before the relay has passed them on."""


def lacks(journal: Journal, sources: list[str], entitlement: Entitlement, page: int
          ) -> Iterator[bool | None]:
    """Whether the journal lacks something an image of ``sources`` for a link with
    ``entitlement`` may need: a trim, or a not-selected marker that does not cover it. Yields
    None after each page read, then the answer."""
    for source in sources:
        info = journal.info(source)
        if info.trimmed_through > 0 or info.high_water == 0:  # trimmed, or never carried
            yield True
            return
        first = 1
        while first <= info.high_water:
            last = min(info.high_water, first + page - 1)
            for entry in journal.iter_entries(source, first, last, page_size=page):
                if isinstance(entry, NotSelected) and not entry.covers(
                        entitlement.topics, entitlement.grant):
                    yield True
                    return
            first = last + 1
            yield None
    yield False


class UpstreamImage:
    """One image request asked of the upstream for one link; filled in the fetch link's
    thread, read by the answer once :attr:`ready`. Shares the fetch slots' fields
    (:class:`~seqrepair.amqp.relay.fetch.UpstreamFetches`)."""

    def __init__(self, entitlement: Entitlement, request: ImageRequest, *,
                 principal: str = "") -> None:
        self.entitlement = entitlement
        self.request = request
        self.principal = principal
        self.source = ",".join(request.sources) or "*"
        self.first = self.last = 0
        self.count = 0
        self.bytes = 0
        self.lost: tuple[int, int] | None = None
        self.error: str | None = None
        self.deadline = 0.0
        self.attach_by = 0.0
        self.images: list[ImageFrame] = []
        self.complete: ImageComplete | None = None
        self.asked: ImageRequest | None = None
        self._ids = itertools.count(1)
        self._done = threading.Event()
        self._lock = threading.RLock()

    @property
    def done(self) -> bool:
        """Whether the answer is complete (or failed)."""
        return self._done.is_set()

    @property
    def ready(self) -> bool:
        """Whether images wait to be taken, or the answer is complete."""
        return bool(self.images) or self._done.is_set()

    def arrived(self) -> list[ImageFrame]:
        """The images that came since the last call."""
        with self._lock:
            taken, self.images = self.images, []
        return taken

    def cancel(self) -> None:
        """The asking link went away."""
        self.finish(error="cancelled")

    def finish(self, *, error: str | None = None) -> None:
        """End it (the first call decides)."""
        with self._lock:
            if not self._done.is_set():
                self.error = error
                self._done.set()

    def ask(self) -> ImageRequest:
        """The request the fetch link sends (again after a reconnect: a new ``request_id``,
        and the images of the earlier attempt dropped)."""
        with self._lock:
            self.images = []
            self.asked = ImageRequest(self.request.topics, self.request.patterns,
                                      self.request.sources,
                                      request_id=next(self._ids) % (1 << 31))
            return self.asked

    def take(self, frame: object) -> None:
        """Take one frame of the fetch link."""
        with self._lock:
            asked = self.asked
            if self.done or asked is None:
                return
            if isinstance(frame, ImageFrame) and frame.request_id == asked.request_id:
                if self.count >= MAX_IMAGES:
                    self.finish(error=f"more than {MAX_IMAGES} images")
                    return
                self.images.append(frame)
                self.count += 1
            elif isinstance(frame, ImageComplete) and frame.request_id == asked.request_id:
                self.complete = frame
                self.finish()


def passed_through(fetch: UpstreamImage, request: ImageRequest, entitlement: Entitlement
                   ) -> Iterator[ImageFrame | ImageComplete | None]:
    """The upstream's answer as the asking link gets it: its ``request_id``, what its
    entitlement allows; None while nothing waits (the stream is parked meanwhile). Ends
    without a closing frame when the upstream could not answer."""
    allows = entitlement.allows
    topics: set[str] = set()
    sources: set[str] = set()
    while True:
        finished = fetch.done
        for frame in fetch.arrived():
            pub: Publication = frame.publication
            if allows(pub):
                topics.add(pub.topic)
                sources.add(pub.source)
                yield ImageFrame(pub, request.request_id)
        if finished:
            break
        yield None
    complete = fetch.complete
    if fetch.error is not None or complete is None:
        log.warning("upstream image request failed: the subscriber asks again",
                    error=fetch.error, request_id=request.request_id)
        return
    # only what the link was given is named: a partial item or a source the link may not see
    # (taken out above) is not told to it, as its own journal's answer would not
    yield ImageComplete({s: n for s, n in complete.as_of.items() if s in sources},
                        request.request_id, tuple(t for t in complete.partial if t in topics))


def relay_image_answer(
    journal: Journal, enqueue: Callable[[UpstreamImage], None], page: int,
    entitlement: Entitlement, request: ImageRequest, principal: str, sources: list[str],
    local: Iterator[Any],
) -> tuple[Iterator[Any], Callable[[], bool]]:
    """A relay's answer to ``request`` (:data:`~seqrepair.amqp.component.images.ImageFetcher`):
    ``local`` (its journal's fold) where the journal holds all the link may need, else the
    upstream's, through a fetch link ``enqueue`` starts; and whether it waits (parked)."""
    asked: list[UpstreamImage] = []

    def answer() -> Iterator[Any]:
        # a request naming no source asks about every source upstream has, and the relay's
        # journal knows only those that sent it something since it subscribed: one that
        # published only before (or nothing the relay carried) is upstream's alone, so such
        # a request is answered there (else its items would be told gone: none in the answer)
        lacking = not request.sources
        for step in ([] if lacking else lacks(journal, sources, entitlement, page)):
            if step is None:
                yield None
            else:
                lacking = step
        if not lacking:
            yield from local
            return
        fetch = UpstreamImage(entitlement, request, principal=principal)
        asked.append(fetch)
        log.info("image request answered from upstream: the journal lacks what it needs",
                 request_id=request.request_id, sources=sources[:20], principal=principal)
        enqueue(fetch)
        try:
            yield from passed_through(fetch, request, entitlement)
        finally:
            fetch.cancel()  # a no-op once it ended; else its link is not wanted any more

    return answer(), lambda: bool(asked) and not asked[0].ready
