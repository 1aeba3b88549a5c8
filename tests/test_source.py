"""StreamSource: durable work from a Redis stream, against a real Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from replica.contract import ITEM_FIELD, WORK_GROUP, Keys
from replica.service.breaker import AsyncCircuitBreaker, BreakerOpen
from replica.service.settings import ReplicaSettings
from replica.service.source import StreamSource

Handler = Callable[[Any], Awaitable[None]]


def make_settings(redis_url: str, fleet: str, replica_id: str = "r1", **kw: Any) -> ReplicaSettings:
    return ReplicaSettings(
        redis_url=redis_url, fleet=fleet, replica_id=replica_id, insecure_no_auth=True, **kw
    )


async def enqueue(redis: aioredis.Redis, fleet: str, n: int, start: int = 0) -> list[str]:
    ids = []
    for i in range(start, start + n):
        ids.append(await redis.xadd(Keys(fleet).work, {ITEM_FIELD: json.dumps({"id": f"i{i}"})}))
    return ids


async def pending_count(redis: aioredis.Redis, fleet: str, consumer: str | None = None) -> int:
    rows = await redis.xpending_range(
        Keys(fleet).work, WORK_GROUP, "-", "+", 10_000, consumername=consumer
    )
    return len(rows)


class Recorder:
    """A handler recording item ids; optionally blocks every item until ``gate`` is set."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.done: list[str] = []
        self.started: list[str] = []
        self.gate = gate
        self.changed = asyncio.Event()

    async def __call__(self, item: Any) -> None:
        self.started.append(item["id"])
        self.changed.set()
        if self.gate is not None:
            await self.gate.wait()
        self.done.append(item["id"])
        self.changed.set()

    async def wait(self, cond: Callable[[], bool], timeout: float = 15.0) -> None:
        async with asyncio.timeout(timeout):
            while not cond():
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def running(
    redis: aioredis.Redis, settings: ReplicaSettings, handler: Handler, **kw: Any
) -> AsyncIterator[StreamSource]:
    source = StreamSource(redis, settings, handler, **kw)
    await source.pool.start()
    await source.start()
    try:
        yield source
    finally:
        await source.stop(timeout=5.0)


async def until(cond: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    """Poll a condition held in another system (Redis) with a bounded deadline."""
    async with asyncio.timeout(timeout):
        while True:
            if await cond():
                return
            await asyncio.sleep(0.02)


async def test_every_item_in_the_stream_is_handled_and_acknowledged(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 30)
    rec = Recorder()
    async with running(redis, make_settings(redis_url, fleet_name, workers=3), rec) as source:
        await rec.wait(lambda: len(rec.done) == 30)
        await until(lambda: _zero(pending_count(redis, fleet_name)))
        assert source.stats().done == 30
    assert sorted(rec.done) == sorted(f"i{i}" for i in range(30))


async def _true(value: bool) -> bool:
    return value


async def _zero(aw: Awaitable[int]) -> bool:
    return await aw == 0


async def test_a_paused_pool_leaves_new_work_in_redis(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    rec = Recorder()
    source = StreamSource(redis, make_settings(redis_url, fleet_name), rec)
    source.pool.hold("test", "operator")
    await source.pool.start()
    await source.start()
    try:
        await enqueue(redis, fleet_name, 10)
        await asyncio.sleep(0.5)  # a window in which a reader that ignored the pause would read
        assert await pending_count(redis, fleet_name) == 0
        assert source.held == 0 and rec.started == []
        source.pool.resume("operator")
        await rec.wait(lambda: len(rec.done) == 10)
    finally:
        await source.stop(timeout=5.0)


async def test_prefetch_is_bounded_by_the_queue_size(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 20)
    gate = asyncio.Event()
    rec = Recorder(gate)
    settings = make_settings(redis_url, fleet_name, workers=2, queue_size=3)
    async with running(redis, settings, rec) as source:
        await rec.wait(lambda: len(rec.started) == 2)
        await until(lambda: _equals(pending_count(redis, fleet_name), 3))
        assert source.held == 3
        assert source.pool.in_flight == 2 and source.pool.queued == 1
        gate.set()
        await rec.wait(lambda: len(rec.done) == 20)


async def _equals(aw: Awaitable[int], value: int) -> bool:
    return await aw == value


async def test_a_failed_item_is_retried_and_then_acknowledged(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 3)
    attempts: dict[str, int] = {}
    done = asyncio.Event()

    async def handler(item: Any) -> None:
        attempts[item["id"]] = attempts.get(item["id"], 0) + 1
        if item["id"] == "i1" and attempts["i1"] <= 2:
            raise RuntimeError("transient")
        if len(attempts) == 3 and attempts["i1"] == 3:
            done.set()

    async with running(redis, make_settings(redis_url, fleet_name, max_retries=3), handler) as s:
        await asyncio.wait_for(done.wait(), 15)
        await until(lambda: _zero(pending_count(redis, fleet_name)))
        stats = s.stats()
        assert stats.failed == 2 and stats.retried == 2 and stats.dead_lettered == 0
    assert await redis.xlen(Keys(fleet_name).dead) == 0


async def test_an_item_that_keeps_failing_is_dead_lettered_with_its_error(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    (entry,) = await enqueue(redis, fleet_name, 1)
    attempts = 0

    async def handler(item: Any) -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError(f"bad item {item['id']}")

    settings = make_settings(redis_url, fleet_name, max_retries=2)
    async with running(redis, settings, handler) as source:
        await until(lambda: _equals(redis.xlen(Keys(fleet_name).dead), 1))
        assert source.stats().dead_lettered == 1
    assert attempts == 3  # the first attempt and two retries
    assert await pending_count(redis, fleet_name) == 0
    [(_, fields)] = await redis.xrange(Keys(fleet_name).dead)
    assert fields["entry"] == entry
    assert json.loads(fields[ITEM_FIELD]) == {"id": "i0"}
    assert fields["error"] == "ValueError: bad item i0"
    assert fields["deliveries"] == "3" and fields["replica"] == "r1"


async def test_malformed_entries_are_dead_lettered_and_counted(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xadd(keys.work, {"other": "x"})
    await redis.xadd(keys.work, {ITEM_FIELD: "{not json"})
    await enqueue(redis, fleet_name, 1)
    rec = Recorder()
    async with running(redis, make_settings(redis_url, fleet_name), rec) as source:
        await rec.wait(lambda: rec.done == ["i0"])
        await until(lambda: _equals(redis.xlen(keys.dead), 2))
        assert source.stats().malformed == 2
    errors = sorted(f["error"] for _, f in await redis.xrange(keys.dead))
    assert errors[0].startswith("malformed entry: item is not JSON")
    assert errors[1] == "malformed entry: no 'item' field"
    assert await pending_count(redis, fleet_name) == 0


async def test_items_a_crashed_replica_held_are_claimed_after_the_idle_time(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    await enqueue(redis, fleet_name, 5)
    # A replica that read five items and died without acknowledging them.
    await redis.xreadgroup(WORK_GROUP, "dead-replica", {keys.work: ">"}, count=5)
    assert await pending_count(redis, fleet_name, "dead-replica") == 5
    rec = Recorder()
    settings = make_settings(redis_url, fleet_name, claim_idle=0.2)
    async with running(redis, settings, rec) as source:
        await rec.wait(lambda: len(rec.done) == 5)
        await until(lambda: _zero(pending_count(redis, fleet_name)))
        assert source.stats().claimed == 5
    assert sorted(rec.done) == [f"i{i}" for i in range(5)]


async def _stopped_with_two_done_and_four_unstarted(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, claim_idle: float
) -> tuple[StreamSource, Recorder]:
    """A replica "first" that took all six items, ran two, and was stopped meanwhile."""
    await enqueue(redis, fleet_name, 6)
    gate = asyncio.Event()
    first = Recorder(gate)
    settings = make_settings(redis_url, fleet_name, "first", workers=2, queue_size=6,
                             claim_idle=claim_idle)
    source = StreamSource(redis, settings, first)
    await source.pool.start()
    await source.start()
    await first.wait(lambda: len(first.started) == 2)
    await until(lambda: _equals(pending_count(redis, fleet_name, "first"), 6))
    stopping = asyncio.create_task(source.stop(timeout=10.0))
    await asyncio.sleep(0)
    gate.set()  # the two in-flight items finish within the timeout
    await stopping
    assert sorted(first.done) == sorted(first.started) and len(first.done) == 2
    return source, first


async def test_stop_leaves_unstarted_items_pending_for_another_replica(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    _source, first = await _stopped_with_two_done_and_four_unstarted(
        redis, redis_url, fleet_name, claim_idle=0.3
    )
    # The four unstarted ones are still pending under the stopped replica, not acknowledged.
    assert await pending_count(redis, fleet_name, "first") == 4
    second = Recorder()
    async with running(redis, make_settings(redis_url, fleet_name, "second", claim_idle=0.3),
                       second):
        await second.wait(lambda: len(second.done) == 4)
        await until(lambda: _zero(pending_count(redis, fleet_name)))
    assert sorted(first.done + second.done) == [f"i{i}" for i in range(6)]


async def test_what_a_stopping_replica_leaves_is_claimed_at_once_not_after_the_idle_time(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    long_idle = 60.0  # far longer than this test may take
    source, first = await _stopped_with_two_done_and_four_unstarted(
        redis, redis_url, fleet_name, claim_idle=long_idle
    )
    assert source.stats().handed_back == 4
    rows = await redis.xpending_range(Keys(fleet_name).work, WORK_GROUP, "-", "+", 10,
                                      consumername="first")
    assert len(rows) == 4 and all(r["time_since_delivered"] >= long_idle * 1000 for r in rows)
    second = Recorder()
    settings = make_settings(redis_url, fleet_name, "second", claim_idle=long_idle)
    async with running(redis, settings, second) as peer:
        await second.wait(lambda: len(second.done) == 4, timeout=15.0)
        assert peer.stats().claimed == 4
    assert sorted(first.done + second.done) == [f"i{i}" for i in range(6)]


async def test_an_item_done_whose_ack_is_slow_is_not_claimed_and_run_again(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    """A stall between an item finishing and its XACK landing lets the entry sit idle past
    claim_idle; the replica's own claim sweep must not run it a second time."""
    await enqueue(redis, fleet_name, 1)
    rec = Recorder()
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    xack = client.xack
    acked = asyncio.Event()

    async def slow_xack(*args: Any) -> Any:
        await asyncio.sleep(2.5)  # > claim_idle and > one read's BLOCK: sweeps run meanwhile
        result = await xack(*args)
        acked.set()
        return result

    client.xack = slow_xack  # type: ignore[method-assign]
    try:
        settings = make_settings(redis_url, fleet_name, claim_idle=0.2)
        async with running(client, settings, rec):
            await asyncio.wait_for(acked.wait(), 10)
        assert rec.done == ["i0"]
        assert await pending_count(redis, fleet_name) == 0
    finally:
        await client.aclose()


async def test_a_replica_restarted_under_its_id_takes_its_own_pending_items_first(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    await enqueue(redis, fleet_name, 3)
    await redis.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=3)
    rec = Recorder()
    async with running(redis, make_settings(redis_url, fleet_name, "r1"), rec) as source:
        await rec.wait(lambda: len(rec.done) == 3)
        assert source.stats().recovered == 3
        await until(lambda: _zero(pending_count(redis, fleet_name)))


async def test_failures_while_the_breaker_is_open_are_not_counted_against_the_item(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 4)
    breaker = AsyncCircuitBreaker(fail_max=1, reset_timeout=0.2)
    healthy = asyncio.Event()
    done: list[str] = []
    changed = asyncio.Event()

    async def handler(item: Any) -> None:
        changed.set()
        async with breaker:
            if not healthy.is_set():
                raise ConnectionError("dependency down")
        done.append(item["id"])

    async def wait(cond: Callable[[], bool]) -> None:
        async with asyncio.timeout(15):
            while not cond():
                changed.clear()
                await changed.wait()

    settings = make_settings(redis_url, fleet_name, max_retries=0, workers=2)
    async with running(redis, settings, handler, breaker=breaker,
                       breaker_check_interval=0.05) as source:
        await wait(lambda: source.stats().outage_retries >= 6)
        healthy.set()
        await wait(lambda: len(done) == 4)
        assert source.stats().dead_lettered == 0
    assert await redis.xlen(Keys(fleet_name).dead) == 0
    assert breaker.state == "closed"
    assert isinstance(BreakerOpen("x"), Exception)


async def test_a_held_item_keeps_its_lease_beyond_the_claim_idle_time(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 2)
    gate = asyncio.Event()
    slow = Recorder(gate)
    other = Recorder()
    # claim_idle 1 s: renewals every third of it leave room for a stall of a loaded machine
    a = make_settings(redis_url, fleet_name, "a", workers=2, claim_idle=1.0)
    async with running(redis, a, slow) as first:
        await slow.wait(lambda: len(slow.started) == 2)
        b = make_settings(redis_url, fleet_name, "b", claim_idle=1.0)
        async with running(redis, b, other) as second:
            await asyncio.sleep(3.0)  # three claim idle times: the leases must hold
            assert other.started == [] and second.stats().claimed == 0
            gate.set()
            await slow.wait(lambda: len(slow.done) == 2)
        assert first.stats().lost_leases == 0
    assert await pending_count(redis, fleet_name) == 0


async def test_an_item_past_its_timeout_counts_as_timed_out_and_is_retried(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 1)
    calls = 0

    async def handler(item: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(30)

    settings = make_settings(redis_url, fleet_name, item_timeout=0.2)
    async with running(redis, settings, handler) as source:
        await until(lambda: _true(source.stats().done == 1))
        await until(lambda: _zero(pending_count(redis, fleet_name)))
        stats = source.stats()
        assert stats.timed_out == 1 and stats.retried == 1
        assert source.pool.stats().timed_out == 1


@pytest.mark.parametrize("reply", [None, [], {}])
def test_an_empty_read_reply_has_no_entries(reply: Any) -> None:
    from replica.service.source import _entries

    assert _entries(reply) == []
