"""The subscription interface: a REST API over HTTP for the component's subscriptions.

:mod:`.manager` keeps the registry thread-safe and persisted, :mod:`.catalog` does the same
for the topic catalog (``/topics``), :mod:`.api` maps HTTP requests onto them (no sockets),
:mod:`.server` serves that over the standard library's HTTP server.
"""
