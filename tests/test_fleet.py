"""coordinator.Fleet against a real Redis: changes, wait reports, replicas, history, restore."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, until

from coordinator import Fleet
from replica.contract import MAX_REASON, FleetState, Keys, format_time, now_utc
from replica.errors import ContractError


async def test_a_fresh_fleet_reads_as_running_at_version_zero(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    assert await fleet.state() == FleetState.initial(fleet_name)
    assert await fleet.replicas() == []
    assert await fleet.history() == []
    report = await fleet.wait(0, timeout=1.0)
    assert report.ok and report.replicas == []


async def test_pausing_a_paused_fleet_keeps_since_and_updates_the_reason(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    first = await fleet.pause("db maintenance", by="alice", expected_for=timedelta(minutes=30))
    assert first.paused and first.version == 1 and first.by == "alice"
    assert first.expected_until is not None and first.since is not None
    assert first.expected_until - first.since == timedelta(minutes=30)
    second = await fleet.pause("db maintenance, running late", by="bob")
    assert second.version == 2 and second.since == first.since
    assert second.reason == "db maintenance, running late" and second.by == "bob"
    assert await fleet.state() == second
    raw = await redis.hgetall(Keys(fleet_name).state)
    assert raw["paused"] == "1" and raw["version"] == "2" and raw["since"].endswith("Z")


async def test_resuming_a_running_fleet_changes_nothing_and_returns_the_state(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    fresh = await fleet.resume(by="alice")
    assert fresh == FleetState.initial(fleet_name)
    await fleet.pause("x", by="alice")
    resumed = await fleet.resume(by="alice")
    again = await fleet.resume(by="carol")
    assert again == resumed and again.version == 2 and again.by == "alice"
    assert [e.action for e in await fleet.history()] == ["resume", "pause"]


async def test_history_lists_every_change_newest_first(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("one", by="a")
    await fleet.resume(by="b")
    await fleet.pause("two", by="c")
    events = await fleet.history(limit=2)
    assert [(e.action, e.reason, e.by, e.version) for e in events] == [
        ("pause", "two", "c", 3), ("resume", "", "b", 2),
    ]
    assert events[0].at is not None
    assert json.loads(json.dumps(events[0].to_dict()))["version"] == 3


async def test_a_resume_reason_goes_to_the_audit_trail_not_the_state(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    await fleet.pause("db maintenance", by="a")
    state = await fleet.resume(by="b", reason="  migration done ")
    assert not state.paused and state.reason == ""
    (event,) = await fleet.history(limit=1)
    assert (event.action, event.reason, event.by) == ("resume", "migration done", "b")
    with pytest.raises(ContractError):
        await fleet.resume(by="b", reason="x" * (MAX_REASON + 1))


async def test_bad_changes_are_refused_before_they_reach_redis(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    with pytest.raises(ContractError):
        await fleet.pause("", by="alice")
    with pytest.raises(ContractError):
        await fleet.pause("reason", by="")
    with pytest.raises(ContractError):
        await fleet.pause("x" * 5000, by="alice")
    with pytest.raises(ContractError):
        await fleet.pause("reason", by="alice", expected_for=timedelta(seconds=-1))
    with pytest.raises(ContractError):
        await fleet.resume(by="alice", stagger=timedelta(hours=5))
    with pytest.raises(ContractError):
        Fleet(redis, "Not A Fleet")
    assert await fleet.state() == FleetState.initial(fleet_name)


async def test_durations_may_be_given_in_seconds(redis: aioredis.Redis, fleet_name: str) -> None:
    fleet = Fleet(redis, fleet_name)
    state = await fleet.pause("numbers", by="api", expected_for=60, auto_resume_after=120.0)
    assert state.since is not None and state.expected_until is not None
    assert state.expected_until - state.since == timedelta(seconds=60)
    assert state.auto_resume_at is not None
    resumed = await fleet.resume(by="api", stagger=5)
    assert resumed.resume_stagger_s == 5.0


async def test_enqueue_appends_json_items_to_the_work_stream(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    ids = await fleet.enqueue([{"order": 1}, "two", 3])
    assert len(ids) == 3
    entries = await redis.xrange(Keys(fleet_name).work)
    assert [e[0] for e in entries] == ids
    assert [json.loads(e[1]["item"]) for e in entries] == [{"order": 1}, "two", 3]
    assert await fleet.enqueue([]) == []


async def test_a_pause_is_pushed_to_five_controllers_and_wait_reports_all_quiet(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    # polls far apart: after start-up's read no poll comes during the test, so a change can
    # only arrive by push (the stats say so: pushes counted, no poll in between)
    poll = 120.0
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 5, poll_interval=poll) as replicas:
        for action in ("pause", "resume"):
            before = [c.stats() for c in replicas.controllers]
            if action == "pause":
                state = await fleet.pause("five", by="t")
            else:
                state = await fleet.resume(by="t")
            async with asyncio.timeout(30):  # a hang guard, far below the first poll
                await asyncio.gather(*(p.wait_for(action == "pause") for p in replicas.pools))
            report = await fleet.wait(state.version, timeout=30)
            after = [c.stats() for c in replicas.controllers]
            # pushed, not polled: each applied one more pushed state, and polled nothing
            assert [a.applied_version for a in after] == [state.version] * 5
            assert [(a.pushes - b.pushes, a.polls - b.polls, a.applied - b.applied)
                    for a, b in zip(after, before, strict=True)] == [(1, 0, 1)] * 5
            assert report.ok, report.to_dict()
            assert report.action == action and report.version == state.version
            assert sorted(r.id for r in report.replicas) == [f"pod-{i}" for i in range(5)]
            assert all(r.reached and r.why is None for r in report.replicas)
            assert all(r.applied_version >= state.version for r in report.replicas)
            if action == "pause":
                # quiet acknowledged on the push's apply (no poll came): nothing was in flight
                assert all(r.quiet_at is not None for r in report.replicas)
                assert all(r.quiet_after_s is not None and r.quiet_after_s >= 0
                           for r in report.replicas)
            assert report.stragglers == []
            assert json.loads(json.dumps(report.to_dict()))["ok"] is True


async def test_wait_names_a_replica_whose_item_outlasts_the_pause_as_still_in_flight(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(item: Any) -> None:
        started.set()
        await release.wait()

    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2) as replicas:
        busy = Replica(redis_url, fleet_name, "busy-1", handler=slow, pause_timeout=0.2)
        await busy.start()
        try:
            busy.pool.put_nowait("long job")
            await started.wait()
            state = await fleet.pause("drain", by="t")
            # every record says what it will say at the wait's end (the two quiet, the busy one
            # not): a short wait then reports it however loaded the machine
            await until(lambda: _all_records_at(redis, fleet_name, state.version, 3))
            await until(lambda: _quiet(redis, fleet_name, ["pod-0", "pod-1"]))
            report = await fleet.wait(state.version, timeout=1.0)
            assert not report.ok
            (straggler,) = report.stragglers
            assert straggler.id == "busy-1" and straggler.why == "still in flight"
            assert straggler.in_flight == 1 and straggler.applied_version == state.version
            assert straggler.quiet_at is None
            assert {r.id for r in report.replicas if r.reached} == {"pod-0", "pod-1"}
            record = await redis.hgetall(Keys(fleet_name).replica("busy-1"))
            assert record["quiet"] == "0" and record["in_flight"] == "1"
            release.set()
            report = await fleet.wait(state.version, timeout=10)
            assert report.ok
            assert len(replicas) == 2
        finally:
            release.set()
            await busy.stop()


async def test_wait_finds_acks_it_missed_in_the_records(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 3) as replicas:
        state = await fleet.pause("early", by="t")
        # every replica applies and acknowledges before anyone waits
        await until(lambda: all(c.stats().heartbeats >= 2 and c.applied_version == state.version
                                for c in replicas.controllers))
        await until(lambda: _all_records_at(redis, fleet_name, state.version, 3))
        report = await fleet.wait(state.version, timeout=10)
        assert report.ok and len(report.replicas) == 3


async def _all_records_at(redis: aioredis.Redis, fleet: str, version: int, n: int) -> bool:
    keys = Keys(fleet)
    ids = await redis.zrange(keys.replicas, 0, -1)
    versions = [await redis.hget(keys.replica(i), "applied_version") for i in ids]
    return len(ids) == n and all(v == str(version) for v in versions)


async def _quiet(redis: aioredis.Redis, fleet: str, ids: list[str]) -> bool:
    keys = Keys(fleet)
    return all([await redis.hget(keys.replica(i), "quiet") == "1" for i in ids])


async def test_wait_falls_back_to_polling_records_when_no_ack_comes(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    keys = Keys(fleet_name)
    ms = int(time.time() * 1000)
    record = {
        "applied_version": "0", "fleet_held": "0", "quiet": "0",
        "in_flight": "0", "control": "connected", "heartbeat_at": format_time(now_utc()),
        "heartbeat_interval": "10",
    }
    await redis.hset(keys.replica("ghost-1"), mapping=record)
    await redis.zadd(keys.replicas, {"ghost-1": ms})
    await redis.hset(keys.state, mapping={"version": "0", "paused": "0"})  # a fleet, never paused
    state = await fleet.pause("silent", by="t")
    waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=20))
    await until(lambda: _subscribed(redis, keys.acks))  # wait is listening for acks
    assert not waiting.done()
    await redis.hset(keys.replica("ghost-1"), mapping={
        "applied_version": str(state.version), "fleet_held": "1", "quiet": "1",
    })  # no ack published: only the records tell
    report = await waiting
    assert report.ok and report.replicas[0].id == "ghost-1"


async def _subscribed(redis: aioredis.Redis, channel: str) -> bool:
    counts = await redis.pubsub_numsub(channel)
    return bool(counts and counts[0][1])


async def test_wait_reports_a_silent_replica_as_stale_version_or_unreachable(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    keys = Keys(fleet_name)
    now = format_time(now_utc())
    ms = int(time.time() * 1000)
    await redis.hset(keys.replica("behind-1"), mapping={
        "applied_version": "0", "control": "connected", "heartbeat_at": now,
        "heartbeat_interval": "10"})
    await redis.hset(keys.replica("cut-1"), mapping={
        "applied_version": "0", "control": "disconnected", "heartbeat_at": now,
        "heartbeat_interval": "10"})
    await redis.zadd(keys.replicas, {"behind-1": ms, "cut-1": ms, "gone-1": ms - 1_800_000})
    state = await fleet.pause("nobody listens", by="t")
    report = await fleet.wait(state.version, timeout=0.5)
    assert not report.ok
    assert {(r.id, r.why) for r in report.stragglers} == {
        ("behind-1", "stale version"), ("cut-1", "unreachable"),
    }  # gone-1 is stale (no record, half an hour old): not a live replica, not waited for
    infos = {i.id: i for i in await fleet.replicas()}
    assert infos["gone-1"].stale and not infos["behind-1"].stale
    assert [i.id for i in await fleet.replicas(include_stale=False)] == ["behind-1", "cut-1"]


async def test_replicas_lists_live_replicas_with_their_records(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2, heartbeat_interval=3.0,
                        extra_fields=lambda: {"queue_capacity": 100}) as replicas:
        state = await fleet.pause("look", by="t")
        assert (await fleet.wait(state.version, timeout=10)).ok
        infos = await fleet.replicas()
        assert [i.id for i in infos] == ["pod-0", "pod-1"]
        for info in infos:
            assert not info.stale and info.control == "connected"
            assert info.paused and info.quiet and info.fleet_held
            assert info.holds == {"fleet": "look"}
            assert info.applied_version == state.version
            assert info.applied_state == state
            assert info.heartbeat_interval == 3.0 and info.host
            assert info.started_at is not None and info.heartbeat_at is not None
            assert info.extra == {"queue_capacity": "100"}
            assert json.loads(json.dumps(info.to_dict()))["id"] == info.id
        assert len(replicas) == 2
    assert await fleet.replicas() == []  # a clean stop removes the records


async def test_restore_if_missing_rebuilds_the_state_from_the_newest_replica_record(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=60.0) as replicas:
        state = await fleet.pause("keep me", by="t")
        assert (await fleet.wait(state.version, timeout=10)).ok
        assert not await fleet.restore_if_missing()  # nothing is missing
        await redis.delete(keys.state)
        assert await fleet.restore_if_missing()
        assert await fleet.state() == state
        await redis.delete(keys.state)
        # a change on a forgotten hash restores first, so the version keeps growing
        resumed = await fleet.resume(by="t")
        assert resumed.version == state.version + 1 and not resumed.paused
        # both got there, but Redis lost its data just now: one it forgot is not vouched for
        report = await fleet.wait(resumed.version, timeout=10)
        assert all(r.reached for r in report.replicas) and len(report.replicas) == 2
        assert not report.ok and report.redis_lost_at is not None
        assert [e.action for e in await fleet.history(limit=3)] == ["resume", "restore",
                                                                    "restore"]
        assert len(replicas) == 2


async def test_the_coordinators_restore_keeps_an_older_pause_and_raises_it_above_the_replicas(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Under the ACL only the coordinator restores: Redis came back with an older pause while
    the replicas applied a newer running state. The pause stays, at a version above theirs."""
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=60.0):
        paused = await fleet.pause("older pause", by="t")
        assert (await fleet.wait(paused.version, timeout=10)).ok
        resumed = await fleet.resume(by="t")
        assert (await fleet.wait(resumed.version, timeout=10)).ok
        await redis.delete(keys.state)
        await redis.hset(keys.state, mapping=paused.to_hash())  # the lost write's survivor
        caplog.set_level(logging.WARNING, logger="coordinator.fleet.changes")
        assert await fleet.restore_if_missing()
        state = await fleet.state()
        assert state.paused and state.reason == "older pause"
        assert state.version == resumed.version + 1
        assert "kept the older pause" in caplog.text
        assert (await fleet.history(limit=1))[0].action == "restore"


async def test_the_state_change_prunes_replica_ids_silent_for_an_hour(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    ms = int(time.time() * 1000)
    await redis.zadd(keys.replicas, {"old-1": ms - 2 * 3_600_000, "recent-1": ms})
    await fleet.resume(by="t")  # a no-op writes nothing (issue 19, C.10)
    assert await redis.zrange(keys.replicas, 0, -1) == ["old-1", "recent-1"]
    await fleet.pause("prune", by="t")
    assert await redis.zrange(keys.replicas, 0, -1) == ["recent-1"]


async def test_fleet_accepts_a_client_that_does_not_decode(
    redis_url: str, fleet_name: str
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        fleet = Fleet(client, fleet_name)
        state = await fleet.pause("bytes", by="t")
        assert (await fleet.state()) == state
        assert [e.action for e in await fleet.history()] == ["pause"]
        assert all(isinstance(i, str) for i in await fleet.enqueue([1, 2]))
        assert await fleet.replicas() == []
        assert (await fleet.wait(state.version, timeout=1)).ok
    finally:
        await client.aclose()


async def test_a_listening_fleet_waits_on_its_open_subscription(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 3) as replicas, \
            Fleet(redis, fleet_name, wait_poll_interval=0.1) as fleet:
        # a replica that died 30 s ago: still in the set, its record expired: it was not
        # live at the change, so no wait waits for it
        await redis.zadd(keys.replicas, {"dead-1": int(time.time() * 1000) - 30_000})
        for _ in range(3):
            state = await fleet.pause("listening", by="t")
            report = await fleet.wait(state.version, timeout=10)
            assert report.ok, report.to_dict()
            assert sorted(r.id for r in report.replicas) == ["pod-0", "pod-1", "pod-2"]
            state = await fleet.resume(by="t")
            assert (await fleet.wait(state.version, timeout=10)).ok
        assert await _subscribed(redis, keys.acks)
        assert len(replicas) == 3
    assert not await _subscribed(redis, keys.acks)  # closed on exit
