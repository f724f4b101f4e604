"""bin/setup's check of the proton it built: Cyrus SASL, OpenSSL, and the optional client
certificate of proton-optional-client-cert.patch working in C, by TLS handshakes between two
in-memory proton transports (no sockets): a server in VERIFY_PEER_IF_PRESENT mode lets in a
client without a certificate and one whose certificate its CA signed (the subject reaches the
server), and refuses one whose certificate another CA signed. Exit status 0 when all hold;
otherwise what failed on stderr, status 1. Needs ``openssl`` (certificates)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)


def make_pki(folder: Path) -> None:
    for ca in ("ca", "other-ca"):
        openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                "-out", f"{ca}.pem", "-days", "1", "-subj", f"/CN={ca}")
    for name, ca in (("server", "ca"), ("alice", "ca"), ("mallory", "other-ca")):
        openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
                f"{ca}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "1")


def handshake(folder: Path, client_cert: str | None) -> tuple[bool, str | None]:
    """Whether a client (presenting ``client_cert``, else nothing) gets its AMQP open through
    to the server, and the subject the server sees."""
    from proton import SSL, Collector, Connection, SSLDomain, Transport

    server_domain = SSLDomain(SSLDomain.MODE_SERVER)
    server_domain.set_credentials(str(folder / "server.pem"), str(folder / "server.key"), None)
    server_domain.set_trusted_ca_db(str(folder / "ca.pem"))
    server_domain.set_peer_authentication(SSLDomain.VERIFY_PEER_IF_PRESENT,
                                          str(folder / "ca.pem"))
    client_domain = SSLDomain(SSLDomain.MODE_CLIENT)
    client_domain.set_trusted_ca_db(str(folder / "ca.pem"))
    client_domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    if client_cert is not None:
        client_domain.set_credentials(str(folder / f"{client_cert}.pem"),
                                      str(folder / f"{client_cert}.key"), None)
    server, client = Transport(Transport.SERVER), Transport()
    server_ssl = SSL(server, server_domain)
    SSL(client, client_domain)
    server_conn, client_conn = Connection(), Connection()
    server_conn.collect(Collector())
    server.bind(server_conn)
    client.bind(client_conn)
    client_conn.open()
    for _ in range(50):
        moved = False
        for src, dst in ((client, server), (server, client)):
            pending = src.pending()
            data = src.peek(pending) if pending > 0 else None
            if data:
                dst.push(data)
                src.pop(len(data))
                moved = True
            elif pending < 0 and dst.capacity() > 0:
                dst.close_tail()
        if not moved:
            break
    opened = bool(server_conn.state & Connection.REMOTE_ACTIVE)
    return opened, server_ssl.get_cert_subject() if opened else None


def main() -> int:
    import proton

    problems = []
    if not proton.SASL.extended():
        problems.append("proton is not built against Cyrus SASL")
    if not proton.SSL.present():
        problems.append("proton is not built with OpenSSL")
    if not hasattr(proton.SSLDomain, "VERIFY_PEER_IF_PRESENT"):
        problems.append("proton lacks SSLDomain.VERIFY_PEER_IF_PRESENT (patch not applied)")
    if problems:
        print("check-proton: " + "; ".join(problems), file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="check-proton-") as tmp:
        folder = Path(tmp)
        make_pki(folder)
        expected = {None: (True, None), "alice": (True, "CN=alice"), "mallory": (False, None)}
        for cert, want in expected.items():
            got = handshake(folder, cert)
            if got != want:
                problems.append(f"client certificate {cert}: got (opened, subject) {got}, "
                                f"expected {want}")
        try:
            proton.SSLDomain(proton.SSLDomain.MODE_CLIENT).set_peer_authentication(
                proton.SSLDomain.VERIFY_PEER_IF_PRESENT)
            problems.append("a client domain accepted VERIFY_PEER_IF_PRESENT")
        except proton.SSLException:
            pass
    if problems:
        print("check-proton: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
