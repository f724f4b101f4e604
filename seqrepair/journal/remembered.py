"""A replay's entitlement answers, remembered (:mod:`.gapfill`): a replay reads thousands of
publications of a few topics, and asks the link's entitlement once per topic and permission
token (per source and publish type too when it has filters: they may read those, nothing else
decides)."""

from __future__ import annotations

from collections.abc import Callable

from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.journal.format import JournalRow


def remembered(entitlement: Entitlement) -> Callable[[Publication], bool]:
    """``entitlement.allows``, remembered per (topic, permission token), and per source and
    publish type too when it has filters (they may read those; nothing else decides): a
    replay reads thousands of publications of a few topics."""
    answers: dict[tuple[object, ...], bool] = {}
    allows = entitlement.allows
    filtered = bool(entitlement.filters)

    def allowed(pub: Publication) -> bool:
        key: tuple[object, ...] = (
            (pub.topic, pub.permtoken, pub.source, pub.ptype) if filtered
            else (pub.topic, pub.permtoken)
        )
        answer = answers.get(key)
        if answer is None:
            if len(answers) >= 4096:
                answers.clear()
            answer = answers[key] = allows(pub)
        return answer

    return allowed


def remembered_rows(entitlement: Entitlement) -> Callable[[str, JournalRow], bool]:
    """:func:`remembered` for undecoded journal rows of one source: the answer is looked up by
    the entry's own text (topic, permission token, and source and publish type when the
    entitlement has filters); a row whose key is not known yet is decoded in full (raising
    JournalCorruptError if it is corrupt) and asked about, so every answer remembered was
    given for a valid publication with that key."""
    answers: dict[tuple[object, ...], bool] = {}
    allows = entitlement.allows
    filtered = bool(entitlement.filters)

    def allowed(source: str, row: JournalRow) -> bool:
        parts = row.parts  # id, source, topic, ptype, fields, permtoken, ...: format.ROW_PARTS
        key: tuple[object, ...] = (
            (parts[2], parts[5], parts[1], parts[3]) if filtered else (parts[2], parts[5])
        )
        answer = answers.get(key)
        if answer is None:
            if len(answers) >= 4096:
                answers.clear()
            answer = answers[key] = allows(row.publication(source))
        return answer

    return allowed
