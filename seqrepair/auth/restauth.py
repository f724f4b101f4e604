"""Who a REST request comes from: HTTP Basic against the credentials file, bearer tokens per
principal, or ``anonymous`` where the operator allows it.

- ``Authorization: Basic <user:password>`` is checked against the credentials file's salted
  SCRAM-SHA-256 secrets (:class:`~seqrepair.auth.credentials.CredentialStore`), the same the
  AMQP port checks: the principal is the user.
- ``Authorization: Bearer <token>``: the tokens file maps the SHA-256 of each token to its
  principal, one ``PRINCIPAL SHA256-HEX`` a line (``seqrepair credentials token`` makes a
  token, prints it once and appends its line); the token itself is kept by no one but its
  holder. The old single ``--rest-token-file`` is one more token, of the principal
  ``--rest-token-principal`` names (default :data:`LEGACY_TOKEN_PRINCIPAL`).
- Neither header: ``anonymous`` when anonymous access is allowed, else 401.

A request with an ``Authorization`` header that names no principal (a wrong password, an
unknown user or token, another scheme) is 401 whether or not anonymous access is allowed: a
client that tried to authenticate learns that it failed. Every 401 carries a
``WWW-Authenticate`` challenge per scheme offered.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

import attrs

from seqrepair.auth.credentials import CredentialsError, CredentialStore, canonical_user
from seqrepair.core.errors import InvalidConfigError

ANONYMOUS = "anonymous"
LEGACY_TOKEN_PRINCIPAL = "operator"
"""The principal of the single ``--rest-token-file`` token unless ``--rest-token-principal``
names another."""
REALM = "seqrepair"
_HEX = re.compile(r"[0-9a-f]{64}")
_PRINCIPAL = re.compile(r"\S{1,256}")


def token_hash(token: str) -> str:
    """The hex SHA-256 a tokens file keeps of ``token``."""
    return hashlib.sha256(token.strip().encode("utf-8", "surrogatepass")).hexdigest()


def read_tokens(path: str | Path) -> dict[str, str]:
    """A tokens file: ``{sha256-hex: principal}`` (InvalidConfigError naming a bad line)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError(f"--rest-tokens: {exc}", got=str(path)) from None
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2 or not _HEX.fullmatch(fields[1]):
            raise InvalidConfigError(f"--rest-tokens {path} line {number}: expected "
                                     f"'PRINCIPAL SHA256-HEX'", expected="PRINCIPAL SHA256-HEX",
                                     got=f"line {number}")  # not the line: it may be a secret
        tokens[fields[1]] = fields[0]
    return tokens


def new_token(path: str | Path, principal: str) -> str:
    """Make a token for ``principal``, append its hash to the tokens file ``path`` (created
    with mode 0600) and return the token (shown once: nobody keeps it)."""
    if not _PRINCIPAL.fullmatch(principal):
        raise InvalidConfigError("a principal is 1 to 256 characters without spaces",
                                 got=principal)
    token = secrets.token_urlsafe(32)
    target = Path(path)
    if not target.exists():
        target.touch(mode=0o600)
    with target.open("a") as out:
        out.write(f"{principal} {token_hash(token)}\n")
    return token


@attrs.frozen
class RestAuth:
    """How the REST API establishes a request's principal (see the module docstring)."""

    tokens: Mapping[str, str] = attrs.field(factory=dict)
    """SHA-256 hex of a token -> its principal."""
    credentials: CredentialStore | None = None
    allow_anonymous: bool = False

    @property
    def anyone_can_authenticate(self) -> bool:
        """Whether any request could name a principal at all."""
        return bool(self.tokens) or self.credentials is not None or self.allow_anonymous

    def challenges(self) -> tuple[tuple[str, str], ...]:
        """The ``WWW-Authenticate`` headers of a 401, one per scheme offered."""
        headers = [("WWW-Authenticate", f'Bearer realm="{REALM}"')]
        if self.credentials is not None:
            headers.append(("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'))
        return tuple(headers)

    def principal(self, authorization: str | None) -> str | None:
        """The principal of a request with this ``Authorization`` header; None: 401."""
        if authorization is None:
            return ANONYMOUS if self.allow_anonymous else None
        scheme, _, value = authorization.strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return self._bearer(value.strip())
        if scheme == "basic" and self.credentials is not None:
            return self._basic(value.strip())
        return None

    def _bearer(self, token: str) -> str | None:
        digest = token_hash(token)
        found = None
        for known, principal in self.tokens.items():  # every entry: no early exit on a match
            if hmac.compare_digest(known, digest):
                found = principal
        return found

    def _basic(self, value: str) -> str | None:
        assert self.credentials is not None
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode(
                "utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if not sep or not user:
            return None
        try:
            user = canonical_user(user)  # "alice@<this host>" is alice, as over AMQP
            return user if self.credentials.verify(user, password) else None
        except CredentialsError:
            return None  # an unreadable file lets nobody in (logged by the caller's 401)
