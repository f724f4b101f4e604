"""Certificates and credentials for the authentication tests, made by ``openssl`` (the
``cryptography`` package is not a dependency) and ``seqrepair credentials`` (Cyrus
``saslpasswd2``): a test CA, the server's certificate (``localhost``, 127.0.0.1), alice's
client certificate (``example-alice``), one with her subject signed by an unknown CA
(``foreign-alice``), one that has expired (``expired-alice``); :meth:`Pki.person` makes more."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import attrs

from seqrepair.amqp.wire.security import ClientSecurity, sasl_extended
from seqrepair.auth.credentials import CredentialStore

PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}


def scram_missing() -> str | None:
    """Why SCRAM cannot be tested here (None: it can): proton without Cyrus SASL, or Debian's
    sasl2-bin / db-util missing. ``bin/setup`` provides all three."""
    if not sasl_extended():
        return "proton is not built against Cyrus SASL (bin/setup builds it)"
    for tool in ("saslpasswd2", "db_dump", "db_load"):
        if shutil.which(tool, path="/usr/sbin:/usr/bin") is None:
            return f"{tool} is not installed (bin/setup installs sasl2-bin and db-util)"
    return None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(folder: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", cwd=folder)


def _signed(folder: Path, name: str, subject: str, ca: str, days: str,
            san: str | None = None) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", subject, cwd=folder)
    extra: list[str] = []
    if san is not None:
        (folder / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", days, *extra, cwd=folder)


@attrs.frozen
class Pki:
    """Where everything is."""

    folder: Path

    def pem(self, name: str) -> str:
        return str(self.folder / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.folder / f"{name}.key")

    def person(self, name: str) -> str:
        """A certificate of subject ``CN=<name>`` (the test CA's), made once; the principal
        proton reports for it under EXTERNAL."""
        if not (self.folder / f"{name}.pem").exists():
            _signed(self.folder, name, f"/CN={name}", "ca", "2")
        return f"CN={name}"

    def client(self, name: str) -> ClientSecurity:
        """A client presenting ``name``'s certificate, trusting the test CA."""
        return ClientSecurity(ca=self.pem("ca"), cert=self.pem(name), key=self.key(name))

    def server_args(self) -> tuple[str, ...]:
        """``serve`` options: TLS, a client certificate of the test CA required."""
        return ("--tls-cert", self.pem("server"), "--tls-key", self.key("server"),
                "--tls-ca", self.pem("ca"), "--client-cert", "required")

    @property
    def credentials(self) -> str:
        return str(self.folder / "credentials.sasldb")

    @classmethod
    def make(cls, folder: Path, *, with_credentials: bool) -> Pki:
        folder.mkdir(parents=True, exist_ok=True)
        _ca(folder, "ca")
        _ca(folder, "other-ca")
        _signed(folder, "server", "/CN=localhost", "ca", "2", "DNS:localhost,IP:127.0.0.1")
        _signed(folder, "example-alice", "/CN=alice/O=Example", "ca", "2")
        _signed(folder, "foreign-alice", "/CN=alice/O=Example", "other-ca", "2")  # same subject
        _signed(folder, "expired-alice", "/CN=alice/O=Example", "ca", "-1")
        pki = cls(folder)
        if with_credentials:
            store = CredentialStore(pki.credentials)  # needs Cyrus's tools: scram_missing()
            for user, password in PASSWORDS.items():
                store.add(user, password)
        return pki


def tls_url(url: str) -> str:
    """A loopback ``host:port`` by the name the server certificate carries (proton checks a
    host name, not an IP address, against it)."""
    return url.replace("127.0.0.1", "localhost")
