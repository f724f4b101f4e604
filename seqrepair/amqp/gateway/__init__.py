"""The gateway: an AMQP front for a component that relays its clients' links upstream and routes
responses back across gateways: the proton adapter and its links (:mod:`.gateway`), the relay
bookkeeping (:mod:`.relays`) and its proton side (:mod:`.relaylinks`), requests forwarded and
answers routed back (:mod:`.requests`, the pure rewriting in :mod:`.rewrite`), publishers carried
upstream (:mod:`.publish`), and ``seqrepair gateway``'s body (:mod:`.gatewaycmd`).

It may import :mod:`seqrepair.amqp.wire` and :mod:`seqrepair.amqp.client`; never the component.
"""

from seqrepair.amqp.gateway.gateway import Gateway

__all__ = ["Gateway"]
