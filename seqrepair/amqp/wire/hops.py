"""Hop limits and loop detection for gateways and relays (APEX §4.7.2, dataHopping).

A gateway or relay forwards what it is given to the next component upstream. Pointed at each
other by mistake, two of them would forward one subscriber's attach back and forth without end.
APEX answers with a TTL-like hop count; we carry a little more, so that the error can say
*where* the loop is:

* every attach a gateway or relay makes upstream carries the link property ``seqrepair-path``
  (:data:`PROP_PATH`): the identities of the hops it crossed, in order, the nearest to the
  subscriber (or publisher) first. A hop adds its own identity (:meth:`Hops.upstream_properties`)
  and refuses the attach, naming the path, when its identity is already there
  (:class:`RelayLoopError`, a loop) or when the path would get longer than its limit
  (:class:`HopLimitError`, a chain too long: ``--max-hops``, default 8). A component checks
  the path it is given the same way (:meth:`Hops.check`) without extending it;
* the limit is on *hops*, the length of the longest route behind the attach, not on how many
  identities its path holds: a relay's one upstream attach carries the union of its
  subscribers' paths (fan-in), so it also sets ``seqrepair-path-hops`` (:data:`PROP_PATH_HOPS`,
  ulong), the hops of its deepest route plus its own; every hop that extends a path sets it
  (absent: the path's length). A path carries at most :data:`MAX_CARRIED` identities: past
  that, those first on it (the farthest from the hop that cut it) are left out; a loop through
  them is not seen by identity but still ends at the hop limit, each round adding a hop;
* every request or frame a gateway forwards carries the application property
  ``seqrepair-hops`` (:data:`HOPS_PROPERTY`, ulong): how many hops it has crossed. Requests
  past the limit are refused (:meth:`Hops.forward_count`); frames are counted
  (:func:`count_hop`), their path having been bounded at attach.

A path is a peer's input like any other: it must be a list of at most :data:`MAX_PATH` strings
of at most :data:`MAX_HOP_ID` characters each, printable, none empty (else
:class:`MalformedPathError`, ``amqp:invalid-field``), so a hostile path costs a few kilobytes
at most and is refused before anything is attached.

A hop identity is stable and unique for the life of a process: ``--hop-id`` when the operator
gives one, else :func:`default_hop_id`: the process's name and listen address plus a random
tag, e.g. ``edge@127.0.0.1:5673~3f9a1c``, which is what an operator wants to read in an error.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from proton import symbol, ulong

from seqrepair.amqp.wire.errors import AmqpAdapterError, InvalidLinkPropertyError
from seqrepair.amqp.wire.vocabulary import PROP_PATH, PROP_PATH_HOPS
from seqrepair.core.errors import InvalidConfigError

HOPS_PROPERTY = "seqrepair-hops"
"""Application property (ulong) of a request or frame a gateway forwarded: the hops crossed."""
DEFAULT_MAX_HOPS = 8
"""The default limit on hops (gateways and relays) between a client and the component."""
MAX_HOPS_LIMIT = 255
"""The highest limit an operator may configure (APEX's hop count is 0..255)."""
MAX_PATH = MAX_HOPS_LIMIT
"""The most elements a ``seqrepair-path`` may hold; a longer one is malformed."""
MAX_CARRIED = 128
"""The most identities a hop puts on a path it sends (a relay's fan-in may bring more: those
first on the path are left out, the hop count still counts them)."""
MAX_HOP_ID = 128
"""The most characters of one hop identity."""
DESCRIPTION_LIMIT = 480
"""Characters of a refusal's description (AMQP conditions here carry at most 500)."""

HOP_LIMIT_CONDITION = "seqrepair:hop-limit-exceeded"
LOOP_CONDITION = "seqrepair:relay-loop"
HOP_CONDITIONS = frozenset({HOP_LIMIT_CONDITION, LOOP_CONDITION})
"""The conditions of a refusal no reconnect cures: the clients stop on them."""

Path = tuple[str, ...]
Route = tuple[Path, int]
"""A path and its hops (the length of the longest route it stands for)."""


class MalformedPathError(InvalidLinkPropertyError):
    """A ``seqrepair-path`` that is not a list of at most :data:`MAX_PATH` non-empty printable
    strings of at most :data:`MAX_HOP_ID` characters (``amqp:invalid-field``)."""


class HopError(AmqpAdapterError):
    """An attach or request refused for its path; ``path`` is the path it would have had."""

    def __init__(self, message: str, *, path: Path = (), expected: Any = None,
                 got: Any = None) -> None:
        super().__init__(message, expected=expected, got=got)
        self.path = path


class HopLimitError(HopError):
    """The attach (or request) would cross more hops than the limit (``expected``); ``got`` is
    how many it would cross."""

    condition = HOP_LIMIT_CONDITION


class RelayLoopError(HopError):
    """The attach came back to a hop it already crossed: gateways or relays forward to each
    other in a loop. ``got`` is the identity found twice."""

    condition = LOOP_CONDITION


def hop_refusal(condition: str | None, message: str, got: Any = None) -> HopError | None:
    """The typed error a client reports for a refusal with ``condition`` (None: not a hop
    condition); ``message`` is the condition and description as the client words them."""
    kind = {HOP_LIMIT_CONDITION: HopLimitError, LOOP_CONDITION: RelayLoopError}.get(
        condition or "")
    return None if kind is None else kind(message, got=got)


def describe_path(path: Sequence[str], limit: int = DESCRIPTION_LIMIT - 120) -> str:
    """``path`` as an operator reads it, ``a -> b -> c``, its middle left out past ``limit``
    characters (the ends say where it starts and where it was refused)."""
    text = " -> ".join(path) if path else "(no hop)"
    if len(text) <= limit:
        return text
    for ends in (2, 1):  # identities are short enough for the first and last to fit
        left = len(path) - 2 * ends
        text = " -> ".join([*path[:ends], f"... {left} more ...", *path[-ends:]])
        if len(text) <= limit:
            return text
    return text[: limit - 3] + "..."


def _fail(message: str, got: Any) -> MalformedPathError:
    return MalformedPathError(f"seqrepair-path: {message}", expected="list of string",
                              got=got)


def read_path(properties: Mapping[Any, Any] | None) -> Path:
    """The ``seqrepair-path`` of attach ``properties`` (keys symbols or strings), () when
    absent or null; :class:`MalformedPathError` when it is not a well-formed path."""
    if not properties:
        return ()
    value = None
    for key, item in properties.items():
        if str(key) == str(PROP_PATH):
            value = item
            break
    if value is None:
        return ()
    elements = getattr(value, "elements", value)  # an AMQP array comes as proton's Array
    if isinstance(elements, str | bytes) or not isinstance(elements, list | tuple):
        raise _fail(f"not a list but {type(value).__name__}", type(value).__name__)
    if len(elements) > MAX_PATH:
        raise _fail(f"{len(elements)} hops, more than any limit ({MAX_PATH})", len(elements))
    path = []
    for i, hop in enumerate(elements):
        if not isinstance(hop, str):  # a symbol is a str too: ASCII text, taken as such
            raise _fail(f"hop {i} is {type(hop).__name__}, not a string", type(hop).__name__)
        if not hop or len(hop) > MAX_HOP_ID or not hop.isprintable():
            raise _fail(f"hop {i} is not 1..{MAX_HOP_ID} printable characters",
                        hop[:MAX_HOP_ID])
        path.append(str(hop))
    return tuple(path)


def read_route(properties: Mapping[Any, Any] | None) -> Route:
    """The path of attach ``properties`` (:func:`read_path`) and its hops: its
    ``seqrepair-path-hops``, absent the path's length, at least 1 with any identity on the path
    (a route through a hop crossed it). :class:`MalformedPathError` for a count that is not an
    integer 0..2^64-1."""
    path = read_path(properties)
    value = None
    for key, item in (properties or {}).items():
        if str(key) == str(PROP_PATH_HOPS):
            value = item
            break
    if value is None:
        return path, len(path)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise MalformedPathError(f"{PROP_PATH_HOPS} must be an integer 0..2^64-1",
                                 expected="ulong", got=value)
    return path, max(int(value), 1 if path else 0)


def check_max_hops(value: object, *, option: str = "max_hops") -> int:
    """``value`` if it is a limit an operator may set (1..:data:`MAX_HOPS_LIMIT`)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_HOPS_LIMIT:
        raise InvalidConfigError(f"{option} must be an integer in 1..{MAX_HOPS_LIMIT}, "
                                 f"got {value!r}", expected=(1, MAX_HOPS_LIMIT), got=value)
    return value


def check_hop_id(value: object, *, option: str = "hop_id") -> str:
    """``value`` if it can be a hop identity (1..:data:`MAX_HOP_ID` printable characters)."""
    if (not isinstance(value, str) or not value or len(value) > MAX_HOP_ID
            or not value.isprintable()):
        raise InvalidConfigError(f"{option} must be 1..{MAX_HOP_ID} printable characters, "
                                 f"got {value!r}", expected=(1, MAX_HOP_ID), got=value)
    return value


def default_hop_id(name: str, listening: str) -> str:
    """A hop identity unique to this process: ``name@listening~tag`` with a random tag, cut to
    :data:`MAX_HOP_ID` characters."""
    tag = secrets.token_hex(3)
    head = f"{name}@{listening}"[: MAX_HOP_ID - len(tag) - 1]
    return f"{head}~{tag}"


@attrs.frozen
class Hops:
    """One process's identity on paths and its hop limit (``--hop-id``, ``--max-hops``)."""

    identity: str = attrs.field(converter=check_hop_id)
    max_hops: int = attrs.field(default=DEFAULT_MAX_HOPS, converter=check_max_hops)

    def check(self, properties: Mapping[Any, Any] | None) -> Path:
        """The path of an attach this process takes as the end of it (a component): refused
        (:class:`HopError`) when it holds this identity or crossed more hops than the limit."""
        return self.check_route(properties)[0]

    def check_route(self, properties: Mapping[Any, Any] | None) -> Route:
        """:meth:`check`, and the hops the attach crossed (:func:`read_route`)."""
        path, hops = read_route(properties)
        if self.identity in path:  # it came back here: name the loop as it closes
            self._checked((*path, self.identity), hops + 1, "would cross")
        return self._checked(path, hops, "has crossed"), hops

    def extend(self, properties: Mapping[Any, Any] | None) -> Path:
        """The path of an attach this process forwards: the path it came with plus this
        identity (at most :data:`MAX_CARRIED`, the first left out), refused when that is a loop
        or crosses more hops than the limit."""
        return self.extend_route(properties)[0]

    def extend_route(self, properties: Mapping[Any, Any] | None) -> Route:
        """:meth:`extend`, and the hops it would cross: one more than it came with."""
        path, hops = read_route(properties)
        path = self._checked((*path, self.identity), hops + 1, "would cross")
        return path[-MAX_CARRIED:], hops + 1

    def upstream_properties(self, properties: Mapping[Any, Any] | None) -> dict[symbol, Any]:
        """The link properties to attach upstream with, for an attach that came with
        ``properties`` (None: an attach of this process's own; a relay's carries the identities
        behind it, ``relay/paths.py``): the same, keys made symbols, ``seqrepair-path``
        extended with this identity. :class:`HopError` or :class:`MalformedPathError` refuses
        it, with a description naming the path."""
        path, hops = self.extend_route(properties)
        out = {k if isinstance(k, symbol) else symbol(str(k)): v
               for k, v in dict(properties or {}).items()}
        out[PROP_PATH] = list(path)
        out[PROP_PATH_HOPS] = ulong(hops)
        return out

    def forward_count(self, properties: Mapping[Any, Any] | None) -> int:
        """The ``seqrepair-hops`` a request forwarded by this process carries on (the one it
        came with, plus one); :class:`HopLimitError` past the limit. A count that is not a
        non-negative integer is :class:`MalformedPathError`."""
        count = read_hops(properties) + 1
        if count > self.max_hops:
            raise HopLimitError(
                f"hop limit exceeded: this request would cross {count} hops, more than "
                f"{self.max_hops}, at {self.identity}",
                path=(self.identity,), expected=self.max_hops, got=count,
            )
        return count

    def _checked(self, path: Path, hops: int, crossing: str) -> Path:
        seen: set[str] = set()
        for hop in path:
            if hop in seen:
                raise RelayLoopError(
                    _cut(f"relay loop: {hop} is twice on this attach's path "
                         f"{describe_path(path)}; gateways or relays forward to each other"),
                    path=path, expected="each hop once", got=hop,
                )
            seen.add(hop)
        if hops > self.max_hops:
            raise HopLimitError(
                _cut(f"hop limit exceeded: this attach {crossing} {hops} hops, more "
                     f"than {self.max_hops} (at {self.identity}): {describe_path(path)}"),
                path=path, expected=self.max_hops, got=hops,
            )
        return path


def _cut(text: str) -> str:
    return text if len(text) <= DESCRIPTION_LIMIT else text[: DESCRIPTION_LIMIT - 3] + "..."


def read_hops(properties: Mapping[Any, Any] | None) -> int:
    """The ``seqrepair-hops`` of application ``properties``: 0 when absent;
    :class:`MalformedPathError` when it is not an integer 0..2^64-1."""
    value = None if not properties else properties.get(HOPS_PROPERTY)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise MalformedPathError(f"{HOPS_PROPERTY} must be an integer 0..2^64-1",
                                 expected="ulong", got=value)
    return int(value)


def count_hop(properties: Mapping[Any, Any] | None) -> dict[Any, Any]:
    """Application ``properties`` with ``seqrepair-hops`` one more (a frame a gateway
    forwards: counted, never refused). A malformed count is replaced by 1."""
    out = dict(properties or {})
    try:
        hops = read_hops(out)
    except MalformedPathError:
        hops = 0
    out[HOPS_PROPERTY] = ulong(hops + 1)
    return out


__all__ = [
    "DEFAULT_MAX_HOPS",
    "HOPS_PROPERTY",
    "HOP_CONDITIONS",
    "HOP_LIMIT_CONDITION",
    "LOOP_CONDITION",
    "MAX_CARRIED",
    "MAX_HOPS_LIMIT",
    "MAX_HOP_ID",
    "MAX_PATH",
    "PROP_PATH",
    "PROP_PATH_HOPS",
    "HopError",
    "HopLimitError",
    "Hops",
    "MalformedPathError",
    "RelayLoopError",
    "Route",
    "check_hop_id",
    "check_max_hops",
    "count_hop",
    "default_hop_id",
    "describe_path",
    "hop_refusal",
    "read_hops",
    "read_path",
    "read_route",
]
