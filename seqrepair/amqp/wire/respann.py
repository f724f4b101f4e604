"""The names of the AMQP response-annotation mechanism (``amqp-response-annotations.txt``):
the connection capability, the target capability, the request annotations and the one an
answer carries back."""

from proton import symbol

RESPONSE_ANNOTATIONS = symbol("RESPONSE_ANNOTATIONS_V1_0")
"""Connection capability: the peer routes answers by response annotations (§2.2)."""
RESPONSE_ADDRESS_SUPPORTED = symbol("response-address-supported")
"""Target capability: requests sent to it may carry response annotations (§2.3)."""
RESPONSE_TARGET = symbol("response-link-target-address")
"""Request annotation: the target address, on the requester's connection, answers go to."""
RESPONSE_COOKIE = symbol("response-address-cookie")
"""Request annotation: opaque bytes every answer carries back as :data:`ADDRESS_COOKIE`."""
ADDRESS_COOKIE = symbol("address-cookie")
"""Answer annotation: the request's :data:`RESPONSE_COOKIE`, echoed."""
