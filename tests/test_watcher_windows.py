"""The watcher of ``fleetgate serve`` audits each maintenance window's start and end, once
however many servers watch the fleet, on a real Redis (issue 14 section 2).

Windows here start a second or two ahead and last a second or two (the shortest durations
there are); the tests wait on the audit stream, never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import redis.asyncio as aioredis

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.summary import is_overdue
from coordinator.notify.windows import WINDOW_ENDED, WINDOW_STARTED, due_edges
from replica.contract import Keys, format_time, now_utc
from tests.apikit import watchers
from tests.fleetkit import audit, until


async def edges(redis: aioredis.Redis, fleet: str) -> list[tuple[str, str]]:
    return [(e["action"], e["hold"]) for e in await audit(redis, fleet)
            if e["action"] in (WINDOW_STARTED, WINDOW_ENDED)]


async def test_two_running_watchers_audit_a_windows_start_and_end_once_each(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, clients: list[aioredis.Redis]
) -> None:
    fleet = Fleet(redis, fleet_name)
    state = await fleet.pause("pg 16 upgrade", by="alice", hold="dbmaint",
                              starts_at=now_utc() + timedelta(seconds=1.5),
                              expected_for=1, auto_resume_after=1)
    hold = state.holds[0] if state.holds else None
    assert hold is not None and hold.starts_at is not None and hold.auto_resume_at is not None
    running = [await w.start() for w in watchers(redis_url, fleet_name, clients)]
    try:
        async def ended() -> bool:
            return (WINDOW_ENDED, "dbmaint") in await edges(redis, fleet_name)
        await until(ended, timeout=30)
        for w in running:  # and once more each, now that both edges have passed
            await w.check()
    finally:
        for w in running:
            await w.stop()
    assert await edges(redis, fleet_name) == [(WINDOW_STARTED, "dbmaint"), (WINDOW_ENDED, "dbmaint")]
    started, done = [e for e in await audit(redis, fleet_name) if e["action"].startswith("window_")]
    assert started["at"] == format_time(hold.starts_at) and done["at"] == format_time(hold.auto_resume_at)
    assert started["reason"] == "pg 16 upgrade" and started["by"] == "alice"
    assert started["version"] == str(state.version)
    assert done["starts_at"] == format_time(hold.starts_at)
    assert sum(w.windows.appended for w in running) == 2
    # the scheduled change itself was audited when it was made, before the window
    assert (await audit(redis, fleet_name))[0]["action"] == "hold_scheduled"


async def test_watchers_checking_at_the_same_instant_write_each_edge_once(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, clients: list[aioredis.Redis]
) -> None:
    fleet = Fleet(redis, fleet_name)
    state = await fleet.pause("window", by="alice", hold="w", starts_at=now_utc() + timedelta(seconds=1),
                              auto_resume_after=1)
    assert state.holds is not None and state.holds[0].auto_resume_at is not None
    end = state.holds[0].auto_resume_at
    many = watchers(redis_url, fleet_name, clients) * 4  # the same two, and more at once
    fresh = watchers(redis_url, fleet_name, clients)  # servers that never wrote anything

    async def past_the_end() -> bool:
        return now_utc() >= end
    await until(past_the_end, timeout=10)
    await asyncio.gather(*(w.windows.check(state, now_utc()) for w in many + fresh))
    assert await edges(redis, fleet_name) == [(WINDOW_STARTED, "w"), (WINDOW_ENDED, "w")]


async def test_a_hold_released_before_its_window_starts_is_never_audited_as_started(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, clients: list[aioredis.Redis]
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("later", by="alice", hold="w", starts_at=now_utc() + timedelta(hours=1))
    await fleet.resume(by="bob", hold="w")
    for w in watchers(redis_url, fleet_name, clients):
        await w.check()
    assert await edges(redis, fleet_name) == []
    assert [e["action"] for e in await audit(redis, fleet_name)] == ["hold_scheduled", "hold_cancelled"]


async def test_a_hold_that_ended_by_its_auto_resume_is_no_forgotten_pause(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, clients: list[aioredis.Redis]
) -> None:
    fleet = Fleet(redis, fleet_name)
    state = await fleet.pause("short", by="alice", hold="brief", expected_for=1, auto_resume_after=1)
    assert state.auto_resume_at is not None
    end = state.auto_resume_at

    async def past_the_end() -> bool:
        return now_utc() > end + timedelta(seconds=1)  # past max_pause (1 s) too
    await until(past_the_end, timeout=10)
    for w in watchers(redis_url, fleet_name, clients):
        await w.check()
    read = await fleet.state()
    assert read.paused is True  # as written: the hash says paused, the hold says it ended
    assert not is_overdue(read, now_utc(), max_pause=1)
    assert await redis.xlen(Keys(fleet_name).events) == 0  # no overdue alert
    assert await edges(redis, fleet_name) == [(WINDOW_ENDED, "brief")]


async def test_a_window_that_started_by_itself_is_not_overdue_from_the_fleets_older_since(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, clients: list[aioredis.Redis]
) -> None:
    fleet = Fleet(redis, fleet_name)
    state = await fleet.pause("window", by="alice", hold="w", starts_at=now_utc() + timedelta(seconds=1),
                              expected_for=3600)
    # the fleet has been running since long ago (the running state's since)
    await redis.hset(Keys(fleet_name).state, "since", "2026-01-01T00:00:00.000Z")
    assert state.holds is not None and state.holds[0].starts_at is not None
    start = state.holds[0].starts_at

    async def started() -> bool:
        return now_utc() > start + timedelta(seconds=1.5)  # past max_pause (1 s) after it
    await until(started, timeout=10)
    read = await fleet.state()
    assert read.effectively_paused(now_utc())
    assert not is_overdue(read, now_utc(), max_pause=1)
    for w in watchers(redis_url, fleet_name, clients):
        await w.check()
    assert await redis.xlen(Keys(fleet_name).events) == 0
    assert await edges(redis, fleet_name) == [(WINDOW_STARTED, "w")]


def test_due_edges_are_in_time_order_and_only_those_passed() -> None:
    from replica.contract import FleetState
    from replica.contract.holds import Hold

    now = now_utc()
    a = Hold("a", "x", "u", now - timedelta(minutes=5), None, now - timedelta(minutes=1),
             now - timedelta(minutes=5))
    b = Hold("b", "x", "u", now - timedelta(minutes=3), None, now + timedelta(minutes=1),
             now - timedelta(minutes=3))
    c = Hold("c", "x", "u", now + timedelta(minutes=3), None, None, now + timedelta(minutes=3))
    state = FleetState(fleet="f", paused=True, reason="x", by="u", since=now, version=4,
                       holds=(c, b, a))
    assert [(e[0], e[1].name) for e in due_edges(state, now)] == [
        (WINDOW_STARTED, "a"), (WINDOW_STARTED, "b"), (WINDOW_ENDED, "a"),
    ]
