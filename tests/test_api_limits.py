"""The backlog limit through the API (issue 21, point 6): ``GET/PUT/DELETE
/api/fleets/{name}/limits`` and ``/api/fleet/limits``, admin-token writes, view-token reads,
strict JSON bodies refused with a 4xx and a JSON detail (never a 500), the limit in
``GET /api/fleets/{name}`` and /metrics, and a garbage hash shown, not crashed on."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from replica.contract import Keys
from tests.apikit import ADMIN, VIEW, auth, json_headers, strict_json


def path(fleet: str) -> str:
    return f"/api/fleets/{fleet}/limits"


async def test_put_get_and_delete_a_limit_with_the_right_tokens(
    api: httpx.AsyncClient, redis: aioredis.Redis, fleet_name: str
) -> None:
    put = await api.put(path(fleet_name), headers=json_headers(ADMIN),
                        json={"max_backlog": 5000, "when_full": "wait"})
    assert put.status_code == 200, put.text
    body = strict_json(put)
    assert body["limit"]["max_backlog"] == 5000 and body["limit"]["by"] == "alice"
    assert body["previous"] is None and body["changed"] is True
    got = await api.get(path(fleet_name), headers=auth(VIEW))
    assert got.status_code == 200
    assert strict_json(got)["limit"]["when_full"] == "wait"
    fleet = strict_json(await api.get(f"/api/fleets/{fleet_name}", headers=auth(VIEW)))
    assert fleet["summary"]["backlog_limit"]["max_backlog"] == 5000  # at once, not a second later
    metrics = (await api.get("/metrics")).text
    assert f'fleetgate_fleet_backlog_limit{{fleet="{fleet_name}"}} 5000.0' in metrics
    assert (await api.get("/api/fleet/limits", headers=auth(VIEW))).json()["limit"]["max_backlog"] == 5000
    denied = await api.put(path(fleet_name), headers=json_headers(VIEW), json={"max_backlog": 1})
    assert denied.status_code == 403
    assert (await api.delete(path(fleet_name), headers=json_headers(VIEW))).status_code == 403
    assert (await api.get(path(fleet_name))).status_code == 401
    gone = await api.delete(path(fleet_name), headers=json_headers(ADMIN))
    assert gone.status_code == 200 and strict_json(gone)["previous"]["max_backlog"] == 5000
    again = await api.delete("/api/fleet/limits", headers=json_headers(ADMIN))
    assert again.status_code == 200 and strict_json(again)["changed"] is False
    assert not await redis.exists(Keys(fleet_name).limits)
    actions = [e["action"] for e in (await api.get(
        f"/api/fleets/{fleet_name}/history", headers=auth(VIEW))).json()["events"]]
    assert actions[:2] == ["limit_cleared", "limit_set"]


BAD_BODIES: list[Any] = [
    {},
    {"max_backlog": "5000"},
    {"max_backlog": 0},
    {"max_backlog": -3},
    {"max_backlog": 2.5},
    {"max_backlog": True},
    {"max_backlog": 10**13},
    {"max_backlog": None},
    {"max_backlog": 5, "when_full": "maybe"},
    {"max_backlog": 5, "when_full": None},
    {"max_backlog": 5, "by": "mallory"},
    [5000],
    "5000",
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=lambda b: repr(b)[:30])
async def test_a_bad_body_is_a_422_with_a_json_detail_and_changes_nothing(
    api: httpx.AsyncClient, redis: aioredis.Redis, fleet_name: str, body: Any
) -> None:
    response = await api.put(path(fleet_name), headers=json_headers(ADMIN), json=body)
    assert response.status_code == 422, response.text
    assert strict_json(response)["detail"]
    assert not await redis.exists(Keys(fleet_name).limits)


async def test_not_json_is_415_and_nan_is_422(
    api: httpx.AsyncClient, redis: aioredis.Redis, fleet_name: str
) -> None:
    plain = await api.put(path(fleet_name), headers={**auth(ADMIN), "Content-Type": "text/plain"},
                          content=b'{"max_backlog": 5}')
    assert plain.status_code == 415 and strict_json(plain)["detail"]
    nan = await api.put(path(fleet_name), headers=json_headers(ADMIN),
                        content=b'{"max_backlog": NaN}')
    assert nan.status_code == 422
    assert (await api.delete(path(fleet_name), headers=auth(ADMIN))).status_code == 415
    assert not await redis.exists(Keys(fleet_name).limits)


async def test_reading_the_limit_of_a_fleet_never_seen_is_404_and_a_bad_name_422(
    api: httpx.AsyncClient,
) -> None:
    assert (await api.get(path("never-seen-fleet"), headers=auth(VIEW))).status_code == 404
    assert (await api.get("/api/fleets/Bad Name/limits", headers=auth(VIEW))).status_code == 422


async def test_a_garbage_limits_hash_is_shown_with_why_never_a_500(
    api: httpx.AsyncClient, redis: aioredis.Redis, fleet_name: str
) -> None:
    assert (await api.put(path(fleet_name), headers=json_headers(ADMIN),
                          json={"max_backlog": 10})).status_code == 200
    await redis.hset(Keys(fleet_name).limits, "max_backlog", "\x1b[2J9e9")
    got = await api.get(path(fleet_name), headers=auth(VIEW))
    assert got.status_code == 200
    limit = strict_json(got)["limit"]
    assert limit["max_backlog"] is None and "not a whole number" in limit["error"]
    assert "\x1b" not in got.text
    fleet = await api.get(f"/api/fleets/{fleet_name}", headers=auth(VIEW))
    assert fleet.status_code == 200 and strict_json(fleet)["summary"]["backlog_limit"]["error"]
    metrics = await api.get("/metrics")
    # this fleet's series only: the session's server holds other tests' fleets, some limited
    assert metrics.status_code == 200
    assert f'fleetgate_fleet_backlog_limit{{fleet="{fleet_name}"}}' not in metrics.text
    await redis.delete(Keys(fleet_name).limits)
    await redis.set(Keys(fleet_name).limits, "not a hash")
    assert "not a hash" in strict_json(await api.get(path(fleet_name), headers=auth(VIEW)))["limit"]["error"]
