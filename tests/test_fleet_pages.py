"""``GET /api/fleets/{name}``: the summary by default, every record a page at a time with
``?replicas=all&limit=&cursor=``, bad paging values a 422 with a JSON detail, and one read of
the records for many requests at once (the app's snapshot cache)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from coordinator.fleet.pages import MAX_PAGE, page
from coordinator.web.api import create_app
from tests.apikit import VIEW, auth, client_for, make_settings
from tests.fleetkit import Kit, replicas

SIZE = 23


@pytest.fixture
async def app(redis_url: str, fleet_name: str) -> FastAPI:
    return create_app(make_settings(redis_url, fleet_name), run_watcher=False)


@pytest.fixture
async def fleet(redis_url: str, fleet_name: str) -> AsyncIterator[Kit]:
    async with replicas(redis_url, fleet_name, SIZE, heartbeat_interval=30, poll_interval=5) as kit:
        yield kit


async def get(api: httpx.AsyncClient, path: str, **params: str) -> httpx.Response:
    return await api.get(path, params=params, headers=auth(VIEW))


async def test_following_next_cursor_meets_every_replica_exactly_once_in_id_order(
    app: FastAPI, fleet: Kit, fleet_name: str
) -> None:
    path = f"/api/fleets/{fleet_name}"
    async with client_for(app) as api:
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            params = {"replicas": "all", "limit": "5"} | ({"cursor": cursor} if cursor else {})
            response = await get(api, path, **params)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["summary"]["replicas"] == SIZE and len(body["replicas"]) <= 5
            seen += [r["id"] for r in body["replicas"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
    assert pages == 5
    assert seen == sorted(fleet.ids) and len(set(seen)) == SIZE


async def test_the_default_answer_is_the_summary_with_the_replicas_that_need_attention(
    app: FastAPI, fleet: Kit, fleet_name: str
) -> None:
    fleet.replicas[3].pool.hold("disk full")
    async with client_for(app) as api:
        for _ in range(200):
            body = (await get(api, f"/api/fleets/{fleet_name}")).json()
            if body["attention_total"]:
                break
            await asyncio.sleep(0.05)
    assert set(body) == {"fleet", "state", "summary", "attention", "attention_total"}
    assert body["attention_total"] == 1 and body["attention"][0]["id"] == "r4"
    assert body["attention"][0]["why"] == ["paused while the fleet runs"]
    assert body["summary"]["live"] == SIZE and body["summary"]["paused_while_running"] == 1


@pytest.mark.parametrize("params", [
    {"replicas": "all", "limit": "0"},
    {"replicas": "all", "limit": str(MAX_PAGE + 1)},
    {"replicas": "all", "limit": "ten"},
    {"replicas": "all", "limit": "-1"},
    {"replicas": "all", "cursor": "not a replica id"},
    {"replicas": "every"},
    {"limit": "5"},
    {"cursor": "r1"},
])
async def test_bad_paging_values_get_422_with_a_json_detail(
    app: FastAPI, fleet_name: str, params: dict[str, str]
) -> None:
    async with client_for(app) as api:
        await api.post("/api/fleet/pause", headers=auth("admin-token-for-tests-0123"),
                       json={"reason": "so the fleet exists"})
        response = await get(api, f"/api/fleets/{fleet_name}", **params)
    assert response.status_code == 422, response.text
    assert isinstance(response.json()["detail"], str | list)


async def test_many_requests_at_once_read_the_records_once(
    app: FastAPI, fleet: Kit, fleet_name: str
) -> None:
    async with client_for(app) as api:
        paths = [f"/api/fleets/{fleet_name}", "/api/fleet", "/metrics"] * 4
        answers = await asyncio.gather(*(api.get(p, headers=auth(VIEW)) for p in paths))
        assert [a.status_code for a in answers] == [200] * len(paths)
        assert app.state.runtime.snapshots.reads_of(fleet_name) == 1


def test_a_page_after_the_last_id_is_empty_and_has_no_next_cursor() -> None:
    assert page([], 10, "zz").to_dict() == {
        "replicas": [], "limit": 10, "cursor": "zz", "next_cursor": None}
