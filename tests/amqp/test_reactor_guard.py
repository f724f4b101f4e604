"""proton 0.40's teardown race (issue 22 §3): the expiry of a selectable whose transport the
same select round already detached. A restarted component died of it with ``AttributeError:
'NoneType' object has no attribute 'capacity'`` in ``IOHandler.update``; every container we
run is built by :func:`seqrepair.amqp.wire.reactor.make_container`, whose I/O handler skips it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from proton import Connection, Endpoint, Transport
from proton.handlers import IOHandler

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.admission import Admission, CountLimits, LimitExceededError
from seqrepair.amqp.wire.gate import Gate
from seqrepair.amqp.wire.reactor import GuardedIOHandler, make_container
from seqrepair.core.messages import Publication

from .conftest import wait_for
from .inthread import HereComponent


def _expired_without_transport() -> Any:
    """The event proton dispatches for the race: an expired selectable, transport gone."""
    reactor = SimpleNamespace(now=0.0)
    return SimpleNamespace(selectable=SimpleNamespace(_transport=None, _reactor=reactor),
                           connection=None)


def test_proton_itself_trips_over_the_race() -> None:
    # the failure the guard is for: if proton ever fixes it, this says so
    with pytest.raises(AttributeError, match="capacity"):
        IOHandler().on_selectable_expired(_expired_without_transport())


def test_the_guarded_handler_skips_the_expiry_of_a_selectable_without_transport() -> None:
    handler = GuardedIOHandler()
    handler.on_selectable_expired(_expired_without_transport())
    assert handler.skipped == 1


def test_proton_trips_over_a_transport_it_never_selected() -> None:
    # a transport bound to a connection whose socket was gone (the chaos test met it once)
    with pytest.raises(AttributeError, match="_selectable"):
        IOHandler().on_transport(SimpleNamespace(transport=Transport()))


def test_the_guarded_handler_skips_the_events_of_a_transport_it_never_selected() -> None:
    handler = GuardedIOHandler()
    transport = Transport()
    connection = Connection()
    transport.bind(connection)
    handler.on_transport(SimpleNamespace(transport=transport))
    handler.on_transport_closed(SimpleNamespace(transport=transport))
    assert handler.skipped == 2
    assert connection.transport is None  # unbound, as proton's own handler ends


def test_a_limit_closing_a_connection_whose_transport_is_gone_leaves_it_alone() -> None:
    # opening it would have proton bind it to a transport without a socket
    gate = Gate(Admission(CountLimits()), clock=lambda: 0.0)
    connection = Connection()
    gate.close(connection, LimitExceededError("over", expected=1, got=2), "refused")
    assert connection.state & Endpoint.LOCAL_UNINIT


def test_make_container_dispatches_io_events_to_the_guarded_handler() -> None:
    # proton's Container wraps the I/O handler in its GlobalOverrides, which hands it every
    # event that no connection overrides
    assert isinstance(make_container().global_handler.base, GuardedIOHandler)


def _race(comp: HereComponent, link_name: str) -> None:
    """In the component's thread: what proton does for a connection whose socket hit
    end-of-file in the readable event of a round in which its deadline also expired
    (``IOHandler.on_selectable_error``), then the queued expired event of that round."""
    transport = comp.links[link_name].sender.connection.transport
    selectable = transport._selectable
    transport.close_head()
    transport.close_tail()
    selectable.terminate()
    selectable._transport = None
    transport._selectable = None
    selectable.update()
    selectable.expired()


@pytest.mark.amqp
@pytest.mark.redis
def test_the_component_survives_the_race_and_serves_on(
    here: Callable[..., HereComponent],
) -> None:
    comp = here()
    thread = comp._here_thread
    got: list[Publication] = []
    other: list[Publication] = []
    with Subscriber(comp.here_url, "/weather/#", link_name="raced", heartbeat_interval=0.2,
                    on_publication=got.append) as sub, \
         Subscriber(comp.here_url, "/weather/#", link_name="bystander",
                    heartbeat_interval=0.2, on_publication=other.append) as bystander:
        assert sub.connected.wait(10)
        assert bystander.connected.wait(10)
        with Publisher(comp.here_url, "feed.race", address="/weather/#") as publisher:
            publisher.publish_many([("/weather/a", {"n": i}, "update") for i in range(100)])
            assert publisher.flush(30)
            assert wait_for(lambda: len(got) == 100 and len(other) == 100, 20)
            comp.call(lambda: _race(comp, "raced"))
            # the component's thread went on: it still answers, and serves both links on
            assert comp.call(lambda: threading.current_thread() is thread)
            publisher.publish_many([("/weather/b", {"n": i}, "update") for i in range(100)])
            assert publisher.flush(30)
        # the raced subscriber lost its connection, reconnected and had the rest repaired
        assert wait_for(lambda: len(got) == 200 and len(other) == 200, 30), (len(got),
                                                                             len(other))
    assert thread.is_alive()
    assert [p.source_seq for p in got] == list(range(1, 201))
    assert [p.source_seq for p in other] == list(range(1, 201))


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.amqp
@pytest.mark.redis
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_clients_run_one_after_another_leave_no_descriptors_behind(
    here: Callable[..., HereComponent],
) -> None:
    # proton never closes an EventInjector's pipe: each client run left two descriptors, and a
    # process past 1023 of them has proton's select() fail for every connection it holds
    comp = here()

    rounds = iter(range(100))

    def one_round() -> None:
        with Subscriber(comp.here_url, "/weather/#", heartbeat_interval=0.2) as sub:
            assert sub.connected.wait(10)
        with Publisher(comp.here_url, f"feed.fd{next(rounds)}", address="/weather/#") as publisher:
            publisher.publish("/weather/a", {"n": 1}, "update")
            assert publisher.flush(10)

    one_round()  # whatever the first round opens for good (imports, caches) is not a leak
    before = _open_descriptors()
    for _ in range(20):
        one_round()
    assert _open_descriptors() - before < 10  # was 80 more: 2 per client run
