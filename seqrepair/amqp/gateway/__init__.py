"""The gateway: an AMQP front for a component that relays its clients' links upstream and routes
responses back across gateways (:mod:`.gateway`, :mod:`.relays`, :mod:`.publish`,
:mod:`.rewrite`), and ``seqrepair gateway``'s body (:mod:`.gatewaycmd`).

It may import :mod:`seqrepair.amqp.wire` and :mod:`seqrepair.amqp.client`; never the component.
"""

from seqrepair.amqp.gateway.gateway import Gateway

__all__ = ["Gateway"]
