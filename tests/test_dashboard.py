"""The dashboard in a real browser (Debian's chromium through Playwright's Python API).

Three real replicas (pools with controllers, in a thread of their own) follow a fleet on a
real Redis; the coordinator is served by uvicorn on a free port in another thread. The test
enters the token and a reason, clicks Pause, sees every replica row turn quiet with the new
version applied, clicks Resume and sees them run again.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis as syncredis

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.settings import CoordinatorSettings
from replica.contract import Keys, format_time, now_utc
from tests.dashkit import ADMIN, ARGS, Server, dashboard_page, patient
from tests.dashkit import chromium_or_skip as _chromium_or_skip
from tests.fleetkit import ReplicaThread, wait_until

SCREENSHOT = Path(tempfile.gettempdir()) / "fleetgate-dashboard.png"
SCREENSHOT_OVERDUE = Path(tempfile.gettempdir()) / "fleetgate-dashboard-overdue.png"
SCREENSHOT_STALE = Path(tempfile.gettempdir()) / "fleetgate-dashboard-stale.png"

pytestmark = pytest.mark.slow


@pytest.fixture
def coordinator(redis_url: str, fleet_name: str) -> Iterator[Server]:
    settings = CoordinatorSettings.model_validate(
        {"redis_url": redis_url, "fleet": fleet_name, "admin_token": ADMIN, "admin_name": "dash-op",
         "port": free_port()}
    )
    with Server(settings) as server:
        yield server


def test_pause_and_resume_from_the_dashboard_with_real_replicas(
    redis_url: str, fleet_name: str, coordinator: Server
) -> None:
    executable = _chromium_or_skip()
    from playwright.sync_api import expect, sync_playwright

    profile = tempfile.mkdtemp(prefix="fleetgate-chromium-")
    try:
        with ReplicaThread(redis_url, fleet_name, 3), sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=executable, args=ARGS, headless=True,
                viewport={"width": 1280, "height": 900},
            )
            try:
                page = patient(context.new_page())
                page.goto(coordinator.fleet_url(fleet_name))
                # no token yet: the page says so instead of showing data
                expect(page.locator("#connection")).to_have_attribute("data-state", "auth")

                page.fill("#token", ADMIN)
                expect(page.locator("#connection")).to_have_attribute("data-state", "live")
                expect(page.locator("#banner-state")).to_have_text("RUNNING")
                rows = page.locator("#replicas tbody tr")
                expect(rows).to_have_count(3)

                # the token lives in this tab's sessionStorage only
                assert page.evaluate("sessionStorage.getItem('fleetgate.token')") == ADMIN
                assert page.evaluate("localStorage.length") == 0
                assert page.context.cookies() == []

                # pause without a reason is refused on the page
                page.click("#pause")
                expect(page.locator("#message")).to_contain_text("reason is required")

                page.fill("#reason", "dashboard drill")
                page.select_option("#for", "1800")
                page.click("#pause")
                expect(page.locator("#message")).to_contain_text("Paused by dash-op")
                expect(page.locator("#banner-state")).to_have_text("PAUSED")
                expect(page.locator("#banner-reason")).to_have_text("dashboard drill")
                expect(page.locator("#banner-by")).to_have_text("dash-op")
                version = page.locator("#banner-version").inner_text()
                assert int(version) >= 1
                for rid in ("r1", "r2", "r3"):
                    row = page.locator(f'#replicas tbody tr[data-replica-id="{rid}"]')
                    expect(row).to_have_attribute("data-state", "quiet")
                    expect(row.locator("td.version")).to_have_attribute("data-version", version)
                expect(page.locator("#history tbody tr").first).to_have_attribute("data-action", "pause")
                page.screenshot(path=str(SCREENSHOT), full_page=True)

                expect(page.locator("#reason")).to_have_value("")  # cleared once it was used
                page.fill("#reason", "drill over")  # optional on a resume: for the audit trail
                page.click("#resume")
                expect(page.locator("#message")).to_contain_text("Resumed by dash-op")
                expect(page.locator("#banner-state")).to_have_text("RUNNING")
                resumed = page.locator("#banner-version").inner_text()
                assert int(resumed) == int(version) + 1
                for rid in ("r1", "r2", "r3"):
                    row = page.locator(f'#replicas tbody tr[data-replica-id="{rid}"]')
                    expect(row).to_have_attribute("data-state", "running")
                    expect(row.locator("td.version")).to_have_attribute("data-version", resumed)
                expect(page.locator("#history tbody tr").first).to_have_attribute("data-action", "resume")
                expect(page.locator("#history tbody tr").first).to_contain_text("drill over")
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_a_read_only_or_wrong_token_cannot_pause_from_the_dashboard(
    redis_url: str, fleet_name: str, coordinator: Server
) -> None:
    executable = _chromium_or_skip()
    from playwright.sync_api import expect

    with dashboard_page(executable) as page:
        page.goto(coordinator.fleet_url(fleet_name))
        page.fill("#token", "not-the-token-000000000")
        page.fill("#reason", "should not happen")
        page.click("#pause")
        expect(page.locator("#message")).to_contain_text("not valid")
        expect(page.locator("#connection")).to_have_attribute("data-state", "auth")
        page.click("#forget")
        assert page.evaluate("sessionStorage.getItem('fleetgate.token')") is None


def test_an_overdue_pause_turns_the_banner_red_and_markup_in_a_reason_stays_text(
    redis_url: str, fleet_name: str, coordinator: Server
) -> None:
    executable = _chromium_or_skip()
    from playwright.sync_api import expect

    reason = '<img src=x onerror="window.pwned=1"> <b>db</b> & "cache"'
    now = now_utc()
    client = syncredis.Redis.from_url(redis_url, decode_responses=True)
    client.hset(Keys(fleet_name).state, mapping={
        "version": "4", "paused": "1", "reason": reason, "by": "ivy",
        "since": format_time(now - timedelta(hours=2)),
        "expected_until": format_time(now - timedelta(hours=1)),
        "changed_at": format_time(now - timedelta(hours=2)),
    })
    client.close()
    with dashboard_page(executable, height=700) as page:
        page.goto(coordinator.fleet_url(fleet_name))
        page.fill("#token", ADMIN)
        expect(page.locator("#banner")).to_have_attribute("data-state", "overdue")
        expect(page.locator("#banner-state")).to_have_text("PAUSED — OVERDUE")
        expect(page.locator("#banner-age")).to_have_text("2h00m")
        expect(page.locator("#banner-reason")).to_have_text(reason)
        assert page.locator("#banner-reason img, #banner-reason b").count() == 0
        assert page.evaluate("window.pwned === undefined")
        color = page.evaluate("getComputedStyle(document.getElementById('banner-state')).color")
        assert color == "rgb(180, 35, 24)"  # --red
        page.screenshot(path=str(SCREENSHOT_OVERDUE))


STALE_PANELS = ("#banner", "#replicas-panel", "#history-panel")
STALE_NOTE = re.compile(r"Stale since \d\d:\d\d:\d\d UTC \((.+)\): as fetched at \d\d:\d\d:\d\d UTC")


def test_stale_data_is_greyed_out_saying_since_when_after_forget_a_wrong_token_or_an_error(
    private_redis: LocalRedis,
) -> None:
    executable = _chromium_or_skip()
    from playwright.sync_api import Page, expect, sync_playwright

    def expect_stale(page: Page, why: str) -> None:
        for panel in STALE_PANELS:
            expect(page.locator(panel)).to_have_attribute("data-stale", "true")
            note = page.locator(f"{panel} .stale-note")
            expect(note).to_be_visible()
            expect(note).to_have_text(STALE_NOTE)
            expect(note).to_contain_text(f"({why}")
        # the data stays, greyed out
        expect(page.locator("#banner-state")).to_have_text("PAUSED")
        expect(page.locator("#banner-reason")).to_have_text("stale drill")
        expect(page.locator("#history tbody tr")).to_have_count(1)
        for selector in ("#banner-state", "#replicas", "#history"):
            opacity = page.evaluate(
                f"getComputedStyle(document.querySelector('{selector}')).opacity"
            )
            assert float(opacity) < 1, selector
        background = page.evaluate("getComputedStyle(document.getElementById('banner')).backgroundColor")
        assert background == "rgb(236, 238, 242)"  # --grey-bg, not the paused amber

    def expect_fresh(page: Page) -> None:
        for panel in STALE_PANELS:
            expect(page.locator(panel)).to_have_attribute("data-stale", "false")
            expect(page.locator(f"{panel} .stale-note")).to_be_hidden()
        opacity = page.evaluate("getComputedStyle(document.getElementById('banner-state')).opacity")
        assert float(opacity) == 1

    settings = CoordinatorSettings.model_validate(
        {"redis_url": private_redis.url, "fleet": "stale", "admin_token": ADMIN,
         "admin_name": "dash-op", "port": free_port()}
    )
    profile = tempfile.mkdtemp(prefix="fleetgate-chromium-")
    try:
        with Server(settings) as coordinator, sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=executable, args=ARGS, headless=True,
                viewport={"width": 1280, "height": 900},
            )
            try:
                page = patient(context.new_page())
                page.goto(coordinator.fleet_url("stale"))
                page.fill("#token", ADMIN)
                page.fill("#reason", "stale drill")
                page.click("#pause")
                expect(page.locator("#banner-state")).to_have_text("PAUSED")
                expect(page.locator("#history tbody tr")).to_have_count(1)
                expect_fresh(page)

                page.click("#forget")
                expect_stale(page, "no token")
                page.fill("#token", ADMIN)
                expect_fresh(page)

                page.fill("#token", "not-the-token-000000000")
                expect_stale(page, "the token is not valid")
                page.fill("#token", ADMIN)
                expect_fresh(page)

                private_redis.kill()
                expect_stale(page, "Redis unreachable")
                page.screenshot(path=str(SCREENSHOT_STALE), full_page=True)
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_a_pause_that_waits_names_a_replica_gone_silent_and_one_that_left(
    redis_url: str, fleet_name: str, coordinator: Server
) -> None:
    executable = _chromium_or_skip()
    from playwright.sync_api import expect

    keys = Keys(fleet_name)
    client = syncredis.Redis.from_url(redis_url, decode_responses=True)
    beat = now_utc()
    for rid, interval in (("frozen-1", "0.5"), ("leaving-1", "10")):
        # heartbeats as replicas write them: frozen-1's (every 0.5 s) is its last
        client.hset(keys.replica(rid), mapping={
            "applied_version": "0", "fleet_held": "0", "quiet": "0", "in_flight": "2",
            "control": "connected", "heartbeat_at": format_time(beat),
            "heartbeat_interval": interval})
        client.zadd(keys.replicas, {rid: int(beat.timestamp() * 1000)})
    with dashboard_page(executable, height=900) as page:
        page.goto(coordinator.fleet_url(fleet_name))
        page.fill("#token", ADMIN)
        page.fill("#reason", "db migration")
        page.select_option("#wait", "5")
        page.click("#pause")
        expect(page.locator("#message")).to_contain_text("Waiting up to 5s")
        # the pause is made and waited for: leaving-1 stops cleanly meanwhile
        wait_until(lambda: client.hget(keys.state, "paused") == "1")
        client.delete(keys.replica("leaving-1"))
        client.zrem(keys.replicas, "leaving-1")
        message = page.locator("#message")
        expect(message).to_contain_text("Paused by dash-op", timeout=20_000)
        expect(message).to_contain_text("1 of 1 replicas not quiet")
        expect(message).to_have_attribute("data-kind", "warn")
        frozen = page.locator('#wait-report li[data-replica-id="frozen-1"]')
        expect(frozen).to_have_attribute("data-kind", "straggler")
        expect(frozen).to_have_text(
            f"frozen-1: unreachable, last heard {format_time(beat)}, 2 in flight")
        leaving = page.locator('#wait-report li[data-replica-id="leaving-1"]')
        expect(leaving).to_have_attribute("data-kind", "excused")
        expect(leaving).to_have_text("leaving-1: excused, gone (stopped cleanly)")
        client.close()
