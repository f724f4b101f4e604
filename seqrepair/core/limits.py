"""What a publication may hold so that it can always be delivered (issue 22 §3).

A publication is journaled before anyone receives it, and everything journaled must reach
subscribers live and by replay as one AMQP message. So what AMQP cannot carry is refused
*before* a number is taken and before the journal sees it, by :func:`check_deliverable`:

* **Integers** (field values, also inside lists and maps) fit an AMQP ``long``:
  ``MIN_FIELD_INT`` .. ``MAX_FIELD_INT`` (-2^63 .. 2^63-1). The encoders write a field integer
  as a ``long``; a larger one is refused (:class:`~seqrepair.core.errors.UndeliverableError`).
* **Topics** are at most :data:`MAX_TOPIC_BYTES` bytes of UTF-8.
* **Size**: the publication's fields, topic and permission token, encoded as AMQP, take at
  most :data:`MAX_PUBLICATION_SIZE` bytes
  (:class:`~seqrepair.core.errors.OversizedPublicationError`), half the component's default
  ``max-message-size`` (1 MiB), so that one publication with its envelope always fits one
  message of a component on its defaults. A component configured with a smaller
  ``--max-message-size`` refuses what does not fit it (its ingest, before journaling), and a
  publisher sends such a publication alone in its transfer.

:func:`encoded_size` computes the size the AMQP encoders write (exact for None, bool, int,
float, str, bytes, lists and maps; 17 bytes, a UUID's, for any other scalar).

Pure: no I/O, no clock. The sequencers call it when they stamp, the component's ingest when a
plain publisher's message arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seqrepair.core.errors import OversizedPublicationError, UndeliverableError

MAX_FIELD_INT = (1 << 63) - 1
"""The largest field integer: an AMQP ``long``'s."""
MIN_FIELD_INT = -(1 << 63)
"""The smallest field integer: an AMQP ``long``'s."""
MAX_TOPIC_BYTES = 1024
"""The most bytes of UTF-8 a publication's topic takes."""
MAX_PUBLICATION_SIZE = 512 * 1024
"""The most bytes a publication's fields, topic and permission token take, encoded as AMQP."""
MAX_DEPTH = 32
"""The deepest nesting of lists and maps in a field value."""

_OTHER_SCALAR = 17


def _text_size(n: int) -> int:
    return n + (2 if n < 256 else 5)


def _compound_size(items: int, count: int) -> int:
    return items + (3 if items + 1 < 256 and count < 256 else 9)


def encoded_size(value: Any, where: str = "value", depth: int = 0) -> int:
    """The bytes of ``value``'s AMQP encoding; raise UndeliverableError for an integer out of
    an AMQP ``long`` or nesting past :data:`MAX_DEPTH` (``where`` names it)."""
    cls = type(value)
    if cls is str:
        return _text_size(len(value) if value.isascii() else len(value.encode("utf-8",
                                                                               "surrogatepass")))
    if cls is int:
        if -128 <= value <= 127:
            return 2
        if not MIN_FIELD_INT <= value <= MAX_FIELD_INT:
            raise UndeliverableError(
                f"{where} is the integer {value}, outside an AMQP long "
                f"({MIN_FIELD_INT}..{MAX_FIELD_INT}): it could be journaled but never sent",
                expected=(MIN_FIELD_INT, MAX_FIELD_INT), got=value,
            )
        return 9
    if value is None or cls is bool:
        return 1
    if cls is float:
        return 9
    if cls is bytes or cls is bytearray:
        return _text_size(len(value))
    if depth >= MAX_DEPTH and (cls is list or cls is tuple or isinstance(value, Mapping)):
        raise UndeliverableError(f"{where} nests lists and maps more than {MAX_DEPTH} deep",
                                 expected=f"<= {MAX_DEPTH}", got=depth + 1)
    if cls is list or cls is tuple:
        items = sum(encoded_size(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
        return _compound_size(items, len(value)) if value else 1
    if isinstance(value, Mapping):
        items = 0
        for key, item in value.items():
            items += encoded_size(key, f"a key of {where}", depth + 1)
            items += encoded_size(item, f"{where}[{key!r}]", depth + 1)
        return _compound_size(items, 2 * len(value))
    if isinstance(value, int):  # an int subclass: encoded as its value
        return encoded_size(int(value), where, depth)
    return _OTHER_SCALAR


def check_deliverable(
    topic: str, fields: Mapping[str, Any], permtoken: str | None = None
) -> int:
    """Raise unless a publication of ``topic``, ``fields`` and ``permtoken`` can be delivered
    (see the module docstring); return its encoded size. ``topic`` and ``fields`` are taken
    as validated otherwise (a str, a mapping of str keys)."""
    topic_bytes = len(topic) if topic.isascii() else len(topic.encode("utf-8", "surrogatepass"))
    if topic_bytes > MAX_TOPIC_BYTES:
        raise UndeliverableError(
            f"topic of {topic_bytes} bytes: a publication's topic takes at most "
            f"{MAX_TOPIC_BYTES}", expected=f"<= {MAX_TOPIC_BYTES} bytes", got=topic_bytes,
        )
    size = _text_size(topic_bytes)
    for name, value in fields.items():  # the common flat cases inline: stamping is hot
        kind = type(value)
        if kind is int and MIN_FIELD_INT <= value <= MAX_FIELD_INT:
            size += 2 if -128 <= value <= 127 else 9
        elif kind is str and len(value) < 256 and value.isascii():
            size += 2 + len(value)
        elif kind is float:
            size += 9
        else:
            size += encoded_size(value, f"field {name!r}")
        if len(name) < 256 and name.isascii():
            size += 2 + len(name)
        else:
            size += encoded_size(name, "a field name")
    if permtoken is not None:
        size += encoded_size(permtoken)
    if size > MAX_PUBLICATION_SIZE:
        raise OversizedPublicationError(
            f"publication of {size} bytes encoded: one publication takes at most "
            f"{MAX_PUBLICATION_SIZE} (it must fit one message)",
            expected=f"<= {MAX_PUBLICATION_SIZE} bytes", got=size,
        )
    return size
