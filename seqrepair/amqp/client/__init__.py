"""The clients: :class:`Subscriber` (a stub over a proton receiver: reorders, repairs, hands
the application an exact stream), :class:`Publisher` (stamps, journals, sends), the brokered
variants for a plain AMQP broker (:mod:`.brokered`), a capabilities query (:mod:`.query`),
:class:`Contributor` (contributions to another's source, :mod:`.contributor`) and the
``publish``, ``contribute`` and ``subscribe`` commands' bodies (:mod:`.publishcmd`,
:mod:`.contributecmd`, :mod:`.subscribecmd`).
Each takes a :class:`ClientSecurity` (``security=``): TLS, a client certificate, a SASL user and
password (WIRE.md "Authentication").

It may import :mod:`seqrepair.amqp.wire`, the core and the journal; never the component or the
gateway.
"""

from seqrepair.amqp.client.contributor import Contribution, ContributionResult, Contributor
from seqrepair.amqp.client.publisher import Publisher
from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import FATAL_CONDITIONS, Subscriber, SubscriberReport
from seqrepair.amqp.wire.security import ClientSecurity

__all__ = ["FATAL_CONDITIONS", "ClientSecurity", "Contribution", "ContributionResult",
           "Contributor", "Publisher", "Subscriber", "SubscriberReport", "query_capabilities"]
