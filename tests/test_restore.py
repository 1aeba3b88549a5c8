"""Restoring a state hash Redis forgot: an older pause wins, and a version never goes back
(issue 13 rule 4), through real replicas, with and without permission to run the restore."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as aioredis
from cpkit import Replicas, until

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica.contract import FleetState, Keys


async def test_an_older_restored_pause_is_raised_above_a_newer_running_state_so_no_version_goes_back(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=0.2) as replicas:
        applied: dict[int, list[int]] = {i: [] for i in range(len(replicas.controllers))}
        for i, controller in enumerate(replicas.controllers):
            controller.add_listener(
                lambda state, _delay, i=i: applied[i].append(state.version))
        paused = await fleet.pause("older", by="ops")  # replica A's v5
        assert (await fleet.wait(paused.version, timeout=10)).ok
        resumed = await fleet.resume(by="ops")  # replica B's v7
        assert (await fleet.wait(resumed.version, timeout=10)).ok
        # Redis restarted empty and A put its older pause back first
        await redis.delete(keys.state)
        await redis.hset(keys.state, mapping=dict(paused.to_hash()))
        await until(lambda: all(c.applied_version > resumed.version
                                for c in replicas.controllers), timeout=10)
        state = await fleet.state()
        assert state.paused and state.reason == "older" and state.version > resumed.version
        assert all(p.holds == {"fleet": "older"} for p in replicas.pools)
        audit = await redis.xrevrange(keys.audit, count=1)
        assert audit[0][1]["action"] == "restore"
        assert int(audit[0][1]["version"]) == state.version
        before = max(v for versions in applied.values() for v in versions)
        again = await fleet.resume(by="ops")
        assert again.version > before
        assert (await fleet.wait(again.version, timeout=10)).ok
        assert all(c.applied_version == again.version for c in replicas.controllers)
        assert all(not p.paused for p in replicas.pools)
    for versions in applied.values():
        assert versions == sorted(versions), f"a version went back: {versions}"


async def test_a_replica_that_may_not_run_the_restore_still_applies_an_older_pause(
    private_redis: LocalRedis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="replica.control.applier")
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    await admin.execute_command(
        "ACL", "SETUSER", "replica", "on", ">pw", "resetkeys", "~fleetgate:*:replica:*",
        "~fleetgate:*:replicas", "%R~fleetgate:*:state", "resetchannels",
        "&fleetgate:*:control", "&fleetgate:*:acks", "+@all", "-@scripting",
    )
    url = private_redis.url.replace("redis://", "redis://replica:pw@")
    fleet = Fleet(admin, fleet_name)
    keys = Keys(fleet_name)
    try:
        async with Replicas(url, fleet_name, 2, poll_interval=0.2) as replicas:
            paused = await fleet.pause("older", by="ops")
            assert (await fleet.wait(paused.version, timeout=10)).ok
            resumed = await fleet.resume(by="ops")
            assert (await fleet.wait(resumed.version, timeout=10)).ok
            await admin.delete(keys.state)
            await admin.hset(keys.state, mapping=dict(paused.to_hash()))
            await until(lambda: all(p.holds == {"fleet": "older"} for p in replicas.pools),
                        timeout=10)
            # it tried the restore first, was refused, and fell back to the pause (safety first)
            assert all(c.stats().restore_failures >= 1 for c in replicas.controllers)
            assert all(c.applied_version == paused.version for c in replicas.controllers)
            stored = FleetState.from_hash(fleet_name, await admin.hgetall(keys.state))
            assert stored == paused  # nothing written by the replicas
            fallbacks = [r for r in caplog.records if "may not restore" in r.getMessage()]
            assert len(fallbacks) == 2  # logged once per replica
    finally:
        await admin.aclose()
