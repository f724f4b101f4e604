"""The hop path of a relay's one upstream attach (APEX §4.7.2; WIRE.md "Hops, paths and
loops"): pure bookkeeping, no proton, no clock.

A gateway forwards attach by attach, so each path it sends is exact. A relay aggregates its
subscribers into **one** upstream link; for a loop of relays (A subscribes to B, B to A) to be
seen, that link's ``seqrepair-path`` carries every identity behind the relay: the union of
its subscriber links' paths (attached, or detached with their context kept, and those waiting
to be carried), deduplicated in a stable order (:func:`union_path`), then the relay's own
identity (added by :meth:`~seqrepair.amqp.wire.hops.Hops.upstream_properties`), and the hops
of its deepest route (``seqrepair-path-hops``: the hop limit is on that, not on how many
identities fan in). The relay attaches upstream again when that set of identities, or that
depth, changes, never otherwise.

When the upstream attach is refused for its path (a loop, or the hop limit):

* the subscriber links that brought identities onto it (those with a path) are ended with the
  same condition (the relays among them, told so on their own upstream link, drop what is
  behind them in turn); for a loop their identities are also *barred*
  (:meth:`RelayPaths.bar`, at most :data:`MAX_BARRED`, the oldest forgotten first): an attach
  whose path holds one is refused at once, so the hop behind cannot come back and make the
  relay go round again; past the hop limit, the deepest links go and their exact paths are
  barred instead (the relays among them attach again with a shorter path, let through);
* the relay attaches again with what is left; refused with nothing of its subscribers' on the
  path (its own identity alone, or what its upstream barred), it is *cut off*
  (:attr:`RelayPaths.cut_off`): it is part of the loop or too deep itself, so it stops its
  upstream link, ends every subscriber link with that condition and refuses new ones. Every
  relay of a loop ends so within a few attaches each: a loop of relays has no origin (each
  relay has one upstream, all of them in the loop), so nothing could have come through it
  anyway.

Nothing of this lasts: a bar and a cut-off expire like a circuit breaker opens (:class:`Breaker`:
:data:`BAR_FIRST` seconds, doubled on each refusal that follows within :data:`BAR_QUIET`, at
most :data:`BAR_MOST`), and the relay then tries again: a cut-off relay attaches upstream again,
a barred identity may attach again. The upstream attach re-checks the path: while the loop is
there it is refused again (and barred, or cut off, for longer); once the loop is broken (the
other relay stopped or points elsewhere) it is let through, within :data:`BAR_MOST` seconds,
without a restart.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from seqrepair.amqp.wire.hops import Path, Route
from seqrepair.amqp.wire.loopbar import (  # re-exported: they lived here first
    BAR_FIRST,
    BAR_MOST,
    BAR_QUIET,
    MAX_BARRED,
    Bars,
    Breaker,
)


def union_path(paths: Iterable[Path]) -> Path:
    """The identities of ``paths``, each once, in a stable order: the paths sorted, then read
    in turn (a chain keeps its order, the nearest to the subscriber first)."""
    seen: dict[str, None] = {}
    for path in sorted(set(paths)):
        for hop in path:
            seen.setdefault(hop, None)
    return tuple(seen)


@attrs.define
class RelayPaths(Bars):
    """The paths a relay's upstream attach is made of, and what refusals taught it (its
    bars and cut-off: :class:`~seqrepair.amqp.wire.loopbar.Bars`)."""

    links: dict[str, Path] = attrs.Factory(dict)
    """The path each subscriber link (by name) attached with; those without a path are absent."""
    hops: dict[str, int] = attrs.Factory(dict)
    """The hops each link of :attr:`links` crossed (its deepest route)."""
    current: Path = ()
    """The identities behind the relay its upstream attach carries (its own not included)."""
    current_hops: int = 0
    """The hops of the deepest route behind the relay its upstream attach carries."""
    _shrink_since: float | None = None

    def attached(self, name: str, path: Path, hops: int | None = None) -> None:
        """Subscriber link ``name`` attached (again) with ``path`` (``hops``: its length)."""
        if path:
            self.links[name] = path
            self.hops[name] = len(path) if hops is None else hops
        else:
            self.links.pop(name, None)
            self.hops.pop(name, None)

    def behind(self, names: Iterable[str], waiting: Iterable[Path] = ()) -> Path:
        """The identities behind the relay: the paths of the subscriber links ``names`` (those
        it still holds: paths of others are forgotten) and of those ``waiting``. A link
        detached for its path (:meth:`forget`) counts again only once it attaches again."""
        kept = set(names)
        for name in [n for n in self.links if n not in kept]:
            del self.links[name]
            self.hops.pop(name, None)
        return union_path([*self.links.values(), *waiting])

    def depth(self, waiting: Iterable[int] = ()) -> int:
        """The hops of the deepest route behind the relay: its links' (as :meth:`behind` left
        them) and those ``waiting``."""
        return max([0, *self.hops.values(), *waiting])

    def changed(self, behind: Path, now: float, linger: float, hops: int | None = None
                ) -> bool:
        """Whether the upstream link must attach again for ``behind`` (and ``hops``, the
        deepest route; None: as carried): at once when it holds an identity the attach does
        not carry, or a deeper route, after ``linger`` seconds when it only lacks some (a
        subscriber the relay widened for attaches again meanwhile) or is shallower; another
        order of the same identities is no change."""
        hops = self.current_hops if hops is None else hops
        wanted, carried = set(behind), set(self.current)
        if wanted == carried and hops == self.current_hops:
            self._shrink_since = None
            return False
        if not wanted <= carried or hops > self.current_hops:
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

    def deepest(self, names: Iterable[str]) -> list[str]:
        """Of the subscriber links ``names``, those whose routes are the deepest: what made a
        path cross too many hops (one subscriber's made-up path would otherwise end and bar
        every relay and gateway behind this one). The relay drops them and attaches again;
        refused again, it drops the next deepest."""
        with_path = [n for n in names if self.links.get(n)]
        most = max((self.hops.get(n, len(self.links[n])) for n in with_path), default=0)
        return [n for n in with_path if self.hops.get(n, len(self.links[n])) == most]

    def forget(self, names: Iterable[str]) -> None:
        """Links ``names`` were detached for the path they brought: it no longer counts."""
        for name in names:
            self.links.pop(name, None)
            self.hops.pop(name, None)


__all__ = ["BAR_FIRST", "BAR_MOST", "BAR_QUIET", "MAX_BARRED", "Breaker", "RelayPaths",
           "Route", "union_path"]
