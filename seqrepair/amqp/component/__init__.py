"""The pubsub component (``seqrepair serve``): it takes publications from publishers, journals
them, fans them out to subscriber links with link-level numbers and heartbeats, and answers gap
requests from link context or the journal.

It owns the event loop (:mod:`.component`), subscriber links and their contexts (:mod:`.links`,
:mod:`.attach`, :mod:`.routing`), ingest and the journal port (:mod:`.ingest`,
:mod:`.journalport`, :mod:`.holdback`), subscription queues (:mod:`.subqueues`), grants
(:mod:`.grants`), windows and durable positions (:mod:`.ackdispatch`, :mod:`.positions`,
:mod:`.durable`), its settings (:mod:`.config`) and
``seqrepair serve``'s body (:mod:`.servecmd`).

It may import :mod:`seqrepair.amqp.wire`, the core, the journal and the REST manager; never the
clients or the gateway.
"""

from seqrepair.amqp.component.component import Component
from seqrepair.amqp.component.config import ComponentConfig

__all__ = ["Component", "ComponentConfig"]
