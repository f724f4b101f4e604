"""The library's loggers: silent unless the application configures logging.

structlog's default configuration prints to stdout, so a library that logs through
``structlog.get_logger`` writes into the output of an application that never asked for it (a
subscriber printing JSON lines gets them interleaved). Every module takes its logger from
:func:`get_logger` instead:

* while structlog has not been configured (``structlog.is_configured()`` is False), a call goes
  to the standard library's ``logging.getLogger(name)``, and the ``seqrepair`` logger has a
  ``NullHandler`` (the convention for libraries): nothing is shown until the application
  configures logging, e.g. ``logging.basicConfig(level=logging.INFO)``;
* once the application (or the CLI, :func:`seqrepair.cli.configure_logging`) has called
  ``structlog.configure``, calls go through structlog as configured, and
  ``structlog.testing.capture_logs`` sees them.

The check is one attribute read per call; a call below the stdlib logger's level formats
nothing.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

logging.getLogger("seqrepair").addHandler(logging.NullHandler())

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
}


class Logger:
    """A structlog-style logger (``info(event, **fields)``, ``bind``) routed as above."""

    __slots__ = ("_bound", "_context", "_lazy", "_name", "_stdlib")

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context = context or {}
        self._lazy: Any = structlog.get_logger(name, **self._context)
        # A bound logger resolves structlog's configuration once, at its first structlog call,
        # as structlog's own bind() does; a module's logger resolves it at every call.
        self._bound: Any = None
        self._stdlib = logging.getLogger(name)

    def bind(self, **fields: Any) -> Logger:
        """A logger that adds ``fields`` to every event."""
        return Logger(self._name, {**self._context, **fields})

    def _log(self, method: str, event: str, args: tuple[Any, ...], fields: dict[str, Any]) -> None:
        if structlog.is_configured():
            target = self._lazy
            if self._context:
                if self._bound is None:
                    self._bound = self._lazy.bind()
                target = self._bound
            getattr(target, method)(event, *args, **fields)
            return
        level = _LEVELS[method]
        if not self._stdlib.isEnabledFor(level):
            return
        exc_info = fields.pop("exc_info", method == "exception")
        text = event % args if args else event
        pairs = {**self._context, **fields}
        if pairs:
            text += " " + " ".join(f"{key}={value!r}" for key, value in pairs.items())
        self._stdlib.log(level, "%s", text, exc_info=exc_info, stacklevel=3)

    def debug(self, event: str, *args: Any, **fields: Any) -> None:
        self._log("debug", event, args, fields)

    def info(self, event: str, *args: Any, **fields: Any) -> None:
        self._log("info", event, args, fields)

    def warning(self, event: str, *args: Any, **fields: Any) -> None:
        self._log("warning", event, args, fields)

    def error(self, event: str, *args: Any, **fields: Any) -> None:
        self._log("error", event, args, fields)

    def exception(self, event: str, *args: Any, **fields: Any) -> None:
        """Log at error with the exception being handled."""
        self._log("exception", event, args, fields)

    def critical(self, event: str, *args: Any, **fields: Any) -> None:
        self._log("critical", event, args, fields)


def get_logger(name: str) -> Logger:
    """The logger for ``name`` (a dotted name under ``seqrepair``)."""
    return Logger(name)
