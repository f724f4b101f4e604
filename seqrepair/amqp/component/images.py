"""Image requests at the component: ``SNAPSHOT`` answered from the journal (WIRE.md "Image
requests").

The answer is a lazy :class:`~seqrepair.journal.imagefold.ImageFold` queued on the asking data
link's own route, read a journal page per repair turn (:mod:`.fairness`), one ``IMAGE`` per
transfer, then one ``IMAGE-COMPLETE``. Each source's ``as_of`` is its journal high-water read
when the request is taken. Everything the link sent before the answer was fanned out before the
request, so it is at or below ``as_of``; while the answer waits to be read no live frame goes
out on the link (answers first, :meth:`SubscriberLink.pump`), so the stub never holds a
publication of an item newer than the image it gets, and takes what comes after it numbered at
or below ``as_of`` as covered by the image (:mod:`seqrepair.core.stubimages`).

Only the data link's own route carries the answer: one routed elsewhere (response annotations)
could be overtaken by the link's live frames, so such a request is refused
``amqp:not-implemented``. The fold reads what the link's entitlement allows, nothing else.
At most :data:`MAX_IMAGE_ANSWERS` answers run per connection and
:data:`MAX_IMAGE_ANSWERS_PER_PRINCIPAL` per principal; a request past either is refused
``amqp:resource-limit-exceeded`` (ask again later). The principal is the link's (a forwarding
gateway's client is itself, ``seqrepair-on-behalf-of``), and on a connection acting for others
"per connection" is per principal it acts for, so one client behind a forwarding gateway uses
up its own allowance, not the gateway's; such a connection runs at most
:data:`MAX_IMAGE_ANSWERS_FORWARDED` answers in all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from seqrepair.amqp.component.grants import principal_of
from seqrepair.amqp.component.links import ResponseRoute, SubscriberLink
from seqrepair.amqp.wire.errors import NotImplementedAnnotationError, RequestFloodError
from seqrepair.core.permissions import Entitlement
from seqrepair.core.snapshot import ImageRequest
from seqrepair.journal.format import can_name_journal
from seqrepair.journal.imagefold import ImageFold

if TYPE_CHECKING:
    from seqrepair.amqp.component.component import Component

MAX_IMAGE_ANSWERS = 4
"""Image answers in progress per connection."""
MAX_IMAGE_ANSWERS_PER_PRINCIPAL = 16
"""Image answers in progress per principal, over all its connections."""

MAX_IMAGE_ANSWERS_FORWARDED = 64
"""Image answers in progress on one connection for all the principals it acts for."""

ImageFetcher = Callable[[Entitlement, ImageRequest, str, list[str], Iterator[Any]],
                        tuple[Iterator[Any], Callable[[], bool]]]
"""A relay's (``relay/imagefetch.py``): given the asking link's entitlement, the request, its
principal, the sources asked and the journal's answer, the answer to send instead (the
journal's where it holds all the link may need, else the upstream's) and whether it waits."""

_BY_PRINCIPAL: WeakKeyDictionary[Any, Counter[str]] = WeakKeyDictionary()
"""Per component, the image answers in progress per principal."""


def answer_image(
    component: Component,
    link: SubscriberLink,
    route: ResponseRoute,
    request: ImageRequest,
    correlation: Any,
    cookie: bytes | None,
) -> None:
    """Queue the answer to ``request`` about ``link`` (see the module docstring)."""
    if route is not link.route:
        raise NotImplementedAnnotationError(
            "an image request is answered only on the data link it names (reply-to "
            "$link/<name>), never routed elsewhere: the link's live frames could overtake it",
            expected="reply-to $link/<data link>", got=route.target,
        )
    conn = route.sender.connection if route.sender is not None else None
    on_conn: Counter[str] = getattr(conn, "seqrepair_image_answers", None) or Counter()
    principal = component.principals.get(link.name, principal_of(conn))  # the link's own
    by_principal = _BY_PRINCIPAL.setdefault(component, Counter())
    forwarded = principal != principal_of(conn)
    for count, limit, whose in (
        (on_conn[principal], MAX_IMAGE_ANSWERS,
         f"principal {principal!r} on this connection" if forwarded else "this connection"),
        (sum(on_conn.values()), MAX_IMAGE_ANSWERS_FORWARDED,
         "this connection, for all the principals it acts for"),
        (by_principal[principal], MAX_IMAGE_ANSWERS_PER_PRINCIPAL, f"principal {principal!r}"),
    ):
        if count >= limit:
            component.stats["images_refused"] = component.stats.get("images_refused", 0) + 1
            raise RequestFloodError(
                f"{count} image answers already run for {whose} (at most {limit}); ask again "
                "later", expected=limit, got=count)
    journal = component.gapfill.journal
    sources = list(request.sources) or journal.sources()
    marks = journal.high_waters([s for s in sources if can_name_journal(s)])
    fold = ImageFold(journal, request, {s: hw for s, (hw, _) in marks.items()}, link.allows,
                     page_size=component.config.replay_page)
    steps: Iterator[Any] = fold.steps()
    parked = None
    if component.image_fetcher is not None:  # a relay's: what its journal lacks, from upstream
        steps, parked = component.image_fetcher(link.entitlement, request, principal,
                                                list(marks), steps)
    if conn is not None:
        on_conn[principal] += 1
        conn.seqrepair_image_answers = on_conn
    by_principal[principal] += 1
    component.stats["image_requests"] = component.stats.get("image_requests", 0) + 1
    link.log.info("image request", topics=len(request.topics), patterns=request.patterns,
                  request_id=request.request_id, principal=principal)
    route.start_resend(_counted(steps, conn, by_principal, principal), correlation, cookie,
                       parked=parked)


def _counted(steps: Iterator[Any], conn: Any, by_principal: Counter[str],
             principal: str) -> Iterator[Any]:
    """The fold's steps; the counts of answers in progress (the connection's, the
    principal's) drop when it ends (read to its end, or dropped with its route)."""
    try:
        yield from steps
    finally:
        on_conn = getattr(conn, "seqrepair_image_answers", None)
        if on_conn is not None:
            on_conn[principal] -= 1
            if on_conn[principal] <= 0:
                del on_conn[principal]
        by_principal[principal] -= 1
        if by_principal[principal] <= 0:
            del by_principal[principal]
