"""Sequence arithmetic of XEP-0040 §2: values 1..2^b-1, zero means reset, wrap to 1."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqrepair import InvalidSequenceError, SeqRepairError, SequenceSpace


def test_sixteen_bit_sequence_runs_through_the_wrap_to_one_never_zero():
    sp = SequenceSpace(bits=16)
    numbers = [1, 2, 3]
    value = 65533
    numbers.append(value)
    for _ in range(4):
        value = sp.next(value)
        numbers.append(value)
    assert numbers == [1, 2, 3, 65533, 65534, 65535, 1, 2]


def test_the_contract_examples():
    sp = SequenceSpace(bits=16)
    assert sp.max == 65535
    assert sp.next(65535) == 1
    assert sp.next(0) == 1
    assert sp.distance(65534, 2) == 3
    assert sp.is_after(2, 65534)
    assert not sp.is_after(65534, 2)
    assert sp.unwrap(65535, 1) == 65536
    assert sp.wire(65536) == 1


def test_odd_modulus_leaves_no_ambiguous_half_way_point():
    sp = SequenceSpace(bits=3)  # 1..7, half = 3
    assert sp.half == 3
    assert sp.is_after(4, 1)  # distance 3
    assert not sp.is_after(5, 1)  # distance 4: 1 is after 5 instead
    assert sp.is_after(1, 5)


@pytest.mark.parametrize("bits", [1, 65, 0, -3])
def test_bit_width_outside_2_to_64_is_rejected(bits):
    with pytest.raises(InvalidSequenceError) as info:
        SequenceSpace(bits=bits)
    assert info.value.got == bits
    assert info.value.expected == (2, 64)


@pytest.mark.parametrize("bits", ["8", 8.0, True, None])
def test_bit_width_must_be_an_integer(bits):
    with pytest.raises(InvalidSequenceError):
        SequenceSpace(bits=bits)


@pytest.mark.parametrize("value", [-1, 8, 2**70, "3", 3.0, None])
def test_values_outside_the_space_are_rejected_with_structured_fields(value):
    sp = SequenceSpace(bits=3)
    with pytest.raises(InvalidSequenceError) as info:
        sp.next(value)
    assert info.value.got == value
    assert isinstance(info.value, SeqRepairError)


def test_zero_is_not_part_of_the_cycle_for_distance_or_unwrap():
    sp = SequenceSpace(bits=8)
    with pytest.raises(InvalidSequenceError):
        sp.distance(0, 5)
    with pytest.raises(InvalidSequenceError):
        sp.unwrap(10, 0)
    with pytest.raises(InvalidSequenceError):
        sp.wire(0)
    with pytest.raises(InvalidSequenceError):
        sp.unwrap(-1, 3)


def test_unwrap_reads_behind_when_the_wire_value_is_more_than_half_back():
    sp = SequenceSpace(bits=4)  # 1..15, half 7
    assert sp.unwrap(20, sp.wire(18)) == 18
    assert sp.unwrap(20, sp.wire(27)) == 27
    assert sp.unwrap(0, 9) == 9
    assert sp.unwrap(2, 15) == 15  # cannot go below 1, so it is ahead


@given(bits=st.sampled_from([2, 3, 4, 8, 16, 32, 64]), data=st.data())
def test_wire_and_unwrap_round_trip_within_half_the_space(bits, data):
    sp = SequenceSpace(bits=bits)
    last = data.draw(st.integers(min_value=1, max_value=2**70))
    offset = data.draw(st.integers(min_value=-sp.half, max_value=sp.half))
    target = max(1, last + offset)
    assert 1 <= sp.wire(target) <= sp.max
    assert sp.unwrap(last, sp.wire(target)) == target


@given(bits=st.sampled_from([2, 3, 4, 8, 16, 64]), data=st.data())
def test_distance_and_is_after_agree_with_absolute_order(bits, data):
    sp = SequenceSpace(bits=bits)
    a = data.draw(st.integers(min_value=1, max_value=2**66))
    step = data.draw(st.integers(min_value=1, max_value=sp.half))
    b = a + step
    assert sp.distance(sp.wire(a), sp.wire(b)) == step
    assert sp.is_after(sp.wire(b), sp.wire(a))
    assert not sp.is_after(sp.wire(a), sp.wire(b))
