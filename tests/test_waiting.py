"""coordinator.fleet.waiting: the final word on a straggler is its record, not an
acknowledgement alone. The replicas of a fleet share one Redis user, so any of them can publish
an acknowledgement in another's name; a forged ``quiet`` must not make ``wait`` report ok while
the replica's record says it is not quiet. A listening fleet whose replicas all acknowledge in
time reads no record (the fast path). Against a real Redis, with real replicas."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, until

from coordinator import Fleet
from replica.contract import Ack, Keys, format_time, now_utc, parse_time
from tests.fleetkit import run_cli
from tests.procs import ReplicaProcess, base_env, enqueue, replica_processes

DISCOUNTED = "does not confirm its acknowledgement"


def _forged_quiet(replica: str, version: int) -> str:
    return Ack(replica, version, "quiet", fleet_held=True, quiet=True, in_flight=0,
               at=now_utc()).to_json()


async def _subscribed(redis: aioredis.Redis, channel: str) -> bool:
    counts = await redis.pubsub_numsub(channel)
    return bool(counts and counts[0][1])


async def test_a_forged_quiet_ack_does_not_end_a_wait_while_the_record_says_not_applied(
    redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.fleet.waiting")
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    keys = Keys(fleet_name)
    record = {"applied_version": "0", "fleet_held": "0", "quiet": "0", "in_flight": "0",
              "control": "connected", "heartbeat_at": format_time(now_utc()),
              "heartbeat_interval": "10"}
    await redis.hset(keys.replica("frozen-1"), mapping=record)  # frozen: it applies nothing
    await redis.zadd(keys.replicas, {"frozen-1": int(time.time() * 1000)})
    await redis.hset(keys.state, mapping={"version": "0", "paused": "0"})
    state = await fleet.pause("forged", by="t")
    waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=30))
    try:
        await until(lambda: _subscribed(redis, keys.acks), what="wait subscribed")
        await redis.publish(keys.acks, _forged_quiet("frozen-1", state.version))
        await until(lambda: DISCOUNTED in caplog.text, what="the forged ack checked")
        assert not waiting.done()  # the forged ack did not end it
        # the replica really gets there: its record says so, and that ends the wait
        await redis.hset(keys.replica("frozen-1"), mapping={
            "applied_version": str(state.version), "fleet_held": "1", "quiet": "1",
            "heartbeat_at": format_time(now_utc())})
        report = await waiting
    finally:
        waiting.cancel()
    assert report.ok and [r.id for r in report.replicas] == ["frozen-1"]


async def test_a_forged_ack_at_the_deadline_is_judged_by_the_record(
    redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.fleet.waiting")
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    keys = Keys(fleet_name)
    await redis.hset(keys.replica("frozen-1"), mapping={
        "applied_version": "0", "control": "connected", "heartbeat_interval": "10",
        "heartbeat_at": format_time(now_utc())})
    await redis.zadd(keys.replicas, {"frozen-1": int(time.time() * 1000)})
    await redis.hset(keys.state, mapping={"version": "0", "paused": "0"})
    state = await fleet.pause("forged", by="t")

    stop = asyncio.Event()

    async def forge() -> None:  # a loop, as a rogue replica would run it
        while not stop.is_set():
            await redis.publish(keys.acks, _forged_quiet("frozen-1", state.version))
            await asyncio.sleep(0.01)

    forger = asyncio.ensure_future(forge())
    try:
        report = await fleet.wait(state.version, timeout=1.0)
    finally:
        stop.set()  # not cancel(): redis-py can swallow a cancellation inside a call
        await forger
    assert not report.ok
    (straggler,) = report.stragglers
    assert (straggler.id, straggler.why, straggler.applied_version) == (
        "frozen-1", "stale version", 0)
    assert DISCOUNTED in caplog.text


async def test_a_forged_quiet_ack_for_a_busy_replica_does_not_end_its_wait(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.fleet.waiting")
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(item: Any) -> None:
        started.set()
        await release.wait()

    keys = Keys(fleet_name)
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)  # as the CLI and the API wait
    async with Replicas(redis_url, fleet_name, 2) as replicas:
        busy = Replica(redis_url, fleet_name, "busy-1", handler=slow, pause_timeout=0.2)
        await busy.start()
        try:
            busy.pool.put_nowait("long job")
            await started.wait()
            state = await fleet.pause("forged", by="t")
            waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=30))
            await until(lambda: _subscribed(redis, keys.acks), what="wait subscribed")
            await redis.publish(keys.acks, _forged_quiet("busy-1", state.version))
            await until(lambda: DISCOUNTED in caplog.text, what="the forged ack checked")
            assert not waiting.done()
            record = await redis.hgetall(keys.replica("busy-1"))
            assert record["quiet"] == "0" and record["in_flight"] == "1"
            release.set()  # the item ends: the replica turns quiet for real
            report = await waiting
            assert report.ok, report.to_dict()
            assert sorted(r.id for r in report.replicas) == ["busy-1", "pod-0", "pod-1"]
            assert len(replicas) == 2
        finally:
            release.set()
            await busy.stop()


async def test_a_listening_wait_judges_a_straggler_it_polled_by_its_record(
    redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coordinator.fleet.waiting")
    keys = Keys(fleet_name)
    async with Fleet(redis, fleet_name, wait_poll_interval=0.1) as fleet:
        await redis.hset(keys.replica("frozen-1"), mapping={
            "applied_version": "0", "control": "connected", "heartbeat_interval": "10",
            "heartbeat_at": format_time(now_utc())})
        await redis.zadd(keys.replicas, {"frozen-1": int(time.time() * 1000)})
        await redis.hset(keys.state, mapping={"version": "0", "paused": "0"})
        state = await fleet.pause("forged", by="t")
        waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=30))
        try:
            await until(lambda: "polling the records of 1 pending" in caplog.text,
                        what="frozen-1 read as a straggler")
            await redis.publish(keys.acks, _forged_quiet("frozen-1", state.version))
            await until(lambda: DISCOUNTED in caplog.text, what="the forged ack checked")
            assert not waiting.done()
            await redis.hset(keys.replica("frozen-1"), mapping={
                "applied_version": str(state.version), "fleet_held": "1", "quiet": "1",
                "heartbeat_at": format_time(now_utc())})
            report = await waiting
        finally:
            waiting.cancel()
        assert report.ok


async def test_a_listening_wait_that_acks_end_reads_no_record(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coordinator.fleet.waiting")
    async with Replicas(redis_url, fleet_name, 3) as replicas, \
            Fleet(redis, fleet_name, wait_poll_interval=30.0) as fleet:
        for _ in range(3):
            state = await fleet.pause("fast path", by="t")
            assert (await fleet.wait(state.version, timeout=10)).ok
            state = await fleet.resume(by="t")
            assert (await fleet.wait(state.version, timeout=10)).ok
        assert len(replicas) == 3
    assert "checking the records" not in caplog.text  # no round trip added
    assert "polling the records" not in caplog.text


async def test_acks_its_records_confirm_end_a_wait_without_a_warning(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.fleet.waiting")
    fleet = Fleet(redis, fleet_name, wait_poll_interval=5.0)
    async with Replicas(redis_url, fleet_name, 3) as replicas:
        for _ in range(3):
            state = await fleet.pause("genuine", by="t")
            assert (await fleet.wait(state.version, timeout=10)).ok
            state = await fleet.resume(by="t")
            assert (await fleet.wait(state.version, timeout=10)).ok
        assert len(replicas) == 3
    assert DISCOUNTED not in caplog.text


# ---------------------------------------------------------------------------- a frozen replica
# (issue 13, section 1): a replica live at the change is excused only when it left (a clean stop
# removed its record and its member); one whose heartbeat went stale is an unreachable straggler


def _record(version: int = 0, interval: float = 10.0, in_flight: int = 0) -> dict[str, str]:
    return {"applied_version": str(version), "fleet_held": "0", "quiet": "0",
            "in_flight": str(in_flight), "control": "connected",
            "heartbeat_at": format_time(now_utc()), "heartbeat_interval": str(interval)}


async def _register(redis: aioredis.Redis, fleet: str, replica: str,
                    record: dict[str, str]) -> None:
    """A replica's heartbeat as it writes it: the record, and its score in the set (ms) at
    the record's heartbeat time."""
    keys = Keys(fleet)
    beat = parse_time(record["heartbeat_at"])
    assert beat is not None
    await redis.hset(keys.replica(replica), mapping=record)
    await redis.zadd(keys.replicas, {replica: int(beat.timestamp() * 1000)})


async def test_a_replica_whose_heartbeat_goes_stale_during_a_wait_is_an_unreachable_straggler(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    record = _record(interval=0.5, in_flight=2)  # stale 1.25 s after this heartbeat
    await _register(redis, fleet_name, "frozen-1", record)
    state = await fleet.pause("migration", by="t")
    report = await fleet.wait(state.version, timeout=2.0)  # it never heartbeats again
    assert not report.ok, report.to_dict()
    (straggler,) = report.stragglers
    assert (straggler.id, straggler.why, straggler.in_flight) == ("frozen-1", "unreachable", 2)
    assert straggler.last_heard is not None
    assert format_time(straggler.last_heard) == record["heartbeat_at"]
    assert report.excused == []
    shape = report.to_dict()
    assert shape["ok"] is False and shape["excused"] == []
    assert shape["stragglers"] == ["frozen-1"]
    (frozen,) = [r for r in shape["replicas"] if r["id"] == "frozen-1"]
    assert (frozen["why"], frozen["last_heard"], frozen["in_flight"]) == (
        "unreachable", record["heartbeat_at"], 2)


async def test_a_replica_that_stops_cleanly_during_a_wait_is_excused_as_gone(
    redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coordinator.fleet.waiting")
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    keys = Keys(fleet_name)
    await _register(redis, fleet_name, "leaving-1", _record(in_flight=1))
    state = await fleet.pause("migration", by="t")
    waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=30))
    try:
        await until(lambda: "polling the records of 1 pending" in caplog.text,
                    what="leaving-1 waited for")
        assert not waiting.done()
        # what a clean stop sends: the record and the member go
        await redis.delete(keys.replica("leaving-1"))
        await redis.zrem(keys.replicas, "leaving-1")
        report = await waiting
    finally:
        waiting.cancel()
    assert report.ok, report.to_dict()
    assert report.replicas == [] and report.stragglers == []
    assert [(e.id, e.reason) for e in report.excused] == [("leaving-1", "gone")]
    assert report.to_dict()["excused"] == [{"id": "leaving-1", "reason": "gone"}]


async def test_a_replica_whose_record_expired_while_still_registered_is_not_excused(
    redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coordinator.fleet.waiting")
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    keys = Keys(fleet_name)
    record = _record(in_flight=3)
    await _register(redis, fleet_name, "frozen-1", record)
    state = await fleet.pause("migration", by="t")
    waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=1.0))
    try:
        await until(lambda: "polling the records of 1 pending" in caplog.text,
                    what="frozen-1 waited for")
        await redis.delete(keys.replica("frozen-1"))  # expired: the member stays
        report = await waiting
    finally:
        waiting.cancel()
    assert not report.ok and report.excused == []
    (straggler,) = report.stragglers
    assert (straggler.id, straggler.why, straggler.in_flight) == ("frozen-1", "unreachable", 3)
    assert format_time(straggler.last_heard) == record["heartbeat_at"]


async def test_a_replica_lost_with_the_state_when_redis_forgets_is_not_excused(
    redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coordinator.fleet.waiting")
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    keys = Keys(fleet_name)
    await _register(redis, fleet_name, "frozen-1", _record())
    state = await fleet.pause("migration", by="t")
    waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=1.0))
    try:
        await until(lambda: "polling the records of 1 pending" in caplog.text,
                    what="frozen-1 waited for")
        # an empty restart: the state, the member and the record all gone; that is no clean stop
        await redis.delete(keys.state, keys.replica("frozen-1"), keys.replicas)
        report = await waiting
    finally:
        waiting.cancel()
    assert not report.ok and report.excused == []
    assert [(s.id, s.why) for s in report.stragglers] == [("frozen-1", "unreachable")]


async def test_a_listening_wait_does_not_wait_for_a_replica_already_stale_at_the_change(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    async with Fleet(redis, fleet_name, wait_poll_interval=0.1) as fleet:
        # its score is fresh enough for the set, but its record's heartbeat (every second)
        # stopped 30 s before the change: it was not live then
        record = _record(interval=1.0)
        record["heartbeat_at"] = format_time(now_utc() - timedelta(seconds=30))
        await redis.hset(keys.replica("dead-1"), mapping=record)
        await redis.zadd(keys.replicas, {"dead-1": int(time.time() * 1000) - 5000})
        state = await fleet.pause("migration", by="t")
        report = await fleet.wait(state.version, timeout=10)
    assert report.ok and report.replicas == [] and report.excused == []


# ---------------------------------------------------------------------------- real processes


def _stopped(pid: int) -> bool:
    """The process is stopped (state T in /proc): what it had sent has gone."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


@contextlib.asynccontextmanager
async def _one_frozen_with_an_item_in_flight(
    redis: aioredis.Redis, redis_url: str, fleet: str, log_dir: Path
) -> AsyncIterator[tuple[list[ReplicaProcess], ReplicaProcess]]:
    """Three ``fleetgate-replica`` processes on the demo handler, heartbeat 1 s: two with short
    items, one whose item takes ten minutes, frozen (SIGSTOP) once its record shows it in
    flight. Thawed (SIGCONT) at the end, then killed."""
    fast_env = base_env(redis_url, fleet, heartbeat_interval=1, workers=2)
    slow_env = base_env(redis_url, fleet, heartbeat_interval=1, workers=1,
                        demo_item_seconds=600, item_timeout=900)
    async with replica_processes(2, fast_env, log_dir, prefix="fast") as fast, \
            replica_processes(1, slow_env, log_dir, prefix="slow") as (slow,):
        await enqueue(redis, fleet, 20)

        async def slow_busy() -> bool:
            return await redis.hget(Keys(fleet).replica(slow.id), "in_flight") == "1"

        await until(slow_busy, timeout=30, what="the slow replica's record in flight")
        slow.signal(signal.SIGSTOP)  # a long GC pause, a throttled container, a cut-off node
        await until(lambda: _stopped(slow.proc.pid), what="the slow replica to be stopped")
        # its record expires 3 heartbeats (3 s) after its last write; a CLI that starts slowly
        # on a loaded machine would find it gone. Keep it for the test: the tests read it as
        # it was when the replica froze (a test that needs it expired deletes it)
        await redis.pexpire(Keys(fleet).replica(slow.id), 120_000)
        try:
            yield fast, slow
        finally:
            slow.signal(signal.SIGCONT)


@pytest.mark.slow
async def test_a_replica_frozen_with_an_item_in_flight_keeps_a_wait_from_saying_all_quiet(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    async with _one_frozen_with_an_item_in_flight(
            redis, redis_url, fleet_name, tmp_path) as (fast, frozen):
        fleet = Fleet(redis, fleet_name)
        state = await fleet.pause("db migration", by="t")
        report = await fleet.wait(state.version, timeout=3)
    assert not report.ok, report.to_dict()
    assert sorted(r.id for r in report.replicas) == sorted([*(rp.id for rp in fast), frozen.id])
    (straggler,) = report.stragglers
    assert (straggler.id, straggler.why, straggler.in_flight) == (frozen.id, "unreachable", 1)
    assert straggler.last_heard is not None and straggler.last_heard <= now_utc()
    assert all(r.reached for r in report.replicas if r.id != frozen.id)


@pytest.mark.slow
async def test_pause_and_resume_wait_exit_3_naming_a_frozen_replica_unreachable(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path
) -> None:
    async with _one_frozen_with_an_item_in_flight(
            redis, redis_url, fleet_name, tmp_path) as (_fast, frozen):
        paused = await asyncio.to_thread(
            run_cli, "pause", "--reason", "db migration", "--wait", "--timeout", "4s", "--json",
            redis_url=redis_url, fleet=fleet_name)
        await redis.delete(Keys(fleet_name).replica(frozen.id))  # its record expired
        resumed = await asyncio.to_thread(
            run_cli, "resume", "--wait", "--timeout", "4s",
            redis_url=redis_url, fleet=fleet_name)
    assert paused.returncode == 3, paused.stderr
    assert f"{frozen.id} (unreachable, last heard " in paused.stderr
    assert "1 in flight" in paused.stderr
    report = json.loads(paused.stdout)["wait"]
    assert report["ok"] is False and report["excused"] == []
    assert report["stragglers"] == [frozen.id]
    (straggler,) = [r for r in report["replicas"] if r["id"] == frozen.id]
    assert (straggler["id"], straggler["why"], straggler["in_flight"]) == (
        frozen.id, "unreachable", 1)
    assert straggler["last_heard"] is not None
    # by the resume its record has expired (3 heartbeats): still registered, still named
    assert resumed.returncode == 3, resumed.stderr
    assert f"{frozen.id} (unreachable, last heard " in resumed.stderr


async def test_a_replica_frozen_a_few_of_its_short_heartbeats_before_the_change_is_waited_for(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name, wait_poll_interval=0.1)
    # heartbeat every second, silent for 5 s: stale by its own interval, but a GC pause or a
    # throttled container that long still holds its items
    record = _record(interval=1.0, in_flight=1)
    record["heartbeat_at"] = format_time(now_utc() - timedelta(seconds=5))
    await _register(redis, fleet_name, "frozen-1", record)
    state = await fleet.pause("migration", by="t")
    report = await fleet.wait(state.version, timeout=0.5)
    assert not report.ok
    assert [(s.id, s.why, s.in_flight) for s in report.stragglers] == [
        ("frozen-1", "unreachable", 1)]
