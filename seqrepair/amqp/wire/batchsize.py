"""A publisher's transfer that fits the component's ``max-message-size``.

A publisher sends up to ``max_batch`` publications per transfer; publications of some hundred
kilobytes each would make one larger than the component takes (it rejects such a transfer as
``amqp:link:message-size-exceeded``). :func:`fitting` halves the batch until its encoding fits
the limit the component's link advertises; one publication always goes (alone), and one within
:data:`~seqrepair.core.limits.MAX_PUBLICATION_SIZE` fits a component on its defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seqrepair.amqp.wire.framing import Outgoing, encode_frames
from seqrepair.amqp.wire.rawamqp import PackedMessage
from seqrepair.core.messages import Publication

ENVELOPE = 512
"""Bytes a transfer may take besides a packed message's body (its application properties:
message type, count, first link number), with room to spare."""


def encoded_size(message: Outgoing) -> int:
    """The bytes of ``message`` on the wire, or a little more (never fewer)."""
    if isinstance(message, PackedMessage):
        return len(message.body) + ENVELOPE
    return len(message.encode())


def fitting(
    batch: Sequence[Publication], bits: Any, limit: int
) -> tuple[list[Publication], Outgoing, list[Publication]]:
    """``(sent, message, rest)``: the first publications of ``batch`` whose transfer fits
    ``limit`` bytes (0: no limit), encoded, and those left for a later transfer, in order."""
    sent = list(batch)
    rest: list[Publication] = []
    while True:
        message = encode_frames(sent, bits)
        if not limit or len(sent) == 1 or encoded_size(message) <= limit:
            return sent, message, rest
        half = len(sent) // 2
        rest[:0] = sent[half:]
        sent = sent[:half]
