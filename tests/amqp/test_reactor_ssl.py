"""The containers seqrepair runs build proton's default TLS domains only when one is used
(issue 26: the two OpenSSL contexts proton builds in every ``Container`` cost 20-40 ms of CPU
at each client's start, which a catch-up is timed from)."""

from __future__ import annotations

from proton import SSLDomain
from proton.handlers import MessagingHandler
from proton.reactor import Container

from seqrepair.amqp.wire.reactor import GuardedIOHandler, LazySSLContainer, make_container


def test_the_container_sets_what_protons_sets() -> None:
    ours = make_container(MessagingHandler())
    theirs = Container(MessagingHandler(), global_handler=GuardedIOHandler())
    assert isinstance(ours, LazySSLContainer)
    assert set(vars(ours)) == set(vars(theirs))
    for name in ("trigger", "allow_insecure_mechs", "allowed_mechs", "sasl_enabled", "user",
                 "password"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert type(ours.global_handler) is type(theirs.global_handler)
    assert ours.container_id
    assert ours.container_id != theirs.container_id


def test_its_default_domains_are_built_when_used() -> None:
    container = make_container(MessagingHandler())
    config = container.ssl
    assert config._config is None
    client = container.ssl.client  # what a connect without ssl_domain reads: nothing built
    assert config._config is None
    assert client._domain is not None  # read as proton reads it: now built, a real domain
    assert isinstance(config._config.client, SSLDomain)
    assert container.ssl.server._domain is config._config.server._domain
