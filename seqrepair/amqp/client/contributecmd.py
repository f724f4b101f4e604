"""``seqrepair contribute``: send contributions to a source another principal owns
(XEP-0040 §5.2, WIRE.md "Contributions") and print each answer.

The contributions are the JSON lines of ``--file`` (``{topic, fields?, ptype?, permtoken?}``,
as ``seqrepair publish --file`` reads them) or the one ``--topic``/``--fields``. Each answer is
a JSON line on stdout: ``{"accepted": true, "source": ..., "source_seq": N, "contribution":
ID}`` or ``{"accepted": false, "condition": ..., "reason": ...}``. Exit 0 when every one was
accepted, 1 when any was refused or the component could not be reached, 2 on bad input.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterator
from typing import Any

from seqrepair.amqp.client.contributor import ContributionLinkError, Contributor
from seqrepair.amqp.client.publishcmd import Item, _item, file_items
from seqrepair.amqp.wire.errors import ConnectionFailedError
from seqrepair.amqp.wire.security import ClientSecurity
from seqrepair.core.errors import SeqRepairError


def contribute_command(args: argparse.Namespace) -> int:
    """The body of ``seqrepair contribute``."""
    try:
        security = ClientSecurity.from_args(args)
        if args.file and args.topic:
            raise SeqRepairError("give --file or --topic, not both", got="--file --topic")
        one = _one(args)
    except (SeqRepairError, ValueError) as exc:
        print(f"seqrepair contribute: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    refused = 0
    try:
        with Contributor(args.url, args.source, security=security,
                         timeout=args.timeout) as contributor:
            for topic, fields, ptype, permtoken in _items(args, one):
                result = contributor.contribute(topic, fields, ptype, permtoken=permtoken)
                refused += not result.accepted
                print(json.dumps(_line(result)), flush=True)
    except (ContributionLinkError, ConnectionFailedError) as exc:
        print(f"seqrepair contribute: {exc.message}", file=sys.stderr)
        return 1
    except SeqRepairError as exc:  # a bad --file line: the ones before it were sent
        print(f"seqrepair contribute: {exc.message}", file=sys.stderr)
        return 2
    return 1 if refused else 0


def _one(args: argparse.Namespace) -> Item | None:
    if not args.topic:
        return None
    try:
        fields = json.loads(args.fields)
    except ValueError as exc:
        raise SeqRepairError(f"--fields is a JSON object: {exc}", got=args.fields) from None
    return _item({"topic": args.topic, "fields": fields, "ptype": args.ptype,
                  "permtoken": args.permtoken})


def _items(args: argparse.Namespace, one: Item | None) -> Iterator[Item]:
    if one is not None:
        yield one
        return
    yield from itertools.chain.from_iterable(file_items(args))


def _line(result: Any) -> dict[str, Any]:
    if result.accepted:
        return {"accepted": True, "source": result.source, "source_seq": result.source_seq,
                "contribution": result.contribution}
    return {"accepted": False, "source": result.source, "condition": result.condition,
            "reason": result.reason}
