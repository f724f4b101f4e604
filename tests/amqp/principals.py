"""How a test connects as a given principal (AMQP) or calls the REST API as one.

STAND-IN until authentication lands: on main a connection's principal is its AMQP container
id when the transport authenticated nobody, and the REST API tells principals apart by
per-principal bearer tokens (``serve --rest-token-file`` lines ``PRINCIPAL TOKEN``). When real
authentication (SASL users or TLS client certificates) replaces those, only this module
changes: every principal-dependent test asks it for "a connection as P".
"""

from __future__ import annotations

from typing import Any


def amqp_identity(principal: str) -> dict[str, Any]:
    """Keyword arguments that make a ``Subscriber``, ``Publisher`` or proton
    ``BlockingConnection`` connect as ``principal``."""
    return {"container_id": principal}


def rest_token(principal: str) -> str:
    """The bearer token of ``principal`` in :func:`rest_token_file`."""
    return "tok-" + principal.replace("@", ".")  # a bearer token has no "@"


def rest_token_file(path: Any, *principals: str) -> str:
    """Write a ``--rest-token-file`` authenticating ``principals``; return its path."""
    path.write_text("".join(f"{p} {rest_token(p)}\n" for p in principals))
    return str(path)
