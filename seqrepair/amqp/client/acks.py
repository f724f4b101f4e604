"""The subscriber's side of the window discipline (WIRE.md "Window discipline").

:func:`numbering_from_reply` reads what the component's attach reply says of the link's
numbering (width, heartbeat interval, the widest gap range it answers, the window) and checks
it against what the subscriber was given by hand: a disagreement is a
:class:`~seqrepair.amqp.wire.errors.SettingsMismatchError` naming both values, never a silent loss.

:class:`AckSender` decides when to tell the component how far the stub has got: ``ACK`` with
the stub's contiguous point (:func:`consumed_through`) in the current link
context, at most one per ``min_interval`` (20 ms), at once when the stub has consumed a
quarter of the window since the last one (so even a 2-bit link, whose window is one number,
progresses a number per round trip), and again every ``refresh`` seconds while nothing
changes (an ACK lost with a connection would otherwise leave a resumed link's window shut).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from seqrepair.amqp.client.taken import TakenPositions
from seqrepair.amqp.wire.errors import SettingsMismatchError
from seqrepair.amqp.wire.technical import DEFAULT_LINK_BITS, Ack
from seqrepair.amqp.wire.vocabulary import (
    PROP_HEARTBEAT,
    PROP_LINK_BITS,
    PROP_MAX_GAP_RANGE,
    PROP_WINDOW,
)
from seqrepair.core.sequence import SequenceSpace
from seqrepair.core.stub import SubscriberStub

DEFAULT_HEARTBEAT = 1.0
"""The heartbeat interval a subscriber expects before the component has said (seconds)."""
DEFAULT_REQUEST_SPAN = SubscriberStub().max_request_span


@attrs.frozen
class Numbering:
    """The link's numbering as the component runs it (None: the component did not say: an
    older component, or a gateway that does not relay its reply)."""

    bits: int | None = None
    heartbeat_interval: float | None = None
    max_gap_range: int | None = None
    window: int | None = None


def _number(props: Mapping[str, Any], key: Any, kind: type) -> Any:
    value = props.get(str(key))
    if value is None or isinstance(value, bool):
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        return None
    if number <= 0 or (kind is float and not math.isfinite(number)):
        return None
    return number


UNWINDOWED_MIN_BITS = 16
"""The narrowest link a subscriber outside the window reads: below it the component can run a
lap past a subscriber waiting for one repair, and a lap of numbers is a silent loss that no
check of source numbers can always see (a filtered view of a source has holes of any size)."""


def numbering_from_reply(
    props: Mapping[str, Any], *, bits: int | None, heartbeat_interval: float | None
) -> Numbering:
    """The numbering the attach reply ``props`` (plain string keys) announces.

    ``bits`` / ``heartbeat_interval``: what the subscriber was given by hand (None: follow the
    component). A given value the component contradicts raises SettingsMismatchError.
    """
    told = Numbering(
        bits=_number(props, PROP_LINK_BITS, int),
        heartbeat_interval=_number(props, PROP_HEARTBEAT, float),
        max_gap_range=_number(props, PROP_MAX_GAP_RANGE, int),
        window=_number(props, PROP_WINDOW, int),
    )
    if bits is not None and told.bits is not None and bits != told.bits:
        raise SettingsMismatchError(
            f"{SettingsMismatchError.condition}: the component numbers this link in"
            f" {told.bits} bits, the subscriber was given {bits} (--bits): leave it out to"
            " follow the component",
            expected=told.bits, got=bits,
        )
    if (
        heartbeat_interval is not None
        and told.heartbeat_interval is not None
        and not math.isclose(heartbeat_interval, told.heartbeat_interval, rel_tol=1e-9)
    ):
        raise SettingsMismatchError(
            f"{SettingsMismatchError.condition}: the component sends heartbeats every"
            f" {told.heartbeat_interval} s, the subscriber was given {heartbeat_interval} s"
            " (--heartbeat): leave it out to follow the component",
            expected=told.heartbeat_interval, got=heartbeat_interval,
        )
    return told


def consumed_through(stub: SubscriberStub) -> int | None:
    """The wire link number through which ``stub`` has consumed every number of its current
    context (what an ACK says), or None while it has consumed none (nothing to acknowledge:
    the stub's :attr:`~seqrepair.core.stub.SubscriberStub.consumed_through` is 0 or None)."""
    return stub.consumed_through or None


@attrs.define
class AckSender:
    """When a subscriber sends ``ACK``, and what it says (see the module docstring).

    ``window``: the component's window for the link (its attach reply), which sets the
    quarter-window that sends an ACK at once. :meth:`due` is cheap: call it after every
    transfer that :meth:`received` says brought a quarter window, and on every tick.
    """

    link: str
    bits: int
    window: int = 1
    min_interval: float = 0.02
    refresh: float = 1.0
    taken_from: TakenPositions | None = None
    """What the application has taken (:mod:`seqrepair.amqp.client.taken`): the ``taken`` said."""
    space: SequenceSpace = attrs.field(init=False)
    _epoch: str | None = attrs.field(init=False, default=None)
    _through: int | None = attrs.field(init=False, default=None)
    _sent_at: float = attrs.field(init=False, default=-math.inf)
    _received: int = attrs.field(init=False, default=0)
    sent: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self.space = SequenceSpace(self.bits)

    @property
    def quarter(self) -> int:
        """What consumed since the last ACK sends one at once: a quarter window, at least 1."""
        return max(1, self.window // 4)

    def received(self, frames: int) -> bool:
        """``frames`` more came (a transfer's): whether to see at once if an ACK is
        :meth:`due` (a quarter window came since the last one). The cheap test a subscriber
        makes per transfer; otherwise its timer asks :meth:`due` every tick."""
        self._received += frames
        return self._received >= self.quarter

    def taken(self) -> dict[str, int]:
        """Per source, the absolute number the application has taken since the last ACK
        (drained from :attr:`taken_from`: called only when an ACK goes out)."""
        if self.taken_from is None:
            return {}
        return self.taken_from.drain() or {}

    def reattached(self) -> None:
        """A new attach: the next ACK goes at once, whatever was sent before."""
        self._sent_at = -math.inf
        self._through = None
        if self.taken_from is not None:
            self.taken_from.again()  # an ACK lost with the connection is said again

    def due(self, epoch: str | None, through: int | None, now: float) -> Ack | None:
        """The ACK to send now for the stub's contiguous point ``through`` in the link
        context ``epoch``, or None. Nothing is said without a context named by the component
        (it runs no window then); before the stub has consumed the context's first frame,
        only what the application took, if anything."""
        if epoch is None:
            return None
        waited = now - self._sent_at
        if through is None:
            # nothing of the context consumed yet (a replay after a reset is being delivered):
            # the taken alone, so a durable position follows the catch-up too
            if self.taken_from is None or not self.taken_from.pending():
                return None
            if waited < self.min_interval:
                return None
            self._sent_at = now
            self.sent += 1
            return Ack(self.link, epoch, None, self.taken())
        if epoch == self._epoch and through == self._through:
            news = self.taken_from is not None and self.taken_from.pending()
            if waited < (self.min_interval if news else self.refresh):
                return None
        elif epoch == self._epoch and self._through is not None and waited < self.min_interval:
            last = self._through
            consumed = (
                through - last if not (last and through) else self.space.distance(last, through)
            )
            if consumed < self.quarter:
                return None
        taken = self.taken()
        self._received = 0
        self._epoch, self._through, self._sent_at = epoch, through, now
        self.sent += 1
        return Ack(self.link, epoch, through, taken)


@attrs.define
class FollowedNumbering:
    """A subscriber's stub settings, completed from the component at attach.

    ``bits`` / ``heartbeat_interval`` as given by hand (None: follow the component);
    ``stub_settings``: the rest of the :class:`SubscriberStub`'s arguments. The first attach
    reply configures the stub (:meth:`attached` builds a new one when the component's
    numbering differs from the defaults it was made with, before any frame has come); a later
    reply that contradicts it (a component restarted with other settings) stops the
    subscriber, as its frames could not be read.
    """

    link: str
    bits: int | None
    heartbeat_interval: float | None
    stub_settings: dict[str, Any]
    acks: AckSender | None = None
    taken: TakenPositions | None = None
    """Given to the :class:`AckSender` (what the application has taken)."""
    _configured: bool = attrs.field(init=False, default=False)

    def first_stub(self) -> SubscriberStub:
        """The stub to start with (its width and interval the given ones, or the defaults)."""
        return SubscriberStub(
            bits=self.bits or DEFAULT_LINK_BITS,
            heartbeat_interval=self.heartbeat_interval or DEFAULT_HEARTBEAT,
            **self.stub_settings,
        )

    def attached(self, props: Mapping[str, Any], stub: SubscriberStub) -> SubscriberStub:
        """The stub to go on with after an attach whose reply properties are ``props``:
        ``stub`` itself, or one built to the component's numbering on the first attach.
        Raises SettingsMismatchError when the component contradicts a given setting (or, on a
        later attach, the numbering the stub was built for)."""
        told = numbering_from_reply(
            props, bits=self.bits, heartbeat_interval=self.heartbeat_interval
        )
        if self._configured:
            numbering_from_reply(
                props, bits=stub.bits, heartbeat_interval=stub.heartbeat_interval
            )
        else:
            self._configured = True
            settings = dict(self.stub_settings)
            if told.max_gap_range is not None:
                settings["max_request_span"] = min(
                    told.max_gap_range, settings.get("max_request_span", DEFAULT_REQUEST_SPAN)
                )
            wanted = (
                told.bits or stub.bits,
                told.heartbeat_interval or stub.heartbeat_interval,
                settings.get("max_request_span", DEFAULT_REQUEST_SPAN),
            )
            if wanted != (stub.bits, stub.heartbeat_interval, stub.max_request_span):
                stub = SubscriberStub(bits=wanted[0], heartbeat_interval=wanted[1], **settings)
        if told.window is None:  # a component (or gateway) that runs no window for this link
            if stub.bits < UNWINDOWED_MIN_BITS:
                raise SettingsMismatchError(
                    f"{SettingsMismatchError.condition}: no window on this {stub.bits}-bit link"
                    f" (the subscriber does not acknowledge, or the component keeps none): its"
                    f" numbers could wrap while a repair is outstanding, which no subscriber"
                    f" can read unambiguously; acknowledge (ack=True) or use a link of at"
                    f" least {UNWINDOWED_MIN_BITS} bits",
                    expected=UNWINDOWED_MIN_BITS, got=stub.bits,
                )
            self.acks = None
        else:
            if self.acks is None or self.acks.bits != stub.bits:
                self.acks = AckSender(self.link, stub.bits, refresh=stub.heartbeat_interval,
                                      taken_from=self.taken)
            self.acks.window = told.window
            self.acks.reattached()
        return stub
