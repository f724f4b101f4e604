"""A subscriber's image requests after a reconnect (amqp/client/subscriber.py), without a
network: one asked while the connection was being made is queued for it already, and the
resend of the requests unanswered once the data link attaches does not send it twice (two
answers would take two of the component's four image answer rooms, and the stub counts one
send: a rejection of either would be taken as the only one)."""

from __future__ import annotations

from seqrepair.amqp.client.subscriber import Subscriber


def test_a_request_asked_while_connecting_is_sent_once_after_the_attach() -> None:
    sub = Subscriber("127.0.0.1:1", "/#")
    old = sub.stub.request_image(patterns=["/old/#"])  # unanswered when the connection was lost
    assert len(old) == 1
    sub.request_image(patterns=["/#"])
    sub.on_seqrepair_image(None)  # no control link yet: queued
    assert len(sub._outbox) == 1
    sub._resend_images()  # the data link attached
    bodies = [m.body for m in sub._outbox]
    assert len(bodies) == 2, bodies
    assert sorted(b["patterns"][0] for b in bodies) == ["/#", "/old/#"]


def test_requests_after_the_attach_are_not_remembered() -> None:
    """What the connection was being made with is kept only until the resend: bounded."""
    sub = Subscriber("127.0.0.1:1", "/#")
    sub._resend_images()
    for _ in range(3):
        sub.request_image(patterns=["/#"])
        sub.on_seqrepair_image(None)
    assert sub._images_here is None
