"""Server-side permission grants: the component decides what a subscriber may see.

A subscriber's permission tokens (XEP-0040 §5.1) come from the component's configuration,
never from the client. ``seqrepair serve --grant PRINCIPAL=TOKENS[;deny=TOKENS]`` gives one
principal its tokens (comma-separated; ``*`` grants every token) and deny exceptions;
``--default-grant TOKENS[;deny=TOKENS]`` is what every other principal gets (by default no
tokens: only publications without a permission token are visible).

The principal of a connection is the identity its transport proved (SASL SCRAM's user, or
the client certificate's subject with EXTERNAL), ``anonymous`` when the listener let it in
without one (:func:`~seqrepair.amqp.wire.security.principal_of`); never the container id the
client claims (WIRE.md, "Authentication").

The link property ``seqrepair-permtokens`` may only *narrow* the grant (a subscriber that
wants less than it may see); a token it names that the grant lacks is ignored. Deny exceptions
always come from the server. Live delivery and repair (gap fills, source replays) use the one
:class:`~seqrepair.core.permissions.Entitlement` built here, so repair cannot leak either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.amqp.wire.security import principal_of as principal_of  # re-exported
from seqrepair.core.filters import BasicFilter
from seqrepair.core.permissions import ANY_TOKEN, Entitlement
from seqrepair.core.topics import TopicPattern


class InvalidGrantError(AmqpAdapterError):
    """A ``--grant`` / ``--default-grant`` specification that cannot be read."""

    condition = "amqp:invalid-field"


def _token_list(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


@attrs.frozen
class Grant:
    """The tokens one principal is granted, and the tokens it is denied whatever the grant."""

    tokens: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, spec: str) -> Grant:
        """``TOKENS[;deny=TOKENS]``: ``"gold,silver;deny=secret"``, ``"*"``, ``""``."""
        tokens, sep, rest = spec.partition(";")
        deny = frozenset[str]()
        if sep:
            key, eq, value = rest.partition("=")
            if key.strip() != "deny" or not eq:
                raise InvalidGrantError(
                    f"expected TOKENS[;deny=TOKENS], got {spec!r}",
                    expected="TOKENS[;deny=TOKENS]", got=spec,
                )
            deny = _token_list(value)
        return cls(tokens=_token_list(tokens), deny=deny)


def parse_grant(spec: str) -> tuple[str, Grant]:
    """``PRINCIPAL=TOKENS[;deny=TOKENS]`` as ``(principal, Grant)``. A token holds no ``=``
    and the deny part starts at the first ``;``, so a principal may hold ``=``: a certificate
    subject such as ``O=Example,CN=alice``."""
    head, semi, deny = spec.partition(";")
    principal, eq, tokens = head.rpartition("=")
    rest = tokens + semi + deny
    if not eq or not principal.strip():
        raise InvalidGrantError(
            f"expected PRINCIPAL=TOKENS[;deny=TOKENS], got {spec!r}",
            expected="PRINCIPAL=TOKENS[;deny=TOKENS]", got=spec,
        )
    try:
        return principal.strip(), Grant.parse(rest)
    except InvalidGrantError as exc:
        raise InvalidGrantError(
            f"expected PRINCIPAL=TOKENS[;deny=TOKENS], got {spec!r}",
            expected="PRINCIPAL=TOKENS[;deny=TOKENS]", got=spec,
        ) from exc


def narrow(granted: frozenset[str], claimed: Iterable[str] | None) -> frozenset[str]:
    """The tokens of ``granted`` a subscriber asked for (``claimed``; None: all of them).

    Never more than ``granted``: a claimed token outside it is ignored, and a claimed ``*``
    means "everything granted". Only a granted ``*`` lets specific claimed tokens through.
    """
    if claimed is None:
        return granted
    wanted = frozenset(claimed)
    if ANY_TOKEN in wanted:
        return granted
    if ANY_TOKEN in granted:
        return wanted
    return granted & wanted


@attrs.frozen
class GrantTable:
    """Grants by principal, with a default for everyone else."""

    grants: Mapping[str, Grant] = attrs.field(factory=dict)
    default: Grant = Grant()

    @classmethod
    def parse(cls, specs: Iterable[str], default: str = "") -> GrantTable:
        """From ``--grant`` specifications (a principal named twice: the last wins)."""
        return cls(grants=dict(parse_grant(spec) for spec in specs),
                   default=Grant.parse(default))

    def grant_for(self, principal: str) -> Grant:
        """What ``principal`` is granted."""
        return self.grants.get(principal, self.default)

    def entitlement(
        self, principal: str, topics: Iterable[TopicPattern], claimed: Iterable[str] | None,
        filters: Sequence[BasicFilter] = (), exclude: Sequence[TopicPattern] = (),
        denied: Iterable[str] = (),
    ) -> Entitlement:
        r"""The entitlement of a subscriber link: the principal's grant, narrowed by ``claimed``
        and by the tokens it asks to be ``denied`` (added to the grant's deny exceptions: only
        narrows), with the subscription's ``filters`` and the topics the access policy
        ``exclude``\ s."""
        grant = self.grant_for(principal)
        return Entitlement(topics=tuple(topics), grant=narrow(grant.tokens, claimed),
                           deny=grant.deny | frozenset(denied), filters=filters,
                           exclude=exclude)
