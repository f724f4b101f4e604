"""The library's error hierarchy.

Every error raised on bad input is a :class:`SeqRepairError`. Errors carry structured
fields (``expected``, ``got``) so callers can act on them without parsing messages,
in the manner of h2's ``StreamIDTooLowError(stream_id, max_stream_id)``.
"""

from __future__ import annotations

from typing import Any


class SeqRepairError(Exception):
    """Base of every error seqrepair raises on bad input or a broken contract."""

    def __init__(self, message: str, *, expected: Any = None, got: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.expected = expected
        self.got = got


class InvalidSequenceError(SeqRepairError):
    """A sequence number or bit width outside the sequence space."""


class InvalidMessageError(SeqRepairError):
    """A message (publication, heartbeat, request) with a malformed or missing field."""


class UnknownPublishTypeError(InvalidMessageError):
    """A publish type that is not update, correction, image, drop, snapshot (or add)."""


class UndeliverableError(InvalidMessageError):
    """A publication that could be journaled but never delivered as one AMQP message (an
    integer outside an AMQP long, a topic past its limit): refused before it takes a number
    (:mod:`seqrepair.core.limits`). An old journal entry that is so is reported
    ``Unrecoverable`` to a subscriber replaying it."""


class OversizedPublicationError(UndeliverableError):
    """A publication larger, encoded, than one publication may be
    (:data:`~seqrepair.core.limits.MAX_PUBLICATION_SIZE`)."""


class InvalidTopicPatternError(SeqRepairError):
    """A topic or topic pattern that breaks the topic-tree syntax."""


class InvalidConfigError(SeqRepairError, ValueError):
    """A constructor argument or option outside its allowed range (also a ValueError, the
    exception Python code expects for a bad argument value)."""


class InvalidSubscriptionError(SeqRepairError, ValueError):
    """A proposed subscription, or one of its filters, that the subscription model does not
    allow (the CloudEvents Subscriptions API's ``invalid``)."""


class SubscriptionNotFoundError(SeqRepairError, LookupError):
    """No subscription has the id asked for (``notfound``)."""


class SubscriptionConflictError(SeqRepairError):
    """The id of a new subscription is taken, or the subscription may not be changed this way
    (``conflict``)."""


class TopicNotFoundError(SeqRepairError, LookupError):
    """No topic of the catalog is the one asked for (a valid topic nobody published)."""


class TopicConflictError(SeqRepairError):
    """The topic may not be changed this way: the catalog is full, or the topic is the
    operator's (declared on the command line) (``conflict``)."""


class AccessDeniedError(SeqRepairError):
    """The access policy does not let the caller's principal do this operation
    (:mod:`seqrepair.core.policy`; REST ``403 forbidden``, AMQP ``amqp:unauthorized-access``)."""


BAD_INPUT_ERRORS: tuple[type[SeqRepairError], ...] = (
    InvalidSequenceError,
    InvalidMessageError,
    InvalidTopicPatternError,
    InvalidConfigError,
    InvalidSubscriptionError,
)
"""The errors that say the caller's input was wrong (the command line exits 2 on them)."""
