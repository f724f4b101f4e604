"""A ``PUBLICATIONS`` transfer read straight from its bytes into publications (WIRE.md).

The usual way reads a received message's list body into Python lists
(:func:`~seqrepair.amqp.wire.rawamqp.read_message`), then the
:class:`~seqrepair.amqp.wire.codec.Decoder` takes each entry list apart again, checks every
value's type and builds the :class:`~seqrepair.core.messages.Publication`. For the usual
transfer (every entry a regular 8-element publication entry, as a component and a publisher
write them)
:func:`read_publications` does both in one pass over the bytes: each value's AMQP type code
already says its Python type, so only what the codes do not say is checked (the values'
ranges, by :func:`~seqrepair.core.messages.decoded_publication` as on the usual way).

It gives exactly what ``Decoder.decode`` gives for such a message (the same publications, the
source numbers unwrapped by the decoder's own unwrapper, in order), plus each entry's bytes;
for anything else (another message type, a heartbeat or 10-element entry, a value of another
type code, bytes that do not add up, a value the usual way would refuse) it returns None having
changed nothing, and the caller reads the message the usual way, which decodes or raises as
ever. Entries laid out like the one before are read by that layout, one ``struct`` call each
(:mod:`~seqrepair.amqp.wire.entrylayout`), a run of eight or more of them at once
(:mod:`~seqrepair.amqp.wire.entryrun`: a column at a time), the others step by step; a
transfer starts with the layout the last one ended with. Used by the
:class:`~seqrepair.amqp.client.subscriber.Subscriber` (a catch-up receives such transfers at
its full rate), a relay's upstream subscriber (``seqrepair.amqp.relay.upstream``) and the
component's ingest of a publishing link's transfers (``seqrepair.amqp.component.ingest``, inside
its trial: see :func:`read_publications`).
"""

from __future__ import annotations

import struct
from typing import Any

from seqrepair.amqp.wire.entrylayout import EntryLayout, layout_at
from seqrepair.amqp.wire.entryrun import MAX_RUN, MIN_RUN, read_run, reader_of, run_length
from seqrepair.amqp.wire.framing import PTYPE_BY_NAME
from seqrepair.amqp.wire.rawamqp import (
    ReceivedMessage,
    _double_at,
    _read_pairs,
    _u32,
    _ulong_at,
)
from seqrepair.amqp.wire.technical import MESSAGE_TYPE, MessageType
from seqrepair.core.messages import Publication, decoded_publication

_PUBLICATIONS = MessageType.PUBLICATIONS.value
LAYOUT_EVERY = 32
"""One entry in this many of a transfer may be described for a layout
(:mod:`.entrylayout`): an entry laid out unlike the one before is described (about four
entries' worth of reading) while the transfer's budget lasts, then read step by step; a
transfer of fewer entries is read step by step. Bounds the cost of transfers laid out unalike
(varied string lengths) to a few percent."""


_last: list[EntryLayout | None] = [None]  # the layout the last transfer read ended with


class _Irregular(Exception):
    """Not a transfer :func:`read_publications` reads: the usual way reads it."""


def read_publications(
    message: ReceivedMessage, decoder: Any, entries: bool = True
) -> tuple[list[Publication], list[bytes]] | None:
    """The publications of ``message`` (read with its list body left unread:
    ``read_message(data, lazy=True)``) and each entry's bytes, as ``decoder.decode(message)``
    would give them (its unwrapper advanced the same way), or None, nothing changed, when
    the message is not a batch of regular publication entries (see the module). Without
    ``entries`` the list of entry bytes is left empty. Inside a trial of the decoder's
    unwrapper that its owner opened (:meth:`~seqrepair.amqp.wire.framing.SourceUnwrapper.begin`)
    it reads only while that trial touched no source yet, and leaves it open: committed or
    rolled back by its owner, or, when None is returned, open and untouched."""
    at = message.body_at
    props = message.properties
    if at is None or props is None or props.get(MESSAGE_TYPE) != _PUBLICATIONS:
        return None
    unwrapper = decoder.unwrapper
    # inside its owner's trial (the component's ingest), which then decides what is kept:
    # read only when the trial touched nothing yet, so that undoing what this read did is
    # undoing the trial and opening it again
    owned = not unwrapper.in_trial
    if not owned and unwrapper.trial_sources():
        return None
    buf = message._raw
    try:
        if buf[at] == 0xC0:
            end, count, pos = at + 2 + buf[at + 1], buf[at + 2], at + 3
        else:
            end, count, pos = at + 5 + _u32(buf, at + 1)[0], _u32(buf, at + 5)[0], at + 9
        if end > len(buf) or not count:
            return None
        declared = props.get("count")
        if declared is not None and (type(declared) is not int or declared != count):
            return None
        most = decoder.max_publications
        if most is not None and count > most:
            return None
        first = props.get("link_seq")
        if first is not None and (type(first) is not int or first < 0
                                  or first + count - 1 > (1 << decoder.link_bits) - 1):
            return None
        again = props.get("retransmit", False)
        if again is not True and again is not False:
            return None
    except (IndexError, struct.error):  # a list32 too short for its count: the usual way
        return None  # refuses it (a publisher's transfer reaches here: it must not raise)
    unwrap = unwrapper.unwrap
    pubs: list[Publication] = []
    items: list[bytes] = []
    # the last entry's, and the one before it: first, the last transfer's last (a guess,
    # checked as any layout is: any thread's, any transfer's will do)
    layout: EntryLayout | None = _last[0]
    other: EntryLayout | None = None
    budget = count // LAYOUT_EVERY  # entries that may be described for a layout
    if owned:
        unwrapper.begin()
    runs = count // MIN_RUN  # looks for a run of entries alike (entryrun.py) left
    plain = 0  # entries to read one by one before looking again
    try:
        i = 0
        while i < count:
            if layout is not None and runs and not plain and count - i >= MIN_RUN:
                runs -= 1
                reader = reader_of(layout)
                alike = 0 if reader is None else run_length(
                    reader, buf, pos, min(count - i, MAX_RUN))
                if alike >= MIN_RUN:
                    assert reader is not None
                    if read_run(reader, buf, pos, alike, unwrapper, None if first is None
                                else first + i, again, pubs, items if entries else None):
                        pos += alike * reader.size
                        i += alike
                        continue
                plain = max(alike - 1, 0)  # the rest of those alike: one by one too
            elif plain:
                plain -= 1
            start = pos
            values = None if layout is None else layout.read(buf, pos)
            if values is None and other is not None:  # back to the layout before
                values = other.read(buf, pos)
                if values is not None:
                    layout, other = other, layout
            if values is None and budget:
                budget -= 1
                learnt = layout_at(buf, pos)
                values = None if learnt is None else learnt.read(buf, pos)
                if values is not None:
                    layout, other = learnt, layout
            if values is not None:
                assert layout is not None
                ptype, stamp, source, wire, bits, topic, fields, token = values
                if not 2 <= bits <= 64:
                    raise _Irregular
                pos += layout.size
            else:
                ptype, stamp, source, wire, bits, topic, fields, token, pos = _read_entry(
                    buf, pos)
            pubs.append(decoded_publication(
                topic, source, unwrap(source, wire, bits), ptype, fields,
                None if first is None else first + i, token, stamp, again))
            if entries:
                items.append(buf[start:pos])
            i += 1
        if pos != end:
            raise _Irregular
    except Exception:  # _Irregular, Unsupported, bytes cut short, a value refused...
        unwrapper.rollback({})  # as the usual way leaves it: it reads (or refuses) it again
        if not owned:
            unwrapper.begin()  # the owner's trial, open and empty as it was
        return None
    if owned:
        unwrapper.commit()
    _last[0] = layout
    return pubs, items


def _read_entry(buf: bytes, pos: int) -> tuple[Any, ...]:
    """The regular publication entry at ``pos``, step by step: (ptype, timestamp, source,
    wire number, bits, topic, fields, permtoken, the position after it); raises when it is
    not one."""
    if buf[pos] == 0xC0 and buf[pos + 2] == 8:  # list8 of 8 (list32 when large)
        stop = pos + 2 + buf[pos + 1]
        pos += 3
    elif buf[pos] == 0xD0 and _u32(buf, pos + 5)[0] == 8:
        stop = pos + 5 + _u32(buf, pos + 1)[0]
        pos += 9
    else:
        raise _Irregular
    if buf[pos] != 0xA1:  # ptype
        raise _Irregular
    cut = pos + 2 + buf[pos + 1]
    ptype = PTYPE_BY_NAME[buf[pos + 2 : cut].decode("utf-8")]
    code = buf[cut]  # timestamp
    if code == 0x82:
        stamp: float | None = _double_at(buf, cut + 1)[0]
        pos = cut + 9
    elif code == 0x40:
        stamp, pos = None, cut + 1
    else:
        raise _Irregular
    if buf[pos] != 0xA1 or not buf[pos + 1]:  # source: a non-empty string
        raise _Irregular
    cut = pos + 2 + buf[pos + 1]
    source = buf[pos + 2 : cut].decode("utf-8")
    code = buf[cut]  # wire number
    if code == 0x80:
        wire = _ulong_at(buf, cut + 1)[0]
        pos = cut + 9
    elif code == 0x53:
        wire, pos = buf[cut + 1], cut + 2
    else:
        raise _Irregular
    bits = buf[pos + 1]  # smalllong: a width of 2..64 is positive
    if buf[pos] != 0x55 or not 2 <= bits <= 64:
        raise _Irregular
    pos += 2
    if buf[pos] != 0xA1 or not buf[pos + 1]:  # topic: a non-empty string
        raise _Irregular
    cut = pos + 2 + buf[pos + 1]
    topic = buf[pos + 2 : cut].decode("utf-8")
    code = buf[cut]  # fields: a map8 (map32 when large)
    if code == 0xC1:
        pairs, fields_at, fields_end = buf[cut + 2], cut + 3, cut + 2 + buf[cut + 1]
    elif code == 0xD1:
        pairs, fields_at = _u32(buf, cut + 5)[0], cut + 9
        fields_end = cut + 5 + _u32(buf, cut + 1)[0]
    else:
        raise _Irregular
    if pairs % 2:
        raise _Irregular
    fields, pos = _read_pairs(buf, fields_at, pairs // 2)
    if pos != fields_end:
        raise _Irregular
    code = buf[pos]  # permtoken
    if code == 0x40:
        token: str | None = None
        pos += 1
    elif code == 0xA1 and buf[pos + 1]:
        cut = pos + 2 + buf[pos + 1]
        token = buf[pos + 2 : cut].decode("utf-8")
        pos = cut
    else:
        raise _Irregular
    if pos != stop:
        raise _Irregular
    return ptype, stamp, source, wire, bits, topic, fields, token, pos
