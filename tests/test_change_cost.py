"""``wait`` after a change of a big fleet: every one of 2,000 registered replicas is waited for
and a straggler named (what a cheaper change, issue 23 A.1, must keep).
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bench.changecost import register
from coordinator import Fleet
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
