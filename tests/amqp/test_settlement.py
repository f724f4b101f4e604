"""Settlement: the component's frames go pre-settled and the subscriber keeps no delivery.

Reliability comes from link numbers and repair, not from AMQP outcomes: an unsettled frame
would only stay in proton's memory on both ends for the life of the link.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.framing import encode_frame
from seqrepair.core.messages import Publication, PublishType

from .conftest import ComponentProcess, wait_for


class _PlainReader(MessagingHandler):
    """A plain proton receiver recording whether each delivery arrived settled."""

    def __init__(self, url: str, address: str, want: int) -> None:
        super().__init__(prefetch=50)
        self.url, self.address, self.want = url, address, want
        self.settled: list[bool] = []
        self.attached = threading.Event()

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(15, self)
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_receiver(self.conn, self.address)

    def on_link_opened(self, event: Any) -> None:
        self.attached.set()

    def on_message(self, event: Any) -> None:
        self.settled.append(bool(event.delivery.settled))
        if len(self.settled) >= self.want:
            self._close()

    def on_timer_task(self, event: Any) -> None:
        self._close()

    def _close(self) -> None:
        self.conn.close()
        self.timer.cancel()


@pytest.mark.amqp
@pytest.mark.redis
def test_component_frames_arrive_pre_settled_and_the_subscriber_holds_none(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    plain = _PlainReader(comp.url, "/settle/#", want=5)
    plain_thread = threading.Thread(target=Container(plain).run)
    plain_thread.start()
    got: list[Publication] = []
    with Subscriber(comp.url, "/settle/#", on_publication=got.append,
                    heartbeat_interval=0.2) as sub:
        assert sub.connected.wait(10)
        assert plain.attached.wait(10)
        time.sleep(0.2)
        with Publisher(comp.url, "feed.s") as publisher:
            for k in range(0, 200, 40):
                publisher.publish_many([("/settle/x", {"n": i}, "update")
                                        for i in range(k, k + 40)])
            assert publisher.flush()
        assert wait_for(lambda: len(got) == 200)
        # every frame taken is settled (heartbeats keep coming: a frame may be in hand)
        assert wait_for(lambda: sub._receiver.unsettled == 0)
    plain_thread.join(20)
    assert [p.fields["n"] for p in got] == list(range(200))
    assert len(plain.settled) >= 5
    assert all(plain.settled)


class _Delivery:
    """The parts of a proton delivery the subscriber touches."""

    def __init__(self, settled: bool) -> None:
        self.settled = settled
        self.calls: list[Any] = []

    def update(self, state: Any) -> None:
        self.calls.append(state)

    def settle(self) -> None:
        self.calls.append("settle")


class _Event:
    def __init__(self, message: Message, delivery: _Delivery) -> None:
        self.message = message
        self.delivery = delivery


def _frame(link_seq: int) -> Message:
    return encode_frame(Publication("/t/a", "s", link_seq, PublishType.UPDATE, {"n": link_seq},
                                    link_seq=link_seq))


def test_subscriber_frees_pre_settled_frames_and_accepts_unsettled_ones() -> None:
    got: list[Publication] = []
    sub = Subscriber("127.0.0.1:1", "/t/#", on_publication=got.append)
    presettled = _Delivery(settled=True)
    sub.on_message(_Event(_frame(1), presettled))
    assert presettled.calls == ["settle"]
    unsettled = _Delivery(settled=False)
    sub.on_message(_Event(_frame(2), unsettled))
    assert unsettled.calls == [Delivery.ACCEPTED, "settle"]
    undecodable = _Delivery(settled=False)
    sub.on_message(_Event(Message(body=1, properties={"message-type": "NOPE"}), undecodable))
    assert undecodable.calls == [Delivery.ACCEPTED, "settle"]
    assert [p.source_seq for p in got] == [1, 2]


def test_subscriber_reports_every_event_to_on_event_and_delivers_in_order() -> None:
    from seqrepair.core.events import Delivered

    got: list[Publication] = []
    events: list[object] = []
    sub = Subscriber("127.0.0.1:1", "/t/#", on_publication=got.append, on_event=events.append)
    for seq in (1, 2, 4, 3):  # 4 early: buffered, delivered after 3
        sub.on_message(_Event(_frame(seq), _Delivery(settled=True)))
    assert [p.source_seq for p in got] == [1, 2, 3, 4]
    assert [e.publication.source_seq for e in events if isinstance(e, Delivered)] == [1, 2, 3, 4]
