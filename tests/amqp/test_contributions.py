"""Source ownership and contributions (XEP-0040 §5.2, WIRE.md "Contributions") over the real
component, real SCRAM principals and a private redis-server.

alice owns the source ``feed.alice`` (``own-source`` in the policy file) and publishes it with
the library ``Publisher``, taking contributions; bob and carol are granted ``contribute`` to
it, mallory may publish on the same topics but owns nothing and may contribute nothing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection, LinkDetached

from seqrepair.amqp.client.contributor import (
    Contribution,
    ContributionLinkError,
    Contributor,
)
from seqrepair.amqp.client.publisher import Publisher
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.wire.codec import encode
from seqrepair.core.contributions import contribution_of, contributor_of
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, _env, wait_for
from .principals import (
    MISSING,
    WEATHER_FOR_EXAMPLE_COM,
    amqp_identity,
    client_security,
    password,
    serve_args,
)
from .test_authz import publish_as, refusal

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

ALICE, BOB, CAROL, MALLORY = ("alice@example.com", "bob@example.com", "carol@example.com",
                              "mallory@example.com")
SOURCE = "feed.alice"

POLICY = WEATHER_FOR_EXAMPLE_COM + f"""
[[allow]]
actors = ["{ALICE}"]
operations = ["own-source"]
sources = ["feed.alice", "feed.alice.*"]

[[allow]]  # and everyone at example.com the sources named after them
actors = ["*@example.com"]
operations = ["own-source"]
sources = ["{{principal}}/*"]

[[allow]]
actors = ["{BOB}", "{CAROL}"]
operations = ["contribute"]
sources = ["feed.alice"]
topics = ["/weather/#"]

[[allow]]  # a source nobody owns (no own-source names it)
actors = ["{BOB}"]
operations = ["contribute"]
sources = ["feed.open"]
topics = ["/weather/#"]

[[deny]]
actors = ["{CAROL}"]
operations = ["contribute"]
sources = ["feed.*"]
topics = ["/weather/secret/#"]
"""


@pytest.fixture
def served(component: Callable[..., ComponentProcess], tmp_path: Path) -> ComponentProcess:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    return component("--heartbeat", "0.2", *serve_args(tmp_path, ALICE, BOB, CAROL, MALLORY),
                     "--policy", str(policy), "--contribution-rate", "5",
                     "--contribution-burst", "10", "--contribution-timeout", "3")


class Owner:
    """alice's publisher of ``feed.alice``, taking or refusing contributions by a rule."""

    def __init__(self, url: str, rule: Callable[[Contribution], Any] = lambda c: True) -> None:
        self.seen: list[Contribution] = []
        self.rule = rule
        self.publisher = Publisher(url, SOURCE, address="/weather/#",
                                   security=client_security(ALICE),
                                   on_contribution=self._decide).start()

    def _decide(self, contribution: Contribution) -> Any:
        self.seen.append(contribution)
        return self.rule(contribution)

    def wait_attached(self, comp: ComponentProcess) -> None:
        assert wait_for(lambda: self.publisher._contributions is not None
                        and self.publisher._contributions.state & 0x10 == 0x10  # remote active
                        , 20), comp.log_text()[-2000:]

    def close(self) -> None:
        self.publisher.close(10)


@pytest.fixture
def owner(served: ComponentProcess) -> Iterator[Owner]:
    own = Owner(served.url)
    own.wait_attached(served)
    yield own
    own.close()


class Reader:
    """A subscriber of ``/weather/#`` (as bob) that keeps what it is given."""

    def __init__(self, url: str, name: str) -> None:
        self.got: list[Publication] = []
        self.sub = Subscriber(url, "/weather/#", link_name=name, heartbeat_interval=0.2,
                              on_publication=self.got.append,
                              security=client_security(BOB)).start()
        assert self.sub.connected.wait(20)

    def of(self, source: str) -> list[Publication]:
        return [p for p in self.got if p.source == source]


def test_another_principal_publishing_under_an_owned_source_is_refused_and_it_is_untouched(
    served: ComponentProcess, journal: Journal,
) -> None:
    """The reproduction of the issue: mallory publishing 5,000 publications under alice's
    source name; now each is refused and the source keeps only alice's."""
    url = served.url
    assert publish_as(url, ALICE, "/weather/wind/LEMD", 3, source=SOURCE) == [None] * 3
    assert journal.high_water(SOURCE) == 3
    before = journal.read_range(SOURCE, 1, 3)
    started = time.monotonic()
    outcomes = publish_as(url, MALLORY, "/weather/wind/LEMD", 500, source=SOURCE)
    assert outcomes == ["amqp:unauthorized-access"] * 500, outcomes[:3]
    assert time.monotonic() - started < 60
    # the next number, a plain (unnumbered) one, and the anonymous target alike
    assert _publish_fields(url, MALLORY, SOURCE, 4, {"n": 3}) == "amqp:unauthorized-access"
    assert _publish_fields(url, MALLORY, SOURCE, None, {"n": 3}) == "amqp:unauthorized-access"
    assert publish_as(url, MALLORY, "/weather/rain/x", 1, target=None, source=SOURCE) == [
        "amqp:unauthorized-access"]
    assert journal.high_water(SOURCE) == 3
    assert journal.read_range(SOURCE, 1, 3) == before
    # the owner goes on where it was: no number was taken, nothing is in the way
    assert _publish_fields(url, ALICE, SOURCE, 4, {"n": 3}) is None
    assert _publish_fields(url, ALICE, SOURCE, None, {"n": 4}) is None  # numbered 5 for it
    assert journal.high_water(SOURCE) == 5
    # a source pattern per principal ({principal}/*)
    assert _publish_fields(url, BOB, f"{ALICE}/x", 1, {"n": 0}) == "amqp:unauthorized-access"
    assert _publish_fields(url, ALICE, f"{ALICE}/x", 1, {"n": 0}) is None
    # a source no own-source rule names stays anyone's who may publish
    assert publish_as(url, MALLORY, "/weather/wind/LEMD", 2, source="feed.open") == [None] * 2


def test_a_granted_contribution_reaches_subscribers_in_the_owner_s_stream_once_in_order(
    served: ComponentProcess, owner: Owner, journal: Journal,
) -> None:
    url = served.url
    reader = Reader(url, "reader-1")
    try:
        owner.publisher.publish("/weather/wind/LEMD", {"speed": 1})
        assert owner.publisher.flush(20)
        with Contributor(url, SOURCE, security=client_security(BOB)) as bob:
            results = [bob.contribute("/weather/wind/LEMD", {"speed": 10 + i, "by": "bob"})
                       for i in range(5)]
        owner.publisher.publish("/weather/wind/LEMD", {"speed": 2})
        assert owner.publisher.flush(20)
        assert all(r.accepted for r in results), results
        numbers = [r.source_seq for r in results]
        assert numbers == list(range(2, 7)), numbers
        assert wait_for(lambda: len(reader.of(SOURCE)) >= 7, 30)
        time.sleep(0.5)  # nothing more comes: exactly once
        mine = reader.of(SOURCE)
        assert [p.source_seq for p in mine] == list(range(1, 8))
        assert [contributor_of(p) for p in mine] == [None] + [BOB] * 5 + [None]
        assert [p.fields["speed"] for p in mine] == [1, 10, 11, 12, 13, 14, 2]
        assert [contribution_of(p) for p in mine[1:6]] == [r.contribution for r in results]
        journaled = journal.read_range(SOURCE, 1, 7)
        assert [contributor_of(p) for p in journaled] == [None] + [BOB] * 5 + [None]
        assert [c.contributor for c in owner.seen] == [BOB] * 5
    finally:
        reader.sub.stop()


def test_a_claimed_contributor_is_never_taken(
    served: ComponentProcess, owner: Owner, journal: Journal,
) -> None:
    url = served.url
    with Contributor(url, SOURCE, security=client_security(BOB)) as bob:
        forged = bob.contribute("/weather/wind/LEMD", {"$contributor": CAROL})
        assert (forged.accepted, forged.condition) == (False, "amqp:unauthorized-access")
        own = bob.contribute("/weather/wind/LEMD", {"$contributor": BOB, "x": 1})
        assert own.accepted, own
    [pub] = journal.read_range(SOURCE, own.source_seq, own.source_seq)
    assert contributor_of(pub) == BOB
    # a publisher (even the owner) cannot write the reserved fields for a contribution the
    # component did not hand it
    assert publish_as(url, ALICE, "/weather/wind/LEMD", 1, source="feed.alice.2") == [None]
    assert journal.high_water("feed.alice.2") == 1
    done = _publish_fields(url, ALICE, "feed.alice.2", 2,
                           {"$contributor": BOB, "$contribution": own.contribution})
    assert done == "amqp:unauthorized-access"
    assert journal.high_water("feed.alice.2") == 1


def test_contributions_without_grant_to_a_refused_topic_or_malformed_are_refused(
    served: ComponentProcess, owner: Owner, journal: Journal,
) -> None:
    url = served.url
    with pytest.raises(ContributionLinkError) as refused:
        Contributor(url, SOURCE, security=client_security(MALLORY))
    assert refused.value.condition == "amqp:unauthorized-access"
    with pytest.raises(ContributionLinkError) as refused:  # bob may not contribute there
        Contributor(url, "feed.other", security=client_security(BOB))
    assert refused.value.condition == "amqp:unauthorized-access"
    with Contributor(url, SOURCE, security=client_security(CAROL)) as carol:
        denied = carol.contribute("/weather/secret/x", {"a": 1})
        assert (denied.accepted, denied.condition) == (False, "amqp:unauthorized-access")
        outside = carol.contribute("/sports/x", {"a": 1})
        assert (outside.accepted, outside.condition) == (False, "amqp:unauthorized-access")
        for extra, fields, condition in (
            ({"source_seq": 7}, {"a": 1}, "amqp:decode-error"),  # contributors do not number
            ({"source": "feed.other"}, {"a": 1}, "amqp:decode-error"),
            ({"ptype": "nonsense"}, {"a": 1}, "amqp:decode-error"),
            ({"message-type": "GAP-REQUEST"}, {"a": 1}, "amqp:not-implemented"),
            ({}, {"$contribution": "c1"}, "amqp:decode-error"),
        ):
            bad = carol.contribute("/weather/x", fields, extra=extra)
            assert (bad.accepted, bad.condition) == (False, condition), (extra, bad)
        bad_topic = carol.contribute("/weather/#", {"a": 1})
        assert (bad_topic.accepted, bad_topic.condition) == (False, "amqp:decode-error")
        good = carol.contribute("/weather/x", {"a": 1})
        assert good.accepted, good
    assert [c.contributor for c in owner.seen] == [CAROL]  # nothing refused reached it
    assert journal.high_water(SOURCE) == good.source_seq


def test_the_owner_refuses_and_an_absent_owner_is_said_so(
    served: ComponentProcess, journal: Journal,
) -> None:
    url = served.url
    with Contributor(url, SOURCE, security=client_security(BOB)) as bob:
        absent = bob.contribute("/weather/x", {"a": 1})
        assert (absent.accepted, absent.condition) == (False, "seqrepair:contribution-refused")
        assert "not connected" in absent.reason
        own = Owner(url, rule=lambda c: "no thanks" if c.fields.get("a") == 2 else True)
        try:
            own.wait_attached(served)
            no = bob.contribute("/weather/x", {"a": 2})
            assert (no.accepted, no.condition, no.reason) == (
                False, "seqrepair:contribution-refused", "no thanks")
            yes = bob.contribute("/weather/x", {"a": 3})
            assert (yes.accepted, yes.source_seq) == (True, 1)
        finally:
            own.close()
    assert journal.high_water(SOURCE) == 1
    # another principal may not take the owner's contributions
    assert _owner_link(url, MALLORY) == "amqp:unauthorized-access"
    assert _owner_link(url, ALICE) is None


def test_a_contributor_over_its_rate_is_throttled_and_nobody_else_is(
    served: ComponentProcess, owner: Owner, journal: Journal,
) -> None:
    """bob floods (burst 10, 5/s); carol's contributions and alice's own publishing to a
    subscriber go on, complete and in order."""
    url = served.url
    reader = Reader(url, "reader-2")
    flood: list[Any] = []
    stop = threading.Event()

    span: list[float] = []

    def flooding() -> None:
        with Contributor(url, SOURCE, security=client_security(BOB)) as bob:
            started = time.monotonic()
            while not stop.is_set() and len(flood) < 400:
                flood.append(bob.contribute("/weather/bob", {"n": len(flood)}))
            span.append(time.monotonic() - started)

    thread = threading.Thread(target=flooding)
    thread.start()
    try:
        with Contributor(url, SOURCE, security=client_security(CAROL)) as carol:
            carols = []
            for i in range(6):
                owner.publisher.publish("/weather/own", {"i": i})
                carols.append(carol.contribute("/weather/carol", {"i": i}))
                time.sleep(0.25)  # within carol's 5/s
        assert owner.publisher.flush(20)
    finally:
        stop.set()
        thread.join(60)
    assert all(r.accepted for r in carols), carols
    throttled = [r for r in flood if r.condition == "amqp:resource-limit-exceeded"]
    taken = [r for r in flood if r.accepted]
    assert throttled, flood[:5]
    assert len(taken) <= 10 + 5 * span[0] + 1  # the burst plus the rate over its run
    assert {r.condition for r in flood} <= {None, "amqp:resource-limit-exceeded"}
    hw = journal.high_water(SOURCE)
    assert hw == 6 + len(carols) + len(taken)
    try:
        assert wait_for(lambda: len(reader.of(SOURCE)) >= hw, 30)
        mine = reader.of(SOURCE)
        assert [p.source_seq for p in mine] == list(range(1, hw + 1))  # once, in order
        assert [p.fields["i"] for p in mine if p.topic == "/weather/own"] == list(range(6))
        assert [p.fields["i"] for p in mine if p.topic == "/weather/carol"] == list(range(6))
    finally:
        reader.sub.stop()


def _publish_fields(url: str, principal: str, source: str, seq: int | None,
                    fields: dict[str, Any]) -> str | None:
    """Publish one publication with ``fields`` as ``principal`` (``seq`` None: a plain one the
    component numbers): the condition it was rejected with (None: accepted)."""
    conn = BlockingConnection(url, timeout=10, **amqp_identity(principal))
    try:
        link = conn.create_sender("/weather/#").link
        conn.wait(lambda: link.credit > 0, timeout=10)
        message = encode(Publication("/weather/x", source, seq or 1, fields=fields))
        if seq is None:
            message.properties = {k: v for k, v in message.properties.items()
                                  if k not in ("source_seq", "source_bits")}
        delivery = link.send(message)
        conn.wait(lambda: delivery.remote_state in (Delivery.ACCEPTED, Delivery.REJECTED),
                  timeout=10)
        if delivery.remote_state == Delivery.ACCEPTED:
            return None
        return str(delivery.remote.condition.name)
    finally:
        conn.close()


def _owner_link(url: str, principal: str) -> str | None:
    """Attach a link from ``$contributions/feed.alice`` as ``principal``: the condition that
    refused it (None: attached)."""
    conn = BlockingConnection(url, timeout=10, **amqp_identity(principal))
    try:
        conn.create_receiver("$contributions/" + SOURCE, credit=1)
    except LinkDetached as exc:
        return str(exc.condition)
    finally:
        conn.close()
    return None



def test_the_contribute_command_prints_each_answer_and_exits_by_them(
    served: ComponentProcess, tmp_path: Path, journal: Journal,
) -> None:
    def contribute(principal: str, *args: str) -> subprocess.CompletedProcess[str]:
        secret = tmp_path / f"pw-{principal}"
        secret.write_text(password(principal))
        return subprocess.run(
            [sys.executable, "-m", "seqrepair.cli", "contribute", "--url", served.url,
             "--source", SOURCE, "--user", principal, "--password-file", str(secret), *args],
            env=_env(), capture_output=True, text=True, timeout=60)

    absent = contribute(BOB, "--topic", "/weather/x", "--fields", '{"a": 1}')
    assert absent.returncode == 1, absent.stderr
    assert json.loads(absent.stdout)["condition"] == "seqrepair:contribution-refused"
    own = Owner(served.url)
    try:
        own.wait_attached(served)
        lines = tmp_path / "contributions.jsonl"
        lines.write_text('{"topic": "/weather/a", "fields": {"v": 1}}\n'
                         '{"topic": "/weather/b", "fields": {"v": 2}, "ptype": "correction"}\n')
        done = contribute(CAROL, "--file", str(lines))
        assert done.returncode == 0, done.stderr
        answers = [json.loads(line) for line in done.stdout.splitlines()]
        assert [(a["accepted"], a["source_seq"]) for a in answers] == [(True, 1), (True, 2)]
        [_, second] = journal.read_range(SOURCE, 1, 2)
        assert (second.ptype.value, contributor_of(second)) == ("correction", CAROL)
        refused = contribute(MALLORY, "--topic", "/weather/x")
        assert refused.returncode == 1
        assert "amqp:unauthorized-access" in refused.stderr
        bad = contribute(CAROL, "--topic", "/weather/#")
        assert bad.returncode == 2, bad.stderr
    finally:
        own.close()


def test_a_reload_that_takes_a_source_from_its_owner_detaches_its_contributions_link(
    served: ComponentProcess, owner: Owner, tmp_path: Path, journal: Journal,
) -> None:
    assert _publish_fields(served.url, MALLORY, SOURCE, 1, {"n": 0}) == (
        "amqp:unauthorized-access")
    # the source is bob's now
    (tmp_path / "policy.toml").write_text(POLICY.replace(
        f'actors = ["{ALICE}"]\noperations = ["own-source"]',
        f'actors = ["{BOB}"]\noperations = ["own-source"]'))
    assert served.proc is not None
    served.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: owner.publisher.error is not None, 20), served.log_text()[-2000:]
    assert "amqp:unauthorized-access" in owner.publisher.error.message
    assert _publish_fields(served.url, ALICE, SOURCE, 1, {"n": 0}) == "amqp:unauthorized-access"
    assert _publish_fields(served.url, MALLORY, SOURCE, 1, {"n": 0}) == (
        "amqp:unauthorized-access")
    assert _publish_fields(served.url, BOB, SOURCE, 1, {"n": 0}) is None
    assert journal.high_water(SOURCE) == 1
    assert _owner_link(served.url, BOB) is None


CONTRIBUTION_TABLE = ("address", "property", "AMQP type", "presence", "meaning")


def test_an_owner_that_does_not_answer_is_timed_out_and_its_messages_are_as_documented(
    served: ComponentProcess,
) -> None:
    """A raw owner link takes a contribution and never settles it: the contributor is refused
    after --contribution-timeout (3 s). What the owner got has the documented properties."""
    from .test_wire_doc import amqp_type, code, documented_type, table

    documented = {(code(row[0]), code(row[1])): documented_type(row[2])
                  for row in table(CONTRIBUTION_TABLE)}
    conn = BlockingConnection(served.url, timeout=10, **amqp_identity(ALICE))
    try:
        silent = conn.create_receiver("$contributions/" + SOURCE, credit=5)
        with Contributor(served.url, SOURCE, security=client_security(BOB)) as bob:
            started = time.monotonic()
            result = bob.contribute("/weather/x", {"a": 1}, timeout=20)
            waited = time.monotonic() - started
            handed = silent.receive(timeout=5)  # came before the timeout
            accepted_props = _accepted_answer(served, bob)
        assert (result.accepted, result.condition) == (False, "seqrepair:contribution-refused")
        assert "did not answer within 3 s" in result.reason
        assert 2.5 < waited < 15
        props = dict(handed.properties)
        assert props["contributor"] == BOB
        assert props["contribution"] == result.contribution
        assert "source_seq" not in props
        assert handed.body == {"a": 1}
        for name in ("contributor", "contribution"):
            assert amqp_type(props[name]) == documented[("$contributions/<source>", name)]
        for name, value in accepted_props.items():
            assert amqp_type(value) == documented[("$link/<name>", name)], name
        assert {n for a, n in documented if a == "$link/<name>"} == set(accepted_props)
    finally:
        conn.close()


def _accepted_answer(served: ComponentProcess, bob: Contributor) -> dict[str, Any]:
    """The properties of a ``CONTRIBUTION-ACCEPTED`` answer (an owner that takes it)."""
    own = Owner(served.url)
    try:
        own.wait_attached(served)
        mid = "probe-1"
        message = Message(id=mid, reply_to=bob._reply_to, body={"b": 2},
                          properties={"message-type": "PUBLICATION", "topic": "/weather/y"})
        link = bob._sender.link
        delivery = link.send(message)
        bob._conn.wait(lambda: delivery.remote_state == Delivery.ACCEPTED, timeout=20)
        answer = bob._answers.receive(timeout=10)
        assert answer.correlation_id == mid
        props = dict(answer.properties)
        assert props.pop("message-type") == "CONTRIBUTION-ACCEPTED"
        assert answer.body is None
        return props
    finally:
        own.close()


def test_nobody_takes_the_contributions_of_a_source_nobody_owns(served: ComponentProcess) -> None:
    """A source no ``own-source`` names is anyone's to publish under: before, it was anyone's
    to take the contributions of too, so the first principal to attach
    ``$contributions/feed.open`` (mallory) read what bob contributed to it."""
    url = served.url
    assert refusal(url, "$contributions/feed.open", MALLORY) == "amqp:unauthorized-access"
    assert refusal(url, "$contributions/feed.alice", MALLORY) == "amqp:unauthorized-access"
    assert refusal(url, "$contributions/feed.alice", ALICE) is None
    with Contributor(url, "feed.open", security=client_security(BOB)) as bob:
        result = bob.contribute("/weather/wind/LEMD", {"speed": 1})
    assert not result.accepted  # no owner is connected, none can be


def test_a_contributor_over_its_rate_through_several_connections_is_throttled_as_one(
    served: ComponentProcess, owner: Owner, journal: Journal,
) -> None:
    """bob floods through three connections at once: his rate is his principal's (burst 10,
    5/s), not each connection's, so all three together get no more than one would."""
    url = served.url
    results: list[list[Any]] = [[], [], []]
    spans: list[float] = []
    started = time.monotonic()

    def flooding(out: list[Any]) -> None:
        with Contributor(url, SOURCE, security=client_security(BOB)) as bob:
            while len(out) < 150:
                out.append(bob.contribute("/weather/bob", {"n": len(out)}))
        spans.append(time.monotonic() - started)

    threads = [threading.Thread(target=flooding, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(spans) == 3
    flood = [r for out in results for r in out]
    taken = [r for r in flood if r.accepted]
    assert {r.condition for r in flood} <= {None, "amqp:resource-limit-exceeded"}
    assert [r for r in flood if r.condition == "amqp:resource-limit-exceeded"]
    # one principal's bucket over the whole run, whatever the connections
    assert len(taken) <= 10 + 5 * max(spans) + 1, (len(taken), max(spans))
    assert journal.high_water(SOURCE) == len(taken)
