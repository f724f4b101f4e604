"""Memory bounded by configuration, in bytes (WIRE.md "Resource model").

What a subscriber link costs the component is counted in two parts:

* *unsent*: the transfers it handed to proton that its peer has not yet taken (proton keeps a
  delivery queued on its link until the transport writes it; a peer that grants much credit
  and never reads its socket leaves them there). :class:`Unsent` counts them by size, in
  order, and drops the ones proton says left (``Link.queued``);
* *context*: the frames its :class:`~seqrepair.core.context.LinkContext` keeps for gap fill,
  estimated by :func:`~seqrepair.core.context.frame_size`.

Every tick, :class:`MemoryGuard` shares the byte budgets out and enforces them:

* each link's context keeps at most ``link_context_bytes``, and no more than half of an even
  share of its connection's, principal's and the component's bound (the other half is for
  unsent transfers): contexts shrink as links join (older gaps then repair by source);
* a link with more than ``link_unsent_bytes`` unsent, or any unsent when its connection's,
  principal's or the component's unsent bytes pass half their bound, is *paused* (SUBSCRIPTION
  PAUSED, as for ``max_pending``): nothing more is queued for it, and it resumes (with a link
  reset, repaired by source) once its peer has taken everything;
* a link that stays over for ``memory_grace`` seconds is detached with
  ``amqp:resource-limit-exceeded``, and its connection, whose peer does not read (the detach
  would wait behind what it has not taken), closed with the same condition and dropped: proton
  frees the queued transfers only with the transport.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from seqrepair.amqp.component.config import ComponentConfig
    from seqrepair.amqp.component.links import SubscriberLink

TRANSFER_OVERHEAD = 128
"""Bytes a queued transfer costs proton besides its payload (the delivery, its tag)."""

MEMORY_STATS = ("memory_bytes", "memory_peak", "unsent_bytes", "context_bytes",
                "paused_for_bytes", "detached_for_bytes", "link_states")
"""The component's counters this module keeps (its stop counters)."""


@attrs.define(eq=False)
class Unsent:
    """Transfers sent on one AMQP sender that its peer has not yet taken, by size."""

    sizes: deque[int] = attrs.field(factory=deque)
    bytes: int = 0

    def sent(self, delivery: Any) -> None:
        """A transfer was just handed to proton (``delivery``: what ``send`` returned)."""
        size = int(delivery.pending) + TRANSFER_OVERHEAD
        self.sizes.append(size)
        self.bytes += size

    def update(self, queued: int) -> int:
        """Drop the oldest sizes down to ``queued`` (the link's ``queued``: deliveries proton
        has not yet written, the newest ones); return the bytes left."""
        sizes = self.sizes
        while len(sizes) > queued:
            self.bytes -= sizes.popleft()
        return self.bytes

    def clear(self) -> None:
        """The sender is gone (its transfers go with its connection)."""
        self.sizes.clear()
        self.bytes = 0


@attrs.define(eq=False)
class MemoryGuard:
    """Shares the byte budgets among the component's links and enforces them (module doc)."""

    config: ComponentConfig
    stats: dict[str, int]
    _over_since: dict[str, float] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        for key in MEMORY_STATS:
            self.stats.setdefault(key, 0)

    def check(
        self, links: dict[str, SubscriberLink], principals: dict[str, str], now: float
    ) -> list[SubscriberLink]:
        """Apply the bounds at ``now``; return the links to detach (over for too long)."""
        config = self.config
        by_conn: dict[int, list[SubscriberLink]] = defaultdict(list)
        by_principal: dict[str, list[SubscriberLink]] = defaultdict(list)
        unsent: dict[str, int] = {}
        for link in links.values():
            sender = link.sender
            if sender is None:
                link.route.unsent.clear()
                unsent[link.name] = 0
                continue
            unsent[link.name] = link.route.unsent.update(sender.queued)
            by_conn[sender.connection.seqrepair_id].append(link)
            by_principal[principals.get(link.name, "")].append(link)
        total = max(1, len(links))
        share = config.component_bytes // (2 * total)
        context_bytes = 0
        for link in links.values():
            budget = min(config.link_context_bytes, share)
            sender = link.sender
            if sender is not None:
                budget = min(
                    budget,
                    config.connection_bytes // (2 * len(by_conn[sender.connection.seqrepair_id])),
                    config.principal_bytes
                    // (2 * len(by_principal[principals.get(link.name, "")])),
                )
            context = link.context
            context.max_bytes = max(1, budget)
            context.trim(link.window.outstanding if link.window is not None else 0)
            context_bytes += context.bytes
        over: set[str] = {
            name for name, size in unsent.items() if size > config.link_unsent_bytes
        }
        scopes = [(config.component_bytes, list(links.values()))]
        scopes += [(config.connection_bytes, group) for group in by_conn.values()]
        scopes += [(config.principal_bytes, group) for group in by_principal.values()]
        for bound, group in scopes:
            if sum(unsent[link.name] for link in group) > bound // 2:
                over.update(link.name for link in group if unsent[link.name] > 0)
        detach = []
        for name in list(self._over_since):
            if name not in over:
                del self._over_since[name]
        for name in over:
            link = links[name]
            if not link.memory_paused:
                self.stats["paused_for_bytes"] += 1
                link.pause_for_memory(now, unsent[name])
            since = self._over_since.setdefault(name, now)
            if now - since >= config.memory_grace:
                del self._over_since[name]
                self.stats["detached_for_bytes"] += 1
                detach.append(link)
        unsent_bytes = sum(unsent.values())
        stats = self.stats
        stats["unsent_bytes"] = unsent_bytes
        stats["context_bytes"] = context_bytes
        stats["memory_bytes"] = unsent_bytes + context_bytes
        stats["memory_peak"] = max(stats["memory_peak"], stats["memory_bytes"])
        stats["link_states"] = len(links)
        return detach
