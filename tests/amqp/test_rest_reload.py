"""Who may reach the REST API without a token is decided again on SIGHUP, with the tokens
(WIRE.md "Authentication"): ``--allow-anonymous`` lets anonymous requests in only while no
bearer token is configured. Over a real ``seqrepair serve --rest`` process (plain HTTP on
loopback, a private redis-server), SIGHUP sent to the process, requests through
``http.client``."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.auth.restauth import new_token

from .conftest import ComponentProcess, FreePort, wait_for
from .resthttp import rest_status

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_anonymous_access_is_decided_again_on_sighup_with_the_tokens(
        component: Callable[..., ComponentProcess], tmp_path: Path) -> None:
    """Started with ``--allow-anonymous`` and an empty tokens file, the API lets anonymous
    requests in; once a token is in the file and the process is sent SIGHUP, an anonymous
    request is 401 and the token's is 200 (before: anonymous stayed in, as decided at start,
    beside the new tokens); the tokens taken out again, anonymous is back. A file that cannot
    be read keeps all of what is in force, anonymous access included."""
    tokens = tmp_path / "rest.tokens"
    tokens.write_text("")
    rest_port = FreePort()
    comp = component("--rest", rest_port, "--rest-tokens", str(tokens))
    port = rest_port.number
    assert comp.proc is not None
    assert "--allow-anonymous" in comp.command(tmp_path / "unused")
    assert rest_status(port) == 200

    alice = new_token(tokens, "alice")
    assert rest_status(port) == 200  # not read yet
    assert rest_status(port, f"Bearer {alice}") == 401
    comp.hang_up("REST tokens reloaded", 1)
    assert rest_status(port) == 401  # a token is configured: anonymous is out
    assert rest_status(port, f"Bearer {alice}") == 200
    assert "anonymous=False" in comp.log_text().split("REST tokens reloaded")[1]

    tokens.write_text("bob not-a-hash\n")  # unreadable: what is in force stays, all of it
    comp.hang_up("REST tokens not reloaded", 1)
    assert rest_status(port) == 401
    assert rest_status(port, f"Bearer {alice}") == 200

    tokens.write_text("")  # no token any more: anonymous is let in again
    comp.hang_up("REST tokens reloaded", 2)
    assert rest_status(port) == 200
    assert rest_status(port, f"Bearer {alice}") == 401


def test_the_last_token_taken_out_is_revoked_on_sighup(
        component: Callable[..., ComponentProcess], tmp_path: Path) -> None:
    """A component whose AMQP port takes client certificates and whose REST API takes only
    bearer tokens: the operator takes the last token out of the tokens file (it leaked) and
    sends SIGHUP. The token must stop working (401 for everyone: nobody has a way in until a
    token is added again), not stay in force because "nobody could authenticate" (the rule
    that refuses to *start* such an API) made the reload keep the old tokens."""
    from .pki import Pki

    pki = Pki.make(tmp_path / "pki", with_credentials=False)
    tokens = tmp_path / "rest.tokens"
    leaked = new_token(tokens, "alice")
    rest_port = FreePort()
    comp = component(*pki.server_args(), "--rest", rest_port,
                     "--rest-tokens", str(tokens))
    port = rest_port.number
    assert comp.proc is not None
    ca = pki.pem("ca")
    assert rest_status(port, f"Bearer {leaked}", ca=ca) == 200
    assert rest_status(port, ca=ca) == 401

    tokens.write_text("")  # revoked: the only token there was
    os.kill(comp.proc.pid, signal.SIGHUP)
    assert wait_for(lambda: "REST tokens" in comp.log_text().split("listening", 1)[-1], 10), \
        comp.log_text()
    assert wait_for(lambda: rest_status(port, f"Bearer {leaked}", ca=ca) == 401, 10), \
        comp.log_text()
    assert rest_status(port, ca=ca) == 401  # nobody is let in instead

    fresh = new_token(tokens, "bob")  # a token added again: it works, the old one does not
    os.kill(comp.proc.pid, signal.SIGHUP)
    assert wait_for(lambda: rest_status(port, f"Bearer {fresh}", ca=ca) == 200, 10), \
        comp.log_text()
    assert rest_status(port, f"Bearer {leaked}", ca=ca) == 401
