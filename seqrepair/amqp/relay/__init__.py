"""The fractal relay (``seqrepair relay``): a component that is a durable subscriber of another
and re-serves what it gets from its own journal (:mod:`.relay`), with one upstream link for the
union of its subscribers' selections (:mod:`.selection`). Imports wire, client and component."""
