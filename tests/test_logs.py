"""The library is silent unless the application configures logging (seqrepair/logs.py).

Each case runs in a fresh interpreter, since structlog's configuration is process-wide: an
application that journals and publishes through the library, configured three ways.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Starts a private redis-server and publishes through the journal's Publisher: both log at
# info ("embedded_redis.started", "publisher.started"), as the AMQP clients log "connected".
APP = textwrap.dedent("""
    import sys
    import tempfile
    from seqrepair.journal import EmbeddedRedis, Journal, Publisher

    {configure}
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis(data_dir=folder) as server:
        with Journal.from_url(server.url) as journal:
            pub = Publisher("feed.a", journal, bits=16, transport=lambda p: None)
            pub.publish("/t/x", {{"i": 1}}, "image")
            pub.flush()
    print("APP-OUTPUT")
""")


def run_app(configure: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", APP.format(configure=configure)],
        capture_output=True, text=True, timeout=60, check=True,
    )


@pytest.mark.redis
def test_silent_when_the_application_configures_nothing() -> None:
    done = run_app("")
    assert done.stdout == "APP-OUTPUT\n"
    assert done.stderr == ""


@pytest.mark.redis
def test_stdlib_logging_shows_the_events() -> None:
    done = run_app("import logging; logging.basicConfig(level=logging.INFO, stream=sys.stderr)")
    assert done.stdout == "APP-OUTPUT\n"
    assert "INFO:seqrepair.journal.publisher:publisher.started" in done.stderr
    assert "source='feed.a'" in done.stderr  # the bound fields come along


@pytest.mark.redis
def test_stdlib_logging_below_its_level_shows_nothing() -> None:
    done = run_app("import logging; logging.basicConfig(level=logging.WARNING)")
    assert done.stdout == "APP-OUTPUT\n"
    assert done.stderr == ""


@pytest.mark.redis
def test_structlog_configured_by_the_application_takes_them() -> None:
    done = run_app(textwrap.dedent("""
        import structlog
        structlog.configure(
            processors=[structlog.processors.JSONRenderer()],
            logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
        )
    """))
    assert done.stdout == "APP-OUTPUT\n"
    assert '"event": "publisher.started"' in done.stderr
    assert '"source": "feed.a"' in done.stderr


@pytest.mark.parametrize("bound", [False, True])
def test_capture_logs_sees_library_events(bound: bool) -> None:
    import structlog

    from seqrepair.logs import get_logger

    log = get_logger("seqrepair.test")
    if bound:
        log = log.bind(link="L")
    with structlog.testing.capture_logs() as logs:
        log.warning("something", n=1)
    assert logs == [{"event": "something", "n": 1, "log_level": "warning",
                     **({"link": "L"} if bound else {})}]
