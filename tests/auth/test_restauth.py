"""How the REST API establishes a request's principal (:mod:`seqrepair.auth.restauth`): bearer
tokens per principal, the old single token, anonymous only where allowed, 401 otherwise;
HTTP Basic against a real credentials file where Cyrus's tools are installed."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from seqrepair.auth.credentials import CredentialStore, ScramSecret
from seqrepair.auth.restauth import ANONYMOUS, RestAuth, new_token, read_tokens, token_hash
from seqrepair.core.errors import InvalidConfigError
from seqrepair.rest.api import SubscriptionApi
from seqrepair.rest.manager import SubscriptionManager

TOOLS = all(shutil.which(t, path="/usr/sbin:/usr/bin") for t in ("saslpasswd2", "db_dump"))


def _api(auth: RestAuth | None = None, token: str | None = None) -> SubscriptionApi:
    return SubscriptionApi(SubscriptionManager(), auth=auth, token=token,
                           token_principal="ops")


def _status(api: SubscriptionApi, authorization: str | None) -> int:
    headers = {} if authorization is None else {"Authorization": authorization}
    return api.handle("GET", "/subscriptions", headers, b"").status


def test_bearer_tokens_name_their_principals(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    alice, bob = new_token(tokens, "alice@example.com"), new_token(tokens, "bob")
    assert tokens.stat().st_mode & 0o077 == 0
    table = read_tokens(tokens)
    assert table == {token_hash(alice): "alice@example.com", token_hash(bob): "bob"}
    api = _api(RestAuth(tokens=table), token="0ld-s3cret")
    assert api.request_principal(f"Bearer {alice}") == "alice@example.com"
    assert api.request_principal(f"bearer  {bob} ") == "bob"
    assert api.request_principal("Bearer 0ld-s3cret") == "ops"
    for refused in (None, "Bearer nope", f"Basic {alice}", "", f"Bearer{alice}"):
        assert _status(api, refused) == 401, refused


def test_anonymous_only_where_allowed_and_a_failed_attempt_is_401_even_then() -> None:
    assert _api().request_principal(None) == ANONYMOUS  # the library's default: no authentication
    assert _status(_api(token="s3cret"), None) == 401  # a token: it is wanted (as before)
    open_api = _api(RestAuth(allow_anonymous=True))
    assert open_api.request_principal(None) == ANONYMOUS
    assert _status(open_api, "Bearer guessed") == 401
    closed = _api(RestAuth())
    response = closed.handle("GET", "/subscriptions", {}, b"")
    assert response.status == 401
    assert response.json()["error"] == "unauthorized"
    assert [v for k, v in response.headers if k == "WWW-Authenticate"] == [
        'Bearer realm="seqrepair"']


def test_a_tokens_file_line_that_is_not_principal_and_hash_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "tokens"
    bad.write_text("# comment\nalice " + "0" * 64 + "\nbob plaintext-token\n")
    with pytest.raises(InvalidConfigError, match="line 3"):
        read_tokens(bad)


def test_a_scram_secret_checks_the_password_it_was_made_from() -> None:
    # RFC 7677's SCRAM-SHA-256 example: user "user", password "pencil"
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    import hashlib
    import hmac

    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    stored = hashlib.sha256(hmac.new(salted, b"Client Key", hashlib.sha256).digest()).digest()
    secret = ScramSecret.parse("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"
                               + base64.b64encode(stored).decode() + ":"
                               + base64.b64encode(b"k" * 32).decode())
    assert secret is not None
    assert secret.verify("pencil")
    assert not secret.verify("pencil ")
    assert ScramSecret.parse("SCRAM-SHA-1$4096:c2FsdA==$YQ==:Yg==") is None
    assert ScramSecret.parse("SCRAM-SHA-256$many:!!$x:y") is None


@pytest.mark.skipif(not TOOLS, reason="Cyrus sasl2-bin / db-util not installed (bin/setup)")
def test_basic_checks_the_credentials_file_which_keeps_no_password(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "creds.sasldb")
    store.add("alice", "correct horse")
    store.add("bob", "battery staple")
    assert store.path.stat().st_mode & 0o077 == 0
    assert b"correct horse" not in store.path.read_bytes()
    assert store.users() == ["alice", "bob"]
    api = _api(RestAuth(credentials=store))

    def basic(user: str, password: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    assert api.request_principal(basic("alice", "correct horse")) == "alice"
    assert api.request_principal(basic("bob", "battery staple")) == "bob"
    for refused in (basic("alice", "battery staple"), basic("carol", "x"), "Basic !!",
                    "Basic " + base64.b64encode(b"no-colon").decode(), None):
        assert _status(api, refused) == 401, refused
    store.add("alice", "new password")  # a change is seen without a restart
    assert _status(api, basic("alice", "correct horse")) == 401
    assert api.request_principal(basic("alice", "new password")) == "alice"
    store.delete("bob")
    assert store.users() == ["alice"]
    assert _status(api, basic("bob", "battery staple")) == 401
