"""The Spark image rebuild agrees with the core ImageCache (XEP-0040 §3)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqrepair.core.messages import Publication, PublishType
from seqrepair.spark.rebuild import (
    DEFAULT_BLOCK_SIZE,
    IMAGE_COLUMNS,
    collect_images,
    event_keys,
    event_order,
    rebuild_images,
)

from .journals import (
    actual_images,
    entries_of,
    expected_images,
    fold,
    fold_in_seq_order,
    journals,
    to_frame,
)

pytestmark = pytest.mark.spark

FORBIDDEN_PLAN_NODES = ("PythonUDF", "BatchEvalPython", "ArrowEvalPython", "PythonUDTF")


def pub(seq, ptype, fields=None, *, topic="/t", source="feed.a", ts=None):
    return Publication(
        topic=topic, source=source, source_seq=seq, ptype=ptype, fields=fields or {}, timestamp=ts
    )


def images_of(spark, pubs, bits=16, **kwargs):
    return actual_images(rebuild_images(to_frame(spark, [(p, bits) for p in pubs]), **kwargs))


def test_image_update_correction_drop_semantics(spark):
    U, C, IMG, D = PublishType.UPDATE, PublishType.CORRECTION, PublishType.IMAGE, PublishType.DROP
    pubs = [
        pub(1, U, {"a": 1, "b": 2}),  # creates /t, partial
        pub(2, IMG, {"a": 10, "c": None}),  # replaces: b removed, explicit null kept
        pub(3, C, {"c": 3}),
        pub(4, U, {"a": 11}),
        pub(5, U, {"x": 1}, topic="/gone"),
        pub(6, D, topic="/gone"),
        pub(7, D, topic="/back"),
        pub(8, U, {"z": None}, topic="/back"),  # re-created after a drop: partial again
        pub(9, PublishType.SNAPSHOT, topic="/t"),
        pub(10, U, {}, topic="/empty"),  # an update with no fields still creates the item
    ]
    got = images_of(spark, pubs)
    assert got == {
        "/t": {
            "fields": {"a": 11, "c": 3},
            "partial": False,
            "provenance": {"a": ("feed.a", 4, False), "c": ("feed.a", 3, True)},
        },
        "/back": {
            "fields": {"z": None},
            "partial": True,
            "provenance": {"z": ("feed.a", 8, False)},
        },
        "/empty": {"fields": {}, "partial": True, "provenance": {}},
    }
    assert got == expected_images(pubs)
    frame = to_frame(spark, [(p, 16) for p in pubs])
    assert collect_images(rebuild_images(frame)) == fold(pubs).snapshot()


def test_explicit_null_is_distinct_from_absent(spark):
    frame = rebuild_images(
        to_frame(spark, [(pub(1, PublishType.IMAGE, {"gust": None, "speed": 12}), 16)])
    )
    row = frame.collect()[0]
    assert row["fields"] == {"gust": "null", "speed": "12"}
    assert tuple(frame.columns) == IMAGE_COLUMNS


def test_ordering_across_sources_is_time_then_source_then_seq(spark):
    U = PublishType.UPDATE
    pubs = [
        pub(1, U, {"v": "a-late"}, source="feed.a", ts=5.0),
        pub(1, U, {"v": "b-early"}, source="feed.b", ts=1.0),
        pub(2, U, {"w": "b-tie"}, source="feed.b", ts=5.0),  # same time as feed.a 1: b > a
        pub(2, U, {"w": "a-tie"}, source="feed.a", ts=5.0),
    ]
    got = images_of(spark, pubs)["/t"]["fields"]
    assert got == {"v": "a-late", "w": "b-tie"}
    assert [(p.source, p.source_seq) for p in event_order(pubs)] == [
        ("feed.b", 1),
        ("feed.a", 1),
        ("feed.a", 2),
        ("feed.b", 2),
    ]


@pytest.mark.parametrize("block_size", [1, DEFAULT_BLOCK_SIZE])
def test_one_source_is_applied_in_sequence_order_whatever_its_timestamps(spark, block_size):
    U, IMG = PublishType.UPDATE, PublishType.IMAGE
    pubs = [
        pub(1, IMG, {"a": 1}, ts=10.0),
        pub(2, U, {"a": 2}, ts=5.0),  # stamped back: still after 1
        pub(3, IMG, {"b": 1}, topic="/m"),  # untimed
        pub(4, U, {"b": 2}, topic="/m", ts=3.0),
        pub(5, U, {"b": 3, "c": 3}, topic="/m"),  # untimed: still after 4
        pub(6, U, {"c": 4}, topic="/m", ts=1.0),
    ]
    got = images_of(spark, pubs, block_size=block_size)
    assert got["/t"]["fields"] == {"a": 2}
    assert got["/m"]["fields"] == {"b": 3, "c": 4}
    assert got == entries_of(fold_in_seq_order(pubs)) == expected_images(pubs)
    assert event_order(pubs) == sorted(pubs, key=lambda p: p.source_seq)


def test_effective_time_orders_sources(spark):
    """Each publication counts at the running maximum of its source's timestamps."""
    U = PublishType.UPDATE
    pubs = [
        pub(1, U, {"v": "a1"}, source="feed.a", ts=1.0),  # effective 1
        pub(2, U, {"v": "a2"}, source="feed.a", ts=10.0),  # effective 10
        pub(3, U, {"w": "a3"}, source="feed.a", ts=2.0),  # stamped back: effective 10
        pub(4, U, {"x": "a4"}, source="feed.a"),  # untimed: effective 10
        pub(1, U, {"w": "b1", "x": "b1"}, source="feed.b", ts=5.0),  # effective 5
        pub(2, U, {"v": "b2"}, source="feed.b", ts=11.0),  # effective 11
        pub(1, U, {"y": "c1"}, source="feed.c"),  # untimed before any timestamp: -inf
        pub(2, U, {"y": "c2"}, source="feed.c", ts=0.5),
    ]
    assert [(p.source, p.source_seq) for p in event_order(pubs)] == [
        ("feed.c", 1),
        ("feed.c", 2),
        ("feed.a", 1),
        ("feed.b", 1),
        ("feed.a", 2),
        ("feed.a", 3),
        ("feed.a", 4),
        ("feed.b", 2),
    ]
    assert [k[0] for k, _ in event_keys(pubs)] == [-float("inf"), 0.5, 1, 5, 10, 10, 10, 11]
    for block_size in (2, DEFAULT_BLOCK_SIZE):
        got = images_of(spark, pubs, block_size=block_size)
        assert got["/t"]["fields"] == {"v": "b2", "w": "a3", "x": "a4", "y": "c2"}
        assert got == expected_images(pubs)


def test_as_of_time_cuts_on_effective_time(spark):
    U, IMG = PublishType.UPDATE, PublishType.IMAGE
    pubs = [
        pub(1, IMG, {"a": 1}, ts=1.0),
        pub(2, U, {"a": 2}, ts=5.0),
        pub(3, U, {"a": 3}, ts=2.0),  # stamped before 3.0 but after seq 2 (5.0): cut
        pub(4, U, {"b": 4}),  # untimed after 5.0: cut
        pub(1, U, {"c": 1}, source="feed.b"),  # untimed, nothing before: kept
        pub(2, U, {"c": 2}, source="feed.b", ts=3.0),
        pub(3, U, {"c": 3}, source="feed.b", ts=3.5),
    ]
    got = images_of(spark, pubs, as_of_time=3.0)
    assert got["/t"]["fields"] == {"a": 1, "c": 2}
    kept = [p for key, p in event_keys(pubs) if key[0] <= 3.0]
    assert got == expected_images(kept)
    assert images_of(spark, pubs, as_of_time=0.0)["/t"]["fields"] == {"c": 1}
    for no_time in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            images_of(spark, pubs, as_of_time=no_time)


def test_as_of_sequence_and_time(spark):
    U, IMG = PublishType.UPDATE, PublishType.IMAGE
    pubs = [
        pub(1, IMG, {"a": 1}, ts=1.0),
        pub(2, U, {"a": 2}, ts=2.0),
        pub(3, U, {"a": 3}, ts=3.0),
        pub(1, U, {"b": 1}, source="feed.b", ts=2.5),
        pub(2, U, {"b": 2}, source="feed.b", ts=3.5),
    ]
    by_seq = images_of(spark, pubs, as_of_seq={"feed.a": 2, "feed.b": 1})
    assert by_seq["/t"]["fields"] == {"a": 2, "b": 1}
    by_time = images_of(spark, pubs, as_of_time=3.0)
    assert by_time["/t"]["fields"] == {"a": 3, "b": 1}
    assert by_time == expected_images([p for p in pubs if p.timestamp <= 3.0])


def test_physical_plan_has_no_python_udf(spark):
    frame = to_frame(spark, [(pub(1, PublishType.IMAGE, {"a": 1}), 16)])
    for images in (rebuild_images(frame), rebuild_images(frame, as_of_time=1.0)):
        plan = images._jdf.queryExecution().executedPlan().toString()
        assert "HashAggregate" in plan or "SortAggregate" in plan
        assert "Window" in plan  # effective times: a native running maximum
        for node in FORBIDDEN_PLAN_NODES:
            assert node not in plan


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_rebuild_agrees_with_image_cache(spark, data):
    """Many random journals per Spark job: each with its own topics and source names.

    Timestamps go backwards, repeat and go missing; the core ImageCache is fed in the
    documented event order, and a single-source journal in plain sequence order."""
    batch = [data.draw(journals(prefix=f"j{n}")) for n in range(25)]
    block_size = data.draw(st.sampled_from([1, 2, 3, DEFAULT_BLOCK_SIZE]), label="block_size")
    entries = [e for journal in batch for e in journal]
    pubs = [p for p, _ in entries]
    frame = to_frame(spark, entries)
    actual = actual_images(rebuild_images(frame, block_size=block_size))
    assert actual == expected_images(pubs)
    for journal in batch:
        mine = [p for p, _ in journal]
        if len({p.source for p in mine}) == 1:
            topics = {p.topic for p in mine}
            alone = {t: image for t, image in actual.items() if t in topics}
            assert alone == entries_of(fold_in_seq_order(mine))
    # as of the middle of every source
    cut = {}
    for p in pubs:
        cut[p.source] = max(cut.get(p.source, 0), p.source_seq)
    cut = {s: n // 2 for s, n in cut.items()}
    kept = [p for p in pubs if p.source_seq <= cut[p.source]]
    got = actual_images(rebuild_images(frame, as_of_seq=cut, block_size=block_size))
    assert got == expected_images(kept)
    # as of a time: publications whose effective time is at or before it
    when = data.draw(st.integers(0, 14).map(lambda n: n / 2), label="as_of_time")
    kept = [p for key, p in event_keys(pubs) if key[0] <= when]
    got = actual_images(rebuild_images(frame, as_of_time=when, block_size=block_size))
    assert got == expected_images(kept)


def test_wire_numbers_wrap_at_small_widths(spark):
    frame = to_frame(spark, [(pub(n, PublishType.UPDATE, {"n": n}), 2) for n in range(1, 8)])
    rows = frame.orderBy("seq").select("seq", "wire_seq").collect()
    assert [r["wire_seq"] for r in rows] == [1, 2, 3, 1, 2, 3, 1]
    images = rebuild_images(frame).collect()
    assert json.loads(images[0]["fields"]["n"]) == 7
    assert images[0]["provenance"]["n"]["seq"] == 7
