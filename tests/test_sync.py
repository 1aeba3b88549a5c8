"""replica.control.sync: the poll and the heartbeat in one round trip, fail-static on a lost
Redis, and the restore of a state hash Redis forgot."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, until

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica import FleetController
from replica.contract import Keys
from replica.control.stats import ControllerStats


async def test_a_heartbeat_rides_on_a_poll_rather_than_a_round_trip_of_its_own(
    redis_url: str, fleet_name: str
) -> None:
    replica = Replica(redis_url, fleet_name, "pod-hb", poll_interval=0.05,
                      heartbeat_interval=0.2)
    await replica.start()
    try:
        # the writes of start-up (the syncing hold released, the subscription confirmed) go
        # out at once, whatever the poll's phase: spied on only once they have gone
        outbox = replica.controller._outbox
        await until(lambda: not outbox.record_dirty, what="the start-up record written")
        link = replica.controller._link
        call = link.call
        trips: list[list[str]] = []

        async def spy(commands: list[tuple[Any, ...]], quiet: Any = ()) -> list[Any]:
            trips.append([str(c[0]) for c in [*commands, *quiet]])
            return await call(commands, quiet)

        link.call = spy  # type: ignore[method-assign]

        def beats() -> list[list[str]]:  # record writes without an ack (not a change's)
            return [t for t in trips if "HSET" in t and "PUBLISH" not in t]

        await until(lambda: len(beats()) >= 4, what="four heartbeats")
        assert all("HGETALL" in t for t in beats()), trips
        assert sum("HGETALL" in t for t in trips) > len(beats())
    finally:
        await replica.stop()

def stats_at_apply(controller: FleetController) -> dict[int, ControllerStats]:
    """The controller's stats at the moment it applied each version (a poll is counted, a push
    too, before the state it brought is applied)."""
    applied: dict[int, ControllerStats] = {}
    controller.add_listener(
        lambda state, _: applied.setdefault(state.version, controller.stats()))
    return applied


def polls_until_applied(at_change: ControllerStats, applied: ControllerStats) -> int:
    """Polls read from just after a change until the change was applied. The loop has one
    round trip in flight at a time: a working replica needs at most 2 (one sent before the
    change, the next one reads it), 0 if a push or a poll applied it first."""
    return applied.polls - at_change.polls


async def test_subscriptions_killed_just_before_a_pause_still_pause_every_replica_within_a_poll(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    poll = 2.0
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 5, poll_interval=poll) as replicas:
        applies = [stats_at_apply(c) for c in replicas.controllers]
        killed = await redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        assert int(killed) >= 5
        paused = await fleet.pause("after the kill", by="t")
        at_change = [c.stats() for c in replicas.controllers]
        async with asyncio.timeout(30):  # a hang guard: fifteen polls
            await asyncio.gather(*(p.wait_for(True) for p in replicas.pools))
        # within a poll: the push, a resubscription's poll or the first poll after the change
        # brought it, never a later one
        assert [polls_until_applied(c, a[paused.version]) <= 2
                for c, a in zip(at_change, applies, strict=True)] == [True] * 5
        await until(lambda: all(c.connected for c in replicas.controllers))
        assert all(c.stats().reconnects >= 1 for c in replicas.controllers)

async def test_redis_restarted_empty_during_a_pause_runs_nothing_and_the_state_is_restored(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    fleet = Fleet(admin, fleet_name)
    keys = Keys(fleet_name)
    try:
        async with Replicas(private_redis.url, fleet_name, 3, poll_interval=0.5,
                            heartbeat_interval=1.0) as replicas:
            paused = await fleet.pause("before the crash", by="ops")
            assert (await fleet.wait(paused.version, timeout=10)).ok
            for i, pool in enumerate(replicas.pools):
                for n in range(5):
                    pool.put_nowait((i, n))
            private_redis.kill()
            await until(lambda: not any(c.connected for c in replicas.controllers),
                        what="every controller to notice")
            assert all(r.ran == [] for r in replicas)
            assert all(c.applied_version == paused.version for c in replicas.controllers)
            private_redis.start()  # empty: no persistence
            await admin.connection_pool.disconnect()  # the test's own client: no stale sockets
            await until(lambda: all(c.connected for c in replicas.controllers), timeout=30,
                        what="every controller to reconnect")
            # the test's client may see the restored hash before the restoring replica's call
            # returns to it and is counted: wait for both
            await until(lambda: _restored(admin, keys, replicas.controllers), timeout=10)
            restored = await fleet.state()
            assert restored.version == paused.version and restored.paused
            assert restored.reason == "before the crash" and restored.since == paused.since
            assert sum(c.stats().restores for c in replicas.controllers) >= 1
            assert all(r.ran == [] for r in replicas)
            assert any(e.action == "restore" for e in await fleet.history())
            resumed = await fleet.resume(by="ops")
            assert resumed.version == paused.version + 1
            report = await fleet.wait(resumed.version, timeout=15)
            # all got there, but Redis lost its data just now (restored_at): not ok
            assert not report.stragglers and report.redis_lost_at is not None
            assert not report.ok
            await until(lambda: all(len(r.ran) == 5 for r in replicas))
            assert all(r.started_while_held == [] for r in replicas)
    finally:
        await admin.aclose()

async def _restored(admin: aioredis.Redis, keys: Keys,
                    controllers: list[FleetController]) -> bool:
    return (sum(c.stats().restores for c in controllers) >= 1
            and bool(await admin.exists(keys.state)))


async def test_the_control_field_reads_disconnected_while_pubsub_is_refused(
    private_redis: LocalRedis, no_subscribe_url: str, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    url = no_subscribe_url
    fleet = Fleet(admin, fleet_name)
    try:
        replica = Replica(url, fleet_name, "pod-1", poll_interval=0.3, start_timeout=5.0)
        await replica.start()
        try:
            assert replica.controller.synced and not replica.controller.connected
            assert replica.pool.holds == {}
            applies = stats_at_apply(replica.controller)
            paused = await fleet.pause("polled", by="ops")
            at_change = replica.controller.stats()
            async with asyncio.timeout(30):  # a hang guard: a hundred polls
                await replica.pool.wait_for(True)
            # no push can come: the first poll after the change applied it
            applied = applies[paused.version]
            assert applied.pushes == at_change.pushes == 0
            assert polls_until_applied(at_change, applied) <= 2
            record = await admin.hgetall(Keys(fleet_name).replica("pod-1"))
            assert record["control"] == "disconnected"
        finally:
            await replica.stop()
    finally:
        await admin.aclose()

async def test_a_replica_without_write_access_to_the_state_counts_the_failed_restore_and_stays(
    private_redis: LocalRedis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="replica.control.sync")
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    await admin.execute_command(
        "ACL", "SETUSER", "replica", "on", ">pw", "resetkeys", "~fleetgate:*:replica:*",
        "~fleetgate:*:replicas", "%R~fleetgate:*:state", "%R~fleetgate:*:schedules",
        "resetchannels",
        "&fleetgate:*:control", "&fleetgate:*:acks", "+@all",
    )
    url = private_redis.url.replace("redis://", "redis://replica:pw@")
    fleet = Fleet(admin, fleet_name)
    keys = Keys(fleet_name)
    try:
        async with Replicas(url, fleet_name, 2, poll_interval=0.2) as replicas:
            paused = await fleet.pause("acl", by="ops")
            assert (await fleet.wait(paused.version, timeout=10)).ok
            await admin.delete(keys.state)  # Redis forgot the state
            await until(lambda: all(c.stats().restore_failures >= 2
                                    for c in replicas.controllers))
            assert all(p.holds == {"fleet": "acl"} for p in replicas.pools)
            failures = [r for r in caplog.records if "cannot restore" in r.getMessage()]
            assert len(failures) == 2  # logged once per replica
            assert await fleet.restore_if_missing()
            assert (await fleet.state()).version == paused.version
            assert not await fleet.restore_if_missing()
            resumed = await fleet.resume(by="ops")
            report = await fleet.wait(resumed.version, timeout=10)
            # all got there, but Redis lost its data just now (restored_at): not ok
            assert not report.stragglers and report.redis_lost_at is not None
            assert not report.ok
    finally:
        await admin.aclose()
