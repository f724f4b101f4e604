"""The wire format: what crosses an AMQP connection between seqrepair's parts and any peer.

It owns the codec (:mod:`.codec`, :mod:`.framing`, :mod:`.rawamqp`, :mod:`.rawvalues`), the
technical messages (:mod:`.technical`), the errors and the AMQP conditions they carry
(:mod:`.errors`), the response annotations (:mod:`.respann`), the attach vocabulary
(:mod:`.vocabulary`), the message-size limits (:mod:`.sizelimit`, :mod:`.batchsize`), and the
proton plumbing every part shares: the guarded container (:mod:`.reactor`, :mod:`.guard`),
reconnect back-off (:mod:`.backoff`) and the door on a listener, connection and link count
limits (:mod:`.admission`, :mod:`.gate`: the component's and the gateway's).

It may import :mod:`seqrepair.core` and proton, and none of the other AMQP parts
(component, client, gateway), nor Redis.
"""
