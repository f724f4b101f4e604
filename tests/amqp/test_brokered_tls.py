"""Brokered mode over TLS with a password (issue 25): ``seqrepair publish --broker amqps://``
and ``seqrepair subscribe --broker amqps://`` against a private RabbitMQ with a TLS listener
and a user of its own, authenticated with SASL PLAIN (what RabbitMQ offers; proton sends it
only inside TLS). Real parts only: certificates made by ``openssl`` (:mod:`.pki`), RabbitMQ,
redis-server and the CLI as processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqrepair.amqp.wire.security import PASSWORD_ENV

from .conftest import RabbitBroker, _env, _install_rabbitmq, free_port, wait_for
from .pki import Pki

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

USER = "feeder"
PASSWORD = "feeder-secret-7"
PATIENCE = 8
"""Seconds a client tries: RabbitMQ answers a failed login only after a pause (~3 s)."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"), with_credentials=False)


@pytest.fixture(scope="module")
def tls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ``amqps://`` URL of RabbitMQ with a TLS listener (the test CA's ``localhost``
    certificate) and one user, ``feeder``, in place of ``guest``: anonymous logins map to
    nobody."""
    why = _install_rabbitmq()
    if why is not None:
        pytest.skip(f"brokered mode needs RabbitMQ: {why}")
    tls_port = free_port()
    conf = (f"listeners.ssl.default = 127.0.0.1:{tls_port}\n"
            f"ssl_options.cacertfile = {pki.pem('ca')}\n"
            f"ssl_options.certfile = {pki.pem('server')}\n"
            f"ssl_options.keyfile = {pki.key('server')}\n"
            "ssl_options.verify = verify_peer\n"
            "ssl_options.fail_if_no_peer_cert = false\n"
            f"default_user = {USER}\ndefault_pass = {PASSWORD}\n"
            "amqp1_0.default_user = none\n"
            # a client certificate logs in as the user its common name names (EXTERNAL)
            "auth_mechanisms.1 = PLAIN\nauth_mechanisms.2 = EXTERNAL\n"
            "ssl_cert_login_from = common_name\n")
    broker = RabbitBroker(tmp_path_factory.mktemp("rabbitmq-tls"), conf)
    (broker.base / "enabled_plugins").write_text(
        "[rabbitmq_amqp1_0,rabbitmq_auth_mechanism_ssl].\n")
    broker.start()
    try:
        yield f"amqps://localhost:{tls_port}"  # the name the server certificate carries
    finally:
        broker.stop()


def _cli(*args: str, env: dict[str, str] | None = None,
         timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seqrepair.cli", *args], env=env or _env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


def _errors(stderr: str) -> list[str]:
    """The lines the command said about itself (not its log or its statistics)."""
    return [line for line in stderr.splitlines() if line.startswith("seqrepair ")]


def _password_file(folder: Path, password: str) -> str:
    path = folder / f"password-{uuid.uuid4().hex[:6]}"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return str(path)


def test_publish_and_subscribe_through_a_tls_broker_with_a_password(
    tls_broker: str, pki: Pki, redis_url: str, tmp_path: Path
) -> None:
    url = tls_broker
    address = f"/queue/seqrepair-tls-{uuid.uuid4().hex[:12]}"
    out = tmp_path / "delivered.jsonl"
    n = 200
    # the subscriber reads its password from the environment, the publisher from a file
    sub_env = dict(_env(), **{PASSWORD_ENV: PASSWORD})
    sub_log = open(tmp_path / "sub.log", "w")  # noqa: SIM115
    sub = subprocess.Popen(
        [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "subscribe",
         "--broker", url, "--address", address, "--redis-url", redis_url, "--output", str(out),
         "--heartbeat", "0.3", "--count", str(n), "--duration", "60",
         "--tls-ca", pki.pem("ca"), "--user", USER],
        env=sub_env, stdout=sub_log, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: "attached to broker" in (tmp_path / "sub.log").read_text(), 30), (
            (tmp_path / "sub.log").read_text())
        result = _cli("publish", "--broker", url, "--address", address, "--redis-url",
                      redis_url, "--source", "feed.tls", "--count", str(n), "--batch", "20",
                      "--tls-ca", pki.pem("ca"), "--user", USER,
                      "--password-file", _password_file(tmp_path, PASSWORD))
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report["published"] == n
        assert report["accepted"] == n
        assert sub.wait(60) == 0, (tmp_path / "sub.log").read_text()
    finally:
        if sub.poll() is None:
            sub.terminate()
            sub.wait(10)
        sub_log.close()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["source_seq"] for r in records] == list(range(1, n + 1))
    assert {r["source"] for r in records} == {"feed.tls"}
    assert [r["fields"]["n"] for r in records] == list(range(n))


def test_a_wrong_password_is_refused_with_one_line(
    tls_broker: str, pki: Pki, redis_url: str, tmp_path: Path
) -> None:
    url = tls_broker
    address = f"/queue/seqrepair-tls-{uuid.uuid4().hex[:12]}"
    security = ("--tls-ca", pki.pem("ca"), "--user", USER,
                "--password-file", _password_file(tmp_path, "not-" + PASSWORD))
    pub = _cli("publish", "--broker", url, "--address", address, "--redis-url", redis_url,
               "--source", "feed.bad", "--count", "5", "--timeout", str(PATIENCE), *security)
    assert pub.returncode != 0
    [line] = _errors(pub.stderr)
    assert line.startswith(
        f"seqrepair publish: not every publication was accepted in {PATIENCE} s: "
        f"cannot reach the broker at {url} (amqp:unauthorized-access"), line
    sub = _cli("subscribe", "--broker", url, "--address", address, "--redis-url", redis_url,
               "--duration", str(PATIENCE), *security)
    assert sub.returncode != 0
    [line] = _errors(sub.stderr)
    assert line.startswith(f"seqrepair subscribe: never connected to the broker at {url} "
                           "(amqp:unauthorized-access"), line


def test_an_untrusted_ca_fails_with_one_line(
    tls_broker: str, pki: Pki, redis_url: str, tmp_path: Path
) -> None:
    url = tls_broker
    address = f"/queue/seqrepair-tls-{uuid.uuid4().hex[:12]}"
    security = ("--tls-ca", pki.pem("other-ca"), "--user", USER,
                "--password-file", _password_file(tmp_path, PASSWORD))
    pub = _cli("publish", "--broker", url, "--address", address, "--redis-url", redis_url,
               "--source", "feed.untrusted", "--count", "5", "--timeout", str(PATIENCE), *security)
    assert pub.returncode != 0
    [line] = _errors(pub.stderr)
    assert f"cannot reach the broker at {url} (" in line, line
    assert "certificate verify failed" in line, line
    sub = _cli("subscribe", "--broker", url, "--address", address, "--redis-url", redis_url,
               "--duration", str(PATIENCE), *security)
    assert sub.returncode != 0
    [line] = _errors(sub.stderr)
    assert f"never connected to the broker at {url} (" in line, line
    assert "certificate verify failed" in line, line


def test_a_client_certificate_logs_in_with_external(
    tls_broker: str, pki: Pki, redis_url: str, tmp_path: Path
) -> None:
    """No password: the certificate (``CN=feeder``, the test CA's) is the login."""
    pki.person(USER)
    address = f"/queue/seqrepair-tls-{uuid.uuid4().hex[:12]}"
    security = ("--tls-ca", pki.pem("ca"), "--tls-cert", pki.pem(USER),
                "--tls-key", pki.key(USER))
    pub = _cli("publish", "--broker", tls_broker, "--address", address, "--redis-url",
               redis_url, "--source", "feed.cert", "--count", "5", "--timeout", str(PATIENCE),
               *security)
    assert pub.returncode == 0, pub.stderr
    assert json.loads(pub.stdout.strip().splitlines()[-1])["accepted"] == 5
