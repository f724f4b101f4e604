"""The audit's text summary: full column names, numbers aligned under them (no Spark needed)."""

from seqrepair.spark.audit import format_summary

DIGEST = {
    "sources": [
        {"source": "feed.a", "bits": 8, "publications": 1200, "first_seq": 1, "last_seq": 1203,
         "gap_count": 1, "gap_numbers": 3, "trimmed_numbers": 0, "duplicates": 2,
         "out_of_order": 5, "update": 1000, "correction": 100, "image": 90, "drop": 10,
         "snapshot": 0},
    ],
    "items": {"items": 7, "never_imaged": 1, "corrected_items": 3, "corrections": 100,
              "dropped_items": 2, "drops": 10},
    "gaps": [{"source": "feed.a", "first": 17, "last": 19, "count": 3, "kind": "gap"}],
}


def test_the_summary_names_every_column_in_full_and_aligns_the_numbers_under_it():
    lines = format_summary(DIGEST).splitlines()
    header, rule, row = lines[1], lines[2], lines[3]
    assert header.split() == [
        "source", "bits", "publications", "first", "last", "gaps", "missing", "trimmed",
        "not-selected", "duplicates", "out-of-order", "update", "correction", "image", "drop",
        "snapshot",
    ]
    assert len(header) == len(rule) == len(row)
    # each number ends where its column's name ends (right-aligned)
    for name, value in (("publications", "1200"), ("duplicates", "2"), ("out-of-order", "5"),
                        ("correction", "100")):
        assert row[: header.index(name) + len(name)].endswith(value)
    assert "Items: 7 live or dropped, 1 never imaged, 3 corrected (100 corrections)" in lines[5]
    assert lines[-1] == "  feed.a: 17..19 (3, gap)"


def test_a_relays_not_selected_ranges_are_a_section_of_their_own():
    relay = {
        **DIGEST,
        "sources": [{**DIGEST["sources"][0], "not_selected_numbers": 40}],
        "not_selected": [
            {"source": "feed.a", "first": 20, "last": 59, "count": 40, "kind": "not-selected"}
        ],
    }
    lines = format_summary(relay).splitlines()
    header, row = lines[1], lines[3]
    name = "not-selected"
    assert row[: header.index(name) + len(name)].endswith("40")
    gaps = lines.index("Missing ranges (first 1):")
    chosen = lines.index("Not selected by a relay (first 1):")
    assert lines[gaps + 1] == "  feed.a: 17..19 (3, gap)"
    assert gaps < chosen
    assert lines[chosen + 1:] == ["  feed.a: 20..59 (40, not-selected)"]
