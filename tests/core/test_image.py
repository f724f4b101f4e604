"""The image cache: what each publish type does to an item (XEP-0040 §3)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.image import ImageCache, ItemImage
from seqrepair.core.messages import Publication, PublishType

TOPIC = "/weather/wind/LEMD"
_seq = itertools.count(1)


def pub(
    ptype: PublishType | str,
    fields: Mapping[str, Any] | None = None,
    *,
    topic: str = TOPIC,
    source: str = "feed.a",
    source_seq: int | None = None,
) -> Publication:
    return Publication(
        topic=topic,
        source=source,
        source_seq=next(_seq) if source_seq is None else source_seq,
        ptype=ptype,
        fields=fields or {},
    )


def cache_of(*pubs: Publication) -> ImageCache:
    cache = ImageCache()
    for p in pubs:
        cache.apply(p)
    return cache


def entry(cache: ImageCache, topic: str = TOPIC) -> ItemImage:
    found = cache.entry(topic)
    assert found is not None
    return found


# --- image -------------------------------------------------------------------------------


def test_image_creates_a_complete_item() -> None:
    cache = cache_of(pub("image", {"speed": 12, "dir": 270}))
    assert cache.get(TOPIC) == {"speed": 12, "dir": 270}
    assert not entry(cache).partial


def test_image_replaces_all_fields_and_removes_the_absent_ones() -> None:
    cache = cache_of(pub("image", {"speed": 12, "dir": 270}), pub("image", {"speed": 14}))
    assert cache.get(TOPIC) == {"speed": 14}


def test_image_with_no_fields_leaves_an_empty_item() -> None:
    cache = cache_of(pub("image", {"speed": 12}), pub("image", {}))
    assert TOPIC in cache
    assert cache.get(TOPIC) == {}


def test_add_is_read_as_image() -> None:
    cache = cache_of(pub("update", {"speed": 12, "dir": 270}), pub("add", {"speed": 14}))
    assert cache.get(TOPIC) == {"speed": 14}
    assert not entry(cache).partial


# --- update and correction ---------------------------------------------------------------


def test_update_overwrites_the_fields_it_carries_and_keeps_the_rest() -> None:
    cache = cache_of(pub("image", {"speed": 12, "dir": 270}), pub("update", {"speed": 14}))
    assert cache.get(TOPIC) == {"speed": 14, "dir": 270}
    assert not entry(cache).partial


def test_update_adds_new_fields() -> None:
    cache = cache_of(pub("image", {"speed": 12}), pub("update", {"gust": 20}))
    assert cache.get(TOPIC) == {"speed": 12, "gust": 20}


def test_correction_overwrites_like_update_and_records_the_corrected_fields() -> None:
    cache = cache_of(
        pub("image", {"speed": 12, "dir": 270, "gust": 20}),
        pub("correction", {"speed": 11}),
        pub("correction", {"dir": 260}),
    )
    assert cache.get(TOPIC) == {"speed": 11, "dir": 260, "gust": 20}
    assert entry(cache).corrected == frozenset({"speed", "dir"})


def test_a_later_update_of_a_corrected_field_is_no_longer_a_correction() -> None:
    cache = cache_of(
        pub("image", {"speed": 12, "dir": 270}),
        pub("correction", {"speed": 11, "dir": 260}),
        pub("update", {"speed": 13}),
    )
    assert entry(cache).corrected == frozenset({"dir"})


def test_an_image_clears_the_corrections() -> None:
    cache = cache_of(pub("correction", {"speed": 11}), pub("image", {"speed": 11}))
    assert entry(cache).corrected == frozenset()


@pytest.mark.parametrize("ptype", ["update", "correction"])
def test_update_or_correction_on_an_unknown_item_creates_it_partial(ptype: str) -> None:
    cache = cache_of(pub(ptype, {"speed": 12}))
    assert cache.get(TOPIC) == {"speed": 12}
    assert entry(cache).partial


def test_update_without_fields_on_an_unknown_item_still_creates_it() -> None:
    cache = cache_of(pub("update", {}))
    assert cache.get(TOPIC) == {}
    assert entry(cache).partial


def test_an_item_stays_partial_until_an_image_arrives() -> None:
    cache = cache_of(pub("update", {"speed": 12}), pub("correction", {"dir": 270}))
    assert entry(cache).partial
    cache.apply(pub("image", {"speed": 12, "dir": 270}))
    assert not entry(cache).partial
    cache.apply(pub("update", {"speed": 13}))
    assert not entry(cache).partial


# --- explicit nulls ----------------------------------------------------------------------


def test_explicit_null_is_kept_as_a_value_distinct_from_absent() -> None:
    cache = cache_of(pub("image", {"speed": 12, "gust": 20}), pub("update", {"gust": None}))
    fields = cache.get(TOPIC)
    assert fields == {"speed": 12, "gust": None}
    assert fields is not None
    assert "gust" in fields
    assert "dir" not in fields


def test_image_keeps_explicit_nulls_and_drops_absent_fields() -> None:
    cache = cache_of(pub("image", {"speed": 12, "gust": 20}), pub("image", {"gust": None}))
    assert cache.get(TOPIC) == {"gust": None}


def test_a_null_can_be_overwritten_by_a_value() -> None:
    cache = cache_of(pub("update", {"gust": None}), pub("update", {"gust": 25}))
    assert cache.get(TOPIC) == {"gust": 25}


# --- drop and snapshot -------------------------------------------------------------------


def test_drop_deletes_the_item() -> None:
    cache = cache_of(pub("image", {"speed": 12}), pub("drop"))
    assert TOPIC not in cache
    assert cache.get(TOPIC) is None
    assert cache.entry(TOPIC) is None
    assert len(cache) == 0


def test_drop_of_an_unknown_item_does_nothing() -> None:
    cache = cache_of(pub("image", {"speed": 12}, topic="/other"), pub("drop"))
    assert cache.snapshot() == {"/other": {"speed": 12}}


def test_an_update_after_a_drop_starts_a_new_partial_item() -> None:
    cache = cache_of(pub("image", {"speed": 12, "dir": 270}), pub("drop"), pub("update", {"x": 1}))
    assert cache.get(TOPIC) == {"x": 1}
    assert entry(cache).partial


@pytest.mark.parametrize("fields", [{}, {"speed": 99}])
def test_snapshot_is_a_request_and_changes_nothing(fields: dict[str, Any]) -> None:
    cache = cache_of(pub("image", {"speed": 12}))
    before = cache.entry(TOPIC)
    cache.apply(pub("snapshot", fields))
    cache.apply(pub("snapshot", fields, topic="/unknown"))
    assert cache.entry(TOPIC) is before
    assert cache.snapshot() == {TOPIC: {"speed": 12}}


# --- provenance --------------------------------------------------------------------------


def test_field_seq_records_the_publication_that_last_set_each_field() -> None:
    cache = cache_of(
        pub("image", {"speed": 12, "dir": 270}, source="feed.a", source_seq=7),
        pub("update", {"speed": 13}, source="feed.b", source_seq=3),
        pub("correction", {"gust": None}, source="feed.a", source_seq=8),
    )
    assert entry(cache).field_seq == {
        "speed": ("feed.b", 3),
        "dir": ("feed.a", 7),
        "gust": ("feed.a", 8),
    }


def test_an_image_resets_field_seq_to_its_own_fields() -> None:
    cache = cache_of(
        pub("update", {"speed": 12, "dir": 270}, source_seq=1),
        pub("image", {"speed": 12}, source_seq=2),
    )
    assert entry(cache).field_seq == {"speed": ("feed.a", 2)}


# --- the container -----------------------------------------------------------------------


def test_items_are_keyed_by_topic_and_independent() -> None:
    cache = cache_of(
        pub("image", {"speed": 12}, topic="/weather/wind/LEMD"),
        pub("image", {"mm": 3}, topic="/weather/precipitation/LFPG"),
        pub("update", {"speed": 14}, topic="/weather/wind/LEMD"),
        pub("drop", topic="/weather/precipitation/LFPG"),
        pub("update", {"speed": 5}, topic="/weather/wind/LFPG"),
    )
    assert cache.snapshot() == {
        "/weather/wind/LEMD": {"speed": 14},
        "/weather/wind/LFPG": {"speed": 5},
    }


def test_items_len_contains_and_iter() -> None:
    cache = cache_of(pub("image", {"a": 1}, topic="/b"), pub("update", {"b": 2}, topic="/a"))
    assert len(cache) == 2
    assert "/a" in cache
    assert "/c" not in cache
    assert ["/x"] not in cache  # an unhashable key is simply not there
    assert list(cache) == ["/a", "/b"]
    assert [(topic, dict(fields)) for topic, fields in cache.items()] == [
        ("/a", {"b": 2}),
        ("/b", {"a": 1}),
    ]


def test_unknown_topics_give_none() -> None:
    cache = ImageCache()
    assert cache.get("/nothing") is None
    assert cache.entry("/nothing") is None
    assert cache.get(["/x"]) is None  # type: ignore[arg-type]
    assert cache.snapshot() == {}
    assert list(cache.items()) == []


def test_returned_fields_are_read_only() -> None:
    cache = cache_of(pub("image", {"speed": 12}))
    fields = cache.get(TOPIC)
    with pytest.raises(TypeError):
        fields["speed"] = 0  # type: ignore[index]
    assert cache.get(TOPIC) == {"speed": 12}


def test_returned_values_do_not_change_when_later_publications_arrive() -> None:
    cache = cache_of(pub("image", {"speed": 12}))
    fields, item = cache.get(TOPIC), cache.entry(TOPIC)
    cache.apply(pub("update", {"speed": 13, "dir": 1}))
    cache.apply(pub("correction", {"speed": 11}))
    assert fields == {"speed": 12}
    assert item is not None
    assert item.fields == {"speed": 12}
    assert item.corrected == frozenset()
    assert item.field_seq.keys() == {"speed"}


def test_item_image_is_frozen() -> None:
    item = entry(cache_of(pub("image", {"speed": 12})))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        item.partial = True  # type: ignore[misc]


def test_snapshot_is_an_independent_plain_copy() -> None:
    cache = cache_of(pub("image", {"speed": 12}))
    snap = cache.snapshot()
    assert type(snap[TOPIC]) is dict
    snap[TOPIC]["speed"] = 0
    assert cache.get(TOPIC) == {"speed": 12}


def test_publications_are_applied_in_the_order_given() -> None:
    # Ordering is the stub's job: an older source_seq applied later still wins.
    cache = cache_of(
        pub("update", {"speed": 13}, source_seq=9), pub("update", {"speed": 12}, source_seq=8)
    )
    assert cache.get(TOPIC) == {"speed": 12}


@pytest.mark.parametrize("bad", [None, {"topic": TOPIC}, "image", 42])
def test_apply_rejects_anything_but_a_publication_and_leaves_the_cache_intact(
    bad: object,
) -> None:
    cache = cache_of(pub("image", {"speed": 12}))
    with pytest.raises(InvalidMessageError) as info:
        cache.apply(bad)  # type: ignore[arg-type]
    assert info.value.expected == "Publication"
    assert info.value.got == type(bad).__name__
    assert cache.snapshot() == {TOPIC: {"speed": 12}}


# --- properties against a reference model ------------------------------------------------


@attrs.define
class ModelItem:
    fields: dict[str, Any]
    partial: bool
    corrected: set[str]
    field_seq: dict[str, tuple[str, int]]


def model_apply(model: dict[str, ModelItem], p: Publication) -> None:
    """The rules of XEP-0040 §3 written as plainly as possible."""
    kind = p.ptype
    if kind is PublishType.SNAPSHOT:
        return
    if kind is PublishType.DROP:
        if p.topic in model:
            del model[p.topic]
        return
    if kind is PublishType.IMAGE:
        model[p.topic] = ModelItem(fields={}, partial=False, corrected=set(), field_seq={})
    elif p.topic not in model:
        model[p.topic] = ModelItem(fields={}, partial=True, corrected=set(), field_seq={})
    item = model[p.topic]
    for name, value in p.fields.items():
        item.fields[name] = value
        item.field_seq[name] = (p.source, p.source_seq)
        if kind is PublishType.CORRECTION:
            item.corrected.add(name)
        else:
            item.corrected.discard(name)


field_values = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=2))
field_maps = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), field_values, max_size=4)
publications = st.builds(
    lambda topic, source, ptype, fields: (topic, source, ptype, fields),
    st.sampled_from(["/x", "/y", "/x/z"]),
    st.sampled_from(["feed.a", "feed.b"]),
    st.sampled_from(list(PublishType)),
    field_maps,
)


def stream(raw: list[tuple[str, str, PublishType, dict[str, Any]]]) -> list[Publication]:
    return [
        Publication(topic=t, source=s, source_seq=n, ptype=k, fields=f)
        for n, (t, s, k, f) in enumerate(raw, start=1)
    ]


@settings(deadline=None)  # cold hypothesis caches can make the first example slow
@given(st.lists(publications, max_size=40))
def test_cache_agrees_with_the_reference_model(
    raw: list[tuple[str, str, PublishType, dict[str, Any]]],
) -> None:
    cache = ImageCache()
    model: dict[str, ModelItem] = {}
    for p in stream(raw):
        cache.apply(p)
        model_apply(model, p)
        assert cache.snapshot() == {topic: item.fields for topic, item in model.items()}
    assert len(cache) == len(model)
    for topic, item in model.items():
        got = entry(cache, topic)
        assert dict(got.fields) == item.fields
        assert got.partial is item.partial
        assert got.corrected == item.corrected
        assert dict(got.field_seq) == item.field_seq


@settings(deadline=None)
@given(st.lists(publications, max_size=20), field_maps)
def test_an_image_erases_all_history(
    raw: list[tuple[str, str, PublishType, dict[str, Any]]], image: dict[str, Any]
) -> None:
    cache = cache_of(*stream(raw))
    cache.apply(pub("image", image, topic="/x", source="feed.c", source_seq=1))
    assert entry(cache, "/x") == ItemImage(
        fields=image,
        partial=False,
        corrected=frozenset(),
        field_seq=dict.fromkeys(image, ("feed.c", 1)),
    )


def test_items_is_a_list_that_can_be_measured_and_read_twice() -> None:
    cache = cache_of(pub("image", {"a": 1}, topic="/b"), pub("image", {"a": None}, topic="/a"))
    items = cache.items()
    assert len(items) == 2
    assert [(topic, dict(fields)) for topic, fields in items] == [("/a", {"a": None}),
                                                                  ("/b", {"a": 1})]
    assert dict(items) == dict(cache.items())
