"""The access policy in force: read from its file (``serve --policy FILE``), reloaded on SIGHUP.

The file is TOML (or JSON, when its name ends in ``.json``): ``[[allow]]`` and ``[[deny]]``
tables, each with ``actors``, ``operations`` and optionally ``topics`` (default ``["/#"]``),
``queues`` (default ``["*"]``) and ``sources`` (source names for ``own-source`` and
``contribute``, default ``["*"]``); :mod:`seqrepair.core.policy` says what they mean::

    [[allow]]
    actors = ["*@example.com"]
    operations = ["subscribe", "read-subscription", "create-subscription",
                  "change-subscription", "delete-subscription", "list-topics"]
    topics = ["/weather/#"]

    [[deny]]
    actors = ["*"]
    operations = ["subscribe"]
    topics = ["/weather/secret/#"]

    [[allow]]  # feed.alice is alice's alone; partners may contribute to it
    actors = ["alice@example.com"]
    operations = ["own-source"]
    sources = ["feed.alice"]

    [[allow]]
    actors = ["*@partner.org"]
    operations = ["contribute"]
    sources = ["feed.alice"]

:class:`Access` holds the current :class:`~seqrepair.core.policy.Policy`; the component and
the REST API read :attr:`Access.policy` on every check, so a reload takes effect at the next
attach, publication or request. A file that cannot be read at start is an
:class:`~seqrepair.core.policy.InvalidPolicyError` (``serve`` refuses to start with its one-line
message); on reload it is logged and the policy in force stays.
"""

from __future__ import annotations

import json
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path

from seqrepair.core.errors import SeqRepairError
from seqrepair.core.policy import InvalidPolicyError, Policy
from seqrepair.logs import get_logger

log = get_logger("seqrepair.access")


def load_policy(path: str | Path) -> Policy:
    """The policy of the file at ``path`` (InvalidPolicyError, naming the file, when it
    cannot be read)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        value = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        return Policy.from_json(value)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # TOMLDecodeError is one
        raise InvalidPolicyError(f"policy file {str(path)!r}: {exc}", got=str(path)) from None
    except SeqRepairError as exc:
        raise InvalidPolicyError(f"policy file {str(path)!r}: {exc.message}",
                                 expected=exc.expected, got=exc.got) from None


class Access:
    """The policy in force, and where it comes from (``path``: None, the permissive default).

    ``on_change`` callbacks hear of each policy that replaced another (from the reloading
    thread: they must only hand it on)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Policy], None]] = []
        self.policy = Policy.allow_all() if self.path is None else load_policy(self.path)

    def announce(self) -> None:
        """Log the policy in force (a warning when there is none): once the command's other
        options were taken, so that a refused option stays one line."""
        if self.path is None:
            log.warning("no access policy (serve --policy): every principal may do every "
                        "operation but admin")
        else:
            log.info("access policy loaded", path=str(self.path), rules=len(self.policy.rules))

    def __call__(self) -> Policy:
        """The policy in force."""
        return self.policy

    def on_change(self, listener: Callable[[Policy], None]) -> None:
        """Call ``listener(policy)`` after each successful reload."""
        self._listeners.append(listener)

    def reload(self) -> bool:
        """Read the file again; True when the new policy is in force. A file that cannot be
        read is logged and the policy in force stays."""
        if self.path is None:
            log.warning("no policy file to reload (serve --policy)")
            return False
        with self._lock:
            try:
                policy = load_policy(self.path)
            except InvalidPolicyError as exc:
                log.error("access policy not reloaded; the previous one stays",
                          path=str(self.path), error=exc.message)
                return False
            self.policy = policy
        log.info("access policy reloaded", path=str(self.path), rules=len(policy.rules))
        for listener in list(self._listeners):
            try:
                listener(policy)
            except Exception:
                log.exception("policy listener failed")
        return True
