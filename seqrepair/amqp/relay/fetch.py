"""What a relay's journal lacks, fetched from its upstream for the one subscriber that asks
(XEP-0040 §1: gap fill and source replay "from its own journal, going upstream only for what
it lacks"; the journal side is :mod:`seqrepair.journal.lacking`).

A source replay on the relay meets numbers its journal lacks for the asking link: a run of
*not selected* markers whose selection does not cover the link (its selection was wider than
what the relay carried then: a subscriber that came later, widened the relay, and asks
"everything after N"), or numbers below the relay's retention trim (a relay that trimmed, a
durable subscriber from long ago). The replay asks :class:`UpstreamFetches` for the range
(from the first lacking number to the end of what it replays of that source: a filtered
feed's lacking runs are short and many, one upstream link each would be a link per few
numbers) and waits, parked (no repair turn reads it meanwhile; the component's tick looks
again). A fetch
is one short-lived upstream link, ``relay.<name>.fetch.<n>``, on the relay's one upstream fetch
connection (kept for the next fetches, reconnected with backoff: :mod:`.fetchconn`), on the
**asking subscriber's**
patterns (``seqrepair-selection``) and the tokens the relay grants it
(``seqrepair-permtokens``): the upstream filters by that entitlement, so nothing comes that
the subscriber may not see even when the relay's own principal sees more, and the replay
filters again by the link's full entitlement (the relay's policy exclusions, filters). On it
one ``SOURCE-GAP-REQUEST`` (``after`` the number before the range; again after ``through``
when the upstream says ``more``, or after a reconnect); the answer's publications within the
range are kept, in order, each number once, until one past the range or a closing frame
covers it. ``GAP-ERROR`` ``trimmed`` there ends the fetch at the first number the upstream
lacks too (:attr:`UpstreamFetch.lost`): the replay sends what came before it, then answers
``trimmed`` naming those numbers (an ``Unrecoverable`` at the subscriber, which asks again
after them), a lacking run at a time, and still sends what its journal holds among them. A
refusal, a fatal attach error, no attach within :data:`CONNECT_TIMEOUT` (the upstream is
down) or no answer for :data:`FETCH_TIMEOUT` (an idle timeout: answers coming keep it going)
ends it with :attr:`UpstreamFetch.error`, answered as numbers the upstream lacks too (named,
``GAP-ERROR trimmed``; what the journal holds after them is still sent). Only the upstream
not taking a fetch link at all makes other fetches fail at once for :data:`DOWN_HOLD`; one
fetch's refusal or silence (its selection) is its own.

A fetch keeps its link slot until its replay has taken what came (the link itself stops once
the fetch is done), so the slots bound what a relay holds of fetched publications relay-wide,
however many replays stall; what a replay leaves untaken for :data:`FETCH_TIMEOUT` is dropped
and the fetch ends with an error before it (answered as above, never passed over).

Where fetched publications live: **passed through to the asking link only**, never written to
the relay's journal nor kept in a shared cache; the replay sends them as they come. The journal
is a Redis stream per source, appended in number order: a run fetched later cannot be inserted
in the middle of it (its not-selected marker stays, and stays true for the selection it names).
A shared side cache would have to be keyed by source number *and* entitlement (what one
subscriber may see is not what another may), would serve hits rarely (a widening is followed by
one subscriber's catch-up, not many), and would be memory held after the answer is sent. Passed
through, a fetched publication is held from its arrival until the replay takes it, then
dropped.

Bounds (a hostile subscriber asking for everything must not exhaust the relay):
:data:`MAX_FETCHES` upstream fetch links at once, shared fairly among the principals asking
(more wait: a free link goes to the oldest waiting fetch of the principal running the fewest,
so one principal's many fetches never starve another's: it waits for one fetch to end at
most, not for all of the other's queue); one fetch holds at
most :data:`MAX_HELD` publications and :data:`MAX_HELD_BYTES` bytes of them, then ends early
(``through`` before the range's end): the replay sends them, then reads its journal on after
them (a new fetch where it lacks again), so a relay holds at most ``MAX_FETCHES`` times that
of fetched publications at once.
Each replay waits for one fetch at a time, and the replays themselves are bounded by the
component's own limits (``--max-replays-per-connection``, ``--max-replays-per-principal``,
``--max-gap-range``), so the queue of waiting fetches is too. A fetch whose replay went away
(its link detached) is cancelled.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from seqrepair.amqp.wire.hops import HopError
from seqrepair.core.messages import (
    GapError,
    Publication,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.relay.fetch")

MAX_FETCHES = 4
"""Upstream fetch links a relay runs at once."""

MAX_HELD = 10_000
"""Publications one fetch holds at most (then it ends early: the subscriber asks again)."""

MAX_HELD_BYTES = 16 << 20
"""Bytes of publication entries one fetch holds at most (as they came: the sizes of the
batch entries that carried them), then it ends early the same way."""

FETCH_TIMEOUT = 30.0
"""Seconds a fetch may go without an answer (or its replay without taking what came) before
it ends with an error (answered as numbers the upstream lacks: named)."""

DOWN_HOLD = 5.0
"""Seconds after a fetch found the upstream down (its link not taken within
:data:`CONNECT_TIMEOUT`) during which new fetches fail at once with the same error: a
subscriber owed many lacking runs is told without waiting for the upstream again each time."""

CONNECT_TIMEOUT = 10.0
"""Seconds a fetch link may take to attach (an upstream relay first widens for it) before the
fetch ends with an error: an upstream that is down is said so, not waited for in silence."""


class UpstreamFetch:
    """One range asked of the upstream for one link (an
    :class:`~seqrepair.journal.lacking.UpstreamAnswer`). Filled in the fetch link's thread;
    read by the replay once :attr:`done`."""

    def __init__(self, entitlement: Entitlement, source: str, first: int, last: int,
                 *, held: int = MAX_HELD, held_bytes: int = MAX_HELD_BYTES,
                 principal: str = "") -> None:
        self.entitlement = entitlement
        self.principal = principal  # who asked (the fetch links are shared fairly by it)
        self.source = source
        self.first = first
        self.last = last
        self.held = held
        self.held_bytes = held_bytes
        self.bytes = 0  # of the messages that brought what it holds (counted as they come)
        self.publications: list[Publication] = []
        self.cursor = first - 1  # the last number answered so far
        self.through = first - 1
        self.lost: tuple[int, int] | None = None
        self.lost_items: tuple[str, ...] | None = None  # the topics the upstream named there
        self.error: str | None = None
        self.asked: SourceGapRequest | None = None
        self.count = 0  # publications taken (the list is emptied as they are sent)
        self.deadline = 0.0  # no answer (nor publication taken) since: the fetch ends
        self.attach_by = 0.0
        self._seen = (self.cursor, 0)  # what :meth:`progressed` last saw
        self._ids = itertools.count(1)
        self._done = threading.Event()
        self._lock = threading.RLock()  # the fetch link's thread fills, the event loop cancels

    @property
    def done(self) -> bool:
        """Whether the answer is complete."""
        return self._done.is_set()

    @property
    def ready(self) -> bool:
        """Whether publications wait to be taken, or the answer is complete."""
        return bool(self.publications) or self._done.is_set()

    def progressed(self) -> bool:
        """Whether answers came, or the replay took some, since the last call."""
        now = (self.cursor, self.count - len(self.publications))
        moved, self._seen = now != self._seen, now
        return moved

    def drop_untaken(self, why: str) -> None:
        """The replay took nothing of what came for too long (its subscriber gives no
        credit): what it holds is dropped and the fetch ends with an error before it (the
        replay names those numbers), never passed over."""
        with self._lock:
            if not self.publications:
                return
            self.through = self.cursor = self.publications[0].source_seq - 1
            self.count -= len(self.publications)
            self.publications = []
            self.error, self.lost = why, None
            self._done.set()

    def arrived(self) -> list[Publication]:
        """The publications that came since the last call (the replay sends them now)."""
        with self._lock:
            taken, self.publications = self.publications, []
        return taken

    def cancel(self) -> None:
        """Its replay went away: nothing more is wanted."""
        self.finish(error="cancelled")

    def finish(self, *, error: str | None = None, lost: tuple[int, int] | None = None
               ) -> None:
        """End the fetch (the first call decides)."""
        with self._lock:
            if self._done.is_set():
                return
            self.error = error
            self.lost = lost
            self.through = self.cursor
            self._done.set()

    def request(self) -> SourceGapRequest:
        """The request for what is still missing (after :attr:`cursor`)."""
        self.asked = SourceGapRequest({self.source: self.cursor},
                                      request_id=next(self._ids) % (1 << 31))
        return self.asked

    ask = request  # what its fetch link sends, attached (again: :mod:`.fetchconn`)

    def _ours(self, frame: ReplayComplete | GapError) -> bool:
        request = frame.request
        asked = self.asked
        return asked is not None and (request is None or (
            isinstance(request, SourceGapRequest)
            and request.after.get(self.source) == asked.after.get(self.source)))

    def take(self, frame: object) -> bool:
        """Take one frame of the fetch link; True when what is missing must be asked again."""
        with self._lock:
            return self._take(frame)

    def _take(self, frame: object) -> bool:
        if self.done:
            return False
        if type(frame) is Publication:
            if frame.link_seq is not None or frame.source != self.source:
                return False  # live frames, other sources' replays: not asked for
            seq = frame.source_seq
            if seq > self.last:  # in order: nothing more of the range comes
                self.cursor = self.last
                self.finish()
            elif seq > self.cursor:
                self.publications.append(frame)
                self.count += 1
                self.cursor = seq
                if seq == self.last:
                    self.finish()
                elif self.count >= self.held or self.bytes >= self.held_bytes:
                    self.finish()  # cut short: the rest is asked for again by the subscriber
            return False
        if isinstance(frame, ReplayComplete) and self._ours(frame):
            through = frame.through.get(self.source)
            if through is None:
                return True  # capped before this source: ask again
            if through >= self.last:
                self.cursor = self.last
                self.finish()
                return False
            self.cursor = max(self.cursor, through)
            if frame.more:
                return True
            # the upstream holds no more than this: the rest of the range it lacks too
            self.finish(lost=(self.cursor + 1, self.last))
            return False
        if isinstance(frame, GapError) and self._ours(frame):
            trimmed = (frame.trimmed_through or {}).get(self.source)
            if frame.reason == "trimmed" and trimmed is not None:
                self.lost_items = (frame.items or {}).get(self.source)
                self.finish(lost=(self.cursor + 1, max(self.cursor + 1, min(trimmed, self.last))))
            else:
                self.finish(error=f"{frame.reason}: {frame.detail}")
        return False


def _why(error: Exception) -> str:
    """A fetch link's refusal as its replay may say it: a refusal for the relay's path would
    name the identities behind the relay (other links'), so only its condition is kept."""
    if isinstance(error, HopError):
        return f"{error.condition}: the upstream refused the relay's path"
    return getattr(error, "message", None) or str(error)


class UpstreamFetches:
    """A relay's upstream fetches (the :data:`~seqrepair.journal.lacking.Fetcher` its gap
    fill uses): at most ``limit`` links at once, the rest waiting, started fairly by principal
    (:meth:`_next`); ``link(fetch, tag)`` makes (does not start) a fetch's link, a
    :class:`~seqrepair.amqp.relay.fetchconn.FetchLink` on the relay's one upstream fetch
    connection (its ``connected``, ``error``, ``start()``, ``stop()``). Called from the event
    loop; :meth:`poll` on its tick starts, times out and stops."""

    def __init__(self, link: Callable[[Any, str], Any],
                 clock: Callable[[], float], stats: dict[str, int], *,
                 limit: int = MAX_FETCHES, timeout: float = FETCH_TIMEOUT,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 held: int = MAX_HELD, wake: Callable[[], None] = lambda: None) -> None:
        self.link = link
        self.clock = clock
        self.stats = stats
        self.limit = limit
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.held = held
        self.wake = wake
        self.waiting: deque[Any] = deque()  # UpstreamFetch, UpstreamImage
        self.running: dict[Any, Any] = {}  # fetch: its FetchLink
        self.down_until = 0.0
        self.down_error = ""
        self._stopped: set[Any] = set()  # running fetches whose link was told to stop
        self._names = itertools.count(1)
        self._tag = uuid.uuid4().hex[:8]
        for key in ("fetches", "fetches_lost", "fetches_failed", "fetched"):
            stats.setdefault(key, 0)

    def __call__(self, entitlement: Entitlement, source: str, first: int, last: int,
                 *, principal: str = "") -> UpstreamFetch:
        fetch = UpstreamFetch(entitlement, source, first, last, held=self.held,
                              principal=principal)
        self.enqueue(fetch)
        return fetch

    def enqueue(self, fetch: Any) -> None:
        """Queue ``fetch`` (an :class:`UpstreamFetch`, or an image request's
        :class:`~seqrepair.amqp.relay.imagefetch.UpstreamImage`) for a fetch link."""
        entitlement, source, first, last = fetch.entitlement, fetch.source, fetch.first, fetch.last
        principal = fetch.principal
        self.stats["fetches"] += 1
        if self.clock() < self.down_until:
            fetch.finish(error=f"{self.down_error} (a fetch a moment ago)")
            self._account(fetch)
            return
        self.waiting.append(fetch)
        log.info("fetching from upstream what the journal lacks", source=source, first=first,
                 last=last, topics=[str(t) for t in entitlement.topics], principal=principal,
                 waiting=len(self.waiting), running=len(self.running))
        self.poll()

    def poll(self) -> None:
        """End what is over (done, failed, too slow), start what waits while room is left."""
        now = self.clock()
        for fetch, sub in list(self.running.items()):
            failed = down = None
            # an idle timeout: answers coming keep the fetch going (the other kinds of
            # fetch this runs, an image request's, may say nothing of progress or holdings)
            if getattr(fetch, "progressed", lambda: False)():
                fetch.deadline = now + self.timeout
            if sub.connected.is_set():
                fetch.attached = True
            elif getattr(fetch, "attached", False):  # its connection dropped: it reconnects
                fetch.attached = False
                fetch.attach_by = now + self.connect_timeout
            if not fetch.done and sub.error is not None:  # this link refused (its selection)
                failed = _why(sub.error)
            elif not fetch.done and now >= fetch.deadline:
                failed = f"no answer within {self.timeout:g} s"
            elif not fetch.done and not sub.connected.is_set() and now >= fetch.attach_by:
                failed = down = (f"the upstream did not take the fetch link within "
                                 f"{self.connect_timeout:g} s")
            if failed is not None:
                fetch.finish(error=failed)
            if down is not None:  # the upstream itself, not this fetch: others fail at once
                self.down_until, self.down_error = now + DOWN_HOLD, down
            if fetch.done and fetch not in self._stopped:  # its link goes, its slot may stay
                self._stopped.add(fetch)
                threading.Thread(target=sub.stop, name="relay-fetch-stop", daemon=True).start()
            if fetch.done and getattr(fetch, "publications", None) and now >= fetch.deadline:
                fetch.drop_untaken(f"the replay took nothing for {self.timeout:g} s")
            # its slot is kept while its replay has not taken what came: a relay holds at
            # most ``limit`` fetches' publications at once, however many replays stall
            if fetch.done and not getattr(fetch, "publications", None):
                del self.running[fetch]
                self._stopped.discard(fetch)
                self._account(fetch)
        while len(self.running) < self.limit:
            next_fetch = self._next()
            if next_fetch is None:
                break
            fetch = next_fetch
            fetch.deadline = now + self.timeout
            fetch.attach_by = now + self.connect_timeout
            try:
                sub = self.link(fetch, f"{self._tag}.{next(self._names)}")
            except Exception as exc:  # a path the relay may not send, say: named, not hidden
                fetch.finish(error=_why(exc))
                self._account(fetch)
                continue
            self.running[fetch] = sub
            log.info("upstream fetch started", source=fetch.source, first=fetch.first,
                     last=fetch.last, principal=fetch.principal,
                     running=self._of(fetch.principal),
                     others_waiting=sum(f.principal != fetch.principal for f in self.waiting))
            sub.start()

    def _of(self, principal: str) -> int:
        return sum(f.principal == principal for f in self.running)

    def _next(self) -> Any:
        """The waiting fetch to start next: the oldest of the principal running the fewest
        (cancelled ones dropped), so the links are shared fairly among those asking."""
        while self.waiting and self.waiting[0].done:
            self.waiting.popleft()
        best: Any = None
        fewest = self.limit + 1
        for fetch in self.waiting:
            if fetch.done:
                continue
            count = self._of(fetch.principal)
            if count < fewest:
                best, fewest = fetch, count
                if count == 0:
                    break
        if best is not None:
            self.waiting.remove(best)
        return best

    def _account(self, fetch: Any) -> None:
        self.stats["fetched"] += fetch.count
        if fetch.lost is not None:
            self.stats["fetches_lost"] += 1
        if fetch.error is not None and fetch.error != "cancelled":
            self.stats["fetches_failed"] += 1
            log.warning("upstream fetch failed", source=fetch.source, first=fetch.first,
                        last=fetch.last, error=fetch.error)
        self.wake()

    def stop(self) -> None:
        """Cancel everything (the relay stops)."""
        for fetch in self.waiting:
            fetch.cancel()
        self.waiting.clear()
        for fetch, sub in self.running.items():
            fetch.cancel()
            if fetch not in self._stopped:
                threading.Thread(target=sub.stop, name="relay-fetch-stop", daemon=True).start()
        self.running.clear()
        self._stopped.clear()
