"""The credentials file: one Cyrus SASL ``sasldb`` of salted SCRAM-SHA-256 secrets, the one
source of truth for passwords on both ports.

The AMQP listener hands it to Cyrus SASL (``SCRAM-SHA-256``, see
:mod:`seqrepair.amqp.wire.security`); the REST API checks an HTTP Basic password against the
same secrets (:meth:`CredentialStore.verify`). It holds, per user, only what RFC 5802 lets a
server keep: ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` (Cyrus's
``authPassword`` property), never the password: ``saslpasswd2 -n`` with
``scram_secret_generate: yes`` writes no ``userPassword``.

It is written only through ``saslpasswd2`` (Debian ``sasl2-bin``), the password on its stdin,
and read through ``db_dump`` (``db-util``): the file is a Berkeley DB that Python's standard
library cannot open. Its mode is 0600.

A password is checked as RFC 5802 §3 has the server check a proof: SaltedPassword =
PBKDF2-HMAC-SHA-256(password, salt, iterations), ClientKey = HMAC(SaltedPassword, "Client
Key"), and SHA-256(ClientKey) must equal StoredKey (compared in constant time).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import attrs

from seqrepair.core.errors import InvalidConfigError, SeqRepairError

APP = "seqrepair"
"""The Cyrus application name (``saslpasswd2 -a``), as the AMQP listener's ``seqrepair.conf``."""

SCRAM_PROPERTY = "authPassword"
USER_NAME = re.compile(r"[A-Za-z0-9._@+-]{1,128}")
"""What a user name may be: it travels in SASL and HTTP Basic unchanged."""


class CredentialsError(SeqRepairError):
    """The credentials file could not be read or written (a missing tool, a bad file)."""


@attrs.frozen
class ScramSecret:
    """One user's SCRAM-SHA-256 secret."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def parse(cls, text: str) -> ScramSecret | None:
        """From Cyrus's ``SCRAM-SHA-256$<i>:<salt>$<StoredKey>:<ServerKey>``; None for
        another mechanism's secret or a malformed one."""
        mech, _, rest = text.partition("$")
        if mech != "SCRAM-SHA-256":
            return None
        try:
            head, _, keys = rest.partition("$")
            iterations, _, salt = head.partition(":")
            stored, _, server = keys.partition(":")
            return cls(int(iterations), base64.b64decode(salt, validate=True),
                       base64.b64decode(stored, validate=True),
                       base64.b64decode(server, validate=True))
        except ValueError:
            return None

    def verify(self, password: str) -> bool:
        """Whether ``password`` is the one this secret was made from (constant time)."""
        salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), self.salt,
                                     self.iterations)
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        return hmac.compare_digest(hashlib.sha256(client_key).digest(), self.stored_key)


_UNKNOWN = ScramSecret(4096, b"seqrepair-unknown", b"\0" * 32, b"\0" * 32)
"""What a password of an unknown user is checked against (it matches nothing)."""


def _tool(name: str) -> str:
    for folder in ("", "/usr/sbin", "/usr/bin"):
        found = shutil.which(name, path=folder or None)
        if found:
            return found
    raise CredentialsError(f"{name} not found: install Debian's sasl2-bin and db-util (bin/setup)",
                           expected=name)


def check_user(user: str) -> str:
    """``user`` if it is a valid user name (InvalidConfigError otherwise)."""
    if not USER_NAME.fullmatch(user):
        raise InvalidConfigError(
            "a user name is 1 to 128 letters, digits and . _ @ + -", expected=USER_NAME.pattern,
            got=user)
    return user


def _unescape(line: str) -> bytes:
    """A ``db_dump -p`` value: printable bytes, ``\\\\`` and ``\\XX`` hex escapes."""
    out = bytearray()
    i = 0
    raw = line.encode("latin-1")
    while i < len(raw):
        if raw[i] == 0x5C:  # backslash
            if raw[i + 1 : i + 2] == b"\\":
                out.append(0x5C)
                i += 2
            else:
                out.append(int(raw[i + 1 : i + 3], 16))
                i += 3
        else:
            out.append(raw[i])
            i += 1
    return bytes(out)


def canonical_user(user: str) -> str:
    """``user`` as one principal name whichever way it was written: ``alice@<this host>``
    (Cyrus SASL's default realm, which a client may name or leave out) is ``alice``, as
    :func:`_name` lists it; any other name as it is. The AMQP and REST ports both use it,
    so one user is never two principals."""
    name, at, realm = user.rpartition("@")
    if at and name and realm in (socket.gethostname(), socket.getfqdn()):
        return name
    return user


def _name(key: bytes) -> str:
    """The user name of a sasldb key ``user\\0realm\\0property``, as SASL and HTTP Basic
    give it: Cyrus keeps ``alice@example.com`` as user ``alice`` of realm ``example.com``, and
    a name without ``@`` under this host's name (its default realm)."""
    user, realm = [*key.split(b"\0"), b"", b""][:2]
    name, host = user.decode("utf-8", "replace"), realm.decode("utf-8", "replace")
    return name if host in (socket.gethostname(), socket.getfqdn(), "") else f"{name}@{host}"


@attrs.define
class CredentialStore:
    """The credentials file at ``path`` (a sasldb): add, delete, list users and check a
    password. Reads are cached until the file changes."""

    path: Path = attrs.field(converter=Path)
    _cache: tuple[tuple[int, int], dict[str, ScramSecret]] | None = attrs.field(
        default=None, init=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    # --- writing (saslpasswd2) -------------------------------------------------------------

    def add(self, user: str, password: str) -> None:
        """Create ``user`` or change its password (only the salted SCRAM secret is kept)."""
        check_user(user)
        if not password or "\n" in password:
            raise InvalidConfigError("a password is one non-empty line", got="(hidden)")
        with tempfile.TemporaryDirectory(prefix="seqrepair-sasl-") as conf:
            # saslpasswd2 writes SCRAM secrets only when its application's config asks
            (Path(conf) / f"{APP}.conf").write_text(
                "mech_list: SCRAM-SHA-256\nscram_secret_generate: yes\n")
            self._run([_tool("saslpasswd2"), "-p", "-c", "-n", "-f", str(self.path), "-a", APP,
                       user], password, conf)
        if self.secret(user) is None:
            raise CredentialsError(
                f"saslpasswd2 stored no SCRAM-SHA-256 secret for {user!r} (is Cyrus SASL's "
                f"SCRAM plugin installed? Debian: libsasl2-modules)", got=user)

    def delete(self, user: str) -> None:
        """Remove every entry of ``user`` (CredentialsError when it has none). ``saslpasswd2
        -d`` leaves SCRAM secrets behind, so the file is dumped, filtered and loaded into a new
        file that replaces it (``db_dump``/``db_load``)."""
        check_user(user)
        dump = self._dump().splitlines()
        start = dump.index("HEADER=END") + 1
        end = dump.index("DATA=END")
        pairs = list(zip(dump[start:end:2], dump[start + 1 : end : 2], strict=True))
        kept = [pair for pair in pairs if _name(_unescape(pair[0][1:])) != user]
        if len(kept) == len(pairs):
            raise CredentialsError(f"no user {user!r} in {self.path}", got=user)
        text = "\n".join(dump[:start] + [line for pair in kept for line in pair]
                         + dump[end:]) + "\n"
        fresh = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fresh.unlink(missing_ok=True)
        try:
            self._run([_tool("db_load"), str(fresh)], text, None, path=fresh)
            fresh.replace(self.path)
        finally:
            fresh.unlink(missing_ok=True)

    def _run(self, argv: list[str], stdin: str, conf: str | None,
             path: Path | None = None) -> None:
        env = dict(os.environ)
        if conf is not None:
            env["SASL_CONF_PATH"] = conf
        old = os.umask(0o077)
        try:
            done = subprocess.run(argv, input=stdin.encode(), capture_output=True, env=env,
                                  timeout=30, check=False)
        finally:
            os.umask(old)
        if done.returncode != 0:
            raise CredentialsError(
                f"{Path(argv[0]).name} failed: {done.stderr.decode(errors='replace').strip()}",
                got=done.returncode)
        written = path or self.path
        if written.exists():
            written.chmod(0o600)

    # --- reading (db_dump) -----------------------------------------------------------------

    def users(self) -> list[str]:
        """The users with a SCRAM secret, sorted."""
        return sorted(self._secrets())

    def secret(self, user: str) -> ScramSecret | None:
        """``user``'s SCRAM secret (None when it has none)."""
        return self._secrets().get(user)

    def verify(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (False for an unknown user)."""
        secret = self.secret(user)
        if secret is None:
            _UNKNOWN.verify(password)  # as long as for a known user: names do not leak
            return False
        return secret.verify(password)

    def _secrets(self) -> dict[str, ScramSecret]:
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise CredentialsError(f"cannot read the credentials file {self.path}: {exc}",
                                   got=str(self.path)) from None
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if self._cache is not None and self._cache[0] == stamp:
                return self._cache[1]
            secrets = self._read()
            self._cache = (stamp, secrets)
            return secrets

    def _dump(self) -> str:
        done = subprocess.run([_tool("db_dump"), "-p", str(self.path)], capture_output=True,
                              timeout=30, check=False)
        if done.returncode != 0:
            raise CredentialsError(
                f"cannot read the credentials file {self.path}: "
                f"{done.stderr.decode(errors='replace').strip()}", got=str(self.path))
        return done.stdout.decode("latin-1")

    def _read(self) -> dict[str, ScramSecret]:
        lines = self._dump().splitlines()
        try:
            body = lines[lines.index("HEADER=END") + 1 :]
        except ValueError:
            raise CredentialsError(f"{self.path} is not a sasldb", got=str(self.path)) from None
        body = [line[1:] for line in body if line.startswith(" ")]
        secrets: dict[str, ScramSecret] = {}
        for key, value in zip(body[0::2], body[1::2], strict=False):
            raw = _unescape(key)
            if raw.split(b"\0")[2:3] != [SCRAM_PROPERTY.encode()]:
                continue
            secret = ScramSecret.parse(_unescape(value).decode("latin-1"))
            if secret is not None:
                secrets[_name(raw)] = secret
        return secrets
