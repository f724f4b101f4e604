"""Who is on the other end of an AMQP connection: TLS and SASL for listeners and clients.

A listener (the component, a gateway) is configured by a :class:`ServerSecurity`:

- TLS with its certificate and key (``--tls-cert``/``--tls-key``); with ``--tls-ca`` and
  ``--client-cert required`` every client must present a certificate that CA signed, and SASL
  ``EXTERNAL`` then names the connection by the certificate's subject, as proton reports it
  (``O=Example,CN=alice``). With ``--client-cert optional`` every client is asked for one: a
  certificate presented is verified as under ``required`` (another CA's, or an expired one,
  fails the TLS handshake: never a silent fall back to passwords) and offers ``EXTERNAL``; a
  client presenting none goes on to the other mechanisms. proton-c has no such mode (it asks
  and insists, or does not ask): ``bin/setup`` builds proton with
  ``bin/patches/proton-optional-client-cert.patch``, which adds
  ``SSLDomain.VERIFY_PEER_IF_PRESENT`` (:func:`optional_client_cert_supported`).
- ``SCRAM-SHA-256`` against a Cyrus SASL ``sasldb`` (``--credentials FILE``, managed with
  ``seqrepair credentials``) holding only salted SCRAM secrets (iteration count, salt,
  StoredKey, ServerKey), never a password. PLAIN is not offered: Cyrus verifies PLAIN against a
  plaintext ``userPassword`` only, and a file of plaintext passwords is what must not exist.
  SCRAM needs proton built against Cyrus (``proton.SASL.extended()``; ``bin/setup`` builds it),
  clients too.
- ``ANONYMOUS`` only with ``--allow-anonymous``: the principal is then ``anonymous``.

The principal of a connection (:func:`principal_of`) is the identity the transport proved,
never the container id the client claims. A listener that would authenticate nobody refuses to
start unless it allows anonymous access, and a listener on a non-loopback address that allows
anonymous access or has no TLS refuses to start unless told ``insecure``.

A client is configured by a :class:`ClientSecurity`: an ``amqps://`` URL (or a CA) turns TLS
on and checks the server's certificate and host name, a client certificate and key are offered
for ``EXTERNAL``, a user and password (read from a file or the environment, never only the
command line) go to SASL.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from seqrepair.auth.credentials import canonical_user
from seqrepair.core.errors import InvalidConfigError

__all__ = [
    "ANONYMOUS",
    "CLIENT_CERT_MODES",
    "PASSWORD_ENV",
    "SCRAM",
    "ClientSecurity",
    "ServerSecurity",
    "optional_client_cert_supported",
    "principal_of",
    "sasl_extended",
]

ANONYMOUS = "anonymous"
"""The principal of a connection that authenticated nobody."""

SCRAM = "SCRAM-SHA-256"
"""The password mechanism offered against the credentials file."""

CLIENT_CERT_MODES = ("none", "optional", "required")
"""``--client-cert``: not asked for; asked for and verified if presented; insisted on."""

PASSWORD_MECHS = "SCRAM-SHA-512 SCRAM-SHA-256 SCRAM-SHA-1 PLAIN"
"""What a client with a user and password (and no certificate) allows, of what the server
offers: SCRAM where offered, else PLAIN (which proton sends only inside TLS)."""

PASSWORD_ENV = "SEQREPAIR_PASSWORD"
"""The environment variable a client reads its SASL password from (else ``--password-file``)."""

CYRUS_APP = "seqrepair"
"""The Cyrus SASL application name: the ``seqrepair.conf`` a listener writes, the ``-a`` of
``saslpasswd2``."""


def sasl_extended() -> bool:
    """Whether proton was built against Cyrus SASL (SCRAM possible)."""
    from proton import SASL

    return bool(SASL.extended())


def optional_client_cert_supported() -> bool:
    """Whether proton's TLS layer can verify a client certificate only if one is presented
    (``SSLDomain.VERIFY_PEER_IF_PRESENT``, from ``bin/setup``'s patched build)."""
    from proton import SSLDomain

    return hasattr(SSLDomain, "VERIFY_PEER_IF_PRESENT")


def principal_of(connection: Any) -> str:
    """Who a connection is: the user its transport authenticated (SASL SCRAM, or EXTERNAL with
    the certificate's subject), else :data:`ANONYMOUS`. Never the claimed container id, nor
    the authorization id the client asked SASL for: ``transport.user`` is the authentication
    id, and proton's server accepts any authorization id (its Cyrus proxy policy allows all).
    A name in this host's realm is the bare user, as REST names it
    (:func:`~seqrepair.auth.credentials.canonical_user`)."""
    transport = getattr(connection, "transport", None)
    user = getattr(transport, "user", None) if transport is not None else None
    if isinstance(user, str) and user:
        # Cyrus takes "alice@<this host>" for "alice" (its default realm): one principal
        user = canonical_user(user)
        if user.lower() != ANONYMOUS:
            return user
    return ANONYMOUS


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a listen address's host) only accepts local connections."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(url: str) -> str:
    """The host of a listen address (``host:port``, ``[v6]:port``, ``amqp[s]://host:port``)."""
    rest = url.split("://", 1)[-1]
    host = rest.rpartition(":")[0] if ":" in rest and not rest.endswith("]") else rest
    return host.strip("[]") or "0.0.0.0"


def _readable(option: str, path: str | None) -> None:
    if path is not None and not os.access(path, os.R_OK):
        raise InvalidConfigError(f"{option}: cannot read {path}", got=path)


@attrs.define
class ServerSecurity:
    """How a listener authenticates its connections (see the module docstring)."""

    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    client_cert: str = "none"
    credentials: str | None = None
    """A Cyrus sasldb of SCRAM secrets (``seqrepair credentials add``)."""
    allow_anonymous: bool = False
    insecure: bool = False
    _sasl_folder: str | None = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def mechanisms(self) -> list[str]:
        """The SASL mechanisms offered, strongest first."""
        mechs = []
        if self.client_cert in ("optional", "required"):
            # offered to a connection only when TLS verified a certificate (proton sets the
            # external identity from the peer's subject, Cyrus lists EXTERNAL only then)
            mechs.append("EXTERNAL")
        if self.credentials is not None:
            mechs.append(SCRAM)
        if self.allow_anonymous:
            mechs.append("ANONYMOUS")
        return mechs

    def check(self, url: str, *, option: str = "--url") -> None:
        """Refuse a configuration that is inconsistent, or that would let anyone in where the
        operator did not ask for it (InvalidConfigError naming the option)."""
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidConfigError("--tls-cert and --tls-key go together",
                                     expected="both or neither")
        _readable("--tls-cert", self.tls_cert)
        _readable("--tls-key", self.tls_key)
        _readable("--tls-ca", self.tls_ca)
        if self.client_cert not in CLIENT_CERT_MODES:
            raise InvalidConfigError(f"--client-cert must be one of {CLIENT_CERT_MODES}",
                                     expected=CLIENT_CERT_MODES, got=self.client_cert)
        if self.client_cert != "none" and (not self.tls or self.tls_ca is None):
            raise InvalidConfigError(f"--client-cert {self.client_cert} needs --tls-cert, "
                                     "--tls-key and --tls-ca (the CA that signs client "
                                     "certificates)")
        if self.client_cert == "optional" and not optional_client_cert_supported():
            raise InvalidConfigError(
                "--client-cert optional needs proton built with "
                "bin/patches/proton-optional-client-cert.patch (SSLDomain.VERIFY_PEER_IF_PRESENT "
                "is missing: run bin/setup)", expected="SSLDomain.VERIFY_PEER_IF_PRESENT")
        if self.credentials is not None:
            _readable("--credentials", self.credentials)
            if not sasl_extended():
                raise InvalidConfigError(
                    "--credentials needs proton built against Cyrus SASL for SCRAM-SHA-256 "
                    "(proton.SASL.extended() is False: run bin/setup, or pip install "
                    "--no-binary python-qpid-proton python-qpid-proton with libsasl2-dev)")
        if not self.mechanisms():
            raise InvalidConfigError(
                "nobody could authenticate: give --credentials FILE, --client-cert "
                "required|optional, or --allow-anonymous (anonymous access only where you ask "
                "for it)")
        host = host_of(url)
        if not is_loopback(host) and (self.allow_anonymous or not self.tls) and not self.insecure:
            raise InvalidConfigError(
                f"{option} {host} is not a loopback address and the listener "
                + ("allows anonymous access" if self.allow_anonymous else "has no TLS")
                + ": refused unless --insecure", got=host)

    def ssl_domain(self) -> Any:
        """proton's server SSLDomain, None without TLS."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        from proton import SSLDomain

        domain = SSLDomain(SSLDomain.MODE_SERVER)
        domain.set_credentials(self.tls_cert, self.tls_key, None)
        if self.tls_ca is not None:
            domain.set_trusted_ca_db(self.tls_ca)
        if self.client_cert == "required":
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER, self.tls_ca)
        elif self.client_cert == "optional":
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_IF_PRESENT, self.tls_ca)
        else:
            domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
        return domain

    def prepare(self) -> None:
        """Write the private Cyrus SASL configuration (when proton has Cyrus): a
        ``seqrepair.conf`` naming the mechanisms and the credentials file, in a folder of its
        own; :meth:`configure` points each transport there."""
        if self._sasl_folder is not None or not sasl_extended():
            return
        folder = tempfile.mkdtemp(prefix="seqrepair-sasl-")
        atexit.register(shutil.rmtree, folder, True)
        # every mechanism seqrepair may offer: allowed_mechs narrows it per transport, and
        # Cyrus reads one configuration per process (the first listener's: see configure)
        lines = [f"mech_list: EXTERNAL {SCRAM} ANONYMOUS"]
        if self.credentials is not None:
            lines += ["pwcheck_method: auxprop", "auxprop_plugin: sasldb",
                      f"sasldb_path: {Path(self.credentials).resolve()}"]
        (Path(folder) / f"{CYRUS_APP}.conf").write_text("\n".join(lines) + "\n")
        self._sasl_folder = folder

    def configure(self, transport: Any) -> None:
        """Set a new server transport's SASL layer (from ``on_connection_bound``). proton
        initialises Cyrus once per process, from the configuration the first server transport
        names: listeners of one process share the first one's credentials file (the commands
        run one listener per process)."""
        self.prepare()
        sasl = transport.sasl()
        if self._sasl_folder is not None:
            sasl.config_path(self._sasl_folder)
            sasl.config_name(CYRUS_APP)
        sasl.allowed_mechs(" ".join(self.mechanisms()))
        # without anonymous access, a client that skips SASL altogether is refused too
        transport.require_auth(not self.allow_anonymous)

    @classmethod
    def from_args(cls, args: Any) -> ServerSecurity:
        """From the listener options (:func:`seqrepair.amqp.commands.add_server_security`)."""
        return cls(tls_cert=args.tls_cert, tls_key=args.tls_key, tls_ca=args.tls_ca,
                   client_cert=args.client_cert, credentials=args.credentials,
                   allow_anonymous=args.allow_anonymous, insecure=args.insecure)


ANONYMOUS_LISTENER = ServerSecurity(allow_anonymous=True)
"""A listener that lets anyone in as ``anonymous`` (loopback tests, the demo)."""


@attrs.frozen
class ClientSecurity:
    """How a client proves who it is (see the module docstring)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = attrs.field(default=None, repr=False)
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    mechs: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise InvalidConfigError("--tls-cert and --tls-key go together",
                                     expected="both or neither")
        if self.user is not None and self.password is None:
            raise InvalidConfigError(
                f"--user needs a password: --password-file or ${PASSWORD_ENV}")

    def ssl_domain(self, url: str) -> Any:
        """proton's client SSLDomain for ``url``: None for a plain ``amqp://`` URL without a CA
        or certificate."""
        if not url.startswith("amqps://") and self.ca is None and self.cert is None:
            return None
        from proton import SSLDomain

        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if self.ca is not None:
            domain.set_trusted_ca_db(self.ca)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, self.ca)
        if self.cert is not None:
            domain.set_credentials(self.cert, self.key or "", None)
        return domain

    def url(self, url: str) -> str:
        """``url`` with the ``amqps`` scheme when TLS is on and it names none
        (InvalidConfigError for an ``amqp://`` URL with a CA or certificate: proton would
        drop TLS for it without a word)."""
        if self.ca is None and self.cert is None:
            return url
        if url.startswith("amqp://"):
            raise InvalidConfigError(f"{url} is plaintext but a TLS CA or certificate is "
                                     f"given: use amqps://", expected="amqps://", got=url)
        return url if "://" in url else f"amqps://{url}"

    def connect_kwargs(self, url: str) -> dict[str, Any]:
        """The keyword arguments of ``Container.connect`` for ``url``."""
        kwargs: dict[str, Any] = {}
        domain = self.ssl_domain(self.url(url))
        if domain is not None:
            kwargs["ssl_domain"] = domain
        if self.user is not None:
            kwargs["user"] = self.user
            kwargs["password"] = self.password
        if self.mechs is not None:
            kwargs["allowed_mechs"] = self.mechs
        elif self.user is None and self.cert is not None:
            kwargs["allowed_mechs"] = "EXTERNAL"
        elif self.user is not None and self.cert is None:
            # proton would pick EXTERNAL when a server offers it (RabbitMQ with its
            # auth_mechanism_ssl plugin), and fail without a certificate to show
            kwargs["allowed_mechs"] = PASSWORD_MECHS
        return kwargs

    @classmethod
    def from_args(cls, args: Any, prefix: str = "") -> ClientSecurity:
        """From the client options (:func:`seqrepair.amqp.commands.add_client_security`, with
        its ``prefix``): the password from ``--password-file``, else ``$SEQREPAIR_PASSWORD``."""
        key = prefix.replace("-", "_")

        def arg(name: str) -> Any:
            return getattr(args, key + name, None)

        password = None
        if arg("password_file"):
            try:
                password = Path(arg("password_file")).read_text().rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise InvalidConfigError(f"--{prefix}password-file: {exc}",
                                         got=arg("password_file")) from None
        elif arg("user") is not None:
            password = os.environ.get(PASSWORD_ENV)
        return cls(ca=arg("tls_ca"), cert=arg("tls_cert"), key=arg("tls_key"), user=arg("user"),
                   password=password, mechs=arg("sasl_mechs"))


NO_CLIENT_SECURITY = ClientSecurity()
