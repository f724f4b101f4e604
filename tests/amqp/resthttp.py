"""GET /subscriptions from a component's REST API on loopback, as the authentication tests
ask it: plain HTTP, or HTTPS trusting a given CA."""

from __future__ import annotations

import http.client
import ssl


def rest_get(port: int, authorization: str | None = None, *, ca: str | None = None
             ) -> tuple[int, list[str]]:
    """GET /subscriptions (with ``authorization`` as the header, when given), over HTTPS to
    ``localhost`` trusting ``ca`` when given, else plain HTTP to 127.0.0.1: the status and the
    ``WWW-Authenticate`` challenges."""
    conn: http.client.HTTPConnection
    if ca is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection(
            "localhost", port, timeout=10, context=ssl.create_default_context(cafile=ca))
    headers = {"Accept": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    try:
        conn.request("GET", "/subscriptions", headers=headers)
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    return response.status, response.headers.get_all("WWW-Authenticate") or []


def rest_status(port: int, authorization: str | None = None, *, ca: str | None = None) -> int:
    """The status of :func:`rest_get`."""
    return rest_get(port, authorization, ca=ca)[0]
