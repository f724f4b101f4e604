"""The journal format: Redis keys and entries, and the Parquet archive. Fixed; readers rely on it.

Redis (per source; ``{<source>}`` is a Cluster hash tag, so one source's keys share a slot)
----------------------------------------------------------------------------------------------
``seqrepair:{<source>}:journal``
    A stream. Entry ID ``<absolute source_seq>-0``: a repeated append of a number is rejected
    by Redis itself and ``XRANGE key <a> <b>`` is a direct range read. Appends are contiguous
    (each batch starts at high-water + 1). Entry fields, all strings:

    ``source``      the source name
    ``topic``       the item's topic
    ``ptype``       ``update`` | ``correction`` | ``image`` | ``drop`` | ``snapshot``
    ``fields``      JSON object text; an explicit null is JSON ``null``, an absent key was not
                    sent. Compact separators, UTF-8, no NaN/Infinity.
    ``permtoken``   the permission token; the field is omitted when there is none
    ``ts``          ``repr()`` of the float timestamp; omitted when there is none
    ``wire``        the wire source number: ``SequenceSpace(bits).wire(source_seq)``
    ``bits``        the source's sequence bit width

    **Packed rows.** An append of ``envelope.PACK_MIN`` (8) or more consecutive publications
    is written as rows of up to ``envelope.ROW_MOST`` (64) publications and
    ``envelope.ROW_BYTES`` (64 KiB, unless one publication is larger), one entry per row:
    entry ID ``<the row's last number>-0``, fields (in this order) ``first`` (its first
    number), ``source``, ``bits``, ``rows`` (the append script's envelope of those
    publications, JSON ``[[number, topic, ptype, fields, permtoken|null, ts|null, wire],
    ...]``, numbers ``first``..last as decimal text). So an entry's ID is still the highest
    number it holds and IDs rise with the numbers: ``XRANGE key <a> <b>`` gives the rows
    ending in ``a``..``b``, and the row holding ``b`` is the next one if its ``first`` is at
    or below ``b``. The scripts ``READ`` and ``READ_ROWS`` give each publication of a packed
    row as the entry it would be written one by one, so readers see no difference; a
    reader of raw ``XRANGE`` must expand them itself. A stream may hold both kinds, and
    not-selected markers, in any order of appends. Retention trims whole rows: a row holding
    ``trimmed_through`` stays, its numbers up to there no longer given. Why: the append
    script's cost is mostly per entry (an ``XADD``, the envelope's decoding), so a batch of
    256 costs Redis about a sixth of what 256 entries did (``benchmarks/notes/packed-rows.md``);
    a read of one number decodes its row (at most 64), and memory per publication is about
    the same.

``seqrepair:{<source>}:meta``
    A hash: ``high_water`` (last absolute number held), ``bits``, ``trimmed_through`` (last
    absolute number removed by retention, 0 when nothing was trimmed), ``trimmed_at``
    (optional, ``repr()`` of the float time of the last trim), ``brought_by`` (optional: the
    principal a component took the source's first journaled publications from, written by the
    same append script, once; the component counts a principal's new sources from it across
    restarts. Absent on a source journaled by a publisher or relay, or before it was recorded:
    counted as nobody's. Retention never removes it: a trimmed source is still journaled).

``seqrepair:sources``
    A set of every source name journaled.

``seqrepair:journaled`` (a Pub/Sub channel, not a key)
    Each append announces ``"<high-water> <source>"`` there, from inside its script, after
    the append (the component's journal check without a round trip: ``journalfeed``).

Parquet archive (written by retention before trimming, read by Spark)
---------------------------------------------------------------------
Files ``<archive_root>/<urllib.parse.quote(source, safe='')>/seq-<first:020d>-<last:020d>.parquet``
with the columns of :func:`archive_schema`: ``source`` string, ``seq`` int64 (absolute),
``wire_seq`` int64, ``bits`` int32, ``topic`` string, ``ptype`` string, ``fields``
map<string, string> (each value the JSON text of the field's value: an explicit null is the
string ``"null"``, an absent field an absent key), ``permtoken`` string (nullable),
``timestamp`` double (nullable). A relay's not-selected marker (:mod:`.selection`) is one row
too: ``seq`` its first number, ``ptype`` ``not-selected``, ``topic`` ``""``, ``fields``
``through`` (the last number it covers) and ``selection`` (JSON text, like every field value),
``wire_seq`` the wire number of ``seq``, ``permtoken`` and ``timestamp`` null.

Reading for a replay (:meth:`~seqrepair.journal.journal.Journal.iter_rows`): the script
``READ_ROWS`` returns an entry whose fields are in the order the append script writes them
(``source topic ptype fields [permtoken] [ts] wire bits``) as one positional row, and any other
entry (another order, other fields, a relay's not-selected marker) by name as ``READ`` does; a
:class:`JournalRow` holds either undecoded. Nothing stored changes: entries written before, or
by other writers, read as they always did.

Helpers here encode and decode both forms; :func:`encode_archive_table` is what tests of other
readers use to write archives.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from math import isfinite
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from seqrepair.core.errors import InvalidMessageError, SeqRepairError
from seqrepair.core.limits import (
    MAX_FIELD_INT,
    MAX_PUBLICATION_SIZE,
    MAX_TOPIC_BYTES,
    MIN_FIELD_INT,
)
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.sequence import SequenceSpace
from seqrepair.journal.errors import JournalCorruptError
from seqrepair.journal.selection import NOT_SELECTED, NotSelected

if TYPE_CHECKING:
    import pyarrow as pa

KEY_PREFIX = "seqrepair"
SOURCES_KEY = f"{KEY_PREFIX}:sources"
MAX_JOURNAL_SEQ = (1 << 53) - 1
"""Highest absolute number the journal accepts (exact in the Lua scripts' doubles)."""

ENTRY_FIELDS = ("source", "topic", "ptype", "fields", "permtoken", "ts", "wire", "bits")
META_HIGH_WATER = "high_water"
META_BITS = "bits"
META_TRIMMED_THROUGH = "trimmed_through"
META_TRIMMED_AT = "trimmed_at"
META_BROUGHT_BY = "brought_by"

_decode_json = json.JSONDecoder().decode


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make_encoder() -> Any:
    """Compact, UTF-8, no NaN. The C encoder is built once (``JSONEncoder.encode`` rebuilds it
    on every call, which costs more than encoding a small object)."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    c_encode_basestring = getattr(json.encoder, "c_encode_basestring", None)
    if c_make_encoder is None or c_encode_basestring is None:  # pragma: no cover - no C accel
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    iterencode = c_make_encoder(
        None, _not_json, c_encode_basestring, None, ":", ",", False, False, False
    )

    def encode(value: Any) -> str:
        return "".join(iterencode(value, 0))

    return encode


_encode_json: Callable[[Any], str] = _make_encoder()
encode_json = _encode_json
"""Compact JSON text of ``value`` (UTF-8, NaN and Infinity refused with ValueError)."""


def stream_key(source: str) -> str:
    """The stream holding ``source``'s publications."""
    return f"{KEY_PREFIX}:{{{source}}}:journal"


def meta_key(source: str) -> str:
    """The hash holding ``source``'s high-water, bit width and trim record."""
    return f"{KEY_PREFIX}:{{{source}}}:meta"


def entry_id(seq: int) -> str:
    """The stream entry ID of absolute number ``seq``."""
    return f"{seq}-0"


def seq_of(entry: str | bytes) -> int:
    """The absolute number in an entry ID ``<seq>-0``."""
    text = entry.decode() if isinstance(entry, bytes) else entry
    number, _, sub = text.partition("-")
    if sub != "0" or not number.isdigit():
        raise JournalCorruptError(f"entry ID {text!r} is not <seq>-0", got=text)
    return int(number)


def check_source(source: object) -> str:
    """Return ``source`` if it can name a journal, else raise InvalidMessageError.

    Not ``.`` or ``..`` (its archive folder would be the archive root or its parent), and no
    ``{`` or ``}`` (its keys' hash tag would no longer be the whole name, and a leading ``}``
    would put a source's keys in different Redis Cluster slots).
    """
    if not isinstance(source, str) or not source:
        raise InvalidMessageError("a source must be a non-empty string", got=source)
    if source in (".", "..") or "{" in source or "}" in source:
        raise InvalidMessageError(
            f"a source name cannot be '.' or '..' or hold '{{' or '}}', got {source!r}",
            expected="a name without braces, not . or ..",
            got=source,
        )
    return source


def can_name_journal(source: object) -> bool:
    """Whether :func:`check_source` takes ``source``."""
    try:
        check_source(source)
    except InvalidMessageError:
        return False
    return True


def check_seq(seq: object, what: str = "sequence number", *, low: int = 0) -> int:
    """Return ``seq`` if it is an absolute number the journal can hold, else raise."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not low <= seq <= MAX_JOURNAL_SEQ:
        raise InvalidMessageError(
            f"{what} must be an integer in {low}..{MAX_JOURNAL_SEQ}, got {seq!r}",
            expected=(low, MAX_JOURNAL_SEQ),
            got=seq,
        )
    return seq


def encode_fields(fields: Mapping[str, Any]) -> str:
    """The JSON object text of a publication's fields (explicit null -> ``null``)."""
    try:
        return _encode_json(fields.copy() if type(fields) is MappingProxyType else dict(fields))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessageError(
            f"publication fields are not JSON-encodable: {exc}", expected="JSON values"
        ) from exc


_SCALARS = (str, int, float, bool, type(None))


def plainly_journaled(topic: object, fields: object, permtoken: object) -> bool:
    """Whether :func:`journal_form` would pass and keep ``fields`` as they are, proven without
    encoding anything: ASCII text, and fields a dict of ASCII keys to None, bools, ints, finite
    floats and ASCII text (what the journal's JSON takes as is). A
    :class:`~seqrepair.core.messages.Publication`'s own fields (a read-only view of a dict)
    count as a dict: a component checks every publication it receives this way. False means
    "not proven": ask the real check."""
    if (
        type(topic) is not str
        or not topic.isascii()
        or (permtoken is not None and (type(permtoken) is not str or not permtoken.isascii()))
        or (type(fields) is not dict and type(fields) is not MappingProxyType)
    ):
        return False
    for key, value in fields.items():
        if type(key) is not str or not key.isascii():
            return False
        kind = type(value)
        if kind is str:
            if not value.isascii():
                return False
        elif kind is float:
            if not isfinite(value):
                return False
        elif value is not None and kind is not int and kind is not bool:
            return False
    return True


def plainly_sendable(topic: object, fields: object, permtoken: object) -> bool:
    """Whether both :func:`plainly_journaled` and
    :func:`~seqrepair.core.limits.check_deliverable` would pass, in one pass over the fields
    (a component checks both for every publication it receives; a test holds this equal to
    asking both). False means "not proven": ask them."""
    if (
        type(topic) is not str
        or not topic.isascii()
        or len(topic) > MAX_TOPIC_BYTES
        or (type(fields) is not dict and type(fields) is not MappingProxyType)
    ):
        return False
    n = len(topic)
    size = n + (2 if n < 256 else 5)
    if permtoken is not None:
        if type(permtoken) is not str or not permtoken.isascii():
            return False
        n = len(permtoken)
        size += n + (2 if n < 256 else 5)
    for key, value in fields.items():
        if type(key) is not str or not key.isascii():
            return False
        n = len(key)
        size += n + (2 if n < 256 else 5)
        kind = type(value)
        if kind is str:
            if not value.isascii():
                return False
            n = len(value)
            size += n + (2 if n < 256 else 5)
        elif kind is int:
            if -128 <= value <= 127:
                size += 2
            elif MIN_FIELD_INT <= value <= MAX_FIELD_INT:
                size += 9
            else:
                return False
        elif kind is float:
            if not isfinite(value):
                return False
            size += 9
        elif value is None or kind is bool:
            size += 1
        else:
            return False
    return size <= MAX_PUBLICATION_SIZE


def journal_form(
    topic: str, fields: Mapping[str, Any], permtoken: str | None
) -> Mapping[str, Any]:
    """``fields`` with each value as the journal will hold it, in its JSON form (a tuple
    becomes a list, a number used as a nested key its text); raise InvalidMessageError unless
    a publication with these parts can be journaled. Publishing the JSON form makes what
    subscribers get live equal to what a replay from the journal gives them. The field names
    are left for :class:`~seqrepair.core.messages.Publication` to check."""
    try:
        topic.encode("utf-8")
        encode_fields(fields).encode("utf-8")
        if permtoken is not None:
            permtoken.encode("utf-8")
    except (UnicodeEncodeError, AttributeError) as exc:
        raise InvalidMessageError(f"publication text is not encodable: {exc}") from exc
    if not isinstance(fields, Mapping):
        return fields  # no publication's fields: Publication says so
    return {
        name: value if type(value) in _SCALARS else json.loads(encode_value(value))
        for name, value in fields.items()
    }


def encode_value(value: Any) -> str:
    """The JSON text of one field value (the archive's map values)."""
    try:
        return _encode_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessageError(f"field value is not JSON-encodable: {exc}") from exc


@lru_cache(maxsize=64)
def space(bits: int) -> SequenceSpace:
    """The (cached) sequence space of ``bits``."""
    return SequenceSpace(bits)


def encode_entry(publication: Publication, bits: int) -> dict[str, str]:
    """The stream entry fields of ``publication`` (absolute ``source_seq``) in ``bits``."""
    entry = {
        "source": publication.source,
        "topic": publication.topic,
        "ptype": publication.ptype.value,
        "fields": encode_fields(publication.fields),
    }
    if publication.permtoken is not None:
        entry["permtoken"] = publication.permtoken
    if publication.timestamp is not None:
        entry["ts"] = repr(float(publication.timestamp))
    entry["wire"] = str(space(bits).wire(publication.source_seq))
    entry["bits"] = str(bits)
    return entry


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def decode_entry(
    entry: str | bytes, values: Mapping[Any, Any], *, source: str | None = None
) -> Publication:
    """The publication stored as stream entry ``entry`` with ``values`` (str or bytes).

    Raises :class:`~seqrepair.journal.errors.JournalCorruptError` on anything malformed,
    including a wire number that does not match the absolute one.
    """
    try:
        text = {_text(key): _text(value) for key, value in values.items()}
    except UnicodeDecodeError as exc:
        raise JournalCorruptError(f"entry {entry!r} is not UTF-8", source=source) from exc
    return decode_values(seq_of(entry), text, source=source)


def decode_values(seq: int, text: Mapping[str, str], *, source: str | None = None) -> Publication:
    """The publication numbered ``seq`` from its decoded entry fields (see :func:`decode_entry`)."""
    try:
        pub_source = text["source"]
        if source is not None and pub_source != source:
            raise JournalCorruptError(
                f"entry {seq} of {source!r} names source {pub_source!r}",
                source=source,
                expected=source,
                got=pub_source,
            )
        bits = int(text["bits"])
        if int(text["wire"]) != (seq - 1) % space(bits).max + 1:
            raise JournalCorruptError(
                f"entry {seq} of {pub_source!r}: wire {text['wire']} != {bits}-bit wire of {seq}",
                source=pub_source,
                got=text["wire"],
            )
        fields = _decode_json(text["fields"])
        if not isinstance(fields, dict):
            raise JournalCorruptError(f"entry {seq}: fields are not a JSON object", got=fields)
        ts = text.get("ts")
        return Publication(
            topic=text["topic"],
            source=pub_source,
            source_seq=seq,
            ptype=PublishType(text["ptype"]),
            fields=fields,
            permtoken=text.get("permtoken"),
            timestamp=None if ts is None else float(ts),
        )
    except JournalCorruptError:
        raise
    except (KeyError, TypeError, ValueError, SeqRepairError) as exc:
        raise JournalCorruptError(
            f"journal entry {seq} does not decode: {exc!r}", source=source, got=dict(text)
        ) from exc


ROW_PARTS = ("source", "topic", "ptype", "fields", "permtoken", "ts", "wire", "bits")
"""The entry fields of a :class:`JournalRow`'s ``parts``, in order (after the entry ID)."""


class JournalRow(NamedTuple):
    """One publication's stream entry as read, not yet decoded: a reader that relays entries
    as they are (a source replay, :mod:`.gapfill`) decodes only what it needs and validates the
    rest its own way; :meth:`publication` is the full decode."""

    seq: int
    """The absolute number (the entry ID)."""
    parts: list[Any]
    """The entry ID, then the fields :data:`ROW_PARTS` names, each its stored text or None
    when the entry lacks it."""
    stored: dict[str, str] | None = None
    """Every entry field as stored, when the entry holds fields beyond :data:`ROW_PARTS` or
    in another order (None: ``parts`` holds them all)."""

    @classmethod
    def of(cls, seq: int, values: dict[str, str]) -> JournalRow:
        """The row of entry ``seq`` whose fields are ``values`` (any layout)."""
        return cls(seq, [entry_id(seq), *map(values.get, ROW_PARTS)], values)

    @property
    def values(self) -> dict[str, str]:
        """The entry fields, as stored (see the module docstring)."""
        if self.stored is not None:
            return self.stored
        return {name: value for name, value in zip(ROW_PARTS, self.parts[1:], strict=True)
                if value is not None}

    def publication(self, source: str | None = None) -> Publication:
        """The publication, decoded and validated (:func:`decode_values`)."""
        return decode_values(self.seq, self.values, source=source)


# --- Parquet archive -------------------------------------------------------------------------


def archive_schema() -> pa.Schema:
    """The Arrow schema of archive files."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("source", pa.string(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("wire_seq", pa.int64(), nullable=False),
            pa.field("bits", pa.int32(), nullable=False),
            pa.field("topic", pa.string(), nullable=False),
            pa.field("ptype", pa.string(), nullable=False),
            pa.field("fields", pa.map_(pa.string(), pa.string()), nullable=False),
            pa.field("permtoken", pa.string(), nullable=True),
            pa.field("timestamp", pa.float64(), nullable=True),
        ]
    )


def archive_dir(root: str | Path, source: str) -> Path:
    """The folder holding ``source``'s archive files."""
    return Path(root) / urllib.parse.quote(check_source(source), safe="")


def archive_path(root: str | Path, source: str, first: int, last: int) -> Path:
    """The archive file of ``source``'s numbers ``first``..``last``."""
    return archive_dir(root, source) / f"seq-{first:020d}-{last:020d}.parquet"


def encode_archive_row(publication: Publication, bits: int) -> dict[str, Any]:
    """One archive row (a dict of column values) for ``publication``."""
    return {
        "source": publication.source,
        "seq": publication.source_seq,
        "wire_seq": space(bits).wire(publication.source_seq),
        "bits": bits,
        "topic": publication.topic,
        "ptype": publication.ptype.value,
        "fields": [(name, encode_value(value)) for name, value in publication.fields.items()],
        "permtoken": publication.permtoken,
        "timestamp": None if publication.timestamp is None else float(publication.timestamp),
    }


def encode_marker_row(marker: NotSelected, bits: int) -> dict[str, Any]:
    """The archive row of a relay's not-selected ``marker`` (see the module docstring)."""
    return {
        "source": marker.source,
        "seq": marker.first,
        "wire_seq": space(bits).wire(marker.first),
        "bits": bits,
        "topic": "",
        "ptype": NOT_SELECTED,
        "fields": [("through", str(marker.last)), ("selection", encode_value(marker.selection))],
        "permtoken": None,
        "timestamp": None,
    }


def encode_archive_table(
    publications: Iterable[Publication | NotSelected], bits: int
) -> pa.Table:
    """An Arrow table of ``publications`` (a relay's not-selected markers among them) in the
    archive schema."""
    import pyarrow as pa

    rows = [encode_archive_row(pub, bits) if isinstance(pub, Publication)
            else encode_marker_row(pub, bits) for pub in publications]
    return pa.Table.from_pylist(rows, schema=archive_schema())


def decode_archive_table(table: pa.Table) -> list[Publication]:
    """The publications held in an archive table (raises JournalCorruptError if malformed); a
    relay's not-selected markers are no publications and are left out."""
    out: list[Publication] = []
    for row in table.to_pylist():
        if row.get("ptype") == NOT_SELECTED:
            continue
        try:
            bits = int(row["bits"])
            if int(row["wire_seq"]) != space(bits).wire(int(row["seq"])):
                raise JournalCorruptError("archive row wire_seq does not match seq", got=row)
            out.append(
                Publication(
                    topic=row["topic"],
                    source=row["source"],
                    source_seq=int(row["seq"]),
                    ptype=PublishType(row["ptype"]),
                    fields={name: _decode_json(value) for name, value in row["fields"]},
                    permtoken=row["permtoken"],
                    timestamp=row["timestamp"],
                )
            )
        except JournalCorruptError:
            raise
        except (KeyError, TypeError, ValueError, SeqRepairError) as exc:
            raise JournalCorruptError(f"archive row does not decode: {exc!r}", got=row) from exc
    return out


def as_journaled(publication: Publication) -> Publication:
    """``publication`` with its fields as the journal will hold them (itself when they are
    already in that form); InvalidMessageError when it cannot be journaled. A component fans
    out this form, so live subscribers get what a replay gives them."""
    if plainly_journaled(publication.topic, publication.fields, publication.permtoken):
        return publication
    fields = journal_form(publication.topic, publication.fields, publication.permtoken)
    return attrs.evolve(publication, fields=fields)
