"""Refusing an attach, and telling a refusal, as AMQP 1.0 §2.6.3 says: the responding end
attaches with a null source (when it is the sender) or a null target (the receiver), then
detaches with the reason.

The null terminus is what says "refused" in the attach itself. The two frames usually arrive
in one read, but nothing makes them: a component that writes a busy connection's transfers at
once (:func:`~seqrepair.amqp.wire.reactor.write_now`, another link's) can send the attach
before the detach is made. A peer that saw only an attach with a source took the link as open
and, relaying it (a gateway), answered its own client with an open link before the refusal
came. So every end that refuses nulls its terminus (:func:`refuse_link`, :func:`null_terminus`),
and every end that waits for an answer takes a null terminus as the refusal whose detach
is still to come (:func:`attach_refused`). An end that takes a link answers with its
terminus's address: proton sends a source without one (not dynamic) as null, a refusal.
"""

from __future__ import annotations

from typing import Any

from proton import Condition, Endpoint, Terminus


def null_terminus(link: Any) -> None:
    """Make the attach ``link`` sends a refusal's: its own terminus (the source of a sender,
    the target of a receiver) null. Before the attach is written: in ``on_link_opening``."""
    (link.source if link.is_sender else link.target).type = Terminus.UNSPECIFIED


def attach_refused(link: Any) -> bool:
    """Whether the peer's answer to ``link``'s attach is a refusal: detached already, or
    attached with a null terminus (the source of a sender, the target of a receiver), its
    detach to follow. Only once the peer's attach came (``on_link_opened``)."""
    if link.state & Endpoint.REMOTE_CLOSED:
        return True
    terminus = link.remote_source if link.is_receiver else link.remote_target
    return bool(terminus.type == Terminus.UNSPECIFIED)


def refuse_link(link: Any, condition: Condition | None) -> None:
    """End ``link`` with ``condition`` (None: without one). One not attached yet is refused:
    attached with a null terminus, then detached, both in the same write."""
    if link.state & Endpoint.LOCAL_CLOSED:
        return
    if link.state & Endpoint.LOCAL_UNINIT:
        null_terminus(link)
        link.open()
    if condition is not None:
        link.condition = condition
    link.close()


__all__ = ["attach_refused", "null_terminus", "refuse_link"]
