"""Entry script for ``spark-submit``: the same jobs as ``seqrepair rebuild|audit``.

::

    spark-submit --master spark://host:7077 seqrepair/spark/submit.py \\
        rebuild --archive /data/archive --output /data/images

The master comes from ``spark-submit``; the other options are those of the CLI commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

if __package__ in (None, ""):  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from seqrepair.spark import jobs, options


def build_parser() -> argparse.ArgumentParser:
    """``rebuild`` and ``audit`` without ``--master``."""
    parser = argparse.ArgumentParser(prog="submit.py", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="info")
    sub = parser.add_subparsers(dest="command", required=True)
    rebuild = sub.add_parser("rebuild")
    options.add_input_arguments(rebuild, master=False)
    options.add_rebuild_arguments(rebuild)
    rebuild.set_defaults(func=jobs.rebuild_main)
    audit = sub.add_parser("audit")
    options.add_input_arguments(audit, master=False)
    audit.set_defaults(func=jobs.audit_main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, configure logging, run the job in spark-submit's session."""
    from seqrepair.cli import configure_logging

    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
