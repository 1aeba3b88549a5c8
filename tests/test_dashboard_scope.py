"""Holds for part of a fleet and a canary resume on the dashboard (issue 22 B.5, C.8), in headless
Chromium against a real coordinator and Redis.

Seven replica records written by the replica's own record writer (``ReplicaRecord``), each with
its labels and, as its controller would apply them, the holds that match it; the holds come from
the real ``Fleet`` calls: ``zone-a`` (``pause(select="zone=eu-west-1a")``) and ``v142``
(``pause(select="version=1.4.2")``, then ``resume(canary="canary", canaries=["orders-4"])``). The
fleet page shows each replica's labels as chips, each hold's selector, how many of the live
replicas it holds and the canary resume in progress; the overview names the selectors too.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica import PausablePool
from replica.contract import Keys
from replica.contract.holds import Hold, hold_applies
from replica.control.record import ReplicaRecord
from tests.dashkit import ADMIN, Server, chromium_or_skip, dashboard_page
from tests.test_dashboard_fleets import run_async, settings

pytestmark = pytest.mark.slow
FLEET = "orders"
SLOW = 20_000  # ms
SHOTS = Path(tempfile.gettempdir())

LABELS: dict[str, dict[str, str]] = {
    "orders-1": {"zone": "eu-west-1a", "version": "1.4.1"},
    "orders-2": {"zone": "eu-west-1a", "version": "1.4.1"},
    "orders-3": {"zone": "us-east-1a", "version": "1.4.2"},
    "orders-4": {"zone": "us-east-1a", "version": "1.4.2"},
    "orders-5": {"zone": "us-east-1a", "version": "1.4.2"},
    "orders-6": {"zone": "us-east-1a", "version": "1.4.2"},
    "orders-7": {},  # no FLEETGATE_LABELS (or a record of an older release)
}


class _Source:
    """What a controller shows the record writer (connected, holding what the pool holds)."""

    def __init__(self, fleet_held: bool) -> None:
        self.fleet_held = fleet_held
        self.resume_at = None
        self.subscribed = True


async def _noop(item: Any) -> None:
    return None


async def _register(client: aioredis.Redis, holds: list[Hold]) -> None:
    """Each replica's record, its pool holding what ``hold_applies`` says the holds hold."""
    for rid, labels in LABELS.items():
        pool = PausablePool(_noop)
        for hold in holds:
            if hold_applies(hold, labels, rid):
                pool.hold(hold.reason, source=f"fleet:{hold.name}")
        record = ReplicaRecord(pool, _Source(bool(pool.holds)), Keys(FLEET), rid,
                               heartbeat_interval=600.0, poll_interval=1.0, host="node-" + rid[-1],
                               labels=labels)
        pipe = client.pipeline(transaction=False)
        for command in record.commands():
            pipe.execute_command(*command)
        await pipe.execute()


@pytest.fixture
def scoped(private_redis: LocalRedis) -> None:
    async def make(client: aioredis.Redis) -> None:
        fleet = Fleet(client, FLEET)
        await fleet.pause("eu-west-1a database failover", by="alice", hold="zone-a",
                          select="zone=eu-west-1a")
        await fleet.pause("bad build 1.4.2", by="bob", hold="v142", select="version=1.4.2")
        await fleet.resume(by="carol", hold="v142", reason="try one", canary="canary",
                           canaries=["orders-4"])
        state = await fleet.state()
        holds = [h for h in state.effective_holds() if h.name in ("zone-a", "v142")]
        assert [h.canaries for h in holds if h.name == "v142"] == [("orders-4",)]
        await _register(client, holds)

    run_async(make, private_redis.url)


def test_the_fleet_page_shows_labels_selectors_what_each_hold_holds_and_the_canary(
    private_redis: LocalRedis, scoped: None
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    with Server(settings(private_redis.url, FLEET)) as server, \
            dashboard_page(executable, height=1200) as page:
        page.goto(server.fleet_url(FLEET))
        page.fill("#token", ADMIN)
        # each replica's labels, a chip each, sorted by key; none is "-"
        expect(page.locator("#replicas tbody tr")).to_have_count(7, timeout=SLOW)
        one = page.locator('#replicas tr[data-replica-id="orders-1"] td.labels')
        expect(one.locator("span.label-chip")).to_have_text(["version=1.4.1", "zone=eu-west-1a"])
        expect(one).to_have_attribute("data-labels", "version=1.4.1,zone=eu-west-1a")
        four = page.locator('#replicas tr[data-replica-id="orders-4"] td.labels span.label-chip')
        expect(four).to_have_text(["version=1.4.2", "zone=us-east-1a"])
        seven = page.locator('#replicas tr[data-replica-id="orders-7"] td.labels')
        expect(seven).to_have_text("-")
        assert seven.locator("span").count() == 0
        assert page.locator("#replicas thead th").all_text_contents()[-1] == "labels"
        # each hold: its selector, how many of the 7 live replicas it holds, the canary
        zone = page.locator('#holds tr[data-hold="zone-a"] td.hold-scope')
        expect(zone.locator(".hold-select")).to_have_text("select zone=eu-west-1a")
        expect(zone.locator(".hold-holding")).to_have_text("holds 2 of 7 replicas")
        assert zone.locator(".hold-canary").count() == 0
        v142 = page.locator('#holds tr[data-hold="v142"] td.hold-scope')
        expect(v142.locator(".hold-select")).to_have_text("select version=1.4.2")
        expect(v142.locator(".hold-holding")).to_have_text("holds 3 of 7 replicas")
        expect(v142.locator(".hold-canary")).to_have_text("canary: 1 of 4 released (orders-4)")
        expect(v142.locator(".hold-canary")).to_have_attribute("data-canaries", "orders-4")
        page.locator("#holds-panel").screenshot(path=str(SHOTS / "fleetgate-holds-scope.png"))

        # the overview names each hold's selector and the canary resume
        page.goto(server.url)
        row = page.locator(f'#fleets tr[data-fleet="{FLEET}"] td.holds')
        expect(row).to_have_text(
            "v142 [version=1.4.2] (canary: 1 released), zone-a [zone=eu-west-1a]", timeout=SLOW)


def test_a_hold_for_every_replica_says_so_and_a_promoted_canary_is_gone(
    private_redis: LocalRedis,
) -> None:
    """A hold without a selector holds every live replica; once the canary resume is promoted
    the hold is released and its row (and its canary line) is gone."""
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    async def make(client: aioredis.Redis) -> None:
        fleet = Fleet(client, FLEET)
        await fleet.pause("freeze", by="alice", hold="freeze")
        await fleet.pause("bad build 1.4.2", by="bob", hold="v142", select="version=1.4.2")
        await fleet.resume(by="carol", hold="v142", canary="canary", canaries=["orders-4"])
        await fleet.resume(by="carol", hold="v142", canary="promote")
        state = await fleet.state()
        await _register(client, list(state.effective_holds()))

    run_async(make, private_redis.url)
    with Server(settings(private_redis.url, FLEET)) as server, \
            dashboard_page(executable) as page:
        page.goto(server.fleet_url(FLEET))
        page.fill("#token", ADMIN)
        freeze = page.locator('#holds tr[data-hold="freeze"] td.hold-scope')
        expect(freeze.locator(".hold-holding")).to_have_text("holds 7 of 7 replicas", timeout=SLOW)
        expect(freeze.locator(".hold-select")).to_have_text("every replica")
        expect(page.locator('#holds tr[data-hold="v142"]')).to_have_count(0)
        assert page.locator("#holds .hold-canary").count() == 0
