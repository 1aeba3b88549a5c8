"""The API's ``select`` and ``dry_run`` (issue 22 points 6 and 9), on a real Redis: a pause
with ``select`` and ``wait`` waits for the live replicas it matches only, and says how many."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import redis.asyncio as aioredis

from replica import PausablePool
from replica.contract import R_LABELS, Keys, format_time, now_utc
from replica.control.controller import FleetController
from tests.fleetkit import until
from tests.test_api_holds import fleet_body, post


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


async def _forged(redis: aioredis.Redis, fleet: str, replica: str, labels: str) -> None:
    """A replica live by its heartbeat (30 s interval) that never applies a version."""
    record: dict[Any, Any] = {
        "applied_version": "0", "fleet_held": "0", "quiet": "0", "in_flight": "0",
        "control": "connected", "heartbeat_at": format_time(now_utc()),
        "heartbeat_interval": "30", R_LABELS: labels}
    await redis.hset(Keys(fleet).replica(replica), mapping=record)
    await redis.zadd(Keys(fleet).replicas, {replica: int(now_utc().timestamp() * 1000)})


async def test_a_selected_pause_waits_for_the_matching_live_replicas_only_and_says_how_many(
    api: httpx.AsyncClient, redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    async def handler(item: Any) -> None:
        pass

    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(client.aclose)
        pool = await stack.enter_async_context(PausablePool(handler, name="eu-1"))
        await stack.enter_async_context(FleetController(
            pool, client, fleet_name, "eu-1", poll_interval=0.2, heartbeat_interval=0.5,
            host="testhost", labels={"zone": "eu"}))
        # a live replica of another zone that would never get there: waited for, the wait
        # could not end ok
        await _forged(redis, fleet_name, "us-1", '{"zone":"us"}')

        async def both_live() -> bool:
            return {r["id"] for r in (await fleet_body(api))["replicas"]} == {"eu-1", "us-1"}
        await until(both_live)

        made = await post(api, "/api/fleet/pause", {"reason": "eu db", "hold": "zone-eu",
                                                    "select": "zone=eu", "wait": True,
                                                    "timeout": 20})
        assert made.status_code == 200, made.text
        body = made.json()
        assert body["selected"] == {"select": "zone=eu", "matched": 1, "live": 2}
        assert body["wait"]["ok"] is True
        assert [r["id"] for r in body["wait"]["replicas"]] == ["eu-1"]
        assert pool.holds == {"fleet:zone-eu": "eu db"}

        # a selector that matches no live replica: said, and the wait does not pretend
        none = await post(api, "/api/fleet/pause", {"reason": "ap db", "hold": "zone-ap",
                                                    "select": "zone=ap", "wait": True,
                                                    "timeout": 20})
        assert none.status_code == 202, none.text
        body = none.json()
        assert body["selected"] == {"select": "zone=ap", "matched": 0, "live": 2}
        assert body["wait"]["ok"] is False and body["wait"]["replicas"] == []
        assert body["detail"].startswith(
            f"select 'zone=ap' matches no live replica of fleet {fleet_name} (0 of 2)")
        assert "zone-ap" in body["state"]["holds"]  # the hold is made all the same
        # without wait: the count, no detail
        quiet = await post(api, "/api/fleet/pause", {"reason": "ap db", "hold": "zone-ap",
                                                     "select": "zone=ap"})
        assert quiet.status_code == 200, quiet.text
        assert quiet.json()["selected"]["matched"] == 0 and "detail" not in quiet.json()
