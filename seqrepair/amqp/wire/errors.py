"""Errors of the AMQP adapter.

Every error raised on hostile or malformed AMQP input is a :class:`AmqpAdapterError`, itself a
:class:`~seqrepair.core.errors.SeqRepairError`, and carries the AMQP error condition the
component answers with (``amqp:decode-error``, ``amqp:not-found``...). Proton's own exceptions
are mapped to these at the adapter boundary (httpcore's ``map_exceptions`` habit).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from proton import Condition, symbol, ulong

from seqrepair.core.errors import SeqRepairError
from seqrepair.logs import get_logger

INFO_TEXT_LIMIT = 200
"""The most characters (or bytes) of one string (or binary) in a condition's ``info``."""
INFO_ITEMS_LIMIT = 16
"""The most elements of one list or map in a condition's ``info``; the rest is left out."""
_MAX_ULONG = (1 << 64) - 1
_MIN_LONG = -(1 << 63)


def info_value(value: Any) -> Any:
    """``value`` as a typed AMQP value for a condition's ``info`` (WIRE.md, Errors).

    A number in 0..2^64-1 is a ``ulong``, a negative one that fits a ``long``; a float a
    ``double``; text a ``string`` and bytes a ``binary`` (both cut to
    :data:`INFO_TEXT_LIMIT`); a tuple, list or set a ``list`` and a mapping a ``map`` (at most
    :data:`INFO_ITEMS_LIMIT` elements each); None a null. Anything else (an integer past 64
    bits included) is its ``str`` text, cut the same way: never a Python ``repr``.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return info_value(value.value)
    if isinstance(value, int):
        if 0 <= value <= _MAX_ULONG:
            return ulong(value)
        if _MIN_LONG <= value < 0:
            return int(value)
        return str(int(value))[:INFO_TEXT_LIMIT]
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)[:INFO_TEXT_LIMIT]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)[:INFO_TEXT_LIMIT]
    if isinstance(value, Mapping):
        items = list(value.items())[:INFO_ITEMS_LIMIT]
        return {info_value(k): info_value(v) for k, v in items}
    if isinstance(value, list | tuple | set | frozenset):
        return [info_value(v) for v in list(value)[:INFO_ITEMS_LIMIT]]
    return str(value)[:INFO_TEXT_LIMIT]


def condition_info(expected: Any, got: Any) -> Any:
    """The ``info`` map of a condition the component sends: symbol keys ``expected`` and
    ``got`` with typed values (:func:`info_value`)."""
    return {symbol("expected"): info_value(expected), symbol("got"): info_value(got)}


class AmqpAdapterError(SeqRepairError):
    """Base of the AMQP adapter's errors; ``condition`` is the AMQP error condition to send."""

    condition = "amqp:internal-error"

    def __init__(self, message: str, *, expected: Any = None, got: Any = None) -> None:
        super().__init__(message, expected=expected, got=got)

    def amqp_condition(self) -> Condition:
        """The AMQP condition that says it: ``condition``, and the message cut to 500
        characters (a detach or close frame stays small)."""
        return Condition(self.condition, self.message[:500])


class MalformedMessageError(AmqpAdapterError):
    """A message whose properties or body do not follow the wire format (WIRE.md)."""

    condition = "amqp:decode-error"


class OutOfSpaceError(MalformedMessageError):
    """A sequence number on the wire outside the sequence space it claims."""

    condition = "amqp:invalid-field"


class UnknownMessageTypeError(MalformedMessageError):
    """A ``message-type`` the receiver does not know, or one not allowed on this link."""

    condition = "amqp:not-implemented"


class OversizedMessageError(AmqpAdapterError):
    """A message larger than the receiver takes: more bytes than its link's
    ``max-message-size`` (:mod:`seqrepair.amqp.wire.sizelimit`), or a ``PUBLICATIONS`` message
    carrying more publications than it takes in one."""

    condition = "amqp:link:message-size-exceeded"


class UnknownAddressError(AmqpAdapterError):
    """A link attached to an address the component does not serve."""

    condition = "amqp:not-found"


class UnauthorizedAccessError(AmqpAdapterError):
    """The access policy refuses the operation (a publish, a subscriber's topic pattern, a
    subscription queue it may not attach to) or the link name is another principal's."""

    condition = "amqp:unauthorized-access"


class InvalidLinkPropertyError(AmqpAdapterError):
    """A link property the component reads holds a value it cannot take."""

    condition = "amqp:invalid-field"


class RequestFloodError(AmqpAdapterError):
    """A peer sent requests faster than its allowance."""

    condition = "amqp:resource-limit-exceeded"


class NotImplementedAnnotationError(AmqpAdapterError):
    """A response annotation sent to a target that did not offer ``response-address-supported``."""

    condition = "amqp:not-implemented"


class SettingsMismatchError(AmqpAdapterError):
    """A subscriber was given by hand a setting (link width, heartbeat interval) the component
    contradicts in its attach reply; ``expected`` is the component's, ``got`` the given one."""

    condition = "amqp:precondition-failed"


class ConnectionFailedError(AmqpAdapterError):
    """A client could not reach (or lost) the component or broker."""

    condition = "amqp:connection:forced"


class PublishRejectedError(AmqpAdapterError):
    """The component rejected a batch of publications (the client ``Publisher``'s
    ``rejection``): ``condition`` and the message are the component's, ``expected``/``got``
    come from the condition's info, ``first``/``last`` are the batch's source numbers."""

    def __init__(
        self,
        condition: str,
        message: str,
        *,
        first: int | None = None,
        last: int | None = None,
        expected: Any = None,
        got: Any = None,
    ) -> None:
        super().__init__(message, expected=expected, got=got)
        self.condition = condition
        self.first = first
        self.last = last


def link_refusal(exc: Exception, link: str) -> AmqpAdapterError:
    """What an attach that raised ``exc`` is refused with: a seqrepair error names what was
    wrong with the address (``amqp:not-found``); anything else is logged with its traceback and
    refused ``amqp:internal-error`` (that link only: the component goes on)."""
    if isinstance(exc, AmqpAdapterError):
        return exc
    if isinstance(exc, SeqRepairError):
        return UnknownAddressError(exc.message, got=exc.got)

    get_logger("seqrepair.amqp.component").exception("attach failed", link=link)
    return AmqpAdapterError(f"internal error: {exc!r}"[:500])
