"""The REST API's principals (issue 25): HTTPS, HTTP Basic against the credentials file,
bearer tokens per principal, the old single token as one principal's, 401 with a challenge
per scheme.

Real parts only: ``seqrepair serve --rest`` as a process with TLS (certificates by
``openssl``), credentials by ``seqrepair credentials`` (Cyrus ``saslpasswd2``), tokens by
``seqrepair credentials token``, requests through ``http.client`` over TLS.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import ComponentProcess, FreePort, _env
from .pki import PASSWORDS, Pki, scram_missing
from .resthttp import rest_get

MISSING = scram_missing()
pytestmark = [pytest.mark.amqp, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _token(tokens: Path, principal: str) -> str:
    done = subprocess.run([sys.executable, "-m", "seqrepair.cli", "credentials", "token",
                           principal, "--tokens", str(tokens)], env=_env(),
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


@pytest.fixture
def secured(component: Callable[..., ComponentProcess], tmp_path: Path
            ) -> tuple[int, Pki, dict[str, str]]:
    pki = Pki.make(tmp_path / "pki", with_credentials=True)
    tokens = tmp_path / "tokens"
    issued = {who: _token(tokens, who) for who in ("alice", "bob")}
    (tmp_path / "legacy").write_text("0ld-s3cret\n")
    rest_port = FreePort()
    component("--tls-cert", pki.pem("server"), "--tls-key", pki.key("server"),
              "--credentials", pki.credentials, "--rest", rest_port,
              "--rest-tokens", str(tokens), "--rest-token-file", str(tmp_path / "legacy"),
              "--rest-token-principal", "ops")
    port = rest_port.number
    return port, pki, issued


def test_https_basic_and_bearer_tokens_name_principals_and_anything_else_is_401(
        secured: tuple[int, Pki, dict[str, str]]) -> None:
    port, pki, issued = secured
    ca = pki.pem("ca")
    challenges = ['Bearer realm="seqrepair"', 'Basic realm="seqrepair", charset="UTF-8"']
    assert rest_get(port, ca=ca) == (401, challenges)
    assert rest_get(port, _basic("alice", PASSWORDS["alice"]), ca=ca)[0] == 200
    assert rest_get(port, _basic("bob", PASSWORDS["bob"]), ca=ca)[0] == 200
    assert rest_get(port, _basic("alice", PASSWORDS["bob"]), ca=ca) == (401, challenges)
    assert rest_get(port, _basic("carol", "whatever-1"), ca=ca) == (401, challenges)
    assert rest_get(port, "Basic not-base64!", ca=ca)[0] == 401
    assert rest_get(port, f"Bearer {issued['alice']}", ca=ca)[0] == 200
    assert rest_get(port, f"Bearer {issued['bob']}", ca=ca)[0] == 200
    assert rest_get(port, "Bearer 0ld-s3cret", ca=ca)[0] == 200  # --rest-token-file: principal ops
    assert rest_get(port, "Bearer " + issued["alice"][:-1] + "x", ca=ca)[0] == 401
    assert rest_get(port, "Negotiate abc", ca=ca)[0] == 401
    tokens_file = (Path(pki.folder).parent / "tokens").read_text()
    assert issued["alice"] not in tokens_file  # only its hash is kept
    assert (Path(pki.folder).parent / "tokens").stat().st_mode & 0o077 == 0


def test_the_api_speaks_only_tls_to_clients_that_trust_its_certificate(
        secured: tuple[int, Pki, dict[str, str]]) -> None:
    port, pki, _ = secured
    with pytest.raises(ssl.SSLCertVerificationError):
        rest_get(port, _basic("alice", PASSWORDS["alice"]), ca=pki.pem("other-ca"))
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        plain.request("GET", "/subscriptions")
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.getresponse()  # a TLS server: no HTTP answer to plaintext
    finally:
        plain.close()


def test_the_tokens_files_are_read_again_on_sighup_and_a_bad_one_keeps_those_in_force(
        component: Callable[..., ComponentProcess], tmp_path: Path) -> None:
    """A token made after the start is taken once the component is sent SIGHUP (like the
    policy); one taken out of the file is 401 from then on; a file that cannot be read is
    logged and the tokens in force stay (before: read at start only)."""
    import time

    pki = Pki.make(tmp_path / "pki", with_credentials=True)
    tokens = tmp_path / "tokens"
    alice = _token(tokens, "alice")
    rest_port = FreePort()
    comp = component("--tls-cert", pki.pem("server"), "--tls-key", pki.key("server"),
                     "--credentials", pki.credentials, "--rest", rest_port,
                     "--rest-tokens", str(tokens))
    port = rest_port.number
    assert comp.proc is not None
    ca = pki.pem("ca")
    bob = _token(tokens, "bob")
    assert rest_get(port, f"Bearer {alice}", ca=ca)[0] == 200
    assert rest_get(port, f"Bearer {bob}", ca=ca)[0] == 401  # not read yet

    comp.hang_up("REST tokens reloaded", 1)
    assert rest_get(port, f"Bearer {bob}", ca=ca)[0] == 200
    assert rest_get(port, f"Bearer {alice}", ca=ca)[0] == 200
    tokens.write_text("".join(line + "\n" for line in tokens.read_text().splitlines()
                              if not line.startswith("alice ")))
    comp.hang_up("REST tokens reloaded", 2)
    assert rest_get(port, f"Bearer {alice}", ca=ca)[0] == 401
    assert rest_get(port, f"Bearer {bob}", ca=ca)[0] == 200
    tokens.write_text("bob not-a-hash\n")
    comp.hang_up("REST tokens not reloaded", 1)
    time.sleep(0.2)
    assert rest_get(port, f"Bearer {bob}", ca=ca)[0] == 200  # those in force stay
