"""Restoring a state hash Redis forgot: an older pause wins, and a version never goes back
(issue 13 rule 4), through real replicas, with and without permission to run the restore."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
import redis.asyncio as aioredis
from cpkit import Replicas, until

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica.contract import (
    RESTORE_STATE_LUA,
    FleetState,
    Keys,
    format_time,
    now_utc,
    restore_args,
)
from replica.contract.names import S_RESTORED_AT
from tests.fleetkit import run_cli


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
        report = await fleet.wait(again.version, timeout=10)
        # both got there, but Redis lost its data just now: the wait does not vouch for
        # replicas it may have forgotten
        assert all(r.reached for r in report.replicas) and len(report.replicas) == 2
        assert not report.ok and report.redis_lost_at is not None
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
        "~fleetgate:*:replicas", "%R~fleetgate:*:state", "%R~fleetgate:*:schedules",
        "resetchannels",
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


async def _restored_as_a_replica_would(redis: aioredis.Redis, fleet_name: str,
                                       state: FleetState) -> None:
    """Redis restarted empty (the state hash is gone) and a replica put back what it applied."""
    keys = Keys(fleet_name)
    await redis.delete(keys.state)
    script = redis.register_script(RESTORE_STATE_LUA)
    assert await script(keys=[keys.state, keys.audit, keys.control],
                        args=restore_args(state, "replica-a")) == 1


async def test_a_wait_just_after_redis_lost_its_data_does_not_vouch_for_replicas_it_forgot(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=0.2):
        paused = await fleet.pause("first", by="ops")
        assert (await fleet.wait(paused.version, timeout=10)).ok
        again = await fleet.resume(by="ops")
        assert (await fleet.wait(again.version, timeout=10)).ok
        await _restored_as_a_replica_would(redis, fleet_name, again)
        now = now_utc()
        changed = await fleet.pause("after the restart", by="ops")
        report = await fleet.wait(changed.version, timeout=10)
        # every replica Redis knows got there, but one it forgot may not have registered again
        assert all(r.reached for r in report.replicas) and len(report.replicas) == 2
        assert not report.ok
        assert report.redis_lost_at is not None
        assert abs((report.redis_lost_at - now).total_seconds()) < 60
        assert report.to_dict()["redis_lost_at"] == format_time(report.redis_lost_at)
        cli = await asyncio.to_thread(
            run_cli, "pause", "--reason", "again", "--wait", "--timeout", "10s",
            redis_url=redis_url, fleet=fleet_name)
    assert cli.returncode == 3, cli.stderr
    line = cli.stderr.strip()
    assert "Redis lost its data at " + format_time(report.redis_lost_at) in line
    assert "may not have registered again yet" in line and "fleetgate status" in line
    assert "\n" not in line


async def test_a_wait_long_after_redis_lost_its_data_is_ok_as_before(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=0.2):
        paused = await fleet.pause("first", by="ops")
        assert (await fleet.wait(paused.version, timeout=10)).ok
        await _restored_as_a_replica_would(redis, fleet_name, paused)
        # the restore was an hour ago: every replica alive at the change registered since
        await redis.hset(keys.state, S_RESTORED_AT,
                         format_time(now_utc() - timedelta(hours=1)))
        resumed = await fleet.resume(by="ops")
        report = await fleet.wait(resumed.version, timeout=10)
        assert report.ok and report.redis_lost_at is None
        assert report.to_dict()["redis_lost_at"] is None
        assert await redis.hget(keys.state, S_RESTORED_AT) is not None  # kept by the change
