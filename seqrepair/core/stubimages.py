"""The subscriber stub's image requests, a part of :class:`~seqrepair.core.stub.SubscriberStub`.

See :mod:`seqrepair.core.snapshot` for the exchange. The stub numbers its image requests, keeps
the ones unanswered (:meth:`ImageResyncing.pending_images`: an adapter sends them again after a
reconnect; :meth:`poll` asks again for one that got no answer for :data:`IMAGE_RETRY` seconds,
doubling, and gives it up after :data:`IMAGE_TRIES`) and takes only answers to them. One whose
delivery the component rejected (:meth:`ImageResyncing.image_rejected`) is asked again after
the stub's backoff when the condition passes, and given up at once when it does not. Every
request given up (refused, tries run out, or replaced by a newer one past
:data:`MAX_PENDING_IMAGES`) is told: :class:`ImageRefused`, the reason why. An image
current as of ``as_of`` for (source, item) is delivered unless its source has delivered past
``as_of`` (then publications of the item after ``as_of`` may have been delivered already:
:class:`ImageOutdated`, ask again). From then on the item has an *image floor*: a publication
of that source and item numbered at or below ``as_of`` is *covered*: consumed for its source's
order (the source's last delivered number moves to it, so nothing after it waits and repair
does not ask for it) but not delivered, the image holds it. Publications of the source's other
items are untouched.

Floors are kept only while they can matter: once a source has delivered (or covered) through
the highest floor it has, every floor of it is passed and forgotten, so the floors held are
those of images whose source the link has not yet caught up with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from seqrepair.core.config import check_now
from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication
from seqrepair.core.snapshot import (
    ImageComplete,
    ImageDelivered,
    ImageFrame,
    ImageOutdated,
    ImageRefused,
    ImageRequest,
    ImageResynced,
    RequestImage,
)
from seqrepair.core.stubrepair import TEMPORARY_REJECTIONS
from seqrepair.core.stubstats import StubStats

if TYPE_CHECKING:
    from seqrepair.core.events import Event

MAX_PENDING_IMAGES = 16
"""How many image requests a stub waits for at once; a newer one forgets the oldest (whose
answers are then dropped as stray): it is given up, :class:`ImageRefused`."""
IMAGE_RETRY = 30.0
"""Seconds without any answer to an image request after which it is sent again (a request
the component refused, or lost with a connection): long, since a fold over a large journal may
take a while before its first image. Doubled at each try."""
IMAGE_REJECTIONS = 12
"""How many rejections for now (:meth:`ImageResyncing.image_rejected`) an image request takes
before it is given up. The waits double from the stub's ``retry_interval`` up to
:data:`IMAGE_RETRY` (jittered): the room they wait on is held by other image answers, which
may run as long as a fold over a large journal, so about two and a half minutes in all with
the defaults, not the source requests' ``max_retries`` (about 6 s)."""
IMAGE_TRIES = 4
"""How many times an image request is sent without an answer before it is given up
(``stats.images_abandoned``, :class:`ImageRefused` ``"no answer after 4 tries"``); sends
after a rejection for now do not count (:meth:`ImageResyncing.image_rejected`)."""


class ImageResyncing:
    """Image requests for :class:`~seqrepair.core.stub.SubscriberStub`, which defines the state
    declared here (attrs fields)."""

    _stats: StubStats
    _last_delivered: dict[str, int]
    _events: list[Event]
    _image_ids: int
    _image_asked: dict[int, ImageRequest]
    _image_topics: dict[int, set[str]]
    # per source, per topic, the number the delivered image is current as of
    _image_floor: dict[str, dict[str, int]]
    _image_top: dict[str, int]  # per source, its highest floor
    _image_due: dict[int, float]  # per request unanswered, when to send it again
    _image_tries: dict[int, int]
    _image_rejections: dict[int, int]  # per request, the rejections for now it had
    _image_resend: set[int]  # requests rejected for now: sent again when due, no try counted
    # per request, its sends on this connection neither rejected nor answered: one may still
    # be answering (a fold slow to its first image) while a later send is rejected
    _image_sends: dict[int, int]
    # per source, per topic, the as_of of the image delivered, while requests are pending:
    # overlapping requests answer the same items (each names them, none delivers them twice)
    _image_given: dict[str, dict[str, int]]
    _now: float

    if TYPE_CHECKING:

        def _retry_wait(self, attempts: int, most: float | None = None) -> float: ...

    def request_image(
        self, topics: Sequence[str] = (), patterns: Sequence[str] = (),
        sources: Sequence[str] = (),
    ) -> list[Event]:
        """Ask for the current image of ``topics`` and of the items matching ``patterns`` (of
        ``sources`` only, when given): returns the :class:`RequestImage` to send. A request
        that cannot be made (no topic nor pattern, a malformed one, too many) raises a
        :class:`~seqrepair.core.errors.SeqRepairError`; the stub is then unchanged."""
        request = ImageRequest(tuple(topics), tuple(patterns), tuple(sources),
                               request_id=self._image_ids + 1)
        self._image_ids += 1
        events: list[Event] = []
        if len(self._image_asked) >= MAX_PENDING_IMAGES:
            self._stats.images_abandoned += 1
            events.append(self._give_up_image(
                next(iter(self._image_asked)),
                f"replaced: more than {MAX_PENDING_IMAGES} image requests pending"))
        self._image_asked[self._image_ids] = request
        self._image_topics[self._image_ids] = set()
        self._image_due[self._image_ids] = self._now + IMAGE_RETRY
        self._image_tries[self._image_ids] = 1
        self._image_sends[self._image_ids] = 1
        self._stats.images_requested += 1
        events.append(RequestImage(request))
        return events

    def image_rejected(
        self, request: ImageRequest, condition: str | None, now: float
    ) -> list[Event]:
        """The component rejected the delivery of ``request`` (what a :class:`RequestImage`
        asked), with the AMQP ``condition`` (None: none given): no answer comes for that send.
        A condition that passes (:data:`~seqrepair.core.stubrepair.TEMPORARY_REJECTIONS`: the
        component's image answers or request allowance used up, a failure of its own, the data
        link detached meanwhile) is asked again after the stub's backoff (``retry_interval``
        doubling by ``backoff``, with ``jitter``, as a source request's, but up to
        :data:`IMAGE_RETRY`), at most :data:`IMAGE_REJECTIONS` rejections; another condition
        (``amqp:unauthorized-access``, ``amqp:decode-error``, ``amqp:not-implemented``, ...),
        or the retries run out, gives it up at once: :class:`ImageRefused` with the condition
        as the reason (``stats.images_refused``). A rejection of a request answered, given up
        or replaced meanwhile, or while an earlier send of it may still be answered (its answer
        holding the room), changes nothing (``stats.stray_dropped`` for the first)."""
        now = check_now(now)
        self._now = now
        events: list[Event] = []
        self._events = events
        self._stats.requests_rejected += 1
        request_id = request.request_id
        if request_id is None or self._image_asked.get(request_id) != request:
            self._stats.stray_dropped += 1
            return events
        sends = self._image_sends.get(request_id, 1) - 1
        self._image_sends[request_id] = max(sends, 0)
        if sends > 0:  # an earlier send may still be answered (its answer fills the room)
            return events
        reason = condition or "rejected"
        rejections = self._image_rejections.get(request_id, 0) + 1
        if reason in TEMPORARY_REJECTIONS and rejections < IMAGE_REJECTIONS:
            self._image_rejections[request_id] = rejections
            self._image_resend.add(request_id)
            # capped at IMAGE_RETRY, the jitter kept: the room frees as other answers end
            self._image_due[request_id] = now + self._retry_wait(rejections, IMAGE_RETRY)
        else:
            self._stats.images_refused += 1
            events.append(self._give_up_image(request_id, reason))
        return events

    def _give_up_image(self, request_id: int, reason: str) -> ImageRefused:
        """Forget the request ``request_id``; the event that tells the application."""
        request = self._image_asked[request_id]
        self._forget_image(request_id)
        return ImageRefused(request, reason)

    def _forget_image(self, request_id: int) -> None:
        self._image_asked.pop(request_id, None)
        self._image_topics.pop(request_id, None)
        self._image_due.pop(request_id, None)
        self._image_tries.pop(request_id, None)
        self._image_rejections.pop(request_id, None)
        self._image_resend.discard(request_id)
        self._image_sends.pop(request_id, None)
        if not self._image_asked:  # no answer left that could repeat an image delivered
            self._image_given.clear()

    def _retry_images(self, now: float) -> None:
        """Send again the image requests that got no answer for a while, and those rejected
        for now whose backoff is over; give up on those sent :data:`IMAGE_TRIES` times."""
        for request_id, due in list(self._image_due.items()):
            if now < due:
                continue
            tries = self._image_tries[request_id]
            if request_id in self._image_resend:  # a rejection is no silence: no try counted
                self._image_resend.discard(request_id)
            elif tries >= IMAGE_TRIES:
                self._stats.images_abandoned += 1
                self._events.append(
                    self._give_up_image(request_id, f"no answer after {tries} tries"))
                continue
            else:
                tries += 1
                self._image_tries[request_id] = tries
            self._image_due[request_id] = now + IMAGE_RETRY * 2 ** (tries - 1)
            self._image_sends[request_id] = self._image_sends.get(request_id, 0) + 1
            self._events.append(RequestImage(self._image_asked[request_id]))

    def resend_images(self, now: float) -> list[ImageRequest]:
        """The image requests not yet answered, oldest first, for an adapter to send again on
        a new connection: the sends before it are lost with the old one (their answers never
        end, their rejections never come), so each now has that one send, a rejection of
        which is asked again or given up as :meth:`image_rejected` says."""
        now = check_now(now)
        self._now = now
        for request_id in self._image_asked:
            self._image_sends[request_id] = 1
            if request_id in self._image_resend:  # the send now is the one the backoff awaited
                self._image_resend.discard(request_id)
                self._image_due[request_id] = now + IMAGE_RETRY
        return self.pending_images()

    def pending_images(self) -> list[ImageRequest]:
        """The image requests not yet answered, oldest first (send them again after a lost
        connection: an answer cut short by it never ends)."""
        return list(self._image_asked.values())

    @property
    def image_floors(self) -> int:
        """How many (source, item) image floors the stub holds now."""
        return sum(len(topics) for topics in self._image_floor.values())

    def _on_image(self, frame: ImageFrame) -> None:
        request_id = frame.request_id
        answered = self._image_topics.get(request_id) if request_id else None
        if request_id is None or answered is None:
            self._stats.stray_dropped += 1
            return
        self._image_due[request_id] = self._now + IMAGE_RETRY  # it is being answered
        self._image_resend.discard(request_id)  # a send of it was not rejected after all
        pub = frame.publication
        source, topic, as_of = pub.source, pub.topic, pub.source_seq
        delivered = self._last_delivered.get(source, 0)
        given = self._image_given.setdefault(source, {})
        floor = max(self._image_floor.get(source, {}).get(topic, 0), given.get(topic, 0))
        if as_of <= floor:
            # an image as current already delivered (a request sent again, or another request
            # for the same item): not delivered twice, but this request resynced the item too
            answered.add(topic)
            self._stats.duplicates += 1
            return
        if as_of < delivered:
            self._stats.images_outdated += 1
            self._events.append(ImageOutdated(pub, delivered))
            return
        answered.add(topic)
        given[topic] = as_of
        if as_of > delivered:  # else the source is through it already: nothing to cover
            self._image_floor.setdefault(source, {})[topic] = as_of
            if as_of > self._image_top.get(source, 0):
                self._image_top[source] = as_of
        self._stats.images_delivered += 1
        self._events.append(ImageDelivered(pub, frame.request_id))

    def _on_image_complete(self, complete: ImageComplete) -> None:
        request_id = complete.request_id
        request = self._image_asked.pop(request_id, None) if request_id is not None else None
        if request is None:
            self._stats.stray_dropped += 1
            return
        topics = self._image_topics.pop(request_id, set()) if request_id is not None else set()
        if request_id is not None:
            self._forget_image(request_id)
        self._events.append(ImageResynced(request, dict(complete.as_of), frozenset(topics),
                                          complete.partial))

    def _covered(self, publication: Publication) -> bool:
        """Whether an image delivered holds ``publication`` (new for its source): it is then
        consumed for its source's order and not delivered. Forgets the source's floors once
        its last delivered number has passed them all."""
        source = publication.source
        floors = self._image_floor.get(source)
        if floors is None:
            return False
        seq = publication.source_seq
        covered = seq <= floors.get(publication.topic, 0)
        if covered:
            self._last_delivered[source] = seq
            self._stats.image_covered += 1
        if max(seq, self._last_delivered.get(source, 0)) >= self._image_top[source]:
            # every floor of the source is at or below what it has consumed (this one counted
            # once the caller delivers it): the source order drops all they would cover
            del self._image_floor[source]
            del self._image_top[source]
        return covered

    def _check_image(self, frame: object) -> bool:
        """Whether ``frame`` is part of an image answer (validated by its type)."""
        return isinstance(frame, ImageFrame | ImageComplete)

    def _receive_image(self, frame: object) -> None:
        if isinstance(frame, ImageFrame):
            self._on_image(frame)
        elif isinstance(frame, ImageComplete):
            self._on_image_complete(frame)
        else:  # pragma: no cover - _check_image said so
            raise InvalidMessageError("not an image answer", got=type(frame).__name__)
