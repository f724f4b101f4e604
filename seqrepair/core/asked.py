"""The link requests a subscriber stub sent, per link context.

A reset voids the old context's requests (DESIGN.md), but their answers may still be on the
way and name link numbers the new context uses again. The stub remembers the requests of the
current context and of the one before it, so such an answer is known for what it is.
"""

from __future__ import annotations

import attrs

from seqrepair.core.messages import GapRequest

KEPT = 256
"""Requests remembered per context, the newest: the answers in flight are to recent ones."""


@attrs.define
class AskedRequests:
    """The newest link requests of the current context and of the context a reset voided."""

    _current: dict[GapRequest, None] = attrs.field(factory=dict)
    _voided: dict[GapRequest, None] = attrs.field(factory=dict)

    def note(self, request: GapRequest) -> None:
        """``request`` was sent in the current context."""
        self._current.pop(request, None)
        self._current[request] = None
        if len(self._current) > KEPT:
            del self._current[next(iter(self._current))]

    def new_context(self) -> None:
        """A reset: what was asked so far belongs to a voided context."""
        self._voided, self._current = self._current, {}

    def voided(self, request: object) -> bool:
        """Was ``request`` asked by the voided context only (its answer is not for this one)?"""
        return request in self._voided and request not in self._current
