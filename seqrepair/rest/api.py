"""The HTTP binding of the subscription interface, without sockets or clock (sans-IO).

:class:`SubscriptionApi` maps one HTTP request (method, target, headers, body) onto a
:class:`~seqrepair.rest.manager.SubscriptionManager` (and, for ``/topics``, a
:class:`~seqrepair.rest.catalog.SharedCatalog`) and returns the :class:`Response` to send;
:mod:`seqrepair.rest.server` carries both over the wire. The resources are those of the SWIM
guidance (REST ``/subscriptions`` and ``/topics``) and of the CloudEvents Subscriptions API's
HTTP binding (§3.3); the objects are :meth:`~seqrepair.core.subscriptions.Subscription.to_json`'s
and :mod:`seqrepair.core.catalog`'s:

=========================  =======  ================================================  ======
resource                   method   meaning                                           status
=========================  =======  ================================================  ======
``/subscriptions``         GET      the caller's subscriptions, by id (``[]``: none)  200
``/subscriptions``         POST     create one; ``Location: /subscriptions/<id>``     201
``/subscriptions/<id>``    GET      the subscription                                  200
``/subscriptions/<id>``    PUT      replace it; pause and resume are a PUT that sets  200
                                    ``subscription_status`` to PAUSED or ACTIVE
``/subscriptions/<id>``    DELETE   delete it; the body is what it was (CloudEvents)  200
``/topics``                GET      the topic catalog in the SWIM guidance's "Topic   200
                                    Tree" form; ``?pattern=<pattern>`` (percent-
                                    encoded) lists only the topics it matches
``/topics/<topic>``        GET      ``{"topic", "declared", "configured",             200
                                    "published", "subscriptions"}``: the ids of the
                                    caller's subscriptions that may select it (their
                                    topic pattern and their filters on the topic pass
                                    it)
``/topics/<topic>``        PUT      declare it (listed before anything is published   201
                                    on it, kept in Redis); the body is empty or
                                    ``{}``; 200 when it was listed already
``/topics/<topic>``        DELETE   delete it (the journal keeps its publications;    200
                                    published again, it is listed again); the body is
                                    what it was
any of them                OPTIONS  ``Allow`` names the methods (no body)             204
any of them                HEAD     the GET's status and headers, without the body
=========================  =======  ================================================  ======

A trailing ``/`` is optional and the query string is ignored, but for ``pattern`` on
``/topics``. The id segment is percent-decoded; one that is no valid subscription id is
answered 404 like any id that is not there (no subscription can have it, and PUT does not
create). The topic is everything after ``/topics/``, percent-decoded: encoded whole
(``/topics/%2Fweather%2Fwind%2FLEMD``) or as it is (``/topics//weather/wind/LEMD``; a topic
holding ``?`` or ``%`` must be encoded). The ``/topics`` routes are served only when the API
has a topic catalog; without one they are unknown paths (404). What the access policy lets a
caller see and do there is :mod:`seqrepair.rest.topicsapi`'s.

Every error has a JSON body ``{"error": code, "message": ..., "expected": ..., "got": ...}``
(``expected`` and ``got`` made JSON-safe and cut to :data:`MAX_DETAIL` characters). The checks
run in this order, the first that fails answers:

======  ==========================  =============================================================
status  ``error``                   when
======  ==========================  =============================================================
401     ``unauthorized``            the request names no principal: no ``Authorization`` where
                                    anonymous access is not allowed, or a wrong password,
                                    unknown user or token (with a ``WWW-Authenticate`` per
                                    scheme offered; :mod:`seqrepair.auth.restauth`)
404     ``notfound``                an unknown path; no subscription has the id, or the
                                    caller may not access it (not its own: ids do not leak);
                                    the catalog does not list the topic, or the caller may
                                    not list it (GET, DELETE)
403     ``forbidden``               the access policy refuses the operation (creating,
                                    changing, deleting or reading subscriptions on a topic
                                    pattern, listing, declaring or deleting topics:
                                    :mod:`seqrepair.core.policy`)
405     ``method-not-allowed``      a method the resource does not offer (with ``Allow``)
406     ``not-acceptable``          ``Accept`` admits no JSON (``application/json;q=0`` refuses
                                    it, even after ``*/*``: the more specific range wins)
413     ``payload-too-large``       ``Content-Length`` or the body is over ``max_body``
415     ``unsupported-media-type``  a POST or PUT whose Content-Type is not application/json
                                    (a charset other than UTF-8 included), but a PUT of a
                                    topic with an empty body
400     ``invalid``                 a body that is not UTF-8 JSON (NaN, lone surrogates and
                                    nesting deeper than :data:`MAX_DEPTH` included), or a
                                    proposal the subscription model refuses, or a topic
                                    or ``pattern`` that breaks the topic-tree syntax (a
                                    wildcard in a topic included), or a topic's PUT body
                                    that is not empty nor ``{}``
409     ``conflict``                the id is taken, the registry is full, or the subscription
                                    is the operator's (configured); the topic catalog is
                                    full, or the topic is the operator's (``serve --topic``)
503     ``unavailable``             the manager's or the catalog's store failed (one of
                                    ``unavailable``); the change was undone
500     ``internal``                anything else (logged; the body says nothing more)
======  ==========================  =============================================================
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, unquote, urlsplit

import attrs

from seqrepair.auth.restauth import LEGACY_TOKEN_PRINCIPAL, RestAuth, token_hash
from seqrepair.core.errors import (
    BAD_INPUT_ERRORS,
    AccessDeniedError,
    InvalidConfigError,
    SeqRepairError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TopicConflictError,
    TopicNotFoundError,
)
from seqrepair.core.subscriptions import check_id
from seqrepair.logs import get_logger
from seqrepair.rest.catalog import SharedCatalog
from seqrepair.rest.manager import SubscriptionManager
from seqrepair.rest.topicsapi import declare_topic, delete_topic, read_topic, topic_tree

log = get_logger("seqrepair.rest")

COLLECTION = "/subscriptions"
TOPICS = "/topics"
JSON_TYPE = "application/json; charset=utf-8"
MAX_BODY = 65536
"""Default largest request body, in bytes."""
MAX_DEPTH = 32
"""Deepest nesting of a request body's JSON (a deep ``protocolsettings`` could otherwise be
stored and then fail to serialise on every later GET)."""
MAX_DETAIL = 512
"""Longest ``message``, and longest JSON text of ``expected`` or ``got``, in an error body."""
REALM = 'Bearer realm="seqrepair"'  # the challenge of a 401 that offers only bearer tokens

_COLLECTION_ALLOW = ("GET", "HEAD", "POST", "OPTIONS")
_ITEM_ALLOW = ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")
_TOPICS_ALLOW = ("GET", "HEAD", "OPTIONS")
_TOPIC_ALLOW = ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")
_B64TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
"""RFC 6750's token68: what a bearer token may be, so it travels in a header unchanged."""
_QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")
_DIGITS = re.compile(r"[0-9]+")
_JSON_RANGES = {"application/json": 2, "application/*": 1, "*/*": 0}
"""The Accept media ranges that cover JSON, by specificity."""


class Headers(Protocol):
    """Request headers: a ``dict``, any ``Mapping`` or an ``email.message.Message`` (what
    ``http.server`` gives). Names are looked up case-insensitively; a repeated header's values
    are joined with ``", "``."""

    def items(self) -> Iterable[tuple[str, Any]]:
        """The (name, value) pairs."""


@attrs.frozen
class Response:
    """What to send back: the status, the body and every header but the connection's own."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)

    def json(self) -> Any:
        """The body, read as JSON."""
        return json.loads(self.body)


def json_response(status: int, value: Any, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A response whose body is ``value`` as compact UTF-8 JSON."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (from a configured subscription's command line, say) has no UTF-8
        # form: escape everything rather than fail every GET that includes it.
        body = json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")
    return Response(status, body, (("Content-Type", JSON_TYPE),
                                   ("Content-Length", str(len(body))), *headers))


def error_response(status: int, code: str, message: str, *, expected: Any = None,
                   got: Any = None, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """An error: ``{"error": code, "message": ..., "expected": ..., "got": ...}``."""
    return json_response(status, {
        "error": code,
        "message": message[:MAX_DETAIL],
        "expected": _json_safe(expected),
        "got": _json_safe(got),
    }, headers)


def _refused(status: int, code: str, exc: SeqRepairError) -> Response:
    """The error answer for ``exc``: its message, and what it expected and got."""
    return error_response(status, code, exc.message, expected=exc.expected, got=exc.got)


class _Refusal(Exception):
    """A check failed: ``response`` says so."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


@attrs.frozen
class _Route:
    allow: tuple[str, ...]
    resource: str
    """:data:`COLLECTION` or :data:`TOPICS`."""
    key: str | None
    """None: the collection; otherwise the percent-decoded id or topic (maybe not a valid
    one)."""
    query: str = ""


class SubscriptionApi:
    """The subscription interface over HTTP: ``api.handle("GET", "/subscriptions", {}, b"")``.

    ``auth``: how a request's principal is established (:class:`~seqrepair.auth.restauth.
    RestAuth`: HTTP Basic against the credentials file, bearer tokens per principal, anonymous
    where allowed); by default everyone is ``anonymous``. ``token``: one more bearer token,
    of the principal ``token_principal`` (without ``auth``: the only way in).
    ``max_body``: the largest request body taken, in bytes. ``unavailable``: the exceptions of
    the manager's store that mean "try again later" (503); the component adds redis-py's
    ``RedisError`` to the default ``OSError``. ``topics``: the catalog ``/topics`` lists
    (without one, ``/topics`` is an unknown path). Safe to call from many threads at once (the
    manager and the catalog are).
    """

    def __init__(self, manager: SubscriptionManager, *, token: str | None = None,
                 auth: RestAuth | None = None,
                 token_principal: str = LEGACY_TOKEN_PRINCIPAL,
                 max_body: int = MAX_BODY,
                 unavailable: tuple[type[BaseException], ...] = (OSError,),
                 topics: SharedCatalog | None = None,
                 principal_tokens: Mapping[str, str] | None = None) -> None:
        if token is not None and (not isinstance(token, str) or not _B64TOKEN.fullmatch(token)):
            raise InvalidConfigError(
                "a bearer token is letters, digits and - . _ ~ + / (then = padding)",
                expected=_B64TOKEN.pattern, got=type(token).__name__)  # not the secret
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
            raise InvalidConfigError("max_body must be an integer >= 1", expected=">= 1",
                                     got=max_body)
        if not isinstance(unavailable, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in unavailable
        ):
            raise InvalidConfigError("unavailable must be a tuple of exception classes",
                                     expected="tuple[type[BaseException], ...]", got=unavailable)
        self.manager = manager
        self.topics = topics
        self.max_body = max_body
        self.unavailable = unavailable
        if auth is None:
            auth = RestAuth(allow_anonymous=token is None and not principal_tokens)
        tokens = dict(auth.tokens)
        for principal, secret in (principal_tokens or {}).items():
            if not isinstance(secret, str) or not _B64TOKEN.fullmatch(secret):
                raise InvalidConfigError(
                    "a bearer token is letters, digits and - . _ ~ + / (then = padding)",
                    expected=_B64TOKEN.pattern, got=type(secret).__name__)
            tokens[token_hash(secret)] = principal
        if token is not None:
            tokens[token_hash(token)] = token_principal
        self.auth = attrs.evolve(auth, tokens=tokens)

    def handle(self, method: str, path: str, headers: Headers, body: bytes) -> Response:
        """The response to one request. ``path`` is the request target as sent (path and
        query, or an absolute URL). Never raises: an unexpected error is logged and answered
        500."""
        try:
            response = self._respond("GET" if method == "HEAD" else method, path, headers, body)
        except Exception:
            log.exception("subscription request failed", method=method[:16], path=path[:200])
            response = error_response(500, "internal", "internal error")
        return attrs.evolve(response, body=b"") if method == "HEAD" else response

    def _respond(self, method: str, target: str, headers: Headers, body: bytes) -> Response:
        try:
            return self._handle(method, target, headers, body)
        except _Refusal as refusal:
            return refusal.response

    def _handle(self, method: str, target: str, raw_headers: Headers, body: bytes) -> Response:
        headers = _lowered(raw_headers)
        auth = self.auth  # read once: a reload (SIGHUP) swaps it whole between requests
        principal = auth.principal(headers.get("authorization"))
        if principal is None:
            raise _Refusal(error_response(
                401, "unauthorized", "this API needs 'Authorization: Bearer <token>' or "
                "'Authorization: Basic <user:password>' naming a principal",
                headers=auth.challenges()))
        route = _route(target, with_topics=self.topics is not None)
        allow = ("Allow", ", ".join(route.allow))
        if method == "OPTIONS":
            return Response(204, b"", (allow,))
        if method not in route.allow:
            raise _Refusal(error_response(
                405, "method-not-allowed", f"{method[:16]} is not offered here",
                expected=list(route.allow), got=method[:16], headers=(allow,)))
        if not _accepts_json(headers.get("accept")):
            raise _Refusal(error_response(
                406, "not-acceptable", "responses are application/json, which Accept refuses",
                expected="application/json", got=headers.get("accept")))
        size = _body_size(headers.get("content-length"), body)
        if size > self.max_body:
            raise _Refusal(error_response(
                413, "payload-too-large", f"a request body is at most {self.max_body} bytes",
                expected=self.max_body, got=size))
        proposal = None
        empty_topic_put = route.resource == TOPICS and method == "PUT" and size == 0
        if method in ("POST", "PUT") and not empty_topic_put:
            content_type = headers.get("content-type")
            if not _is_json_media_type(content_type):
                raise _Refusal(error_response(
                    415, "unsupported-media-type", "the body must be application/json (UTF-8)",
                    expected="application/json", got=content_type))
            proposal = _read_json(body)
        if route.resource == TOPICS:
            return self._topics(method, route, proposal, principal)
        return self._call(method, route.key, proposal, principal)

    def request_principal(self, authorization: str | None) -> str | None:
        """Who sends a request with this ``Authorization`` header: the user of HTTP Basic
        (checked against the credentials file), a bearer token's principal, ``anonymous``
        where allowed (:mod:`seqrepair.auth.restauth`); None when it names nobody (401)."""
        return self.auth.principal(authorization)

    def _call(self, method: str, sub_id: str | None, proposal: Any,
              principal: str) -> Response:
        try:
            if sub_id is None:
                if method == "GET":
                    return json_response(200, [sub.to_json()
                                               for sub in self.manager.query(principal)])
                sub = self.manager.create(proposal, principal)
                location = f"{COLLECTION}/{quote(sub.id, safe='')}"
                return json_response(201, sub.to_json(), (("Location", location),))
            try:
                check_id(sub_id)
            except BAD_INPUT_ERRORS as exc:
                raise SubscriptionNotFoundError(f"no subscription {sub_id[:140]!r} "
                                                "(not a subscription id)",
                                                expected=exc.expected, got=exc.got) from None
            if method == "GET":
                sub = self.manager.get(sub_id, principal)
            elif method == "PUT":
                sub = self.manager.update(sub_id, proposal, principal)
            else:
                sub = self.manager.delete(sub_id, principal)
            return json_response(200, sub.to_json())
        except self.unavailable as exc:
            log.warning("subscription store unavailable", method=method, subscription=sub_id,
                        error=repr(exc)[:MAX_DETAIL])
            return error_response(503, "unavailable",
                                  "the subscription store is unavailable; nothing was changed")
        except SubscriptionNotFoundError as exc:
            return _refused(404, "notfound", exc)
        except AccessDeniedError as exc:
            return _refused(403, "forbidden", exc)
        except SubscriptionConflictError as exc:
            return _refused(409, "conflict", exc)
        except BAD_INPUT_ERRORS as exc:
            return _refused(400, "invalid", exc)

    def _topics(self, method: str, route: _Route, proposal: Any, principal: str) -> Response:
        """``/topics`` (GET: the tree) or ``/topics/<topic>`` (GET: one topic and who wants
        it, PUT: declare it, DELETE: delete it), as :mod:`seqrepair.rest.topicsapi` decides
        for ``principal``."""
        catalog = self.topics
        assert catalog is not None
        policy = self.manager.policy()
        topic = route.key
        try:
            if topic is None:
                return json_response(200, topic_tree(catalog, policy, principal,
                                                     _pattern(route.query)))
            if method == "GET":
                return json_response(200, read_topic(catalog, self.manager, policy, principal,
                                                     topic))
            if method == "DELETE":
                return json_response(200, delete_topic(catalog, self.manager, policy,
                                                       principal, topic))
            if proposal is not None and proposal != {}:
                raise _Refusal(error_response(
                    400, "invalid", "a topic is declared with an empty body or {}",
                    expected={}, got=proposal))
            new, info = declare_topic(catalog, self.manager, policy, principal, topic)
            if not new:
                return json_response(200, info)
            location = f"{TOPICS}/{quote(topic, safe='')}"
            return json_response(201, info, (("Location", location),))
        except self.unavailable as exc:
            log.warning("topic store unavailable", method=method, topic=(topic or "")[:200],
                        error=repr(exc)[:MAX_DETAIL])
            return error_response(503, "unavailable",
                                  "the topic store is unavailable; nothing was changed")
        except TopicNotFoundError as exc:
            return _refused(404, "notfound", exc)
        except AccessDeniedError as exc:
            return _refused(403, "forbidden", exc)
        except TopicConflictError as exc:
            return _refused(409, "conflict", exc)
        except BAD_INPUT_ERRORS as exc:
            return _refused(400, "invalid", exc)


def _pattern(query: str) -> str | None:
    """The ``pattern`` parameter of a query string (None without one; 400 when repeated)."""
    values = parse_qs(query, keep_blank_values=True).get("pattern")
    if values is None:
        return None
    if len(values) > 1:
        raise _Refusal(error_response(400, "invalid", "give one pattern at most",
                                      expected="pattern=<topic pattern>", got=values))
    return values[0]


def _lowered(headers: Headers) -> dict[str, str]:
    lowered: dict[str, str] = {}
    for name, value in headers.items():
        key, text = str(name).lower(), str(value)
        lowered[key] = f"{lowered[key]}, {text}" if key in lowered else text
    return lowered


def _route(target: str, *, with_topics: bool) -> _Route:
    """The resource ``target`` names; refuses (404) a path that is none (``/topics`` too,
    unless ``with_topics``)."""
    if target.startswith("/"):
        path, _, query = target.partition("#")[0].partition("?")
    else:  # absolute-form
        parsed = urlsplit(target)
        path, query = parsed.path, parsed.query
    parts = path.split("/")
    if path.startswith("/") and parts[1] == COLLECTION[1:]:
        if len(parts) == 2 or parts[2:] == [""]:
            return _Route(_COLLECTION_ALLOW, COLLECTION, None)
        if parts[2] and (len(parts) == 3 or parts[3:] == [""]):
            return _Route(_ITEM_ALLOW, COLLECTION, unquote(parts[2], errors="surrogateescape"))
    if with_topics and (path == TOPICS or path.startswith(TOPICS + "/")):
        topic = path[len(TOPICS) + 1:]
        if len(topic) > 1 and topic.endswith("/"):  # a raw trailing '/': the optional one
            topic = topic[:-1]
        key = unquote(topic, errors="surrogateescape") if topic else None
        return _Route(_TOPICS_ALLOW if key is None else _TOPIC_ALLOW, TOPICS, key, query)
    known = [COLLECTION, COLLECTION + "/<id>"]
    if with_topics:
        known += [TOPICS, TOPICS + "/<topic>"]
    raise _Refusal(error_response(404, "notfound", "no such resource", expected=known,
                                  got=path))


def _accepts_json(accept: str | None) -> bool:
    """Whether an Accept header admits application/json (no header, or an empty one, admits
    everything); the most specific range that covers JSON decides, by its q being above 0."""
    if accept is None or not accept.strip():
        return True
    best: tuple[int, float] | None = None
    for item in accept.split(","):
        media, *params = item.split(";")
        specificity = _JSON_RANGES.get(media.strip().lower())
        q = _quality(params)
        if specificity is None or q is None:
            continue
        if best is None or (specificity, q) > best:
            best = (specificity, q)
    return best is not None and best[1] > 0


def _quality(params: list[str]) -> float | None:
    """A media range's q (1 when absent); None when it is malformed (the range is ignored)."""
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            return float(value) if _QVALUE.fullmatch(value) else None
    return 1.0


def _body_size(content_length: str | None, body: bytes) -> int:
    """The larger of the body's length and the one Content-Length declares (the server layer
    refuses a malformed Content-Length; here it counts for nothing)."""
    digits = (content_length or "").strip()
    declared = 0
    if _DIGITS.fullmatch(digits):
        digits = digits.lstrip("0") or "0"
        declared = int(digits) if len(digits) <= 18 else 10**18  # int() refuses 4300+ digits
    return max(len(body), declared)


def _is_json_media_type(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media, *params = content_type.split(";")
    if media.strip().lower() != "application/json":
        return False
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in (
            "utf-8", "utf8"
        ):
            return False
    return True


def _read_json(body: bytes) -> Any:
    """The body as JSON; refuses (400) anything but strict, UTF-8, reasonably shallow JSON."""
    try:
        # Decoded here, not by json.loads(bytes), which would also take UTF-16 and UTF-32.
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refusal(error_response(400, "invalid", "the body is not UTF-8",
                                      expected="UTF-8", got=f"byte {exc.start}")) from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise _Refusal(error_response(400, "invalid", f"the body is not JSON: {exc}",
                                      expected="a JSON object")) from None
    problem = _json_problem(value)
    if problem is not None:
        raise _Refusal(error_response(400, "invalid", f"the body is refused: {problem}"))
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_problem(value: Any) -> str | None:
    """Why a decoded JSON value cannot be taken, or None: too deep, or a string that has no
    UTF-8 form (a lone surrogate from a ``\\ud800`` escape) and so could not be stored."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(item, dict):
            stack.extend((key, depth) for key in item)
            stack.extend((member, depth + 1) for member in item.values())
        elif isinstance(item, list):
            stack.extend((member, depth + 1) for member in item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "a string holds a lone surrogate"
    return None


def _json_safe(value: Any) -> Any:
    """``value`` if it is JSON and short, else its repr, cut to :data:`MAX_DETAIL`."""
    try:
        if len(json.dumps(value, allow_nan=False)) <= MAX_DETAIL:
            return value
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not turn an error answer into a 500
        text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL - 3] + "..."
