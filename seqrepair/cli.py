"""The ``seqrepair`` command.

Each adapter package contributes its subcommands through a ``commands`` module exposing
``register(subparsers)``; every subcommand sets ``func(args) -> int``. Only the CLI configures
logging output.

Building the parser needs only the base install: ``seqrepair --help`` and every subcommand's
``--help`` import no proton, redis, pyspark or pyarrow. A command whose extra is missing says
which to install in one line on stderr and exits 2 (:mod:`seqrepair.extras`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from collections.abc import Sequence

import structlog

import seqrepair
from seqrepair.core.errors import BAD_INPUT_ERRORS, SeqRepairError
from seqrepair.extras import MissingExtraError

COMMAND_MODULES = (
    "seqrepair.demo",
    "seqrepair.journal.commands",
    "seqrepair.auth.commands",
    "seqrepair.amqp.commands",
    "seqrepair.spark.commands",
)


def configure_logging(level: str) -> None:
    """Human-readable structlog output on stderr at ``level``."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(message)s")
    # proton narrates each connection attempt at info ("Connecting to...", "Disconnected, ...");
    # our clients log those through structlog already, bound with their link or source
    logging.getLogger("proton").setLevel(
        numeric if numeric == logging.DEBUG else max(logging.WARNING, numeric)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # sys.stderr looked up per logger, not once: a test harness swaps it (and closes it)
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seqrepair",
        description="Reliable-delivery sequencing and gap repair for publish/subscribe.",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        help="debug, info, warning or error (default warning)",
    )
    parser.add_argument("--version", action="version", version=f"seqrepair {seqrepair.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        if _exists(name):
            importlib.import_module(name).register(subparsers)
    return parser


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is not there
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``seqrepair`` command; its failure is one line on stderr, never a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        result: int = args.func(args)
    except MissingExtraError as exc:  # like a usage error: nothing was attempted
        print(exc, file=sys.stderr)
        return 2
    except (SeqRepairError, OSError) as exc:
        # bad input exits 2, like a usage error; any other failure (an unreachable Redis, a
        # port in use) exits 1
        print(f"seqrepair {args.command}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, BAD_INPUT_ERRORS) else 1
    return result


if __name__ == "__main__":
    sys.exit(main())
