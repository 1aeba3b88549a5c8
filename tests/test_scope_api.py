"""The API's ``select`` and ``dry_run`` (issue 22 points 6 and 9), on a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from coordinator.web.api import create_app
from tests.apikit import client_for, make_settings
from tests.test_api_holds import fleet_body, post


@pytest.fixture
async def api(redis_url: str, fleet_name: str) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(create_app(make_settings(redis_url, fleet_name), run_watcher=False)) as client:
        yield client


async def test_a_pause_takes_a_selector_and_a_dry_run_writes_nothing(
    api: httpx.AsyncClient,
) -> None:
    made = await post(api, "/api/fleet/pause", {"reason": "az", "hold": "zone-a",
                                                "select": "zone in (b, a)"})
    assert made.status_code == 200, made.text
    holds: Any = (await fleet_body(api))["state"]["holds"]
    assert holds["zone-a"]["select"] == "zone in (a,b)"
    version = (await fleet_body(api))["state"]["version"]
    dry = await post(api, "/api/fleet/resume", {"hold": "zone-a", "dry_run": True})
    assert dry.status_code == 200, dry.text
    body = dry.json()
    assert body["dry_run"] is True and body["event"] == "resume"
    assert body["paused_before"] is True and body["paused_after"] is False
    assert list(body["holds_before"]) == ["zone-a"] and body["holds_after"] == {}
    assert (await fleet_body(api))["state"]["version"] == version  # nothing written
    refused = await post(api, "/api/fleet/resume", {"hold": "nope", "dry_run": True})
    assert refused.status_code == 404
    bad = await post(api, "/api/fleet/pause", {"reason": "x", "select": "zone in ("})
    assert bad.status_code == 422
