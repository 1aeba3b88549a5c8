"""The coordinator's HTTP API in a test: settings with known tokens, and an httpx client that
runs the app (and its lifespan, with its own Redis client) inside the test's event loop."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI

from coordinator.settings import CoordinatorSettings

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from coordinator.web.metrics import OverdueWatcher

ADMIN = "admin-token-for-tests-0123"
VIEW = "view-token-for-tests-01234"
BOB = "bob-token-for-tests-012345"


def make_settings(redis_url: str, fleet: str, **extra: Any) -> CoordinatorSettings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "fleet": fleet,
        "admin_token": ADMIN,
        "admin_name": "alice",
        "view_token": VIEW,
        "view_name": "grafana",
        **extra,
    }
    return CoordinatorSettings.model_validate(values)


def watchers(
    redis_url: str, fleet: str, clients: list[aioredis.Redis], max_pause: float = 1
) -> list[OverdueWatcher]:
    """One ``fleetgate serve`` watcher (``OverdueWatcher``, ``restore_interval=1``) per client:
    what as many servers watching ``fleet`` would run."""
    from coordinator.fleet.fleet import Fleet
    from coordinator.notify.alerts import Alerts
    from coordinator.web.metrics import OverdueWatcher

    settings = make_settings(redis_url, fleet, restore_interval=1, max_pause=max_pause)
    return [OverdueWatcher(Fleet(c, fleet), settings, Alerts(c, fleet)) for c in clients]


@asynccontextmanager
async def client_for(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://coordinator") as client:
            yield client


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def json_headers(token: str = ADMIN) -> dict[str, str]:
    return {**auth(token), "Content-Type": "application/json"}


def _not_json(constant: str) -> Any:
    raise AssertionError(f"{constant} is not JSON")


def strict_json(response: httpx.Response) -> Any:
    """The body as strict JSON: UTF-8 without lone surrogates, no NaN or Infinity."""
    return json.loads(response.content.decode("utf-8"), parse_constant=_not_json)
