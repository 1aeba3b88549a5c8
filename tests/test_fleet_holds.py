"""Fleet holds through Fleet and set_state.lua against a real Redis: a fleet is paused while
any named hold is active; holds don't undo each other; scheduled holds wait for starts_at."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import redis.asyncio as aioredis

from coordinator import Fleet
from replica.contract import (
    DEFAULT_HOLD,
    MAX_HOLDS,
    RESTORE_STATE_LUA,
    S_HOLDS,
    S_HOLDS_VERSION,
    FleetState,
    Hold,
    Keys,
    format_time,
    now_utc,
    restore_args,
)
from replica.errors import ContractError, HoldConflict, InvalidMessage
from tests.fleetkit import audit


async def test_two_teams_pausing_one_fleet_keep_it_paused_until_both_release(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    db = await fleet.pause("pg 16 upgrade", by="dba", hold="db")
    pay = await fleet.pause("incident 42", by="oncall", hold="payments")
    assert db.paused and pay.paused and pay.version == db.version + 1
    assert pay.since == db.since  # the fleet has been paused since the first hold
    assert [h.name for h in pay.holds or ()] == ["db", "payments"]
    assert pay.reason == "db: pg 16 upgrade; payments: incident 42"
    after_db = await fleet.resume(by="dba", hold="db")
    assert after_db.paused and after_db.effectively_paused()
    assert after_db.reason == "incident 42"
    assert [h.name for h in after_db.holds or ()] == ["payments"]
    running = await fleet.resume(by="oncall", hold="payments")
    assert not running.paused and running.holds == ()
    assert [(e["action"], e["hold"]) for e in await audit(redis, fleet_name)] == [
        ("pause", "db"), ("hold_added", "payments"), ("hold_released", "db"),
        ("resume", "payments"),
    ]


async def test_a_resume_without_a_hold_name_is_refused_while_there_are_several(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("pg 16 upgrade", by="dba", hold="db")
    before = await fleet.pause("incident 42", by="oncall", hold="payments")
    with pytest.raises(HoldConflict) as refused:
        await fleet.resume(by="someone")
    assert refused.value.kind == "ambiguous" and refused.value.holds == ("db", "payments")
    assert "db, payments" in str(refused.value)
    assert await fleet.state() == before  # nothing changed, nothing audited
    assert len(await audit(redis, fleet_name)) == 2


async def test_a_resume_of_a_hold_the_fleet_does_not_have_is_refused_naming_the_holds(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    before = await fleet.pause("pg 16 upgrade", by="dba", hold="db")
    with pytest.raises(HoldConflict) as refused:
        await fleet.resume(by="someone", hold="dbb")
    assert refused.value.kind == "unknown" and refused.value.holds == ("db",)
    assert "'dbb'" in str(refused.value)
    assert await fleet.state() == before


async def test_resume_all_releases_every_hold_and_resume_releases_the_only_one(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("a", by="x", hold="one")
    await fleet.pause("b", by="x", hold="two")
    released = await fleet.resume(by="x", all=True)
    assert not released.paused and released.holds == ()
    assert (await audit(redis, fleet_name))[-1]["action"] == "resume"
    await fleet.pause("c", by="x", hold="three")
    only = await fleet.resume(by="x")
    assert not only.paused
    noop = await fleet.resume(by="x")
    assert noop.version == only.version  # nothing to release: nothing changes


async def test_a_pause_without_a_hold_name_is_the_default_hold_and_updates_it(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    first = await fleet.pause("migration", by="alice")
    second = await fleet.pause("migration, late", by="bob")
    assert [h.name for h in second.holds or ()] == [DEFAULT_HOLD]
    assert second.since == first.since and second.reason == "migration, late"
    assert (await audit(redis, fleet_name))[-1]["action"] == "hold_updated"


async def test_a_scheduled_hold_leaves_the_fleet_running_until_it_starts(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    start = now_utc() + timedelta(hours=2)
    state = await fleet.pause("pg 16 upgrade", by="dba", hold="dbmaint", starts_at=start,
                              expected_for=timedelta(minutes=30),
                              auto_resume_after=timedelta(minutes=30))
    assert not state.paused and not state.effectively_paused()
    (hold,) = state.holds or ()
    assert hold.starts_at == start.replace(microsecond=start.microsecond // 1000 * 1000)
    assert hold.auto_resume_at == hold.starts_at + timedelta(minutes=30)
    assert hold.expected_until == hold.auto_resume_at and hold.status(now_utc()) == "scheduled"
    inside = hold.starts_at + timedelta(minutes=1)
    assert state.effectively_paused(inside) and state.active_holds(inside) == (hold,)
    assert not state.effectively_paused(hold.starts_at + timedelta(minutes=30))
    assert state.next_transition() == hold.starts_at
    assert state.next_transition(inside) == hold.auto_resume_at
    entry = (await audit(redis, fleet_name))[-1]
    assert entry["action"] == "hold_scheduled" and entry["starts_at"] == format_time(start)
    cancelled = await fleet.resume(by="dba", hold="dbmaint")
    assert cancelled.holds == () and not cancelled.paused
    assert (await audit(redis, fleet_name))[-1]["action"] == "hold_cancelled"


async def test_a_hold_that_ended_by_itself_is_dropped_at_the_next_change(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    await fleet.pause("short", by="x", hold="short", auto_resume_after=timedelta(hours=1))
    # move the end into the past, as time would (the script trusts holds at holds_version)
    raw = json.loads(await redis.hget(keys.state, S_HOLDS))
    raw["short"]["auto_resume_at"] = format_time(now_utc() - timedelta(seconds=1))
    await redis.hset(keys.state, mapping={
        S_HOLDS: json.dumps(raw), "changed_at": format_time(now_utc() - timedelta(seconds=2))})
    assert not (await fleet.state()).effectively_paused()
    state = await fleet.pause("next", by="x", hold="next")
    assert [h.name for h in state.holds or ()] == ["next"]
    assert (await audit(redis, fleet_name))[-1]["action"] == "pause"


async def test_a_pause_written_by_an_older_release_reads_as_the_default_hold(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    legacy = FleetState(fleet=fleet_name, paused=True, reason="by hand", by="ops",
                        since=now_utc(), version=7)
    await redis.hset(keys.state, mapping=legacy.to_hash())
    fleet = Fleet(redis, fleet_name)
    read = await fleet.state()
    assert read.holds is None and read.effectively_paused()
    assert [h.name for h in read.effective_holds()] == [DEFAULT_HOLD]
    state = await fleet.pause("incident", by="oncall", hold="payments")
    assert state.version == 8
    assert [h.name for h in state.holds or ()] == [DEFAULT_HOLD, "payments"]
    # holds written by an older writer (holds_version behind version) are not trusted
    await redis.hset(keys.state, mapping={"paused": "0", "version": "9"})
    assert (await fleet.state()).holds is None
    assert not (await fleet.state()).effectively_paused()


async def test_paused_edited_by_hand_at_the_same_version_rules_over_the_holds(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("pg 16 upgrade", by="dba", hold="db")
    running = await fleet.resume(by="dba", hold="db")
    assert running.holds == ()
    await redis.hset(keys.state, mapping={"paused": "1", "reason": "by hand"})
    read = await fleet.state()
    assert read.holds is None and read.effectively_paused() and read.reason == "by hand"
    # the next change reads the hand-made pause as the hold "default"
    state = await fleet.pause("incident", by="oncall", hold="payments")
    assert [h.name for h in state.holds or ()] == [DEFAULT_HOLD, "payments"]
    await redis.hset(keys.state, "paused", "0")  # and a hand-made resume rules as well
    assert not (await fleet.state()).effectively_paused()


async def test_the_control_message_carries_the_holds_and_the_fleet_as_a_whole(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    fleet = Fleet(redis, fleet_name)
    async with redis.pubsub() as pubsub:
        await pubsub.subscribe(keys.control)
        await pubsub.get_message(timeout=1.0)
        state = await fleet.pause("pg 16 upgrade", by="dba", hold="db",
                                  auto_resume_after=timedelta(minutes=5))
        message = await pubsub.get_message(timeout=5.0)
    assert message is not None
    published = FleetState.from_json(message["data"], fleet_name)
    assert published == state
    body = json.loads(message["data"])
    assert body["paused"] is True and set(body["holds"]) == {"db"}
    assert body["auto_resume_at"] == body["holds"]["db"]["auto_resume_at"]
    stored = await redis.hgetall(keys.state)
    assert stored[S_HOLDS_VERSION] == stored["version"] == "1"


async def test_a_fleet_refuses_a_hold_past_the_most_it_may_have(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    for i in range(MAX_HOLDS):
        await fleet.pause("r", by="x", hold=f"h{i:02d}")
    with pytest.raises(HoldConflict) as refused:
        await fleet.pause("one too many", by="x", hold="extra")
    assert refused.value.kind == "too_many"
    updated = await fleet.pause("still fine", by="x", hold="h00")  # an update adds nothing
    assert len(updated.holds or ()) == MAX_HOLDS


@pytest.mark.parametrize("bad", ["", "Upper", "has space", "{tag}", "x" * 64])
async def test_bad_hold_names_are_refused_before_they_reach_redis(
    redis: aioredis.Redis, fleet_name: str, bad: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    with pytest.raises(ContractError):
        await fleet.pause("r", by="x", hold=bad)
    with pytest.raises(ContractError):
        await fleet.resume(by="x", hold=bad)
    assert await redis.exists(Keys(fleet_name).state) == 0


async def test_a_restore_that_raises_an_older_pause_keeps_its_holds_trusted(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("pg 16 upgrade", by="dba", hold="db")
    older = await fleet.pause("incident", by="oncall", hold="payments")
    newer_running = FleetState(fleet=fleet_name, paused=False, reason="", by="x",
                               since=now_utc(), version=older.version + 3, holds=())
    script = redis.register_script(RESTORE_STATE_LUA)
    assert await script(keys=[keys.state, keys.audit, keys.control],
                        args=restore_args(newer_running, "pod-1")) == 2
    raised = await fleet.state()
    assert raised.version == older.version + 4 and raised.effectively_paused()
    assert [h.name for h in raised.holds or ()] == ["db", "payments"]


def test_a_state_with_holds_round_trips_through_its_message_and_its_hash() -> None:
    now = now_utc().replace(microsecond=0)
    holds = (
        Hold("db", "pg 16 upgrade", "dba", now, None, now + timedelta(hours=1)),
        Hold("dbmaint", "window", "dba", now + timedelta(hours=2), now + timedelta(hours=3),
             now + timedelta(hours=3), now + timedelta(hours=2)),
    )
    state = FleetState(fleet="orders", paused=True, reason="pg 16 upgrade", by="dba",
                       since=now, version=4, holds=holds)
    assert FleetState.from_json(state.to_json(), "orders") == state
    assert FleetState.from_hash("orders", state.to_hash()) == state
    assert FleetState.from_json(FleetState.initial("orders").to_json()).holds is None


@pytest.mark.parametrize("holds", ['{"Bad Name": {}}', '{"db": []}', "[1]", "{not json",
                                   '{"db": {"since": "soon"}}'])
def test_an_unreadable_holds_field_is_an_invalid_state_not_a_crash(holds: str) -> None:
    raw = {"paused": "1", "version": "3", S_HOLDS: holds, S_HOLDS_VERSION: "3"}
    with pytest.raises(InvalidMessage) as bad:
        FleetState.from_hash("orders", raw)
    assert bad.value.kind == "bad_state"
    message = json.dumps({"fleet": "orders", "paused": True, "version": 3,
                          "holds": json.loads(holds) if holds.startswith(("{\"", "[")) else 1})
    with pytest.raises(InvalidMessage):
        FleetState.from_json(message, "orders")
