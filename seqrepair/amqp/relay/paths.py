"""The hop path of a relay's one upstream attach (APEX §4.7.2; WIRE.md "Hops, paths and
loops"): pure bookkeeping, no proton, no clock.

A gateway forwards attach by attach, so each path it sends is exact. A relay aggregates its
subscribers into **one** upstream link; for a loop of relays (A subscribes to B, B to A) to be
seen, that link's ``seqrepair-path`` carries every identity behind the relay: the union of
its subscriber links' paths (attached, or detached with their context kept, and those waiting
to be carried), deduplicated in a stable order (:func:`union_path`), then the relay's own
identity (added by :meth:`~seqrepair.amqp.wire.hops.Hops.upstream_properties`). The relay
attaches upstream again when that set of identities changes, never otherwise.

When the upstream attach is refused for its path (a loop, or the hop limit):

* the subscriber links that brought identities onto it (those with a path) are ended with the
  same condition (the relays among them, told so on their own upstream link, drop what is
  behind them in turn); for a loop their identities are also *barred*
  (:meth:`RelayPaths.bar`, at most :data:`MAX_BARRED`, the oldest forgotten first): an attach
  whose path holds one is refused at once, so the hop behind cannot come back and make the
  relay go round again; past the hop limit, their exact paths are barred instead (the relays
  among them attach again with a shorter path, which is let through);
* the relay attaches again with what is left; refused with nothing of its subscribers' on the
  path (its own identity alone, or what its upstream barred), it is *cut off*
  (:attr:`RelayPaths.cut_off`): it is part of the loop or too deep itself, so it stops its
  upstream link, ends every subscriber link with that condition and refuses new ones, until
  it restarts. Every relay of a loop ends so within a few attaches each: a loop of relays has
  no origin (each relay has one upstream, all of them in the loop), so nothing could have
  come through it anyway.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from seqrepair.amqp.wire.hops import HopError, Path

MAX_BARRED = 256
"""Identities a relay refuses at once at most (the oldest barred is forgotten first)."""


def union_path(paths: Iterable[Path]) -> Path:
    """The identities of ``paths``, each once, in a stable order: the paths sorted, then read
    in turn (a chain keeps its order, the nearest to the subscriber first)."""
    seen: dict[str, None] = {}
    for path in sorted(set(paths)):
        for hop in path:
            seen.setdefault(hop, None)
    return tuple(seen)


@attrs.define
class RelayPaths:
    """The paths a relay's upstream attach is made of, and what refusals taught it."""

    links: dict[str, Path] = attrs.Factory(dict)
    """The path each subscriber link (by name) attached with; those without a path are absent."""
    current: Path = ()
    """The identities behind the relay its upstream attach carries (its own not included)."""
    _shrink_since: float | None = None
    barred: dict[str, HopError] = attrs.Factory(dict)
    """Identities refused at once, with the refusal that barred them (oldest first)."""
    barred_paths: dict[Path, HopError] = attrs.Factory(dict)
    """Exact paths refused at once (past the hop limit), with the refusal (oldest first)."""
    cut_off: HopError | None = None
    """Why the relay gave up its upstream link for good (None: it did not)."""

    def attached(self, name: str, path: Path) -> None:
        """Subscriber link ``name`` attached (again) with ``path``."""
        if path:
            self.links[name] = path
        else:
            self.links.pop(name, None)

    def behind(self, names: Iterable[str], waiting: Iterable[Path] = ()) -> Path:
        """The identities behind the relay: the paths of the subscriber links ``names`` (those
        it still holds: paths of others are forgotten) and of those ``waiting``. A link
        detached for its path (:meth:`forget`) counts again only once it attaches again."""
        kept = set(names)
        for name in [n for n in self.links if n not in kept]:
            del self.links[name]
        return union_path([*self.links.values(), *waiting])

    def changed(self, behind: Path, now: float, linger: float) -> bool:
        """Whether the upstream link must attach again for ``behind``: at once when it holds
        an identity the attach does not carry, after ``linger`` seconds when it only lacks
        some (a subscriber the relay widened for attaches again meanwhile); another order of
        the same identities is no change."""
        wanted, carried = set(behind), set(self.current)
        if wanted == carried:
            self._shrink_since = None
            return False
        if not wanted <= carried:
            self._shrink_since = None
            return True
        if self._shrink_since is None:
            self._shrink_since = now
        if now - self._shrink_since < linger:
            return False
        self._shrink_since = None
        return True

    def offenders(self, names: Iterable[str]) -> list[str]:
        """Of the subscriber links ``names``, those that brought identities onto the path."""
        return [name for name in names if self.links.get(name)]

    def longest(self, names: Iterable[str], shorter_than: int) -> list[str]:
        """Of the subscriber links ``names``, the fewest that must go, longest paths first,
        for the identities of the rest to number fewer than ``shorter_than``: a path too long
        is blamed on what made it long, not on every link with a path (one subscriber's made-up
        path would otherwise end and bar every relay and gateway behind this one)."""
        order = sorted((n for n in names if self.links.get(n)),
                       key=lambda n: len(self.links[n]), reverse=True)
        for cut in range(len(order)):
            if len(union_path(self.links[n] for n in order[cut:])) < shorter_than:
                return order[:cut]
        return order

    def bar(self, identities: Iterable[str], error: HopError) -> None:
        """Refuse attaches through ``identities`` from now on, with ``error``'s condition."""
        for hop in identities:
            self.barred.pop(hop, None)
            self.barred[hop] = error
        while len(self.barred) > MAX_BARRED:
            del self.barred[next(iter(self.barred))]

    def bar_paths(self, paths: Iterable[Path], error: HopError) -> None:
        """Refuse attaches with exactly one of ``paths`` from now on, with ``error``'s
        condition (a path past the hop limit: a shorter one may come)."""
        for path in paths:
            self.barred_paths.pop(path, None)
            self.barred_paths[path] = error
        while len(self.barred_paths) > MAX_BARRED:
            del self.barred_paths[next(iter(self.barred_paths))]

    def refusal(self, path: Path) -> HopError | None:
        """The refusal an attach with ``path`` gets (None: it may attach): the relay's own
        when cut off, else the one that barred it or an identity on it."""
        if self.cut_off is not None:
            return self.cut_off
        if path in self.barred_paths:
            return self.barred_paths[path]
        for hop in path:
            if hop in self.barred:
                return self.barred[hop]
        return None

    def forget(self, names: Iterable[str]) -> None:
        """Links ``names`` were detached for the path they brought: it no longer counts."""
        for name in names:
            self.links.pop(name, None)
