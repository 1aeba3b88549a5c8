"""The coordinator's snapshot cache (``coordinator.fleet.snapshots``) and the bounded batches of
``Reads.records``, counted on a private Redis (``INFO commandstats``: nobody else's commands)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.reads import BATCH, Reads
from coordinator.fleet.snapshots import Snapshots
from replica.contract import Keys, format_time, now_utc
from tests.fleetkit import replicas


@pytest.fixture
async def client(private_redis: LocalRedis) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        yield redis
    finally:
        await redis.aclose()


async def calls(redis: aioredis.Redis, *commands: str) -> dict[str, int]:
    """How many times Redis ran each of ``commands`` (scripts' inner calls included)."""
    stats = await redis.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands}


async def delta(redis: aioredis.Redis, before: dict[str, int]) -> dict[str, int]:
    after = await calls(redis, *before)
    return {c: after[c] - before[c] for c in before}


async def test_concurrent_requests_for_a_fleet_share_one_read_of_its_records(
    private_redis: LocalRedis, client: aioredis.Redis, fleet_name: str
) -> None:
    async with replicas(private_redis.url, fleet_name, 4, heartbeat_interval=30, poll_interval=30):
        fleet = Fleet(client, fleet_name)
        snapshots = Snapshots(interval=60)
        before = await calls(client, "zrange", "zcard")
        summaries = await asyncio.gather(*(snapshots.summary(fleet) for _ in range(20)))
        counted = await delta(client, before)
    assert snapshots.reads == 1
    assert counted == {"zrange": 1, "zcard": 20}  # one read of the records, 20 fingerprints
    assert {s.counts()["live"] for s in summaries} == {4}
    assert len({id(s.figures) for s in summaries}) == 1  # the figures counted once


async def test_a_snapshot_answers_until_the_refresh_interval_is_over(
    private_redis: LocalRedis, client: aioredis.Redis, fleet_name: str
) -> None:
    now = [100.0]
    snapshots = Snapshots(interval=1.0, clock=lambda: now[0])
    async with replicas(private_redis.url, fleet_name, 2, heartbeat_interval=30, poll_interval=30):
        fleet = Fleet(client, fleet_name)
        first = await snapshots.snap(fleet)
        now[0] += 0.99
        assert await snapshots.snap(fleet) is first and snapshots.reads == 1
        now[0] += 0.01
        assert await snapshots.snap(fleet) is not first and snapshots.reads == 2


async def test_a_change_or_a_replica_joining_is_seen_by_the_next_request_however_young(
    private_redis: LocalRedis, client: aioredis.Redis, fleet_name: str
) -> None:
    snapshots = Snapshots(interval=3600)
    fleet = Fleet(client, fleet_name)
    async with replicas(private_redis.url, fleet_name, 2, heartbeat_interval=30):
        assert (await snapshots.status(fleet)).state.paused is False
        state = await fleet.pause("drill", by="t")
        seen = await snapshots.status(fleet)
        assert seen.state == state and snapshots.reads == 2
        async with replicas(private_redis.url, fleet_name, 1, prefix="late"):
            assert [r.id for r in (await snapshots.status(fleet)).replicas] == ["late1", "r1", "r2"]
        assert snapshots.reads == 3
        await snapshots.status(fleet)
        assert snapshots.reads == 4  # it left: the count changed again
        await snapshots.status(fleet)
        assert snapshots.reads == 4


async def test_the_records_are_read_in_batches_of_at_most_batch_records(
    client: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    beat = now_utc()
    ids = [f"r{i:03d}" for i in range(23)]
    for rid in ids:
        await client.hset(keys.replica(rid), mapping={
            "applied_version": "0", "quiet": "0", "in_flight": "0", "control": "connected",
            "heartbeat_at": format_time(beat), "heartbeat_interval": "10"})
    await client.zadd(keys.replicas, {rid: int(beat.timestamp() * 1000) for rid in ids})
    reads = Reads(client, fleet_name, keys, batch=10)
    await reads.status()  # loads the script
    before = await calls(client, "evalsha", "hgetall")
    status = await reads.status()
    counted = await delta(client, before)
    assert [r.id for r in status.replicas] == ids
    # 3 calls (10 + 10 + 3 records), each record one HGETALL inside, and the state's
    assert counted == {"evalsha": 3, "hgetall": 23 + 1}
    assert 1 <= BATCH <= 500


async def test_snapshots_of_fleets_asked_for_once_do_not_pile_up(
    client: aioredis.Redis, fleet_name: str
) -> None:
    snapshots = Snapshots(interval=60)
    snapshots.max_entries = 3
    kept = Fleet(client, fleet_name)
    await snapshots.snap(kept)
    for i in range(10):
        await snapshots.snap(Fleet(client, f"{fleet_name}-{i}"))
        await snapshots.snap(kept)  # asked for again and again: never the one dropped
    assert len(snapshots) == 3
    reads = snapshots.reads_of(fleet_name)
    await snapshots.snap(kept)
    assert snapshots.reads_of(fleet_name) == reads  # still cached, not read again
