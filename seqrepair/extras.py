"""Which extra provides which third-party module, and a command that says so in one line.

The base install (attrs, structlog) builds the whole ``seqrepair`` parser: no subcommand's
argparse definition imports proton, redis, pyspark, pyarrow or pandas. A command imports them
when it runs, through :func:`run_body`; one that is not installed stops the command with a
:class:`MissingExtraError` (``seqrepair.cli.main`` prints it as one line and exits 2), never a
traceback. Any other import error is not caught.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import cast

EXTRA_OF = {
    "proton": "amqp",
    "redis": "redis",
    "pyspark": "spark",
    "pyarrow": "redis",  # journal export writes Parquet; spark has it through redis too
    "pandas": "spark",
}
"""Each optional third-party module and the extra that installs it (pyproject.toml)."""

INCLUDES = {"spark": frozenset({"redis"})}
"""Extras that install another (pyproject.toml: ``spark`` reads the journal from Redis)."""


class MissingExtraError(Exception):
    """A command needs a module of an extra that is not installed."""

    def __init__(self, command: str, extras: Sequence[str], module: str) -> None:
        self.command = command
        wanted = list(dict.fromkeys(extras))
        covered = set().union(*(INCLUDES.get(extra, frozenset()) for extra in wanted))
        self.extras = [extra for extra in wanted if extra not in covered]
        self.module = module
        named = " and ".join(repr(extra) for extra in self.extras)
        plural = "s" if len(self.extras) > 1 else ""
        super().__init__(
            f"seqrepair {command}: needs the {named} extra{plural}: "
            f"pip install 'seqrepair[{','.join(self.extras)}]' (no module named {module!r})"
        )


def command_label(args: argparse.Namespace) -> str:
    """``serve``, ``journal info``: the command as typed."""
    words = [args.command, getattr(args, "journal_command", None)]
    return " ".join(word for word in words if word)


def load_body(
    label: str, target: str, needs: Sequence[str], *, extras: Sequence[str] | None = None
) -> Callable[[argparse.Namespace], int]:
    """Import each module of ``needs`` (third-party modules of :data:`EXTRA_OF`), then
    ``target`` (``"package.module:function"``) and return the function. A missing module of
    :data:`EXTRA_OF` raises MissingExtraError naming ``extras`` (default: the extras of
    ``needs``), and the missing module's own extra if they lack it."""
    named = list(extras) if extras is not None else [EXTRA_OF[module] for module in needs]
    module_name, _, function = target.partition(":")
    try:
        for module in needs:
            importlib.import_module(module)
        body = getattr(importlib.import_module(module_name), function)
    except ModuleNotFoundError as exc:
        if exc.name not in EXTRA_OF:  # a broken install or a bug: not ours to hide
            raise
        if "all" not in named:
            named.append(EXTRA_OF[exc.name])
        raise MissingExtraError(label, named, exc.name) from None
    return cast("Callable[[argparse.Namespace], int]", body)


def run_body(
    args: argparse.Namespace, target: str, *needs: str, extras: Sequence[str] | None = None
) -> int:
    """Run the command body ``target`` (see :func:`load_body`) on ``args``."""
    return load_body(command_label(args), target, needs, extras=extras)(args)
