"""A change costs the same whatever the fleet's size (issue 23 A.1): the change's script counts
the registered replicas and never lists them, and ``wait`` reads the members itself, once.

What the script sends is read from ``INFO commandstats`` deltas on a private server (scripts'
inner calls are counted there), never from a clock.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bench.changecost import commands_by_name, delta, register
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
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


async def _change_commands(fleet: Fleet, admin: aioredis.Redis) -> dict[str, int]:
    """The Redis commands one pause and one resume of ``fleet`` send, by name."""
    before = await commands_by_name(admin)
    await fleet.pause("maintenance", by="alice")
    await fleet.resume(by="alice")
    return delta(before, await commands_by_name(admin))


async def test_a_change_never_lists_the_replicas_set_and_sends_the_same_commands_at_any_size(
    private_redis: LocalRedis,
) -> None:
    async with aioredis.Redis.from_url(private_redis.url) as admin:
        small = Fleet(admin, "small", min_replicas_ack=0)
        big = Fleet(admin, "big", min_replicas_ack=0)
        await register(admin, small.keys, 10)
        await register(admin, big.keys, BIG)
        await _change_commands(small, admin)  # the scripts are loaded, the fleets registered
        await _change_commands(big, admin)
        at_10 = await _change_commands(small, admin)
        at_big = await _change_commands(big, admin)
    assert "zrange" not in at_big, at_big
    assert at_big == at_10
    assert at_big["evalsha"] == 2  # one script per change, and nothing per replica


async def test_a_pause_counts_the_registered_replicas_for_wait(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name, min_replicas_ack=0)
    await fleet.pause("nobody yet", by="alice")
    last = fleet._changes.last
    assert last is not None and last.registered == 0
    await register(redis, fleet.keys, 3)
    await fleet.pause("three now", by="alice")
    last = fleet._changes.last
    assert last is not None and last.registered == 3


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
