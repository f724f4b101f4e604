"""A source-level repair in flight, as the subscriber stub keeps it (XEP-0040 §2.4).

The stub has at most one: the request it sent (asked again after retries, trims and replays
that stopped at the component's limit), the link numbers its completion covers, and whether
the link's new context is held until it completes.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from seqrepair.core.messages import ReplayComplete, ReplayStarted, SourceGapRequest, same_attempt


@attrs.define(on_setattr=attrs.setters.NO_OP)
class SourceRepair:
    """A source-level request in flight."""

    request: SourceGapRequest
    cover_through: int  # link numbers up to here are covered once the replay completes
    hold: bool  # deliver nothing from the link until the replay completes (after a reset)
    attempts: int
    next_at: float | None  # None: sent by the application (resume_point), timed from next poll
    resume: bool = False  # asked by resume_point(): the (re)attach of the link
    quiet: bool = True  # no frame of a link context has come since it was asked
    progressed: bool = False  # a replayed publication arrived while it was in flight
    live: bool = False  # the component said it runs the replay, or its frames are coming
    first_after: Mapping[str, int] | None = None  # the first attempt's after (progress base)
    # the request sent for what follows the replay, asked on its REPLAY-STARTED with ``more``
    # (pipelined: the component answers it when this one ends), and its own REPLAY-STARTED
    following: SourceGapRequest | None = None
    following_started: ReplayStarted | None = None

    def __attrs_post_init__(self) -> None:
        if self.first_after is None:
            self.first_after = self.request.after

    def progress(self, now: float, wait: float) -> None:
        """A replayed publication (or the component's word that the replay runs) arrived:
        the replay is live, so the retry count starts again and the next retry is timed from
        now (a give-up would abandon a repair that is making progress, however long the replay
        takes). A retry, when nothing comes for ``wait``, asks "still going?": the same
        ``request_id``, ``after`` the remainder (what was delivered), so a component still
        running the replay continues it and one that lost it replays only the remainder."""
        self.attempts = 1
        self.next_at = now + wait
        self.progressed = True
        self.live = True

    def listening(self, now: float, wait: float) -> None:
        """The application held the thread until ``now``: a replay that was coming is still
        coming, unread in the transport; its retry is not due before ``wait`` from now."""
        if self.progressed and self.next_at is not None:
            self.next_at = max(self.next_at, now + wait)


def resume_after(last_delivered: Mapping[str, int], floor: dict[str, int]) -> dict[str, int]:
    """Where a replay should start per source: after the last delivered number, or after the
    ``floor`` (what retention trimmed, or a replay that stopped short read) when that is
    further. A floor the deliveries have reached is dropped."""
    after = dict(last_delivered)
    for name, seq in list(floor.items()):
        if seq > after.get(name, 0):
            after[name] = seq
        else:
            del floor[name]
    return after


def answers_request(complete: ReplayComplete, request: SourceGapRequest) -> bool:
    """Can ``complete`` end the replay asked for by ``request``?

    When the transport names the request, it must be this one or an earlier attempt of it (the
    same ``request_id``, see :func:`~seqrepair.core.messages.same_attempt`; without ids, the
    same ``after``). Otherwise an answer that stops short of a source's
    ``after`` (a late copy of an earlier answer) cannot be for it; a late copy that reaches it
    (the earlier request's answer, when nothing was delivered between the two) cannot be told
    apart, which is why transports that may duplicate or delay answers name the request.
    """
    if complete.request is not None:
        return same_attempt(complete.request, request)
    through = complete.through
    return all(through.get(name, seq) >= seq for name, seq in request.after.items())
