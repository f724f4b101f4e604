"""The source query (XEP-0040 §4) before subscribing: what does a component offer?

A subscriber that has not attached a data link yet asks over a reply-only link
(``$link/NAME``, WIRE.md): it learns the link bit width, heartbeat interval, maximum gap
range, retention and publish types, and can then subscribe with matching settings.
"""

from __future__ import annotations

import uuid

from proton import Message, ProtonException
from proton.utils import BlockingConnection

from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.errors import ConnectionFailedError, MalformedMessageError
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity
from seqrepair.amqp.wire.technical import Capabilities, CapabilitiesRequest
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS, LINK_PREFIX
from seqrepair.core.errors import SeqRepairError


def query_capabilities(url: str, *, timeout: float = 10.0,
                       security: ClientSecurity = NO_CLIENT_SECURITY) -> Capabilities:
    """Ask the component at ``url`` (``host:port`` or ``amqp://...``) for its capabilities.

    Opens a connection of its own and closes it before returning. Raises
    :class:`ConnectionFailedError` when the component cannot be reached, refuses the query or
    does not answer within ``timeout`` seconds, and :class:`MalformedMessageError` when the
    answer is not a CAPABILITIES message. ``security``: TLS and SASL (WIRE.md
    "Authentication").
    """
    name = "caps-" + uuid.uuid4().hex[:12]
    try:
        conn = BlockingConnection(security.url(url), timeout=timeout, reconnect=False,
                                  **security.connect_kwargs(url))
    except (ProtonException, OSError) as exc:
        raise ConnectionFailedError(f"cannot reach {url}: {exc}", got=url) from exc
    try:
        answers = conn.create_receiver(LINK_PREFIX + name, name=name, credit=1)
        control = conn.create_sender(CONTROL_ADDRESS)
        request = encode(CapabilitiesRequest())
        request.id = name
        request.reply_to = LINK_PREFIX + name
        control.send(request, timeout=timeout)
        answer = answers.receive(timeout=timeout)  # sent settled: nothing to accept
    except ProtonException as exc:  # a timeout, a refused link or a lost connection
        raise ConnectionFailedError(f"no capabilities from {url}: {exc}", got=url) from exc
    finally:
        conn.close()
    return _capabilities_in(answer)


def _capabilities_in(answer: Message) -> Capabilities:
    try:
        decoded = Decoder().decode(answer)
    except SeqRepairError as exc:
        raise MalformedMessageError(f"undecodable answer: {exc}", got=answer.properties) from exc
    found = [item for item in decoded if isinstance(item, Capabilities)]
    if len(found) != 1:
        raise MalformedMessageError(
            "the answer to a source query is one CAPABILITIES message",
            expected="CAPABILITIES", got=answer.properties,
        )
    return found[0]
