"""A change costs the same whatever the fleet's size (issue 23 A.1): the change's script counts
the registered replicas and never lists them. A change made for a ``wait`` (``for_wait``) reads
the set with it, in its own ``MULTI``/``EXEC``, so the wait starts from the membership at the
change: a replica that stops cleanly right after it is named as having left. And ``wait`` after
a change of a big fleet still waits for every one of 2,000 registered replicas.

What a change sends is read from ``INFO commandstats`` deltas on a private server (scripts'
inner calls are counted there), never from a clock.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bench.changecost import commands_by_name, delta, register
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.models import GONE
from coordinator.fleet.reads import Members
from replica.contract import (
    R_APPLIED_AT,
    R_APPLIED_VERSION,
    R_FLEET_HELD,
    R_QUIET,
    R_QUIET_AT,
    format_time,
    now_utc,
)

BIG = 2000


async def _change_commands(
    fleet: Fleet, admin: aioredis.Redis, for_wait: bool = False
) -> dict[str, int]:
    """The Redis commands one pause and one resume of ``fleet`` send, by name."""
    before = await commands_by_name(admin)
    await fleet.pause("maintenance", by="alice", for_wait=for_wait)
    await fleet.resume(by="alice", for_wait=for_wait)
    return delta(before, await commands_by_name(admin))


@pytest.mark.parametrize("for_wait", [False, True], ids=["no-wait", "for-wait"])
async def test_a_change_sends_the_same_commands_at_any_size_and_lists_the_set_only_for_a_wait(
    private_redis: LocalRedis, for_wait: bool
) -> None:
    async with aioredis.Redis.from_url(private_redis.url) as admin:
        small = Fleet(admin, "small", min_replicas_ack=0)
        big = Fleet(admin, "big", min_replicas_ack=0)
        await register(admin, small.keys, 10)
        await register(admin, big.keys, BIG)
        await _change_commands(small, admin, for_wait)  # the scripts loaded, fleets registered
        await _change_commands(big, admin, for_wait)
        at_10 = await _change_commands(small, admin, for_wait)
        at_big = await _change_commands(big, admin, for_wait)
        last = big._changes.last
    assert at_big == at_10
    assert at_big["evalsha"] == 2  # one script per change, and nothing per replica
    assert last is not None and last.registered == BIG
    if for_wait:  # the set read once per change, beside the script, in one transaction
        assert (at_big["zrange"], at_big["multi"], at_big["exec"]) == (2, 2, 2), at_big
        assert last.members is not None and len(last.members.scores) == BIG
    else:
        assert "zrange" not in at_big and "multi" not in at_big, at_big
        assert last.members is None


async def test_a_pause_counts_the_registered_replicas_for_wait(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name, min_replicas_ack=0)
    await fleet.pause("nobody yet", by="alice")
    last = fleet._changes.last
    assert last is not None and last.registered == 0 and last.members is None
    await register(redis, fleet.keys, 3)
    await fleet.pause("three now", by="alice")
    last = fleet._changes.last
    assert last is not None and last.registered == 3


@pytest.mark.parametrize("listening", [False, True], ids=["own-subscription", "listening"])
async def test_a_replica_that_stops_cleanly_right_after_a_change_made_for_a_wait_is_named_as_left(
    redis: aioredis.Redis, fleet_name: str, listening: bool
) -> None:
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.2, min_replicas_ack=0)
    if listening:
        await fleet.listen()
    try:
        await register(redis, fleet.keys, 3)
        ids = [f"pod-{i:05d}" for i in range(3)]
        state = await fleet.pause("maintenance", by="alice", for_wait=True)
        # pod-00002 stops cleanly after the change, before the wait reads anything
        await redis.delete(fleet.keys.replica(ids[2]))
        await redis.zrem(fleet.keys.replicas, ids[2])
        await _applied(redis, fleet, ids[:2], state.version)
        report = await fleet.wait(state.version, timeout=10.0)
    finally:
        await fleet.aclose()
    assert report.ok, report.to_dict()
    assert [(e.id, e.reason) for e in report.excused] == [(ids[2], GONE)]
    assert sorted(r.id for r in report.replicas) == ids[:2]


async def test_a_change_for_a_wait_loads_its_script_and_skips_a_replicas_key_of_another_type(
    private_redis: LocalRedis,
) -> None:
    async with aioredis.Redis.from_url(private_redis.url, decode_responses=True) as admin:
        fleet = Fleet(admin, "odd", min_replicas_ack=0)
        await admin.set(fleet.keys.replicas, "not a sorted set")
        await admin.script_flush()  # NOSCRIPT inside the transaction: loaded, sent again
        state = await fleet.pause("maintenance", by="alice", for_wait=True)
        assert state.paused and state.version == 1
        assert fleet._changes.warnings["replicas_wrongtype"] == 1
        last = fleet._changes.last
        assert last is not None and last.members == Members({}) and last.registered == 0
        await admin.delete(fleet.keys.replicas)
        await register(admin, fleet.keys, 2)
        await admin.script_flush()
        resumed = await fleet.resume(by="alice", for_wait=True)
        assert not resumed.paused and resumed.version == 2
        last = fleet._changes.last
        assert last is not None and last.members is not None
        assert sorted(last.members.scores) == ["pod-00000", "pod-00001"]


async def _applied(redis: aioredis.Redis, fleet: Fleet, ids: list[str], version: int) -> None:
    """Write, as the replicas ``ids`` would, that they applied ``version`` and are quiet."""
    at = format_time(now_utc())
    pipe = redis.pipeline(transaction=False)
    for replica_id in ids:
        pipe.hset(fleet.keys.replica(replica_id), mapping={
            R_APPLIED_VERSION: str(version), R_FLEET_HELD: "1", R_QUIET: "1",
            R_APPLIED_AT: at, R_QUIET_AT: at,
        })
    await pipe.execute()


@pytest.mark.parametrize("listening", [False, True], ids=["own-subscription", "listening"])
async def test_wait_after_a_pause_still_waits_for_every_one_of_2000_registered_replicas(
    redis: aioredis.Redis, fleet_name: str, listening: bool
) -> None:
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.2, min_replicas_ack=0)
    if listening:
        await fleet.listen()
    try:
        await register(redis, fleet.keys, BIG)
        ids = [f"pod-{i:05d}" for i in range(BIG)]
        state = await fleet.pause("maintenance", by="alice")
        await _applied(redis, fleet, ids[:-1], state.version)
        report = await fleet.wait(state.version, timeout=1.0)
        assert not report.ok
        assert len(report.replicas) == BIG  # every registered replica, read after the change
        assert [r.id for r in report.stragglers] == [ids[-1]]
        await _applied(redis, fleet, ids[-1:], state.version)
        again = await fleet.wait(state.version, timeout=10.0)
        assert again.ok and len(again.replicas) == BIG and not again.stragglers
    finally:
        await fleet.aclose()
