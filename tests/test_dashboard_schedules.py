"""The dashboard shows each schedule's occurrence in force or its next one, in its zone and in
UTC (issue 22 A.4), and a canary resume of the one in force (C.8), in headless Chromium against
a real coordinator and Redis."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
import redis.asyncio as aioredis

from coordinator import Fleet
from coordinator.demo.localredis import free_port
from coordinator.fleet.occurrence_canary import occurrence_canary
from coordinator.settings import CoordinatorSettings
from replica.contract import format_time, now_utc
from replica.contract.schedules import next_occurrences
from tests.dashkit import ADMIN, Server, chromium_or_skip, dashboard_page

pytestmark = pytest.mark.slow


def test_the_fleet_page_lists_each_schedule_with_its_next_occurrence(
    redis_url: str, fleet_name: str
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    added = []

    async def make() -> None:
        client = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            fleet = Fleet(client, fleet_name)
            now = now_utc()
            added.append(await fleet.add_schedule(
                "backup", "0 2 * * SUN", timedelta(hours=2), "Europe/Berlin", "weekly backup",
                by="alice"))
            added.append(await fleet.add_schedule(
                "freeze", f"{now.minute} {now.hour} * * *", timedelta(hours=23), "UTC",
                "release freeze", by="bob"))
            await fleet.pause("warm-up", by="ops", hold="warmup")
            # a canary resume of the occurrence in force (issue 22 C.8)
            await occurrence_canary(fleet, "freeze", "canary", "carol", "", ["pod-1"])
        finally:
            await client.aclose()

    thread = threading.Thread(target=asyncio.run, args=(make(),))
    thread.start()
    thread.join(60)
    assert len(added) == 2
    backup_next = next_occurrences(added[0], now_utc(), 1)[0]
    settings = CoordinatorSettings.model_validate(
        {"redis_url": redis_url, "fleet": fleet_name, "admin_token": ADMIN,
         "admin_name": "dash-op", "port": free_port()})
    with Server(settings) as server, dashboard_page(executable) as page:
        page.goto(server.fleet_url(fleet_name))
        page.fill("#token", ADMIN)
        rows = page.locator("#schedules tbody tr")
        expect(rows).to_have_count(2)
        backup = page.locator('#schedules tr[data-schedule="backup"]')
        expect(backup).to_have_attribute("data-active", "false")
        expect(backup).to_contain_text("0 2 * * SUN · 2h · Europe/Berlin")
        expect(backup.locator("td.next-local")).to_contain_text(" 02:00 (+01:00)")
        expect(backup.locator("td.next-utc")).to_contain_text(format_time(backup_next.start))
        freeze = page.locator('#schedules tr[data-schedule="freeze"]')
        expect(freeze).to_have_attribute("data-active", "true")
        expect(freeze.locator("td.next-local")).to_contain_text("now, since")
        canary = freeze.locator(".hold-canary")
        expect(canary).to_have_text("canary: 1 released (pod-1)")
        expect(canary).to_have_attribute("data-canaries", "pod-1")
        expect(backup.locator(".hold-canary")).to_have_count(0)
        expect(page.locator("#no-schedules")).to_be_hidden()
        # the occurrence in force is a hold of the fleet like any other
        expect(page.locator('#holds tr[data-hold="warmup"]')).to_have_count(1)
