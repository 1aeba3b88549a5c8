"""A restore keeps every hold as written (issue 19, C.8): after a failover lost a resume, the
older pause comes back with its version raised, and its holds stay trusted, so a scheduled
maintenance window still holds the replicas when it starts. On a real Redis, real replicas."""

from __future__ import annotations

from datetime import timedelta

import redis.asyncio as aioredis
from cpkit import Replicas, until

from coordinator import Fleet
from replica.contract import RESTORE_STATE_LUA, FleetState, Keys, now_utc, restore_args
from replica.contract.names import S_RESTORED_AT, S_SCHEDULES_VERSION
from replica.contract.scripts import RESTORE_RAISED


async def test_a_restore_after_a_lost_resume_keeps_a_scheduled_window_that_then_holds_the_replica(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    await fleet.pause("deploy", by="ops", hold="a", expected_for=timedelta(seconds=1),
                      auto_resume_after=timedelta(seconds=1))
    window = await fleet.pause("db window", by="ops", hold="w",
                               starts_at=now_utc() + timedelta(seconds=3),
                               auto_resume_after=timedelta(seconds=60))
    lost_hash = await redis.hgetall(keys.state)
    resumed = await fleet.resume(by="ops", hold="a")  # what the replicas applied
    assert not resumed.paused and [h.name for h in resumed.holds or ()] == ["w"]
    # a failover lost the resume: the previous version's hash is back
    await redis.delete(keys.state)
    await redis.hset(keys.state, mapping=lost_hash)
    # a replica restores what it applied once hold `a` has ended by itself
    a = next(h for h in window.holds or () if h.name == "a")
    assert a.auto_resume_at is not None
    args = restore_args(resumed, "pod-0", a.auto_resume_at + timedelta(milliseconds=500))
    script = redis.register_script(RESTORE_STATE_LUA)
    written = await script(keys=[keys.state, keys.audit, keys.control], args=args)
    assert written == RESTORE_RAISED
    after = await redis.hgetall(keys.state)
    assert int(after["version"]) == resumed.version + 1
    assert {k: v for k, v in after.items() if k not in ("version", "holds_version",
                                                          S_RESTORED_AT)} == \
        {k: v for k, v in lost_hash.items() if k not in ("version", "holds_version")}
    state = FleetState.from_hash(fleet_name, after)
    assert state.holds is not None, "the restored holds are not trusted"
    assert [h.name for h in state.holds] == ["a", "w"]
    # the window starts on the replica's own clock and holds it
    async with Replicas(redis_url, fleet_name, 1, poll_interval=0.2) as replicas:
        await until(lambda: "fleet:w" in replicas.pools[0].holds, timeout=20)
        assert (await fleet.state()).effectively_paused()


async def test_a_restore_into_a_missing_hash_writes_exactly_the_state_that_was_applied(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    await fleet.pause("deploy", by="ops", hold="a")
    applied = await fleet.pause("db window", by="ops", hold="w",
                                starts_at=now_utc() + timedelta(hours=1),
                                auto_resume_after=timedelta(minutes=30))
    await redis.delete(keys.state)
    later = now_utc() + timedelta(minutes=5)
    script = redis.register_script(RESTORE_STATE_LUA)
    assert await script(keys=[keys.state, keys.audit, keys.control],
                        args=restore_args(applied, "pod-0", later)) == 1
    after = await redis.hgetall(keys.state)
    restored_at = after.pop(S_RESTORED_AT)
    # a schedules marker the replicas did not read last, so they read the schedules again
    assert after.pop(S_SCHEDULES_VERSION) == restored_at
    assert after == applied.to_hash()
    assert FleetState.from_hash(fleet_name, after) == applied
