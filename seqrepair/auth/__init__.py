"""Who is asking: the credentials file both ports check (:mod:`.credentials`), the REST API's
principals (:mod:`.restauth`) and the ``seqrepair credentials`` command (:mod:`.commands`)."""
