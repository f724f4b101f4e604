"""Answering an image request from the journal: a bounded backward fold (XEP-0040 §3).

For each source the answer is current as of a number fixed when the request is taken (the
journal's high-water then, ``as_of``). The journal is read backwards from ``as_of``, a page per
step, and folded newest first by :class:`ImageCache` rules read backwards: a field takes the
value of the newest publication that carries it; an ``image`` carries the rest of the item and
ends it (whole); a ``drop`` ends it too: a ``drop`` when nothing came after it, else the item
made again after it (whole: the journal holds all of it). An item is sent as soon as it ends,
so the fold holds only the items still open: at most the items of the answer, never the
journal. A source read to its first entry ends its open items whole (they began with an
update); one whose older entries retention removed ends them *partial* (an ``update``: fields
set before the trim point are unknown) and names them in ``ImageComplete.partial``; so does an
item a journal entry that cannot be delivered would have set (written before publishers refused
such entries: it is passed over, as a replay passes it over).

Only what the asking link may see is folded: topics the request matches and publications its
entitlement allows (``allows``), exactly the stream live delivery would have given it, so an
image never carries a field of a publication the link could not see, and items of topics it may
not see never appear. A request naming only topics stops reading a source once all of them are
ended. ``steps()`` yields ``None`` after each page read so the caller (the component's repair
turns) lets others have the event loop; memory is one page plus the open items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.snapshot import ImageComplete, ImageFrame, ImageRequest, image_publication
from seqrepair.core.topics import TopicPattern
from seqrepair.journal.gapfill import undeliverable
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

log = get_logger(__name__)

ImageStep = ImageFrame | ImageComplete | None


class _Open:
    """An item whose fold has not reached its base yet."""

    __slots__ = ("fields", "timestamp")

    def __init__(self, timestamp: float | None) -> None:
        self.fields: dict[str, Any] = {}
        self.timestamp = timestamp


class ImageFold:
    """The answer to ``request`` from ``journal``: see the module docstring.

    ``as_of``: per source, the number to fold through (sources with 0 are skipped);
    ``allows(pub)``: the asking link's entitlement. Iterate :meth:`steps`.
    """

    def __init__(
        self,
        journal: Journal,
        request: ImageRequest,
        as_of: Mapping[str, int],
        allows: Callable[[Publication], bool],
        *,
        page_size: int = 1000,
    ) -> None:
        self.journal = journal
        self.request = request
        self.as_of = {source: seq for source, seq in sorted(as_of.items()) if seq > 0}
        self.allows = allows
        self.page_size = page_size
        self.scanned = 0
        self.sent = 0
        self._patterns = [TopicPattern(p) for p in request.patterns]
        self._wanted: dict[str, bool] = {}

    def _matches(self, topic: str) -> bool:
        wanted = self._wanted.get(topic)
        if wanted is None:
            if len(self._wanted) >= 4096:
                self._wanted.clear()
            wanted = self._wanted[topic] = topic in self.request.topics or any(
                p.matches(topic) for p in self._patterns
            )
        return wanted

    def steps(self) -> Iterator[ImageStep]:
        """The image frames, a ``None`` after every journal page, then the ImageComplete."""
        answered: dict[str, int] = {}
        partial: list[str] = []
        request_id = self.request.request_id
        for source, as_of in self.as_of.items():
            for step in self._source(source, as_of, partial):
                if step is not None:
                    answered[source] = as_of
                    self.sent += 1
                    yield ImageFrame(step, request_id)
                else:
                    yield None
        log.info("imagefold.answered", request_id=request_id, sources=len(answered),
                 images=self.sent, scanned=self.scanned, partial=len(partial))
        yield ImageComplete(answered, request_id, tuple(partial))

    def _source(self, source: str, as_of: int, partial: list[str]) -> Iterator[Publication | None]:
        """The item images of one source (None after each page)."""
        open_items: dict[str, _Open] = {}
        ended: set[str] = set()
        poisoned: set[str] = set()  # items an entry that cannot be delivered would have set
        only_topics = not self._patterns
        wanted_topics = len(self.request.topics)
        through = as_of
        trimmed = 0
        while through >= 1:
            trimmed, page = self.journal.page_back(source, through, self.page_size)
            for pub in page:
                self.scanned += 1
                topic = pub.topic
                if topic in ended or not self._matches(topic) or not self.allows(pub):
                    continue
                ptype = pub.ptype
                if ptype is PublishType.SNAPSHOT:
                    continue
                if undeliverable(pub) is not None:  # written before publishers refused such
                    poisoned.add(topic)  # its fields are not known to be sendable: partial
                    continue
                item = open_items.get(topic)
                if item is None:
                    if ptype is PublishType.DROP:  # the newest word on the item: it is gone
                        ended.add(topic)
                        yield image_publication(topic, source, as_of, PublishType.DROP, {},
                                                pub.timestamp)
                        continue
                    item = open_items[topic] = _Open(pub.timestamp)
                if ptype is not PublishType.DROP:
                    fields = item.fields
                    for name, value in pub.fields.items():
                        if name not in fields:
                            fields[name] = value
                if ptype is PublishType.IMAGE or ptype is PublishType.DROP:
                    # its base: an image, or the drop it was made again after
                    del open_items[topic]
                    ended.add(topic)
                    yield self._ended(topic, source, as_of, item, topic not in poisoned,
                                      partial)
            yield None  # a page read: others may have the event loop
            if only_topics and len(ended) >= wanted_topics:
                return
            if len(page) < self.page_size:
                break
            through = page[-1].source_seq - 1
        # the start of what the journal holds: the open items began after it, or before
        whole = trimmed == 0
        for topic in sorted(open_items):
            yield self._ended(topic, source, as_of, open_items[topic],
                              whole and topic not in poisoned, partial)

    @staticmethod
    def _ended(topic: str, source: str, as_of: int, item: _Open, whole: bool,
               partial: list[str]) -> Publication:
        """The image of an item whose fold is over: ``image`` when ``whole``, else an
        ``update`` of the fields known, named in ``partial``."""
        if not whole:
            partial.append(topic)
        return image_publication(topic, source, as_of,
                                 PublishType.IMAGE if whole else PublishType.UPDATE,
                                 item.fields, item.timestamp)
