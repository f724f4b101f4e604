"""How a test connects as a given principal (AMQP) or calls the REST API as one.

AMQP: a principal is a SCRAM-SHA-256 user of a credentials file the test makes
(:func:`serve_args`: ``seqrepair serve --credentials FILE --allow-anonymous``), the client
proving it with its password; ``anonymous`` is a client that authenticates nobody. A claimed
container id names no principal. SCRAM needs proton built against Cyrus SASL (``bin/setup``):
:data:`MISSING` says why a principal-dependent AMQP test cannot run here.

REST: per-principal bearer tokens (``serve --rest-token-file`` lines ``PRINCIPAL TOKEN``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqrepair.amqp.wire.security import ANONYMOUS, ClientSecurity
from seqrepair.auth.credentials import CredentialStore

from .pki import scram_missing

MISSING = scram_missing()
"""Why SCRAM principals cannot be used here (None: they can)."""


def password(principal: str) -> str:
    """The test password of ``principal``."""
    return "pw-" + principal


def serve_args(folder: Path, *principals: str) -> tuple[str, ...]:
    """``serve`` options authenticating ``principals`` by SCRAM (a credentials file made in
    ``folder``), everyone else as ``anonymous``; anonymous only without Cyrus SASL."""
    if MISSING is not None:
        return ("--allow-anonymous",)
    store = CredentialStore(folder / "principals.sasldb")
    for principal in principals:
        store.add(principal, password(principal))
    return ("--credentials", str(store.path), "--allow-anonymous")


def amqp_identity(principal: str) -> dict[str, Any]:
    """Keyword arguments that make a proton ``BlockingConnection`` or ``Container.connect``
    connect as ``principal``."""
    if principal == ANONYMOUS:
        return {"allowed_mechs": "ANONYMOUS"}
    return {"user": principal, "password": password(principal), "allowed_mechs": "SCRAM-SHA-256"}


def client_security(principal: str) -> ClientSecurity:
    """What makes a library ``Subscriber`` or ``Publisher`` connect as ``principal``."""
    if principal == ANONYMOUS:
        return ClientSecurity(mechs="ANONYMOUS")
    return ClientSecurity(user=principal, password=password(principal), mechs="SCRAM-SHA-256")


def rest_token(principal: str) -> str:
    """The bearer token of ``principal`` in :func:`rest_token_file`."""
    return "tok-" + principal.replace("@", ".")  # a bearer token has no "@"


def rest_token_file(path: Any, *principals: str) -> str:
    """Write a ``--rest-token-file`` authenticating ``principals``; return its path."""
    path.write_text("".join(f"{p} {rest_token(p)}\n" for p in principals))
    return str(path)


WEATHER_FOR_EXAMPLE_COM = """
[[allow]]
actors = ["*@example.com"]
operations = ["publish", "subscribe"]
topics = ["/weather/#"]
"""
"""A policy rule many tests start from: everyone at example.com may publish and subscribe to
``/weather/#``."""

GATEWAY_ACTS_FOR_EXAMPLE_COM = """
[[allow]]
actors = ["gw@example.net"]
operations = ["act-for"]
principals = ["*@example.com"]
"""
"""A policy rule: the gateway's principal (gw@example.net) may act for everyone at
example.com; no grant of its own."""


def policy_args(folder: Path, text: str) -> tuple[str, str]:
    """``--policy`` and a file made in ``folder`` holding the policy ``text``."""
    path = folder / "policy.toml"
    path.write_text(text)
    return "--policy", str(path)


def upstream_args(folder: Path, principal: str) -> tuple[str, ...]:
    """A gateway's options to authenticate upstream as ``principal`` by SCRAM (its password in
    a file made in ``folder``)."""
    secret = folder / "gw-password"
    secret.write_text(password(principal))
    return ("--upstream-user", principal, "--upstream-password-file", str(secret),
            "--upstream-sasl-mechs", "SCRAM-SHA-256")
