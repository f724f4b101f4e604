"""The subscriber's connection lifecycle: one connection at a time, per link name."""

from __future__ import annotations

from typing import Any

from proton import Connection, Transport

from seqrepair.amqp.client.subscriber import Subscriber


class _Recorder:
    """Stands in for the container: records what the subscriber schedules."""

    def __init__(self) -> None:
        self.scheduled: list[Any] = []

    def schedule(self, delay: float, task: Any) -> None:
        self.scheduled.append(task)


def subscriber_with(conn: Connection) -> tuple[Subscriber, _Recorder]:
    sub = Subscriber("127.0.0.1:1", "/weather/#", link_name="lifecycle")
    container = _Recorder()
    sub._container = container
    sub._conn = conn
    return sub, container


def test_a_connection_still_being_made_is_not_taken_for_a_lost_one() -> None:
    # container.connect() returns before the transport is bound: a tick in between must not
    # start a second connection (two live connections for one link name)
    conn = Connection()
    sub, container = subscriber_with(conn)
    sub._on_tick()
    assert sub._conn is conn
    assert container.scheduled == []


def test_a_bound_connection_whose_transport_closed_is_lost_and_reconnected_once() -> None:
    conn = Connection()
    transport = Transport()
    transport.bind(conn)
    conn.seqrepair_bound = True
    transport.close_tail()
    transport.close_head()
    sub, container = subscriber_with(conn)
    sub._on_tick()
    sub._on_tick()
    assert sub._conn is None
    assert len(container.scheduled) == 1
