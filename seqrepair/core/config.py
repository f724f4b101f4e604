"""Validators for constructor arguments of the core's state machines.

Each raises :class:`~seqrepair.core.errors.InvalidConfigError` naming the class and the
argument, with ``expected`` and ``got`` set, so bad configuration fails at construction with a
clear, typed error rather than deep inside a state machine later.
"""

from __future__ import annotations

from math import isfinite
from typing import Any, TypeGuard

import attrs

from seqrepair.core.errors import InvalidConfigError

Validator = Any  # attrs' validator protocol: (instance, attribute, value) -> None


def _is_number(value: object) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, int | float) and value == value


def _is_int(value: object) -> TypeGuard[int]:
    return not isinstance(value, bool) and isinstance(value, int)


def _fail(instance: object, attribute: attrs.Attribute[Any], what: str, value: object) -> None:
    raise InvalidConfigError(
        f"{type(instance).__name__}.{attribute.name} must be {what}", expected=what, got=value
    )


def positive_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A number > 0 (seconds, rates)."""
    if not (_is_number(value) and value > 0):
        _fail(instance, attribute, "a number > 0", value)


def non_negative_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A number >= 0."""
    if not (_is_number(value) and value >= 0):
        _fail(instance, attribute, "a number >= 0", value)


def check_positive_int(name: str, value: object) -> int:
    """``value`` when it is an integer >= 1 (counts, sizes); InvalidConfigError naming
    ``name`` otherwise. For plain arguments; attrs fields take :func:`positive_int`."""
    if not (_is_int(value) and value >= 1):
        raise InvalidConfigError(
            f"{name} must be an integer >= 1, got {value!r}", expected=">= 1", got=value
        )
    return value


def positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An integer >= 1 (counts, capacities)."""
    if not (_is_int(value) and value >= 1):
        _fail(instance, attribute, "an integer >= 1", value)


def non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An integer >= 0 (high-waters)."""
    if not (_is_int(value) and value >= 0):
        _fail(instance, attribute, "an integer >= 0", value)


def optional(check: Validator) -> Validator:
    """``check``, or None."""

    def optional_check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            check(instance, attribute, value)

    return optional_check


def check_now(now: object) -> float:
    """``now`` as float seconds; anything else (bool, NaN, infinity, text) is an
    InvalidConfigError."""
    if not _is_number(now) or not isfinite(now):
        raise InvalidConfigError("now must be a number of seconds", expected="float", got=now)
    return float(now)
