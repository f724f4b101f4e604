"""Messages are immutable and validated: bad input raises a typed error and builds nothing."""

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    SeqRepairError,
    SourceGapRequest,
    TopicPattern,
)
from seqrepair.core.errors import InvalidMessageError, UnknownPublishTypeError


def publication(**overrides):
    values = dict(topic="/weather/wind/LEMD", source="feed.a", source_seq=7,
                  ptype=PublishType.UPDATE, fields={"speed": 12, "gust": None})
    values.update(overrides)
    return Publication(**values)


def test_contract_constructor_and_defaults():
    pub = publication()
    assert pub.link_seq is None
    assert pub.permtoken is None
    assert pub.timestamp is None
    assert pub.retransmit is False


def test_explicit_null_is_a_value_and_an_absent_key_is_not_sent():
    pub = publication()
    assert "gust" in pub.fields
    assert pub.fields["gust"] is None
    assert "direction" not in pub.fields


def test_publication_is_immutable_including_its_fields():
    source_fields = {"speed": 1}
    pub = publication(fields=source_fields)
    source_fields["speed"] = 99
    assert pub.fields["speed"] == 1
    with pytest.raises(TypeError):
        pub.fields["speed"] = 3
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        pub.topic = "/other"


@pytest.mark.parametrize(("name", "expected"), [
    ("update", PublishType.UPDATE), ("correction", PublishType.CORRECTION),
    ("image", PublishType.IMAGE), ("drop", PublishType.DROP),
    ("snapshot", PublishType.SNAPSHOT), ("add", PublishType.IMAGE), ("ADD", PublishType.IMAGE),
])
def test_publish_types_are_read_by_name_and_add_means_image(name, expected):
    assert publication(ptype=name).ptype is expected


@pytest.mark.parametrize("bad", ["set", "", 3, None])
def test_unknown_publish_type_is_a_typed_error(bad):
    with pytest.raises(UnknownPublishTypeError) as info:
        publication(ptype=bad)
    assert info.value.got == bad
    assert "add" in info.value.expected


@pytest.mark.parametrize(("field", "value"), [
    ("topic", ""), ("topic", None), ("source", ""), ("source_seq", 0), ("source_seq", -1),
    ("source_seq", "7"), ("source_seq", True), ("fields", [("a", 1)]), ("fields", {1: "x"}),
    ("link_seq", -1), ("link_seq", 2**64), ("permtoken", ""), ("timestamp", "now"),
    ("timestamp", float("nan")), ("timestamp", float("inf")), ("timestamp", -float("inf")),
    ("retransmit", 1),
])
def test_malformed_publication_fields_are_rejected(field, value):
    with pytest.raises(InvalidMessageError):
        publication(**{field: value})


def test_heartbeat_gap_request_and_replies_validate():
    assert Heartbeat(link_seq=57374, timestamp=1562075995.0).link_seq == 57374
    assert GapRequest(link_from=65534, link_to=2).link_to == 2  # crosses the wrap
    with pytest.raises(InvalidMessageError):
        GapRequest(link_from=0, link_to=3)
    with pytest.raises(InvalidMessageError):
        Heartbeat(link_seq=-5)
    with pytest.raises(InvalidMessageError):
        SourceGapRequest(after={"feed.a": -1})
    with pytest.raises(InvalidMessageError):
        SourceGapRequest(after=[("feed.a", 1)])
    with pytest.raises(InvalidMessageError):
        ReplayComplete(through={"": 3})
    with pytest.raises(InvalidMessageError) as info:
        GapError(reason="lost")
    assert isinstance(info.value, SeqRepairError)


def test_gap_error_names_its_request():
    request = SourceGapRequest(after={"feed.a": 56737, "feed.b": 211234})
    error = GapError(reason="trimmed", request=request)
    assert error.request == SourceGapRequest(after={"feed.b": 211234, "feed.a": 56737})
    assert ReplayComplete(through={"feed.a": 57001}).through["feed.a"] == 57001


@pytest.mark.parametrize(("name", "expected"), [
    ("add", PublishType.IMAGE), ("Update", PublishType.UPDATE), (" drop ", PublishType.DROP),
    ("image", PublishType.IMAGE),
])
def test_the_enum_reads_publish_type_names_like_parse(name, expected):
    assert PublishType(name) is expected
    assert PublishType.parse(name) is expected


@pytest.mark.parametrize("name", ["bogus", "", 3, None])
def test_an_unknown_publish_type_is_a_typed_error(name):
    with pytest.raises(UnknownPublishTypeError) as info:
        PublishType(name)
    assert isinstance(info.value, SeqRepairError)
    assert info.value.got == name
    with pytest.raises(UnknownPublishTypeError):
        PublishType.parse(name)


def test_publish_type_defaults_to_update():
    assert Publication("/a", "feed.a", 1).ptype is PublishType.UPDATE


@pytest.mark.parametrize("topic", ["/weather/#", "/weather/*/LEMD", "/#"])
def test_a_publication_topic_is_an_item_not_a_pattern(topic):
    with pytest.raises(InvalidMessageError, match="pattern"):
        publication(topic=topic)


@pytest.mark.parametrize("topic", [
    "weather", "#", "/", "", "/a//b", "/a/", "/a b", "/a\tb", "/a\x00b", "/wi*d", "/fx/EUR#USD",
    None, 3, b"/weather",
])
def test_a_publication_topic_must_be_a_concrete_topic_of_the_topic_tree(topic):
    # what TopicPattern.matches() would refuse later is refused when the publication is built
    with pytest.raises(InvalidMessageError) as info:
        publication(topic=topic)
    assert info.value.got == topic
    assert "Publication.topic" in info.value.message
    with pytest.raises(SeqRepairError):
        TopicPattern("/#").matches(topic)


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from("/ab*# \x00é"), max_size=8))
def test_a_publication_takes_exactly_the_topics_every_pattern_can_match(topic):
    try:
        built = publication(topic=topic)
    except InvalidMessageError:
        with pytest.raises(SeqRepairError):
            TopicPattern("/#").matches(topic)
    else:
        assert TopicPattern("/#").matches(built.topic)
        assert TopicPattern(built.topic).matches(built.topic)


def test_messages_are_hashable_and_equal_ones_hash_alike():
    a, b = publication(), publication()
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, publication(source_seq=8)}) == 2
    assert hash(SourceGapRequest({"feed.a": 3})) == hash(SourceGapRequest({"feed.a": 3}))
    complete = ReplayComplete(through={"feed.a": 3}, request=SourceGapRequest({"feed.a": 1}))
    assert hash(complete) == hash(ReplayComplete({"feed.a": 3}, SourceGapRequest({"feed.a": 1})))
    assert len({GapError("refused", SourceGapRequest({"a": 1})),
                GapError("refused", SourceGapRequest({"a": 1}))}) == 1


# Publication's __init__ is written out for speed; attrs generates the reference from the
# same field declarations (validators, converters, defaults), so the two cannot drift apart.
ReferencePublication = attrs.make_class(
    "Publication",
    {a.name: attrs.field(default=a.default, validator=a.validator, converter=a.converter)
     for a in attrs.fields(Publication)},
    frozen=True,
)

anything = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**64 + 1), st.floats(),
                     st.text(max_size=4), st.just({}), st.just([1]))
arguments = st.fixed_dictionaries(
    {"topic": st.one_of(st.sampled_from(["/a", "/a/b", "/a/*", "a", "/a//b"]), anything),
     "source": st.one_of(st.just("feed.a"), anything),
     "source_seq": st.one_of(st.integers(1, 2**64 - 1), anything)},
    optional={
        "ptype": st.one_of(st.sampled_from(["update", "add", "Image", PublishType.DROP]),
                           anything),
        "fields": st.one_of(st.dictionaries(st.text(max_size=3), st.none() | st.integers()),
                            anything),
        "link_seq": st.one_of(st.integers(0, 2**64 - 1), anything),
        "permtoken": st.one_of(st.just("tok"), anything),
        "timestamp": st.one_of(st.floats(allow_nan=False), st.integers(), anything),
        "retransmit": anything,
    },
)


def outcome(build, values):
    try:
        built = build(**values)
    except SeqRepairError as exc:
        return type(exc), str(exc)
    return attrs.astuple(built, recurse=False)


@settings(max_examples=500, deadline=None)
@given(arguments)
def test_a_publication_is_built_and_rejected_exactly_as_its_declared_fields_say(values):
    assert outcome(Publication, values) == outcome(ReferencePublication, values)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(0, 2**64 - 1), anything),
       st.sampled_from([None, True, False]))
def test_with_link_is_evolve_with_a_new_link_number(link_seq, retransmit):
    pub = publication(link_seq=3, permtoken="tok", timestamp=1.5)
    changes = {"link_seq": link_seq} | ({} if retransmit is None else {"retransmit": retransmit})
    assert outcome(lambda **_: pub.with_link(link_seq, retransmit=retransmit), {}) == outcome(
        lambda **kw: attrs.evolve(pub, **kw), changes)


def test_an_integer_time_is_kept_as_the_float_it_travels_as():
    nanoseconds = 1_732_000_000_123_456_789
    pub = Publication("/a", "feed.a", 1, timestamp=nanoseconds)
    assert type(pub.timestamp) is float
    assert pub.timestamp == float(nanoseconds)
    assert Heartbeat(link_seq=1, timestamp=5).timestamp == 5.0


@pytest.mark.parametrize("make", [lambda t: Publication("/a", "feed.a", 1, timestamp=t),
                                  lambda t: Heartbeat(link_seq=1, timestamp=t)])
def test_an_integer_time_beyond_any_float_is_refused(make):
    with pytest.raises(InvalidMessageError, match="finite number of seconds"):
        make(10**400)


def test_unlink_own_makes_a_decoder_s_fresh_publications_bare_in_place() -> None:
    from seqrepair.core.messages import unlink_own

    made = [Publication("/a", "s", 5, "update", {"x": 1}, link_seq=9, retransmit=True,
                        permtoken="tok", timestamp=1.5),
            Publication("/a", "s", 6, "update", {})]
    bare = [p.with_link(None, retransmit=False) for p in made]
    same = list(made)
    unlink_own(made)
    assert made == bare  # what with_link(None, retransmit=False) gives
    assert all(a is b for a, b in zip(made, same, strict=True))  # the same objects


class _Name(str):
    """A str subclass: never taken for an exact name."""


@pytest.mark.parametrize("name", [
    *[t.value for t in PublishType], *list(PublishType), "add", " Update ", "IMAGE", "Drop",
    _Name("update"), _Name("add"),
])
def test_a_publication_reads_its_publish_type_as_parse_does(name):
    """The lookup a publication makes of an exact name gives what PublishType.parse gives."""
    pub = Publication(topic="/a", source="s", source_seq=1, ptype=name)
    assert pub.ptype is PublishType.parse(name)
    assert type(pub.ptype) is PublishType


@pytest.mark.parametrize("name", ["", "updates", "nope", 3, None])
def test_a_publication_refuses_an_unknown_publish_type_as_parse_does(name):
    with pytest.raises(UnknownPublishTypeError):
        PublishType.parse(name)
    with pytest.raises(UnknownPublishTypeError):
        Publication(topic="/a", source="s", source_seq=1, ptype=name)
