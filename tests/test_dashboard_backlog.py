"""The dashboard shows a fleet's backlog (issue 21, point 1): the overview's backlog and dead
letters columns, and the fleet page's summary line, from a real coordinator on a Redis of its
own, in a headless Chromium."""

from __future__ import annotations

import asyncio

import pytest
import redis as syncredis
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.fleet.fleet import Fleet
from coordinator.settings import CoordinatorSettings
from replica.contract import WORK_GROUP, Keys
from tests.dashkit import ADMIN, Server, chromium_or_skip, dashboard_page

pytestmark = pytest.mark.slow


async def pause(url: str) -> None:
    async with aioredis.Redis.from_url(url, decode_responses=True) as redis:
        await Fleet(redis, "orders").pause("maintenance", by="t")


def test_the_overview_and_the_fleet_page_show_the_backlog_pending_and_dead_letters(
    private_redis: LocalRedis,
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    with syncredis.Redis.from_url(private_redis.url, decode_responses=True) as c:
        keys = Keys("orders")
        for i in range(7):
            c.xadd(keys.work, {"n": str(i)})
        c.xgroup_create(keys.work, WORK_GROUP, id="0")
        c.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=2)
        c.xadd(keys.dead, {"n": "x"})
    settings = CoordinatorSettings.model_validate({
        "redis_url": private_redis.url, "fleet": "orders", "admin_token": ADMIN,
        "port": free_port(),
    })
    asyncio.run(pause(private_redis.url))  # in the registry, held: the backlog grows
    with Server(settings) as server, dashboard_page(executable) as page:
        page.goto(server.url)
        page.fill("#token", ADMIN)
        row = page.locator('#fleets tbody tr[data-fleet="orders"]')
        expect(row.locator("td.backlog")).to_have_text("5")
        expect(row.locator("td.dead")).to_have_text("1")
        page.goto(server.fleet_url("orders"))
        expect(page.locator("#summary")).to_contain_text(
            "backlog 5 waiting (oldest ")
        expect(page.locator("#summary")).to_contain_text("2 pending, 1 dead letters")
