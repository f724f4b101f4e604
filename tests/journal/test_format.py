"""The fixed journal format: entries and archive rows round-trip, malformed ones raise."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.errors import JournalCorruptError
from seqrepair.journal.format import (
    archive_path,
    check_source,
    decode_archive_table,
    decode_entry,
    encode_archive_table,
    encode_entry,
    meta_key,
    stream_key,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**62), 2**62)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)

publications = st.builds(
    Publication,
    topic=st.sampled_from(["/weather/wind/LEMD", "/weather/rain/EGLL", "/news/é"]),
    source=st.just("feed.a"),
    source_seq=st.integers(1, 2**53 - 1),
    ptype=st.sampled_from(list(PublishType)),
    fields=st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=4),
    permtoken=st.none() | st.text(min_size=1, max_size=5),
    timestamp=st.none() | st.floats(0, 2e9),
)


def test_keys_share_a_cluster_hash_tag() -> None:
    assert stream_key("feed.a") == "seqrepair:{feed.a}:journal"
    assert meta_key("feed.a") == "seqrepair:{feed.a}:meta"


@pytest.mark.parametrize("name", [".", "..", "}feed", "feed}", "{feed}", "a{b"])
def test_a_source_name_that_would_break_its_keys_or_archive_folder_is_refused(
    name: str, tmp_path
) -> None:
    with pytest.raises(InvalidMessageError, match="source name"):
        check_source(name)
    with pytest.raises(InvalidMessageError):
        archive_path(tmp_path, name, 1, 2)


def test_archive_path_quotes_the_source(tmp_path) -> None:
    path = archive_path(tmp_path, "feed/a b", 1, 42)
    assert (
        path == tmp_path / "feed%2Fa%20b" / "seq-00000000000000000001-00000000000000000042.parquet"
    )


@settings(deadline=None)
@given(publications, st.sampled_from([3, 16, 32, 64]))
def test_entry_round_trip(pub: Publication, bits: int) -> None:
    entry = encode_entry(pub, bits)
    assert all(isinstance(v, str) for v in entry.values())
    assert ("permtoken" in entry) == (pub.permtoken is not None)
    assert ("ts" in entry) == (pub.timestamp is not None)
    raw = {k.encode(): v.encode() for k, v in entry.items()}
    assert decode_entry(f"{pub.source_seq}-0".encode(), raw, source="feed.a") == pub


def test_explicit_null_and_absent_field_differ() -> None:
    pub = Publication("/a", "s", 1, "update", {"gust": None})
    assert encode_entry(pub, 16)["fields"] == '{"gust":null}'
    assert decode_entry("1-0", encode_entry(pub, 16)).fields == {"gust": None}


def test_unencodable_fields_are_a_typed_error() -> None:
    with pytest.raises(InvalidMessageError):
        encode_entry(Publication("/a", "s", 1, "update", {"x": {1, 2}}), 16)
    with pytest.raises(InvalidMessageError):
        encode_entry(Publication("/a", "s", 1, "update", {"x": float("nan")}), 16)


@pytest.mark.parametrize(
    ("entry", "change"),
    [
        ("7-1", {}),
        ("x-0", {}),
        ("7-0", {"wire": "8"}),
        ("7-0", {"ptype": "bogus"}),
        ("7-0", {"fields": "[1]"}),
        ("7-0", {"fields": "{"}),
        ("7-0", {"source": "other"}),
        ("7-0", {"bits": "99"}),
    ],
)
def test_malformed_entries_raise_corrupt(entry: str, change: dict[str, str]) -> None:
    values = encode_entry(Publication("/a", "feed.a", 7, "update", {}), 16) | change
    with pytest.raises(JournalCorruptError):
        decode_entry(entry, values, source="feed.a")


@settings(deadline=None)
@given(st.lists(publications, min_size=1, max_size=5))
def test_archive_table_round_trip(pubs: list[Publication]) -> None:
    table = encode_archive_table(pubs, 16)
    assert table.schema.field("fields").type.key_type.equals(table.schema.field("topic").type)
    assert decode_archive_table(table) == pubs


def test_archive_file_columns(tmp_path) -> None:
    pubs = [Publication("/a", "feed.a", 70000, "image", {"g": None}, permtoken="t", timestamp=1.5)]
    path = tmp_path / "x.parquet"
    pq.write_table(encode_archive_table(pubs, 16), path)
    row = pq.read_table(path).to_pylist()[0]
    assert row == {
        "source": "feed.a",
        "seq": 70000,
        "wire_seq": 70000 - 65535,
        "bits": 16,
        "topic": "/a",
        "ptype": "image",
        "fields": [("g", "null")],
        "permtoken": "t",
        "timestamp": 1.5,
    }
