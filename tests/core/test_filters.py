"""Subscription filters: the CloudEvents Subscriptions API's ``basic`` dialect (§3.2.3).

A publication read as a CloudEvent has the attributes source, type (its publish type), subject
and topic (both its topic) and permtoken (absent when it carries none). A filter compares one of
them with a string, exactly, as a prefix or as a suffix, case-sensitively and whitespace kept;
a subscriber's filters are AND-combined with its topic patterns and permission tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidSubscriptionError
from seqrepair.core.filters import (
    ATTRIBUTES,
    MAX_FILTERS,
    MAX_VALUE_LENGTH,
    BasicFilter,
    MatchType,
    parse_filters,
    passes,
)
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.permissions import Entitlement


def pub(
    topic: str = "/weather/wind/LEMD",
    source: str = "feed.a",
    ptype: str = "correction",
    permtoken: str | None = "6747",
) -> Publication:
    return Publication(topic=topic, source=source, source_seq=1, ptype=ptype,
                       fields={"speed": 12}, permtoken=permtoken)


def expr(type: object, property: object, value: object) -> dict[str, Any]:
    return {"dialect": "basic", "type": type, "property": property, "value": value}


# --- what each filter type selects, on each attribute --------------------------------------

WIND = pub()  # /weather/wind/LEMD from feed.a, a correction carrying token 6747


@pytest.mark.parametrize(
    ("type", "property", "value", "expected"),
    [
        ("exact", "source", "feed.a", True),
        ("exact", "source", "feed", False),
        ("prefix", "source", "feed.", True),
        ("prefix", "source", "a", False),
        ("suffix", "source", ".a", True),
        ("suffix", "source", "feed", False),
        ("exact", "type", "correction", True),
        ("exact", "type", "update", False),
        ("prefix", "type", "corr", True),
        ("prefix", "type", "rection", False),
        ("suffix", "type", "rection", True),
        ("suffix", "type", "corr", False),
        ("exact", "subject", "/weather/wind/LEMD", True),
        ("exact", "subject", "/weather/wind", False),
        ("prefix", "subject", "/weather/wind/", True),
        ("prefix", "subject", "/weather/rain/", False),
        ("suffix", "subject", "/LEMD", True),
        ("suffix", "subject", "/LFPG", False),
        ("exact", "topic", "/weather/wind/LEMD", True),
        ("exact", "topic", "/weather/wind/LFPG", False),
        ("prefix", "topic", "/weather", True),
        ("prefix", "topic", "/wind", False),
        ("suffix", "topic", "wind/LEMD", True),
        ("suffix", "topic", "wind", False),
        ("exact", "permtoken", "6747", True),
        ("exact", "permtoken", "674", False),
        ("prefix", "permtoken", "67", True),
        ("prefix", "permtoken", "47", False),
        ("suffix", "permtoken", "47", True),
        ("suffix", "permtoken", "67", False),
    ],
)
def test_each_type_on_each_attribute(type: str, property: str, value: str,
                                     expected: bool) -> None:
    assert BasicFilter(type, property, value).matches(WIND) is expected


@settings(deadline=None)
@given(st.sampled_from(["exact", "prefix", "suffix"]), st.sampled_from(sorted(ATTRIBUTES)),
       st.text(max_size=8), st.sampled_from(["/weather/wind/LEMD", "/a", "/LEMD", "/a/b"]))
def test_compare_is_matches_on_the_attribute_value(type: str, property: str, value: str,
                                                   topic: str) -> None:
    f = BasicFilter(type, property, value)
    p = pub(topic=topic)
    found = ATTRIBUTES[property](p)
    assert found is not None
    assert f.compare(found) is f.matches(p)


def test_the_whole_attribute_is_a_prefix_and_a_suffix_of_itself() -> None:
    for property, value in [("source", "feed.a"), ("type", "correction"),
                            ("subject", "/weather/wind/LEMD"), ("permtoken", "6747")]:
        assert BasicFilter("prefix", property, value).matches(WIND)
        assert BasicFilter("suffix", property, value).matches(WIND)
        assert not BasicFilter("prefix", property, value + "x").matches(WIND)
        assert not BasicFilter("suffix", property, "x" + value).matches(WIND)


def test_the_empty_value_is_a_prefix_and_suffix_of_everything_but_equal_to_nothing() -> None:
    for property in ATTRIBUTES:
        assert BasicFilter("prefix", property, "").matches(WIND)
        assert BasicFilter("suffix", property, "").matches(WIND)
        assert not BasicFilter("exact", property, "").matches(WIND)


def test_subject_and_topic_both_read_the_topic() -> None:
    for topic in ["/weather/wind/LEMD", "/a", "/weather/precipitation/LFPG"]:
        p = pub(topic=topic)
        assert BasicFilter("exact", "subject", topic).matches(p)
        assert BasicFilter("exact", "topic", topic).matches(p)


@pytest.mark.parametrize("ptype", list(PublishType))
def test_type_is_the_publish_type_in_its_wire_spelling(ptype: PublishType) -> None:
    p = pub(ptype=ptype.value)
    assert BasicFilter("exact", "type", ptype.value).matches(p)
    assert not BasicFilter("exact", "type", ptype.name).matches(p)  # "UPDATE" is not "update"


def test_an_add_is_an_image() -> None:
    assert BasicFilter("exact", "type", "image").matches(pub(ptype="add"))
    assert not BasicFilter("exact", "type", "add").matches(pub(ptype="add"))


# --- case and whitespace (§3.2.3.2: case sensitive, all whitespace counts) -----------------


@pytest.mark.parametrize(
    ("type", "value"),
    [
        ("exact", "Feed.a"),
        ("exact", "FEED.A"),
        ("prefix", "Feed"),
        ("suffix", ".A"),
        ("exact", " feed.a"),
        ("exact", "feed.a "),
        ("exact", "feed.a\n"),
        ("prefix", " feed"),
        ("suffix", "a "),
        ("exact", "feed .a"),
    ],
)
def test_comparison_is_case_sensitive_and_whitespace_counts(type: str, value: str) -> None:
    assert not BasicFilter(type, "source", value).matches(pub(source="feed.a"))


def test_whitespace_in_the_attribute_must_be_matched_too() -> None:
    spaced = pub(source=" feed.a ")
    assert BasicFilter("exact", "source", " feed.a ").matches(spaced)
    assert not BasicFilter("exact", "source", "feed.a").matches(spaced)
    assert BasicFilter("prefix", "source", " f").matches(spaced)
    assert not BasicFilter("prefix", "source", "f").matches(spaced)
    assert BasicFilter("suffix", "source", "a ").matches(spaced)
    assert not BasicFilter("suffix", "source", "a").matches(spaced)


def test_topic_words_are_case_sensitive() -> None:
    assert not BasicFilter("suffix", "subject", "/lemd").matches(pub(topic="/weather/wind/LEMD"))


# --- an absent permtoken ----------------------------------------------------------------


@pytest.mark.parametrize("type", ["exact", "prefix", "suffix"])
@pytest.mark.parametrize("value", ["", "6747", "None", "null"])
def test_an_absent_permtoken_never_matches(type: str, value: str) -> None:
    assert not BasicFilter(type, "permtoken", value).matches(pub(permtoken=None))


def test_a_permtoken_filter_keeps_tokenless_publications_out_although_tokens_allow_them() -> None:
    entitled = Entitlement(topics=["/#"], grant=["6747"],
                           filters=[expr("prefix", "permtoken", "")])
    assert entitled.allows(pub(permtoken="6747"))
    assert not entitled.allows(pub(permtoken=None))
    assert Entitlement(topics=["/#"], grant=["6747"]).allows(pub(permtoken=None))


# --- AND: filters with each other, and with topic patterns and tokens (§3.2.3) -------------


def test_the_specification_example_exact_type_and_suffix_subject() -> None:
    """§3.2.3.1.4, with a publish type for the event type and a topic for the subject."""
    filters = parse_filters([expr("exact", "type", "correction"),
                             expr("suffix", "subject", "/LEMD")])
    assert passes(filters, pub(ptype="correction", topic="/weather/wind/LEMD"))
    assert not passes(filters, pub(ptype="update", topic="/weather/wind/LEMD"))
    assert not passes(filters, pub(ptype="correction", topic="/weather/wind/LFPG"))
    assert not passes(filters, pub(ptype="update", topic="/weather/wind/LFPG"))


def test_no_filter_passes_everything() -> None:
    assert passes((), WIND)
    assert passes(parse_filters(None), pub(permtoken=None))
    assert passes(parse_filters([]), WIND)


def test_contradictory_filters_pass_nothing() -> None:
    filters = parse_filters([expr("exact", "source", "feed.a"), expr("exact", "source", "feed.b")])
    assert not passes(filters, pub(source="feed.a"))
    assert not passes(filters, pub(source="feed.b"))


ENTITLED = Entitlement(
    topics=["/weather/#"],
    grant={"6747", "1234"},
    deny={"1234"},
    filters=[expr("suffix", "subject", "/LEMD"), expr("prefix", "source", "feed.")],
)


@pytest.mark.parametrize(
    ("publication", "visible", "why"),
    [
        (pub(), True, "topic, token and both filters pass"),
        (pub(permtoken=None), True, "no token is always allowed by tokens"),
        (pub(topic="/climate/wind/LEMD"), False, "no topic pattern matches"),
        (pub(permtoken="9999"), False, "token not granted"),
        (pub(permtoken="1234"), False, "token granted but denied"),
        (pub(topic="/weather/wind/LFPG"), False, "first filter fails"),
        (pub(source="other.a"), False, "second filter fails"),
        (pub(topic="/weather/wind/LFPG", source="other.a"), False, "both filters fail"),
    ],
)
def test_the_entitlement_and_combines_topics_tokens_and_filters(
    publication: Publication, visible: bool, why: str
) -> None:
    assert ENTITLED.allows(publication) is visible, why


def test_an_entitlement_reads_filter_expressions_and_keeps_filter_objects() -> None:
    as_json = Entitlement(topics=["/#"], filters=[expr("exact", "source", "feed.a")])
    as_objects = Entitlement(topics=["/#"], filters=[BasicFilter("exact", "source", "feed.a")])
    assert as_json == as_objects
    assert as_json.filters == (BasicFilter(MatchType.EXACT, "source", "feed.a"),)
    assert Entitlement(topics=["/#"]).filters == ()


def test_everything_has_no_filter() -> None:
    assert Entitlement.everything().filters == ()
    assert Entitlement.everything().allows(pub(permtoken=None))


# --- the JSON form and every refusal (CloudEvents "invalid") -------------------------------


def test_to_json_is_the_subscriptions_api_expression() -> None:
    assert BasicFilter("suffix", "subject", "/LEMD").to_json() == {
        "dialect": "basic", "type": "suffix", "property": "subject", "value": "/LEMD",
    }


def test_from_json_reads_every_type_and_property() -> None:
    for type in MatchType:
        for property in ATTRIBUTES:
            f = BasicFilter.from_json(expr(type.value, property, "v"))
            assert (f.type, f.property, f.value) == (type, property, "v")


def test_the_longest_value_and_the_most_filters_are_accepted() -> None:
    longest = "x" * MAX_VALUE_LENGTH
    assert BasicFilter.from_json(expr("exact", "source", longest)).value == longest
    assert len(parse_filters([expr("exact", "source", str(i)) for i in range(MAX_FILTERS)])) \
        == MAX_FILTERS


def refused(call: Any, *args: Any) -> InvalidSubscriptionError:
    with pytest.raises(InvalidSubscriptionError) as excinfo:
        call(*args)
    assert excinfo.type is InvalidSubscriptionError
    assert isinstance(excinfo.value, ValueError)  # what Python code expects of a bad value
    return excinfo.value


@pytest.mark.parametrize("expression", ["basic", ["basic"], None, 7])
def test_a_filter_that_is_not_an_object_is_refused(expression: object) -> None:
    assert refused(BasicFilter.from_json, expression).got == expression


@pytest.mark.parametrize(
    "expression",
    [
        {"type": "exact", "property": "source", "value": "feed.a"},
        {"dialect": None, "type": "exact", "property": "source", "value": "feed.a"},
    ],
)
def test_a_filter_without_a_dialect_is_refused(expression: dict[str, Any]) -> None:
    error = refused(BasicFilter.from_json, expression)
    assert (error.expected, error.got) == ("basic", None)


@pytest.mark.parametrize("dialect", ["cesql", "BASIC", "Basic", " basic", "", 1, ["basic"]])
def test_an_unsupported_dialect_is_refused(dialect: object) -> None:
    """§3.2.3: "creation or update of the subscription MUST be rejected with an error"."""
    error = refused(BasicFilter.from_json, {**expr("exact", "source", "feed.a"),
                                            "dialect": dialect})
    assert (error.expected, error.got) == ("basic", dialect)


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ({**expr("exact", "source", "a"), "negate": True}, "unknown: negate"),
        ({**expr("exact", "source", "a"), "Value": "a"}, "unknown: Value"),
        ({"dialect": "basic", "type": "exact", "property": "source"}, "missing: value"),
        ({"dialect": "basic", "property": "source", "value": "a"}, "missing: type"),
        ({"dialect": "basic", "type": "exact", "value": "a"}, "missing: property"),
        ({"dialect": "basic"}, "missing: property, type, value"),
        ({"dialect": "basic", "type": "exact", "property": "source", "x": 1},
         "unknown: x; missing: value"),
    ],
)
def test_a_filter_has_exactly_dialect_type_property_and_value(
    expression: dict[str, Any], names: str
) -> None:
    error = refused(BasicFilter.from_json, expression)
    assert error.message.endswith(names)
    assert error.expected == ["dialect", "property", "type", "value"]


@pytest.mark.parametrize("type", ["EXACT", "Prefix", "contains", "", " exact", None, 1,
                                  ["exact"], {}])
def test_a_type_other_than_exact_prefix_or_suffix_is_refused(type: object) -> None:
    error = refused(BasicFilter.from_json, expr(type, "source", "a"))
    assert (error.expected, error.got) == (["exact", "prefix", "suffix"], type)


@pytest.mark.parametrize("property", ["id", "time", "data", "Subject", "SOURCE", " source", "",
                                      "ptype", "permtokens", None, 3, ["subject"], {}])
def test_an_unknown_property_is_refused_when_the_filter_is_made(property: object) -> None:
    """A misspelt attribute would otherwise be a filter that silently never matches."""
    error = refused(BasicFilter.from_json, expr("exact", property, "a"))
    assert error.got == property
    assert error.expected == sorted(ATTRIBUTES)


@pytest.mark.parametrize("value", [None, 6747, 1.5, True, ["a"], {"a": 1}, b"feed.a"])
def test_a_value_that_is_not_a_string_is_refused(value: object) -> None:
    assert refused(BasicFilter.from_json, expr("exact", "source", value)).expected == "str"


def test_a_value_longer_than_the_limit_is_refused() -> None:
    error = refused(BasicFilter.from_json, expr("prefix", "source", "x" * (MAX_VALUE_LENGTH + 1)))
    assert error.got == "x" * 80  # the error does not carry the whole value


def test_more_filters_than_the_limit_are_refused() -> None:
    error = refused(parse_filters, [expr("exact", "source", str(i))
                                    for i in range(MAX_FILTERS + 1)])
    assert (error.expected, error.got) == (MAX_FILTERS, MAX_FILTERS + 1)


@pytest.mark.parametrize("value", [expr("exact", "source", "a"), "basic", b"basic", 5,
                                   {expr("exact", "source", "a")["value"]}, True])
def test_filters_that_are_not_a_list_are_refused(value: object) -> None:
    assert refused(parse_filters, value).expected == "list"


def test_one_bad_expression_refuses_the_whole_list() -> None:
    assert refused(parse_filters, [expr("exact", "source", "a"),
                                   expr("exact", "nope", "a")]).got == "nope"
    assert refused(parse_filters, [expr("exact", "source", "a"), None]).expected == "object"


def test_an_entitlement_with_a_bad_filter_is_refused() -> None:
    error = refused(lambda: Entitlement(topics=["/#"], filters=[expr("regex", "source", ".*")]))
    assert error.got == "regex"


def test_direct_construction_is_validated_like_json() -> None:
    assert refused(BasicFilter, "contains", "source", "a").got == "contains"
    assert refused(BasicFilter, "exact", "sauce", "a").got == "sauce"
    assert refused(BasicFilter, "exact", "source", 1).got == 1


# --- properties ----------------------------------------------------------------------------

_word = st.text(st.characters(blacklist_categories=["Cc", "Cs", "Zs", "Zl", "Zp"],
                              blacklist_characters="/*#\x85\xa0\u1680"), min_size=1, max_size=6)
topics = st.lists(_word, min_size=1, max_size=4).map(lambda words: "/" + "/".join(words))
tokens = st.text(min_size=1, max_size=12)
sources = st.text(min_size=1, max_size=12)


@st.composite
def publications_and_filters(draw: st.DrawFn) -> tuple[Publication, BasicFilter, str]:
    p = pub(topic=draw(topics), source=draw(sources),
            ptype=draw(st.sampled_from(list(PublishType))).value,
            permtoken=draw(st.one_of(st.none(), tokens)))
    property = draw(st.sampled_from(sorted(ATTRIBUTES)))
    attribute = ATTRIBUTES[property](p)
    if attribute is not None and draw(st.booleans()):
        start = draw(st.integers(0, len(attribute)))
        end = draw(st.integers(start, len(attribute)))
        value = attribute[start:end]  # a piece of the attribute: often a prefix or suffix
    else:
        value = draw(st.text(max_size=12))
    return p, BasicFilter(draw(st.sampled_from(list(MatchType))), property, value), \
        "" if attribute is None else attribute


@settings(max_examples=200, deadline=None)
@given(publications_and_filters())
def test_matching_is_plain_string_comparison(case: tuple[Publication, BasicFilter, str]) -> None:
    p, f, attribute = case
    if ATTRIBUTES[f.property](p) is None:
        expected = False
    elif f.type is MatchType.EXACT:
        expected = attribute == f.value
    elif f.type is MatchType.PREFIX:
        expected = attribute.startswith(f.value)
    else:
        expected = attribute.endswith(f.value)
    assert f.matches(p) is expected


filters = st.builds(BasicFilter, st.sampled_from(list(MatchType)),
                    st.sampled_from(sorted(ATTRIBUTES)), st.text(max_size=MAX_VALUE_LENGTH))


@settings(max_examples=150, deadline=None)
@given(filters)
def test_from_json_of_to_json_is_the_same_filter(f: BasicFilter) -> None:
    assert BasicFilter.from_json(f.to_json()) == f
    assert set(f.to_json()) == {"dialect", "type", "property", "value"}


@settings(max_examples=100, deadline=None)
@given(st.lists(filters, max_size=MAX_FILTERS), publications_and_filters())
def test_a_list_passes_when_every_filter_matches(
    fs: list[BasicFilter], case: tuple[Publication, BasicFilter, str]
) -> None:
    p = case[0]
    parsed = parse_filters([f.to_json() for f in fs])
    assert parsed == tuple(fs)
    assert passes(parsed, p) is all(f.matches(p) for f in fs)


def test_entitlements_whose_filters_differ_in_order_or_repetition_are_equal() -> None:
    """Every filter must pass, so a subscriber's link resumes whatever order its filters take."""
    suffix, updates = expr("suffix", "subject", "/LEMD"), expr("exact", "type", "update")
    one = Entitlement(topics=["/#"], filters=[suffix, updates])
    other = Entitlement(topics=["/#"], filters=[updates, suffix, updates])
    assert one == other
    assert hash(one) == hash(other)
    assert one != Entitlement(topics=["/#"], filters=[suffix])
