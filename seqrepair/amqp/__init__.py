"""The AMQP 1.0 binding (python-qpid-proton), in five parts, each a subpackage:

- :mod:`seqrepair.amqp.wire`: the wire format (codec, framing, technical messages, errors and
  their conditions, the attach vocabulary) and the proton plumbing every part shares.
- :mod:`seqrepair.amqp.component`: the pubsub component, ``seqrepair serve``.
- :mod:`seqrepair.amqp.client`: the publisher and subscriber clients, and the brokered ones.
- :mod:`seqrepair.amqp.gateway`: the gateway that relays clients to a component.
- :mod:`seqrepair.amqp.relay`: the fractal relay, ``seqrepair relay``: a component fed by one
  durable upstream subscription, for the union of its subscribers' selections.

Imports go one way: the wire format imports none of the others; the component and the clients
import the wire format; the gateway imports the wire format and the clients; the relay
imports the wire format, the clients and the component
(``tests/test_layout.py`` enforces it). :mod:`seqrepair.amqp.commands` (the CLI's commands) and
:mod:`seqrepair.amqp.demo` sit on top and may import any part. ``WIRE.md`` beside this file is
the wire protocol, for writing a client in any language.
"""
