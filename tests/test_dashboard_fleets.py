"""The dashboard over many fleets and big ones, in a real browser (Debian's chromium).

* The overview (``/``): 20 fleets made with the real ``Fleet`` API on a Redis of their own,
  some paused; the paused ones come first, the page makes one request a poll (``GET
  /api/fleets``, never one per fleet), and a click on a fleet leads to its page.
* Holds: a fleet with two active holds and a scheduled one; the global resume is refused (the
  409 is shown, nothing changes), one hold's own button releases it alone, the fleet stays
  paused by the other, and "Resume all holds" releases the rest.
* 1,000 replicas, their records written by the replica's own record writer
  (``replica.control.record.ReplicaRecord``): the summary, the replicas that need attention,
  and every replica met once across the pages of the table, one request a poll all along.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis as syncredis
import redis.asyncio as aioredis

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.settings import CoordinatorSettings
from replica import PausablePool
from replica.contract import Keys, format_time, now_utc
from replica.control.record import ReplicaRecord
from tests.dashkit import (
    ADMIN,
    ApiRequests,
    Server,
    chromium_or_skip,
    dashboard_page,
    polls,
    wait_polls,
)

pytestmark = pytest.mark.slow
T = TypeVar("T")

PAUSED = (3, 5, 8, 13, 17, 19)
SHOTS = Path(tempfile.gettempdir())
MARKUP = '<img src=x onerror="window.pwned=1"> <b>cache</b> & "db"'


def run_async(make: Callable[[aioredis.Redis], Awaitable[T]], url: str) -> T:
    """Run ``make(client)`` on a loop of its own in a thread (Playwright's sync API owns this
    thread's)."""
    out: list[T] = []

    async def main() -> None:
        client = aioredis.Redis.from_url(url, decode_responses=True)
        try:
            out.append(await make(client))
        finally:
            await client.aclose()

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    thread.join(60)
    assert out, "the Redis calls did not finish"
    return out[0]


def settings(url: str, fleet: str) -> CoordinatorSettings:
    return CoordinatorSettings.model_validate(
        {"redis_url": url, "fleet": fleet, "admin_token": ADMIN, "admin_name": "dash-op",
         "port": free_port()}
    )


def holds_of(client: syncredis.Redis, fleet: str) -> dict[str, Any]:
    holds: dict[str, Any] = json.loads(client.hget(Keys(fleet).state, "holds") or "{}")
    return holds


# ---------------------------------------------------------------------------- many fleets


@pytest.fixture
def twenty_fleets(private_redis: LocalRedis) -> Iterator[list[str]]:
    names = [f"fleet-{i:02d}" for i in range(20)]

    async def make(client: aioredis.Redis) -> None:
        for i, name in enumerate(names):
            fleet = Fleet(client, name)
            if i in PAUSED:
                reason = MARKUP if i == 5 else f"drill {i}"
                window = timedelta(milliseconds=1) if i == 19 else None  # overdue at once
                await fleet.pause(reason, by="ops", expected_for=window)
            else:  # a fleet that ran: paused once and resumed, listed by its changes
                await fleet.pause("warm-up", by="ops")
                await fleet.resume(by="ops")

    run_async(make, private_redis.url)
    yield names


def test_the_overview_lists_twenty_fleets_paused_first_with_one_request_a_poll_and_leads_to_a_fleet(
    private_redis: LocalRedis, twenty_fleets: list[str]
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    with Server(settings(private_redis.url, "fleet-00")) as server, \
            dashboard_page(executable, height=1000) as page:
        api = ApiRequests(page)
        page.goto(server.url)
        expect(page.locator("body")).to_have_attribute("data-view", "overview")
        expect(page.locator("#connection")).to_have_attribute("data-state", "auth")
        page.fill("#token", ADMIN)
        rows = page.locator("#fleets tbody tr")
        expect(rows).to_have_count(20)
        expect(page.locator("#connection")).to_have_attribute("data-state", "live")

        order = rows.evaluate_all("rows => rows.map(r => [r.dataset.fleet, r.dataset.state])")
        paused = [f"fleet-{i:02d}" for i in PAUSED]
        # paused first, the overdue one before the others; then the running ones, by name
        assert order[0] == ["fleet-19", "overdue"]
        assert [name for name, _ in order[:6]] == ["fleet-19", *sorted(paused[:-1])]
        assert all(state == "paused" for _, state in order[1:6])
        assert [name for name, _ in order[6:]] == sorted(set(twenty_fleets) - set(paused))
        assert all(state == "running" for _, state in order[6:])
        expect(page.locator("#fleets-summary")).to_contain_text("20 fleets: 6 paused (1 overdue), 14 running")
        expect(page.locator("#default-fleet a")).to_have_attribute("href", "?fleet=fleet-00")
        row = page.locator('#fleets tbody tr[data-fleet="fleet-03"]')
        expect(row.locator("td.holds")).to_have_text("default")
        expect(row.locator("td.reason")).to_have_text("drill 3")
        expect(page.locator('#fleets tbody tr[data-fleet="fleet-19"] td.overdue')).to_have_text("OVERDUE")
        markup = page.locator('#fleets tbody tr[data-fleet="fleet-05"] td.reason')
        expect(markup).to_have_text(MARKUP)
        assert page.locator("#fleets img, #fleets b").count() == 0
        page.screenshot(path=str(SHOTS / "fleetgate-dashboard-overview.png"), full_page=True)

        # one poll feeds the page: one GET /api/fleets a tick, never a request per fleet
        start, ticks = len(api.seen), polls(page)
        expect(page.locator("body")).not_to_have_attribute("data-polls", str(ticks))
        wait_polls(page, ticks + 3)
        seen = api.since(start)
        assert len(seen) <= polls(page) - ticks + 1
        assert len(seen) >= 2
        assert {path for path, _ in seen} == {"/api/fleets"}

        page.click('#fleets a[aria-label="fleet fleet-05"]')
        expect(page.locator("body")).to_have_attribute("data-view", "fleet")
        assert page.url.endswith("/?fleet=fleet-05")
        expect(page.locator("#fleet-name")).to_have_text("fleet-05")
        expect(page.locator("#banner-state")).to_have_text("PAUSED")
        expect(page.locator("#banner-reason")).to_have_text(MARKUP)
        assert page.evaluate("window.pwned === undefined")

        page.click("#all-fleets")
        expect(page.locator("body")).to_have_attribute("data-view", "overview")
        expect(rows).to_have_count(20)

        server.__exit__(None, None, None)  # the coordinator goes away: the rows stay, greyed out
        expect(page.locator("#fleets-panel")).to_have_attribute("data-stale", "true")
        expect(page.locator("#fleets-panel .stale-note")).to_contain_text("(coordinator unreachable)")
        expect(rows).to_have_count(20)


def test_a_fleet_the_server_cannot_read_is_shown_as_unreadable_with_why_and_the_others_as_usual(
    private_redis: LocalRedis,
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    async def make(client: aioredis.Redis) -> None:
        for name in ("broken", "calm", "held"):
            await Fleet(client, name).pause("drill", by="ops")
        await Fleet(client, "calm").resume(by="ops")
        await Fleet(client, "broken").resume(by="ops")
        replicas = Keys("broken").replicas  # retyped by hand: every read of it fails
        await client.delete(replicas)
        await client.set(replicas, "garbage")

    run_async(make, private_redis.url)
    with Server(settings(private_redis.url, "calm")) as server, \
            dashboard_page(executable, height=600) as page:
        page.goto(server.url)
        page.fill("#token", ADMIN)
        rows = page.locator("#fleets tbody tr")
        expect(rows).to_have_count(3)
        order = rows.evaluate_all("rows => rows.map(r => [r.dataset.fleet, r.dataset.state])")
        assert order == [["broken", "unreadable"], ["held", "paused"], ["calm", "running"]]
        broken = page.locator('#fleets tbody tr[data-fleet="broken"]')
        expect(broken.locator("td.fleet-state")).to_have_text("UNREADABLE")
        expect(broken.locator("td.reason")).to_contain_text("WRONGTYPE")
        expect(page.locator("#fleets-summary")).to_have_text(
            "3 fleets: 1 paused, 1 running, 1 cannot be read")


def test_a_fleet_never_seen_can_be_paused_from_its_page_and_a_bad_name_asks_nothing(
    redis_url: str, fleet_name: str, sync_redis: syncredis.Redis
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    with Server(settings(redis_url, "t-default-" + fleet_name[2:])) as server, \
            dashboard_page(executable) as page:
        api = ApiRequests(page)
        page.goto(server.fleet_url("Not%20a%20fleet!"))
        expect(page.locator("#connection")).to_contain_text("not a fleet name")
        expect(page.locator("#fleet-name")).to_have_text("Not a fleet!")
        page.goto(server.fleet_url(fleet_name))
        page.fill("#token", ADMIN)
        expect(page.locator("#connection")).to_contain_text(f"no fleet {fleet_name} on this Redis")
        assert all(path.startswith(f"/api/fleets/{fleet_name}") for path, _ in api.seen)
        page.fill("#reason", "before the first deploy")
        page.fill("#hold-name", "launch")
        page.select_option("#wait", "")
        page.click("#pause")
        expect(page.locator("#message")).to_contain_text("Paused by dash-op")
        expect(page.locator("#connection")).to_have_attribute("data-state", "live")
        expect(page.locator("#banner-state")).to_have_text("PAUSED")
        expect(page.locator('#holds tr[data-hold="launch"]')).to_have_attribute("data-status", "active")
        assert set(holds_of(sync_redis, fleet_name)) == {"launch"}


# ---------------------------------------------------------------------------- holds


def test_resuming_one_of_two_holds_leaves_the_fleet_paused_by_the_other(
    redis_url: str, fleet_name: str, sync_redis: syncredis.Redis
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    starts: list[datetime] = []

    async def make(client: aioredis.Redis) -> int:
        fleet = Fleet(client, fleet_name)
        await fleet.pause("pg 16 upgrade", by="dba", hold="db")
        starts.append(now_utc() + timedelta(hours=2))
        await fleet.pause("weekly window", by="sre", hold="maint", starts_at=starts[0],
                          expected_for=timedelta(minutes=30), auto_resume_after=timedelta(minutes=30))
        state = await fleet.pause(MARKUP, by="oncall", hold="incident")
        return state.version

    version = run_async(make, redis_url)
    with Server(settings(redis_url, fleet_name)) as server, dashboard_page(executable, height=1100) as page:
        page.goto(server.fleet_url(fleet_name))
        page.fill("#token", ADMIN)
        page.select_option("#wait", "")
        holds = page.locator("#holds tbody tr")
        expect(holds).to_have_count(3)
        expect(page.locator("#banner-state")).to_have_text("PAUSED")
        expect(page.locator('#holds tr[data-hold="db"]')).to_have_attribute("data-status", "active")
        expect(page.locator('#holds tr[data-hold="incident"] td.reason')).to_have_text(MARKUP)
        assert page.locator("#holds img, #holds b").count() == 0
        scheduled = page.locator('#holds tr[data-hold="maint"]')
        expect(scheduled).to_have_attribute("data-status", "scheduled")
        expect(scheduled).to_contain_text("starts " + format_time(starts[0]))
        expect(scheduled.get_by_role("button", name="Cancel scheduled hold maint")).to_be_visible()
        expect(page.locator("#resume-all")).to_be_visible()
        page.screenshot(path=str(SHOTS / "fleetgate-dashboard-holds.png"), full_page=True)

        # the global resume does not release several holds: the 409 is shown, nothing changes
        page.click("#resume")
        message = page.locator("#message")
        expect(message).to_have_attribute("data-kind", "error")
        expect(message).to_contain_text("Nothing changed")
        expect(message).to_contain_text("db")
        assert set(holds_of(sync_redis, fleet_name)) == {"db", "incident", "maint"}
        assert int(sync_redis.hget(Keys(fleet_name).state, "version") or 0) == version

        page.get_by_role("button", name="Resume hold db").click()
        expect(message).to_contain_text("Hold db released by dash-op")
        expect(message).to_contain_text("still paused by incident")
        expect(holds).to_have_count(2)
        expect(page.locator('#holds tr[data-hold="db"]')).to_have_count(0)
        expect(page.locator("#banner-state")).to_have_text("PAUSED")
        assert set(holds_of(sync_redis, fleet_name)) == {"incident", "maint"}
        assert sync_redis.hget(Keys(fleet_name).state, "paused") == "1"

        page.click("#resume-all")
        expect(message).to_contain_text("Resumed by dash-op")
        expect(page.locator("#banner-state")).to_have_text("RUNNING")
        expect(page.locator("#no-holds")).to_be_visible()
        assert holds_of(sync_redis, fleet_name) == {}


# ---------------------------------------------------------------------------- big fleets


class _Source:
    """What a controller shows the record writer: connected to the control channel or not."""

    def __init__(self, subscribed: bool) -> None:
        self.fleet_held = False
        self.resume_at = None
        self.subscribed = subscribed


async def _noop(item: Any) -> None:
    return None


REPLICAS = 1000
CONTROL_DOWN = ("r-0007", "r-0123", "r-0500", "r-0999")


def write_records(client: syncredis.Redis, fleet: str) -> list[str]:
    """1,000 heartbeats as the replica's record writer writes them (one pool for all: the
    records are what the dashboard reads). A few lost their control channel."""
    pool = PausablePool(_noop)
    ids = [f"r-{i:04d}" for i in range(REPLICAS)]
    pipe = client.pipeline(transaction=False)
    for rid in ids:
        record = ReplicaRecord(pool, _Source(rid not in CONTROL_DOWN), Keys(fleet), rid,
                               heartbeat_interval=600.0, poll_interval=1.0, host=f"node-{rid[-1]}")
        for command in record.commands():
            pipe.execute_command(*command)
    pipe.execute()
    return ids


def test_a_fleet_of_a_thousand_replicas_shows_the_summary_the_problems_and_every_replica_a_page_at_a_time(
    redis_url: str, fleet_name: str, sync_redis: syncredis.Redis
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    ids = write_records(sync_redis, fleet_name)
    with Server(settings(redis_url, fleet_name)) as server, dashboard_page(executable, height=1000) as page:
        api = ApiRequests(page)
        page.goto(server.fleet_url(fleet_name))
        page.fill("#token", ADMIN)
        expect(page.locator("#summary")).to_contain_text("1000 replicas: 1000 running")
        attention = page.locator("#attention tbody tr")
        expect(attention).to_have_count(len(CONTROL_DOWN))
        assert attention.evaluate_all("rows => rows.map(r => r.dataset.replicaId)") == list(CONTROL_DOWN)
        expect(attention.first.locator("td.why")).to_have_text("control down")
        expect(page.locator("#attention-summary")).to_contain_text("4 replicas need attention")

        info = page.locator("#page-info")
        expect(info).to_have_text("replicas 1–100 of 1000 (page 1)")
        start, ticks = len(api.seen), polls(page)
        met: list[str] = []
        for n in range(REPLICAS // 100):
            expect(info).to_have_text(f"replicas {n * 100 + 1}–{n * 100 + 100} of 1000 (page {n + 1})")
            rows = page.locator("#replicas tbody tr")
            expect(rows.first).to_have_attribute("data-replica-id", ids[n * 100])
            met += rows.evaluate_all("rows => rows.map(r => r.dataset.replicaId)")
            if n == 4:
                page.screenshot(path=str(SHOTS / "fleetgate-dashboard-big.png"), full_page=True)
            if n < REPLICAS // 100 - 1:
                page.click("#page-next")
        expect(page.locator("#page-next")).to_be_disabled()
        assert met == ids  # every replica, once, in order, across the pages

        page.click("#page-first")
        expect(info).to_have_text("replicas 1–100 of 1000 (page 1)")
        wait_polls(page, polls(page) + 2)
        seen = api.since(start)
        # one request a poll tick (a page asked for takes the next tick's place), each a page
        assert len(seen) <= polls(page) - ticks + 1
        base = f"/api/fleets/{fleet_name}"
        assert {path for path, _ in seen} <= {base, base + "/history", base + "/timeline"}
        pages = [query for path, query in seen if query.get("replicas") == ["all"]]
        assert len(pages) >= REPLICAS // 100
        assert all(query.get("limit") == ["100"] for query in pages)
        # and no answer carries every record (1,000 of them are some 800 KB as JSON)
        assert api.sizes and all(0 < size < 200_000 for _, size in api.sizes), max(api.sizes)
