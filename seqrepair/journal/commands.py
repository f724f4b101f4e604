"""``seqrepair journal info|trim|export``: look after the journal from the command line.

Errors are reported by :func:`seqrepair.cli.main` (one line on stderr). Without ``--redis-url``
each command starts the private embedded redis-server on the data
folder (``--data-dir``, default ``.seqrepair/redis``) and stops it afterwards.

Building the parser imports no redis: a command imports its body's modules when it runs
(:mod:`seqrepair.extras`; ``export`` and ``--archive`` need pyarrow, which the ``redis`` extra
installs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from typing import Any

from seqrepair.argtypes import positive_float, positive_int
from seqrepair.extras import run_body
from seqrepair.journal.datadir import DEFAULT_DATA_DIR


def register(subparsers: Any) -> None:
    """Add ``journal`` and its subcommands to the ``seqrepair`` parser."""
    parser = subparsers.add_parser("journal", help="inspect, trim and archive the Redis journal")
    sub = parser.add_subparsers(dest="journal_command", metavar="SUBCOMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--redis-url", help="Redis to use (default: start an embedded one)")
        p.add_argument(
            "--data-dir",
            default=str(DEFAULT_DATA_DIR),
            help=f"embedded redis data folder (default {DEFAULT_DATA_DIR})",
        )

    info = sub.add_parser("info", help="high-water, length and trim record per source")
    common(info)
    info.add_argument("sources", nargs="*", help="sources to show (default all)")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=_info)

    trim = sub.add_parser("trim", help="apply retention by count and/or age")
    common(trim)
    trim.add_argument("sources", nargs="*", help="sources to trim (default all)")
    trim.add_argument(
        "--max-count", type=positive_int, help="keep at most this many per source"
    )
    trim.add_argument(
        "--max-age", type=positive_float, help="drop publications older than SECONDS"
    )
    trim.add_argument("--archive", help="export to Parquet under this folder before trimming")
    trim.set_defaults(func=_trim)

    export = sub.add_parser("export", help="write a range of a source to Parquet")
    common(export)
    export.add_argument("source")
    export.add_argument(
        "--first", type=positive_int, default=None, help="first number (default oldest)"
    )
    export.add_argument(
        "--last", type=positive_int, default=None, help="last number (default newest)"
    )
    export.add_argument("--archive", required=True, help="archive root folder")
    export.set_defaults(func=_export)


def _info(args: argparse.Namespace) -> int:
    return run_body(args, f"{__name__}:cmd_info", "redis")


def _trim(args: argparse.Namespace) -> int:
    archive = ("pyarrow",) if args.archive else ()
    return run_body(args, f"{__name__}:cmd_trim", "redis", *archive)


def _export(args: argparse.Namespace) -> int:
    return run_body(args, f"{__name__}:cmd_export", "redis", "pyarrow")


def _journaled(journal: Any, names: list[str]) -> list[str]:
    """``names`` when each is a journaled source; JournalError naming those that are not."""
    from seqrepair.journal.errors import JournalError

    known = set(journal.sources())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise JournalError(f"not journaled: {', '.join(map(repr, unknown))}")
    return names


def cmd_info(args: argparse.Namespace) -> int:
    """Print what the journal holds per source."""
    from seqrepair.journal.session import open_journal

    with open_journal(args.redis_url, data_dir=args.data_dir) as journal:
        names = _journaled(journal, args.sources) if args.sources else journal.sources()
        infos = [journal.info(name) for name in names]
    if args.json:
        print(json.dumps([_as_dict(info) for info in infos], indent=2))
        return 0
    if not infos:
        print("no sources journaled")
    for info in infos:
        trimmed_at = "" if info.trimmed_at is None else f" at {time.ctime(info.trimmed_at)}"
        print(
            f"{info.source}: high-water {info.high_water}, {info.length} held, bits {info.bits}, "
            f"trimmed through {info.trimmed_through}{trimmed_at}"
        )
    return 0


def _as_dict(info: Any) -> dict[str, Any]:
    return {
        "source": info.source,
        "high_water": info.high_water,
        "bits": info.bits,
        "trimmed_through": info.trimmed_through,
        "trimmed_at": info.trimmed_at,
        "length": info.length,
    }


def cmd_trim(args: argparse.Namespace) -> int:
    """Apply a retention policy now."""
    from seqrepair.journal.retention import RetentionPolicy, apply_retention
    from seqrepair.journal.session import open_journal

    if args.max_count is None and args.max_age is None:
        print("seqrepair journal trim: give --max-count and/or --max-age", file=sys.stderr)
        return 2
    policy = RetentionPolicy(
        max_count=args.max_count, max_age=args.max_age, archive_root=args.archive
    )
    with open_journal(args.redis_url, data_dir=args.data_dir) as journal:
        names = _journaled(journal, args.sources) if args.sources else journal.sources()
        for name in names:
            report = apply_retention(journal, name, policy, now=time.time())
            print(
                f"{name}: trimmed through {report.trimmed_through} "
                f"({report.removed} removed, {len(report.archived)} archive files)"
            )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a range of one source to Parquet."""
    from seqrepair.journal.retention import export_range
    from seqrepair.journal.session import open_journal

    with open_journal(args.redis_url, data_dir=args.data_dir) as journal:
        info = journal.info(args.source)
        first = args.first if args.first is not None else info.trimmed_through + 1
        last = args.last if args.last is not None else info.high_water
        paths = export_range(journal, args.source, first, last, args.archive)
    for path in paths:
        print(path)
    if not paths:
        quoted = urllib.parse.quote(args.source, safe="")
        print(f"nothing to export for {args.source!r} ({quoted}) in {first}..{last}")
    return 0
