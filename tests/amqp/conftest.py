"""Fixtures: a private redis-server, free ports, and the component as a real process."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from polling import wait_for as wait_for  # re-exported: the amqp tests import it from here

from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis, _die_with_parent
from seqrepair.journal.server import free_port as _free_port

if TYPE_CHECKING:
    from .inthread import HereComponent

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nobody listens on right now, outside the kernel's ephemeral range (no
    outgoing connection takes it before the process it is meant for listens on it)."""
    return _free_port()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


BIND_ATTEMPTS = 3
"""Starts of a process whose port someone else took before it listened."""
_COMPONENTS = itertools.count(1)


class FreePort:
    """A port for a child process's option, found free when made (:func:`free_port`);
    ``str()`` formats it with ``template`` (``127.0.0.1:PORT`` by default, ``{}`` alone for the
    bare number). Between the draw and the child's bind another process may take it: a
    :class:`ComponentProcess` given one among its arguments (or as ``listen``), and
    :func:`start_binding`'s callers, draw it again and start the child again then."""

    def __init__(self, template: str = "127.0.0.1:{}") -> None:
        self.template = template
        self.number = free_port()

    def redraw(self) -> None:
        """Another port, found free now."""
        self.number = free_port()

    def __str__(self) -> str:
        return self.template.format(self.number)


def start_binding(start_once: Callable[[], bool], log_text: Callable[[], str],
                  ports: Sequence[FreePort], *, what: str, sleep_first: bool = False) -> None:
    """Start a child process that binds ``ports`` (and maybe others), by ``start_once`` (True
    once it is ready, False when it exited first): when it exited saying "Address already in
    use" (another process took a port between its draw and the bind), start it again, up to
    :data:`BIND_ATTEMPTS` times, with ``ports`` drawn again; ``sleep_first`` (a port that
    cannot be drawn again is bound too, one its peers know: a restart) waits a moment first.
    RuntimeError with its log when it exits for another reason, or every attempt failed."""
    for attempt in range(1, BIND_ATTEMPTS + 1):
        if start_once():
            return
        log = log_text()
        if "Address already in use" not in log or attempt == BIND_ATTEMPTS:
            raise RuntimeError(f"{what} exited: {log}")
        for port in ports:
            port.redraw()
        if sleep_first:
            time.sleep(0.5 * attempt)

AUTH_OPTIONS = frozenset({"--credentials", "--client-cert", "--tls-cert", "--allow-anonymous"})


def counters_of(stopped: str) -> dict[str, int]:
    """The counters of a process's ``... stopped`` log line (``name=N`` each)."""
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", stopped)}


class ComponentProcess:
    """``seqrepair serve`` in a child process; :meth:`kill` is SIGKILL, :meth:`start` again
    restarts it on the same port. Anonymous (``--allow-anonymous``) unless ``args`` name an
    authentication option.

    Its port is found free before the process binds it: if someone took it meanwhile (the
    component exits with "Address already in use"), :meth:`start` tries again, on a new port
    if the test has not seen :attr:`url` yet (or gave it as a :class:`FreePort`, ``listen``),
    else on the same one a moment later; so with the :class:`FreePort` among ``args`` (a
    ``--rest`` port), drawn again before it first listened (the test reads them once it
    started), the same ports on a restart."""

    kind = "component"
    """What it is, in its file names and errors."""

    def __init__(self, redis_url: str, tmp: Path, *args: str | FreePort,
                 listen: FreePort | None = None) -> None:
        self.redis_url = redis_url
        self._port = listen if listen is not None else FreePort()
        self._port_given = listen is not None  # the test reads it once it started
        self._url = str(self._port)
        self._url_seen = False
        self._url_set = False
        self._listened = False
        self.args = args
        self.secured = bool(AUTH_OPTIONS.intersection(args))
        self.tmp = tmp
        # its own file names: several components may share a folder, and the ready file of
        # another one (or of an earlier one) must not pass for this one's
        self.files = f"{self.kind}-{next(_COMPONENTS)}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0  # times it came up (a start retried for its port counts once)
        self._attempts = 0  # processes started, each with its own log and ready files

    @property
    def url(self) -> str:
        """``127.0.0.1:PORT``, where it listens."""
        if self.proc is None:  # the test may hand it out before the first start
            self._url_seen = True
        return self._url

    @url.setter
    def url(self, url: str) -> None:
        self._url = url
        self._url_seen = self._url_set = True

    @property
    def _port_redrawn(self) -> bool:
        """Whether a start retried for its port draws its listen port again: before it first
        listened, unless the test set it or saw it (a :class:`FreePort` it gave, it reads
        once started)."""
        return not self._listened and not self._url_set and (
            self._port_given or not self._url_seen)

    def start(self) -> ComponentProcess:
        ports = [] if self._listened else [a for a in self.args if isinstance(a, FreePort)]
        if self._port_redrawn:
            ports.append(self._port)
        start_binding(self._start_once, self.log_text, ports, what=self.kind,
                      sleep_first=not self._port_redrawn)
        return self

    def command(self, ready: Path) -> list[str]:
        """The command line that starts it, writing ``ready`` once it listens."""
        return [sys.executable, "-m", "seqrepair.cli", "--log-level", "info", "serve",
                "--url", self._url, "--redis-url", self.redis_url, "--ready-file", str(ready),
                *(() if self.secured else ("--allow-anonymous",)),
                *(str(arg) for arg in self.args)]

    def _start_once(self) -> bool:
        """Start the process; True once it is ready, False if it exited first."""
        if self._port_redrawn:
            self._url = str(self._port)  # drawn again after a port taken
        self._attempts += 1
        ready = self.tmp / f"{self.files}-ready-{self._attempts}"
        log = open(self.tmp / f"{self.files}-{self._attempts}.log", "wb")  # noqa: SIM115
        # dies with the test process however it ends: an interrupted run leaves no component
        # listening and spending CPU on a machine other runs share
        self.proc = subprocess.Popen(self.command(ready), env=_env(), stdout=log,
                                     stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent if sys.platform == "linux"
                                     else None)
        deadline = time.monotonic() + 60  # a ceiling: a loaded 2-core machine can be slow
        while not ready.exists():
            if self.proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.kind} did not start: {self.log_text()}")
            time.sleep(0.02)
        self._listened = True
        self.starts += 1
        return True

    def log_text(self) -> str:
        return (self.tmp / f"{self.files}-{self._attempts}.log").read_text(errors="replace")

    def stopped_lines(self) -> list[str]:
        """Stop it (if it still runs): the ``component stopped`` (``relay stopped``: its
        :attr:`kind`) lines of its log, with its counters (none when it was killed or failed
        first)."""
        self.stop()
        return [line for line in self.log_text().splitlines()
                if f"{self.kind} stopped" in line]

    def stop_counters(self) -> dict[str, int]:
        """Stop it (if it still runs): the counters of its ``component stopped`` (``relay
        stopped``) log line."""
        stopped = self.stopped_lines()
        assert stopped, self.log_text()[-2000:]
        return counters_of(stopped[0])

    def hang_up(self, event: str, times: int) -> None:
        """Send it SIGHUP (it reads its policy and tokens again) and wait until its log has
        ``event`` ``times`` times."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGHUP)
        assert wait_for(lambda: self.log_text().count(event) >= times, 10), self.log_text()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                # a ceiling: its stop on a loaded machine can take seconds, and a component
                # killed first logs no "component stopped" line (the counters tests read)
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def redis_url() -> Iterator[str]:
    with EmbeddedRedis(appendfsync="always") as server:
        yield server.url


@pytest.fixture
def journal(redis_url: str) -> Iterator[Journal]:
    """A :class:`Journal` on the test's private redis-server (:func:`redis_url`)."""
    j = Journal.from_url(redis_url)
    yield j
    j.close()


def _redis_urls(count: int) -> Iterator[list[str]]:
    """``count`` private redis-servers (as for :func:`redis_url`), stopped after: their URLs."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(EmbeddedRedis(appendfsync="always")).url
               for _ in range(count)]


@pytest.fixture
def redises() -> Iterator[list[str]]:
    """Three private redis-servers (an origin's, a relay's, a third's): their URLs."""
    yield from _redis_urls(3)


@pytest.fixture
def redis_pair() -> Iterator[list[str]]:
    """Two private redis-servers (an origin's and a relay's): their URLs."""
    yield from _redis_urls(2)


@pytest.fixture
def component(
    redis_url: str, tmp_path: Path
) -> Iterator[Callable[..., ComponentProcess]]:
    started: list[ComponentProcess] = []

    def make(*args: str | FreePort) -> ComponentProcess:
        proc = ComponentProcess(redis_url, tmp_path, *args).start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


# ------------------------------------------------------------------------------------------
# a private RabbitMQ broker with the AMQP 1.0 plugin (brokered mode)

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


def _install_rabbitmq() -> str | None:
    """Install Debian's rabbitmq-server when missing; None when ready, else why not."""
    if (RABBITMQ_BIN / "rabbitmq-server").exists():
        return None
    if os.geteuid() != 0:
        return "rabbitmq-server is not installed and the tests do not run as root to install it"
    if shutil.which("apt-get") is None:
        return "rabbitmq-server is not installed and there is no apt-get to install it"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(["apt-get", "install", "-y", "-q", "rabbitmq-server"], env=env,
                       check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        out = getattr(exc, "stderr", b"") or b""
        return f"apt-get install rabbitmq-server failed: {exc} {out.decode(errors='replace')}"
    # the package may have started a system broker: stop it so nothing is left running
    if shutil.which("service") is not None:
        subprocess.run(["service", "rabbitmq-server", "stop"], capture_output=True, timeout=60,
                       check=False)
    else:  # pragma: no cover - no service command on this machine
        # the system wrapper runs as the rabbitmq user with the system node's settings
        subprocess.run(["/usr/sbin/rabbitmqctl", "stop"], capture_output=True, timeout=60,
                       check=False)
    if not (RABBITMQ_BIN / "rabbitmq-server").exists():
        return f"apt-get installed rabbitmq-server but {RABBITMQ_BIN}/rabbitmq-server is missing"
    return None


class RabbitBroker:
    """RabbitMQ with ``rabbitmq_amqp1_0`` on private ports, node name, epmd and directories.

    ``url`` is ``amqp://127.0.0.1:PORT`` (AMQP 1.0 on the AMQP port, anonymous login as guest).
    ``conf`` adds lines to its ``rabbitmq.conf`` (a TLS listener, users: ``test_brokered_tls``).
    """

    def __init__(self, base: Path, conf: str = "") -> None:
        self.base = base
        self.port = free_port()
        self.epmd_port = free_port()
        self.url = f"amqp://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        (base / "enabled_plugins").write_text("[rabbitmq_amqp1_0].\n")
        (base / "rabbitmq.conf").write_text(
            f"loopback_users = none\nlisteners.tcp.default = 127.0.0.1:{self.port}\n{conf}"
        )
        self.env = dict(
            os.environ,
            HOME=str(base),  # the Erlang cookie lives here, for the server and rabbitmqctl
            RABBITMQ_NODENAME=f"seqrepair-test-{os.getpid()}-{base.name}@localhost",
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(free_port()),
            ERL_EPMD_PORT=str(self.epmd_port),
            RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
            RABBITMQ_LOG_BASE=str(base / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(base / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(base / "rabbitmq"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(base / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(base / "rabbitmq-env.conf"),
            RABBITMQ_PID_FILE=str(base / "rabbitmq.pid"),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(base / "plugins-expand"),
        )

    def start(self, timeout: float = 60.0) -> RabbitBroker:
        log = open(self.base / "server.out", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")], env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited: {self.log_text()}")
            # it prints "Starting broker... completed with 1 plugins." when ready
            if "completed with" in self.log_text():
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"rabbitmq-server did not start: {self.log_text()}")
            time.sleep(0.1)

    def log_text(self) -> str:
        return (self.base / "server.out").read_text(errors="replace")

    def stop(self) -> None:
        """rabbitmqctl stop, then the process group and our own epmd, whatever is left."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            subprocess.run([str(RABBITMQ_BIN / "rabbitmqctl"), "stop"], env=self.env,
                           capture_output=True, timeout=60, check=False)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        subprocess.run([epmd, "-kill"], env=self.env, capture_output=True, timeout=10,
                       check=False)
        self.proc = None


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitBroker]:
    """A private RabbitMQ broker for the session (installed via apt-get when missing)."""
    # Under xdist both workers may reach a broker test while it is missing: one installs, the
    # other waits here (its apt-get would fail on dpkg's lock and skip its broker tests, or it
    # would see rabbitmq-server unpacked but not yet set up). The lock is in the run's temp
    # root, which every worker of the run shares.
    lock = tmp_path_factory.getbasetemp().parent / "rabbitmq-install.lock"
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        why = _install_rabbitmq()
    if why is not None:
        pytest.skip(f"brokered mode needs RabbitMQ: {why}")
    broker = RabbitBroker(tmp_path_factory.mktemp("rabbitmq")).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def here(redis_url: str) -> Iterator[Callable[..., HereComponent]]:
    """Components in threads of the test (``ComponentConfig`` settings), stopped at its end."""
    from .inthread import HereComponent

    started: list[HereComponent] = []

    def make(**settings: Any) -> HereComponent:
        comp = HereComponent(redis_url, **settings).start()
        started.append(comp)
        return comp

    yield make
    for comp in started:
        comp.shut()


def start_after(url: str, address: str, timeout: float = 20, **identity: Any) -> set[str]:
    """The sources a fresh subscriber link on ``address`` is told of in its attach's
    ``seqrepair-start-after`` (the sources it may learn of), as the connection's principal
    (``identity``: ``amqp_identity(...)``'s keywords) or anonymous."""
    from proton import symbol
    from proton.utils import BlockingConnection

    conn = BlockingConnection(url, timeout=timeout, **identity)
    try:
        receiver = conn.create_receiver(address, name=f"views-{uuid.uuid4().hex}")
        props = dict(receiver.link.remote_properties or {})
        return {str(k) for k in props[symbol("seqrepair-start-after")]}
    finally:
        conn.close()
