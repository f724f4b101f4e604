"""Building blocks for the REST tests: a manager with predictable ids and a store that can fail."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from seqrepair.core.subscriptions import Subscription
from seqrepair.rest.api import Response, SubscriptionApi
from seqrepair.rest.manager import SubscriptionManager

JSON = {"Content-Type": "application/json"}


class FlakyStore:
    """An in-memory SubscriptionStore whose writes raise ``failure`` while it is set."""

    def __init__(self) -> None:
        self.saved: dict[str, dict[str, Any]] = {}
        self.failure: BaseException | None = None

    def load(self) -> list[Subscription]:
        return []

    def save(self, subscription: Subscription) -> None:
        if self.failure is not None:
            raise self.failure
        self.saved[subscription.id] = subscription.to_json()

    def remove(self, sub_id: str) -> None:
        if self.failure is not None:
            raise self.failure
        self.saved.pop(sub_id, None)


def new_manager(store: FlakyStore | None = None, **kwargs: Any) -> SubscriptionManager:
    """A manager whose generated ids are sub-1, sub-2, ..."""
    counter = itertools.count(1)
    return SubscriptionManager(store=store, new_id=lambda: f"sub-{next(counter)}", **kwargs)


def state(manager: SubscriptionManager) -> list[dict[str, Any]]:
    """Everything the manager holds, as the API shows it."""
    return [sub.to_json() for sub in manager.query()]


def call(api: SubscriptionApi, method: str, path: str, body: Any = None,
         headers: Mapping[str, str] | None = None) -> Response:
    """One request; a body that is not bytes is sent as JSON, with a JSON Content-Type."""
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    sent = dict(JSON) if body is not None else {}
    sent.update(headers or {})
    return api.handle(method, path, sent, raw)


@pytest.fixture
def store() -> FlakyStore:
    return FlakyStore()


@pytest.fixture
def manager(store: FlakyStore) -> SubscriptionManager:
    return new_manager(store)


@pytest.fixture
def api(manager: SubscriptionManager) -> SubscriptionApi:
    return SubscriptionApi(manager)


@pytest.fixture
def created(api: SubscriptionApi) -> Callable[..., dict[str, Any]]:
    """Create a subscription through the API; its JSON form."""

    def create(topic: str = "/weather/wind/*", **members: Any) -> dict[str, Any]:
        response = call(api, "POST", "/subscriptions", {"topic": topic, **members})
        assert response.status == 201, response.body
        return dict(response.json())

    return create
