"""An image request given up reaches the application (core/stubimages.py): rejected by the
component for good, rejected for now until the retries run out, unanswered after
``IMAGE_TRIES`` sends, or replaced by a newer one, it ends in :class:`ImageRefused` naming
why; a rejection for now is asked again after the stub's backoff."""

from __future__ import annotations

import pytest

from seqrepair.core.events import Event
from seqrepair.core.snapshot import (
    ImageComplete,
    ImageRefused,
    ImageRequest,
    ImageResynced,
    RequestImage,
)
from seqrepair.core.stub import SubscriberStub
from seqrepair.core.stubimages import (
    IMAGE_REJECTIONS,
    IMAGE_RETRY,
    IMAGE_TRIES,
    MAX_PENDING_IMAGES,
)
from seqrepair.core.stubrepair import TEMPORARY_REJECTIONS


def _stub() -> SubscriberStub:
    stub = SubscriberStub(heartbeat_interval=1000.0, seed=7)
    stub.poll(0.0)
    return stub


def _ask(stub: SubscriberStub, *patterns: str) -> ImageRequest:
    [ask] = stub.request_image(patterns=list(patterns or ("/#",)))
    assert isinstance(ask, RequestImage)
    return ask.request


def _of(events: list[Event], kind: type) -> list[object]:
    return [e for e in events if isinstance(e, kind)]


@pytest.mark.parametrize("condition", [
    "amqp:unauthorized-access", "amqp:decode-error", "amqp:not-implemented",
    "amqp:invalid-field",
])
def test_an_image_request_rejected_for_good_is_refused_at_once(condition: str) -> None:
    stub = _stub()
    request = _ask(stub)
    assert stub.image_rejected(request, condition, 1.0) == [ImageRefused(request, condition)]
    assert stub.pending_images() == []
    assert stub.stats.images_refused == 1
    assert stub.stats.requests_rejected == 1
    # never sent again, and nothing left to wait for
    assert not _of(stub.poll(100 * IMAGE_RETRY), RequestImage)
    assert stub.next_deadline is None or stub.next_deadline > 100 * IMAGE_RETRY


def test_a_rejection_without_a_condition_is_for_good() -> None:
    stub = _stub()
    request = _ask(stub)
    assert stub.image_rejected(request, None, 1.0) == [ImageRefused(request, "rejected")]


@pytest.mark.parametrize("condition", sorted(TEMPORARY_REJECTIONS))
def test_an_image_request_rejected_for_now_is_asked_again_after_the_backoff(
    condition: str,
) -> None:
    stub = _stub()
    request = _ask(stub)
    assert stub.image_rejected(request, condition, 1.0) == []
    due = stub.next_deadline
    assert due is not None
    # the stub's backoff (retry_interval, jittered), not IMAGE_RETRY's silence
    assert 1.0 + stub.retry_interval <= due <= 1.0 + stub.retry_interval * (1 + stub.jitter)
    assert not _of(stub.poll(due - 0.01), RequestImage)
    assert stub.poll(due) == [RequestImage(request)]  # the same request, the same id
    assert stub.pending_images() == [request]
    stub.receive(ImageComplete({"s": 3}, request.request_id), due + 1.0)
    assert stub.stats.images_refused == 0
    assert stub.pending_images() == []


def test_rejections_for_now_back_off_and_are_given_up_when_the_retries_run_out() -> None:
    """The room a rejection for now waits on is held by other image answers, which may run as
    long as a fold over a large journal (IMAGE_RETRY's scale): the waits double from the
    stub's ``retry_interval`` up to IMAGE_RETRY, and the request is given up only after
    IMAGE_REJECTIONS of them, minutes in all (not the source requests' ~6 s)."""
    stub = _stub()
    request = _ask(stub)
    now = 1.0
    waits = []
    events: list[Event] = []
    for _ in range(IMAGE_REJECTIONS):
        events = stub.image_rejected(request, "amqp:resource-limit-exceeded", now)
        if events:
            break
        due = stub.next_deadline
        assert due is not None
        waits.append(due - now)
        assert stub.poll(due) == [RequestImage(request)]
        now = due
    assert events == [ImageRefused(request, "amqp:resource-limit-exceeded")]
    assert len(waits) == IMAGE_REJECTIONS - 1
    assert waits[:5] == sorted(waits[:5])  # doubling
    assert waits[-1] > 4 * waits[0]
    assert max(waits) <= IMAGE_RETRY * (1 + stub.jitter)
    assert sum(waits) >= 2 * IMAGE_RETRY  # longer than an answer's first silence
    assert stub.stats.images_refused == 1
    assert stub.stats.images_abandoned == 0
    assert stub.pending_images() == []


def test_rejections_for_now_are_no_tries_without_an_answer() -> None:
    """A rejection is an answer: sends after it do not count against IMAGE_TRIES."""
    stub = _stub()
    request = _ask(stub)
    now = 1.0
    for _ in range(IMAGE_TRIES + 1):
        assert stub.image_rejected(request, "amqp:resource-limit-exceeded", now) == []
        due = stub.next_deadline
        assert due is not None
        assert stub.poll(due) == [RequestImage(request)]
        now = due
    assert stub.pending_images() == [request]


def test_an_image_request_never_answered_is_refused_naming_its_tries() -> None:
    stub = _stub()
    request = _ask(stub)
    now = 0.0
    refused: list[object] = []
    for _ in range(IMAGE_TRIES + 1):
        now += IMAGE_RETRY * 2**IMAGE_TRIES
        refused += _of(stub.poll(now), ImageRefused)
    assert refused == [ImageRefused(request, f"no answer after {IMAGE_TRIES} tries")]
    assert stub.stats.images_abandoned == 1
    assert stub.stats.images_refused == 0


def test_a_rejection_of_a_request_answered_meanwhile_changes_nothing() -> None:
    stub = _stub()
    request = _ask(stub)
    [resynced] = stub.receive(ImageComplete({"s": 3}, request.request_id), 1.0)
    assert isinstance(resynced, ImageResynced)
    assert stub.image_rejected(request, "amqp:unauthorized-access", 2.0) == []
    assert stub.stats.stray_dropped == 1
    assert stub.stats.images_refused == 0
    # nor one of another stub's request that happens to share the id
    other = _ask(stub, "/a/#")
    stranger = ImageRequest(patterns=("/b/#",), request_id=other.request_id)
    assert stub.image_rejected(stranger, "amqp:unauthorized-access", 3.0) == []
    assert stub.pending_images() == [other]


def test_a_request_replaced_past_the_pending_bound_is_refused() -> None:
    stub = _stub()
    first = _ask(stub, "/first/#")
    for i in range(MAX_PENDING_IMAGES - 1):
        _ask(stub, f"/p{i}/#")
    events = stub.request_image(patterns=["/last/#"])
    [refused, ask] = events
    assert refused == ImageRefused(
        first, f"replaced: more than {MAX_PENDING_IMAGES} image requests pending")
    assert isinstance(ask, RequestImage)
    assert first not in stub.pending_images()
    assert stub.stats.images_abandoned == 1


def test_a_request_rejected_for_now_then_answered_is_not_sent_again() -> None:
    """An answer to an earlier send of it arrives during the backoff: no resend."""
    stub = _stub()
    request = _ask(stub, "/a")
    stub.image_rejected(request, "amqp:resource-limit-exceeded", 1.0)
    stub.receive(ImageComplete({"s": 3}, request.request_id), 1.05)
    assert not _of(stub.poll(5.0), RequestImage)


def test_rejections_of_a_resend_while_an_earlier_send_is_answering_refuse_nothing() -> None:
    """The request got no answer for IMAGE_RETRY (a fold over a large journal, slow to its
    first image) and was sent again; the component, still running the first send's answer,
    rejects the second ``amqp:resource-limit-exceeded`` (that answer fills its room). The
    first send's answer is still coming: the rejections give nothing up and send nothing
    again, and the answer that comes is the request's ImageResynced."""
    stub = _stub()
    request = _ask(stub, "/a")
    now = IMAGE_RETRY + 1.0
    assert stub.poll(now) == [RequestImage(request)]  # the second send
    refused: list[object] = []
    for _ in range(3 * stub.max_retries):
        events = stub.image_rejected(request, "amqp:resource-limit-exceeded", now + 0.01)
        refused += _of(events, ImageRefused)
        due = stub.next_deadline
        if due is None or due > now + IMAGE_RETRY / 2:
            break  # nothing sent again soon: the first send's answer is awaited
        now = due
        polled = stub.poll(now)
        refused += _of(polled, ImageRefused)
        sent = _of(polled, RequestImage)
        if not sent:
            break
    assert refused == []
    assert stub.pending_images() == [request]
    [resynced] = stub.receive(ImageComplete({"s": 3}, request.request_id), now + 5.0)
    assert isinstance(resynced, ImageResynced)
    assert resynced.request == request


def test_after_a_reconnect_the_sends_before_it_answer_nothing() -> None:
    """Sent twice, then the connection is lost and the request sent again on the new one
    (:meth:`resend_images`): a rejection of that send is the only send left, so it is asked
    again after the backoff (not waited on as if an earlier send were still answering)."""
    stub = _stub()
    request = _ask(stub, "/a")
    assert stub.poll(IMAGE_RETRY + 1.0) == [RequestImage(request)]
    assert stub.resend_images(IMAGE_RETRY + 1.5) == [request]
    now = IMAGE_RETRY + 2.0
    assert stub.image_rejected(request, "amqp:resource-limit-exceeded", now) == []
    due = stub.next_deadline
    assert due is not None
    assert due < now + 1.0
    assert stub.poll(due) == [RequestImage(request)]
