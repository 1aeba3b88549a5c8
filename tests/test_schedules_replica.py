"""Recurring windows on the replica side (issue 22 A.2): each replica starts and ends a
schedule's hold on its own clock with no coordinator running; a garbage schedule entry is
skipped and counted while the others apply; a schedules key that cannot be read holds the pool
(control-plane); removing a schedule or ending its occurrence early releases the hold at once,
and an occurrence ended early is not held again. Real Redis, real controllers, real
``fleetgate-replica`` processes.

The windows here recur every few seconds: a six-field cron expression (a leading field of
seconds, cronsim's form) so a test waits seconds, not the minute of a five-field one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from cpkit import Replica, until

from coordinator import Fleet
from replica.contract import S_SCHEDULES_VERSION, SCHEDULES_RECHECK_POLLS, Keys, now_utc
from replica.contract.schedules import Schedule
from replica.pool.holds import CONTROL_PLANE_SOURCE
from tests.procs import AUTH, base_env, replica_processes


async def test_replica_processes_start_and_end_each_occurrence_with_no_coordinator(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path,
    acks: Callable[..., Any],
) -> None:
    env = base_env(redis_url, fleet_name, workers=2, demo_item_seconds=0.05)
    async with replica_processes(2, env, tmp_path) as procs:
        ids = {rp.id for rp in procs}
        fleet = Fleet(redis, fleet_name)
        await until(lambda: _registered(redis, fleet_name, ids), timeout=40)
        # every 6 s, for 2 s; written once, then no coordinator writes anything
        schedule = await fleet.add_schedule("backup", "*/6 * * * * *", 2, "Europe/Berlin",
                                            "nightly backup", by="ops")
        written = await redis.xlen(Keys(fleet_name).audit)

        def each(event: str, held: bool, n: int) -> Callable[[list[dict[str, Any]]], bool]:
            return lambda got: all(
                sum(1 for a in got if a["replica"] == i and a["event"] == event
                    and a["fleet_held"] is held) >= n for i in ids)

        got = await acks(each("quiet", True, 1))
        async with httpx.AsyncClient(timeout=10) as http:
            for rp in procs:
                pool = (await http.get(rp.url + "/pool", headers=AUTH)).json()
                # quiet under the window, or already past it: never any other hold
                assert pool["holds"] in ({"fleet:backup": "nightly backup"}, {}), rp.log()
        got = await acks(each("resumed", False, 1))
        got = await acks(each("quiet", True, 2))  # and the next occurrence holds again
        for rp in procs:
            mine = [a for a in got if a["replica"] == rp.id and a["event"] in ("quiet", "resumed")]
            for a in mine:
                at = datetime.fromisoformat(a["at"])
                occ = schedule.current_or_next(at - timedelta(seconds=2.5))
                assert occ is not None
                if a["event"] == "quiet":  # held only inside an occurrence
                    assert any(o.start <= at < o.end + timedelta(seconds=1)
                               for o in schedule.iter_from(at - timedelta(seconds=3))
                               if o.start <= at), (a, rp.log())
            assert "schedules now backup" in rp.log()
        # the replicas wrote the audit trail nothing, and no state was ever written
        assert await redis.xlen(Keys(fleet_name).audit) == written
        assert (await fleet.state()).version == 0


async def test_a_garbage_entry_is_skipped_and_counted_and_the_others_still_hold(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    keys = Keys(fleet_name)
    good = Schedule("always", "*/2 * * * * *", 1.5, "UTC", "tight", "ops")
    await redis.hset(keys.schedules, mapping={
        "garbage": "{not json", "bad-cron": json.dumps({**good.to_dict(), "cron": "61 * * * *"}),
        "always": good.to_json(),
    })
    rep = await Replica(redis_url, fleet_name, "pod-1", poll_interval=0.2).start()
    try:
        await until(lambda: rep.pool.holds.get("fleet:always") == "tight", what="the window")
        applier = rep.controller._applier
        assert applier.recurring.invalid >= 2
        assert [s.name for s in applier.recurring.schedules] == ["always"]
        assert CONTROL_PLANE_SOURCE not in rep.pool.holds
    finally:
        await rep.stop()


async def test_a_schedules_key_that_cannot_be_read_holds_the_replica(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    keys = Keys(fleet_name)
    await redis.set(keys.schedules, "not a hash")
    rep = Replica(redis_url, fleet_name, "pod-1", poll_interval=0.2)
    await rep.pool.start()
    start = asyncio.create_task(rep.controller.start())
    try:
        await until(lambda: CONTROL_PLANE_SOURCE in rep.pool.holds
                    and "schedules" in rep.pool.holds[CONTROL_PLANE_SOURCE],
                    what="the control-plane hold")
        await redis.delete(keys.schedules)
        await until(lambda: not rep.pool.holds, what="the hold to go")
    finally:
        await asyncio.gather(start, return_exceptions=True)
        await rep.stop()


async def test_removing_a_schedule_or_ending_its_occurrence_releases_it_at_once(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    fleet = Fleet(redis, fleet_name)
    # a window of 23 h every day at this hour and minute: in force now, for the test's life
    now = now_utc()
    cron = f"{now.minute} {now.hour} * * *"
    ago = now.replace(second=0, microsecond=0)
    assert now - ago < timedelta(seconds=59)
    rep = await Replica(redis_url, fleet_name, "pod-1", poll_interval=30.0).start()
    try:
        await fleet.add_schedule("freeze", cron, timedelta(hours=23), "UTC", "freeze", by="ops")
        # the control message makes the replica read the schedules now (its poll is 30 s)
        await until(lambda: "fleet:freeze" in rep.pool.holds, what="the occurrence's hold")
        ended = await fleet.end_occurrence("freeze", by="ops", reason="done early")
        assert ended.ended_early == ago
        await until(lambda: not rep.pool.holds, what="the early end")
        assert (await fleet.schedules()).get("freeze") is not None  # the schedule stays
        # a new poll or a restart does not hold again in the occurrence ended early
        rep.controller._applier.resume_due()
        assert not rep.pool.holds
        await fleet.add_schedule("freeze2", cron, timedelta(hours=23), "UTC", "again",
                                 by="ops")
        await until(lambda: "fleet:freeze2" in rep.pool.holds, what="the second window")
        await fleet.remove_schedule("freeze2", by="ops")
        await until(lambda: not rep.pool.holds, what="the removal")
    finally:
        await rep.stop()
    second = await Replica(redis_url, fleet_name, "pod-2", poll_interval=0.2).start()
    try:
        assert "fleet:freeze" not in second.pool.holds
    finally:
        await second.stop()



async def _twenty_polls_read_no_schedules(trip: Any) -> None:
    """Once a poll has read the schedules, twenty more go by without reading them again."""
    await until(lambda: trip.schedule_reads >= 1, what="the first poll's schedules")
    reads, polls = trip.schedule_reads, trip.polls
    await until(lambda: trip.polls >= polls + 20, what="twenty polls")
    assert trip.schedule_reads == reads


def _in_force_now() -> str:
    """A daily cron at this hour and minute: with a 23 h window, in force for the test's life."""
    now = now_utc()
    return f"{now.minute} {now.hour} * * *"


async def test_a_poll_reads_the_schedules_only_when_the_state_hash_says_they_changed(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    """Issue 23's steady cost: one read a poll, not two. A lost control message still costs
    at most a poll (the state hash's marker says the schedules changed), and a hand edit that
    writes no marker is read within SCHEDULES_RECHECK_POLLS."""
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    await fleet.pause("first change", by="ops")
    await fleet.resume(by="ops")
    assert await redis.hget(keys.state, S_SCHEDULES_VERSION) == "0"
    rep = await Replica(redis_url, fleet_name, "pod-1", poll_interval=0.05).start()
    try:
        trip = rep.controller._sync._trip
        await _twenty_polls_read_no_schedules(trip)  # nothing changed: the state hash alone
        rep.controller._channel._on_message = lambda data: None  # every message lost
        polls = trip.polls
        await fleet.add_schedule("freeze", _in_force_now(), timedelta(hours=23), "UTC",
                                 "freeze", by="ops")
        await until(lambda: "fleet:freeze" in rep.pool.holds, what="the occurrence's hold")
        # the poll that found the marker changed, then the read it asked for at once (one
        # round trip may have been in flight when the schedule was written)
        assert trip.polls - polls <= 3, (trip.polls, polls)
        await redis.hdel(keys.schedules, "freeze")  # by hand: no marker
        polls = trip.polls
        await until(lambda: not rep.pool.holds, what="the hand edit", timeout=60)
        assert trip.polls - polls <= SCHEDULES_RECHECK_POLLS + 2
    finally:
        await rep.stop()


async def test_a_fleet_never_changed_is_followed_with_one_read_a_poll_too(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
) -> None:
    """No pause or resume ever: without a state hash the replicas would read the schedules at
    every poll, and most fleets are never paused."""
    fleet = Fleet(redis, fleet_name)
    rep = await Replica(redis_url, fleet_name, "pod-1", poll_interval=0.05).start()
    try:
        trip = rep.controller._sync._trip
        await _twenty_polls_read_no_schedules(trip)  # no state hash, no schedules
        assert not await redis.exists(Keys(fleet_name).state)
        await fleet.add_schedule("backup", "0 2 * * *", timedelta(hours=1), "UTC", "backup",
                                 by="ops")
        await until(lambda: [s.name for s in rep.controller._applier.recurring.schedules]
                    == ["backup"], what="the schedule read")
        await _twenty_polls_read_no_schedules(trip)
        assert not rep.pool.holds
    finally:
        await rep.stop()


async def test_schedule_writes_mark_the_state_hash_and_a_fleet_never_changed_reads_as_such(
    redis: aioredis.Redis, fleet_name: str,
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    await fleet.add_schedule("backup", "0 2 * * *", timedelta(hours=1), "UTC", "backup",
                             by="ops")
    [(first, _)] = await redis.xrevrange(keys.audit, count=1)
    # a fleet never changed gets the marker alone, and still reads as never changed
    assert await redis.hgetall(keys.state) == {S_SCHEDULES_VERSION: first}
    state = await fleet.state()
    assert (state.version, state.paused) == (0, False)
    await fleet.pause("deploy", by="ops")
    assert await redis.hget(keys.state, S_SCHEDULES_VERSION) == first  # a change keeps it
    await fleet.add_schedule("nightly", "0 3 * * *", timedelta(hours=1), "UTC", "nightly",
                             by="ops")
    [(added, _)] = await redis.xrevrange(keys.audit, count=1)
    assert await redis.hget(keys.state, S_SCHEDULES_VERSION) == added
    await fleet.remove_schedule("nightly", by="ops")
    [(removed, _)] = await redis.xrevrange(keys.audit, count=1)
    assert await redis.hget(keys.state, S_SCHEDULES_VERSION) == removed != added
    await fleet.resume(by="ops")  # a change keeps the marker
    assert await redis.hget(keys.state, S_SCHEDULES_VERSION) == removed


async def _registered(redis: aioredis.Redis, fleet: str, ids: set[str]) -> bool:
    return ids <= {m for m in await redis.zrange(Keys(fleet).replicas, 0, -1)}
