"""``PUT`` and ``DELETE /topics/<topic>`` on a real ``seqrepair serve --rest``: a declared topic
is listed before anything is published on it and after a restart; a deleted one is not listed
again after a restart (nor a crash), unless it is published again.

Real parts only: ``seqrepair serve`` as a process, a private redis-server, a publisher over
proton, HTTP through ``http.client``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.journal.journal import Journal
from seqrepair.journal.topicstore import DECLARED_SUFFIX, TOPICS_KEY

from .conftest import ComponentProcess, FreePort, wait_for
from .test_rest_serve import Rest, rows

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

DECLARED = "/weather/declared/LEMD"
GONE = "/weather/gone/LEMD"  # declared, then deleted, never published
RAIN = "/weather/rain/LEMD"  # published, then deleted, then published again
PUBLISHED = ["/weather/rain/LEMD", "/weather/rain/LFPG", "/weather/wind/LEMD"]  # rows()'


def path(topic: str) -> str:
    return "/topics/" + topic.replace("/", "%2F")


def members(client: redis.Redis, key: str) -> set[str]:
    return {member.decode() for member in client.smembers(key)}  # type: ignore[union-attr]


def test_a_declared_topic_survives_a_restart_and_a_deleted_one_comes_back_only_if_published(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    rest_port = FreePort()
    comp = component("--rest", rest_port, "--topic", "/flight/LEMD")
    port = rest_port.number
    rest = Rest(port)
    client = redis.Redis.from_url(redis_url)
    journal = Journal.from_url(redis_url)
    try:
        status, declared = rest("PUT", path(DECLARED), {})
        assert (status, declared) == (201, {"topic": DECLARED, "declared": True,
                                            "configured": False, "published": False,
                                            "subscriptions": []})
        assert rest("PUT", path(DECLARED), {}) == (200, declared)
        assert rest("PUT", path(GONE))[0] == 201  # no body: Content-Length: 0
        assert rest("GET", "/topics")[1]["topics"] == ["/flight/LEMD", DECLARED, GONE]

        with Publisher(comp.url, "feed.t", journal=journal) as publisher:
            publisher.publish_many(rows(0, 30))
            assert publisher.flush(30)
        assert wait_for(lambda: members(client, TOPICS_KEY) == set(PUBLISHED))

        assert rest("DELETE", path(GONE))[0] == 200
        status, deleted = rest("DELETE", path(RAIN))
        assert (status, deleted["published"]) == (200, True)
        status, error = rest("DELETE", path("/flight/LEMD"))
        assert (status, error["error"]) == (409, "conflict")  # the command line's
        assert members(client, TOPICS_KEY) == set(PUBLISHED) - {RAIN}
        assert members(client, TOPICS_KEY + DECLARED_SUFFIX) == {DECLARED}
        listed = ["/flight/LEMD", DECLARED, "/weather/rain/LFPG", "/weather/wind/LEMD"]
        assert rest("GET", "/topics")[1]["topics"] == listed
        # the journal keeps the deleted topic's publications: retention governs them
        assert sum(pub.topic == RAIN for pub in journal.read_after("feed.t", 0)) == 10

        comp.stop()
        comp.start()
        assert rest("GET", "/topics")[1]["topics"] == listed
        assert rest("GET", path(DECLARED)) == (200, declared)
        assert rest("GET", path(GONE))[0] == 404
        assert rest("GET", path(RAIN))[0] == 404

        # published again, the deleted topic is learned again (and stored again)
        with Publisher(comp.url, "feed.t", journal=journal) as publisher:
            publisher.publish_many([(RAIN, {"n": 30}, "update", None),
                                    (DECLARED, {"n": 31}, "update", None)])
            assert publisher.flush(30)
        relisted = sorted([*listed, RAIN])
        assert wait_for(lambda: rest("GET", "/topics")[1]["topics"] == relisted)
        assert wait_for(lambda: members(client, TOPICS_KEY) == {*PUBLISHED, DECLARED})
        assert rest("GET", path(DECLARED))[1]["published"] is True

        comp.kill()
        comp.start()
        assert rest("GET", "/topics")[1]["topics"] == relisted
        assert rest("GET", path(GONE))[0] == 404
        assert rest("GET", path(RAIN))[1] == {"topic": RAIN, "declared": False,
                                              "configured": False, "published": True,
                                              "subscriptions": []}
    finally:
        journal.close()
        client.close()
