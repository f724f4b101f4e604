"""Circuit-breaker bars after an attach was refused for its path (APEX §4.7.2; WIRE.md "Hops,
paths and loops"): pure bookkeeping, no proton, no clock, shared by relays
(:mod:`seqrepair.amqp.relay.paths`) and gateways (:mod:`seqrepair.amqp.gateway.relays`).

A hop whose upstream attach was refused for a loop, or past the hop limit, remembers it for a
while so that what would go round again is refused at once, without an attach upstream:

* an *identity* on the path that is the loop (:meth:`Bars.bar`): an attach whose path holds it
  is refused with the same condition;
* an exact *path* past the hop limit (:meth:`Bars.bar_paths`): a shorter one may come;
* the hop itself, *cut off* (:meth:`Bars.cut`): it is in the loop (its own identity is the one
  found twice), so every attach through it would go round: all are refused.

At most :data:`MAX_BARRED` identities and as many paths are kept (the oldest forgotten first).
Nothing lasts: a bar expires like a circuit breaker (:class:`Breaker`: :data:`BAR_FIRST`
seconds, doubled on each refusal that follows within :data:`BAR_QUIET`, at most
:data:`BAR_MOST`); the next attach then goes upstream and is checked again there, so a loop
that was broken is let through without a restart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from seqrepair.amqp.wire.hops import (
    DESCRIPTION_LIMIT,
    HopError,
    Path,
    RelayLoopError,
    describe_path,
)

MAX_BARRED = 256
"""Identities (and, apart, exact paths) a hop refuses at once at most (the oldest barred is
forgotten first)."""
BAR_FIRST = 2.0
"""Seconds a first bar or cut-off lasts."""
BAR_MOST = 8.0
"""Seconds a bar or cut-off lasts at most, however often the loop was refused."""
BAR_QUIET = 30.0
"""Seconds without a refusal after which the next bar lasts :data:`BAR_FIRST` again."""

_TWICE = re.compile(r"relay loop: (\S+) is twice")


_PATH = re.compile(r"path (\S+(?: -> \S+)+)")


def loop_cycle(description: str, own: str) -> Path | None:
    """The identities a loop through ``own`` crosses after it before it comes back, read from
    a loop refusal's ``description`` (``... path a -> own -> b -> c -> own; ...``: ``(b,
    c)``), or None when it does not say (another hop's loop, a path described in part)."""
    found = _PATH.search(description)
    if found is None or "..." in found.group(1):
        return None
    path = found.group(1).rstrip(";,.").split(" -> ")
    if path.count(own) < 2:
        return None
    first = path.index(own)
    second = path.index(own, first + 1)
    return tuple(path[first + 1:second])


def around(path: Path, own: str, cycle: Path) -> RelayLoopError:
    """The refusal an attach with ``path`` would come back with from upstream of ``own``,
    a loop crossing ``cycle`` after it (:func:`loop_cycle`): the first identity it meets
    twice, named with the path it would have by then, as a hop there words it."""
    seen: set[str] = set()
    walked: list[str] = []
    for hop in (*path, own, *cycle, own):
        walked.append(hop)
        if hop in seen:
            break
        seen.add(hop)
    twice = walked[-1]
    text = (f"relay loop: {twice} is twice on this attach's path {describe_path(walked)}; "
            "gateways or relays forward to each other")
    if len(text) > DESCRIPTION_LIMIT:
        text = text[: DESCRIPTION_LIMIT - 3] + "..."
    return RelayLoopError(text, path=tuple(walked), expected="each hop once", got=twice)


def looping_identity(description: str) -> str | None:
    """The identity a loop refusal's ``description`` names as found twice on the path (the
    loop), or None when it names none."""
    found = _TWICE.search(description)
    return None if found is None else found.group(1)


@attrs.define
class Breaker:
    """How long the next bar or cut-off lasts: :data:`BAR_FIRST` seconds, doubled for each
    refusal since the last quiet spell of :data:`BAR_QUIET` seconds, at most :data:`BAR_MOST`."""

    strikes: int = 0
    last: float | None = None

    def trip(self, now: float) -> float:
        """A refusal at ``now``: until when what it bars lasts."""
        if self.last is None or now - self.last > BAR_QUIET:
            self.strikes = 0
        self.last = now
        period: float = min(BAR_FIRST * 2.0 ** min(self.strikes, 16), BAR_MOST)
        self.strikes += 1
        return now + period


@attrs.define
class Bars:
    """What refusals for a path taught a hop (see the module)."""

    barred: dict[str, tuple[HopError, float]] = attrs.Factory(dict)
    """Identities refused at once, with the refusal that barred them and until when (oldest
    first)."""
    barred_paths: dict[Path, tuple[HopError, float]] = attrs.Factory(dict)
    """Exact paths refused at once (past the hop limit), with the refusal and until when."""
    cut_off: HopError | None = None
    """Why the hop refuses every attach (None: it does not), until :attr:`cut_until`."""
    cut_until: float = 0.0
    breaker: Breaker = attrs.Factory(Breaker)

    def bar(self, identities: Iterable[str], error: HopError, until: float) -> None:
        """Refuse attaches through ``identities`` with ``error``'s condition until ``until``."""
        for hop in identities:
            self.barred.pop(hop, None)
            self.barred[hop] = (error, until)
        while len(self.barred) > MAX_BARRED:
            del self.barred[next(iter(self.barred))]

    def bar_paths(self, paths: Iterable[Path], error: HopError, until: float) -> None:
        """Refuse attaches with exactly one of ``paths`` with ``error``'s condition until
        ``until`` (a path past the hop limit: a shorter one may come)."""
        for path in paths:
            self.barred_paths.pop(path, None)
            self.barred_paths[path] = (error, until)
        while len(self.barred_paths) > MAX_BARRED:
            del self.barred_paths[next(iter(self.barred_paths))]

    def cut(self, error: HopError, until: float) -> None:
        """Every attach is refused with ``error`` until ``until``."""
        self.cut_off, self.cut_until = error, until

    def cut_ended(self, now: float) -> bool:
        """Whether the hop was cut off and that ended at ``now``: it tries again."""
        if self.cut_off is None or now < self.cut_until:
            return False
        self.cut_off = None
        return True

    def refusal(self, path: Path, now: float) -> HopError | None:
        """The refusal an attach with ``path`` gets at ``now`` (None: it may attach): the
        cut-off's while it lasts, else the one that barred it or an identity on it, while
        that lasts (an expired bar is forgotten)."""
        if self.cut_off is not None and now < self.cut_until:
            return self.cut_off
        if self.barred:
            self.barred = {h: b for h, b in self.barred.items() if b[1] > now}
        if self.barred_paths:
            self.barred_paths = {p: b for p, b in self.barred_paths.items() if b[1] > now}
        if path in self.barred_paths:
            return self.barred_paths[path][0]
        for hop in path:
            if hop in self.barred:
                return self.barred[hop][0]
        return None


__all__ = ["BAR_FIRST", "BAR_MOST", "BAR_QUIET", "MAX_BARRED", "Bars", "Breaker", "around",
           "loop_cycle", "looping_identity"]
