"""coordinator.fleet.waiting: the final word on a straggler is its record, not an
acknowledgement alone. The replicas of a fleet share one Redis user, so any of them can publish
an acknowledgement in another's name; a forged ``quiet`` must not make ``wait`` report ok while
the replica's record says it is not quiet. A listening fleet whose replicas all acknowledge in
time reads no record (the fast path). Against a real Redis, with real replicas."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, until

from coordinator import Fleet
from replica.contract import Ack, Keys, format_time, now_utc

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
