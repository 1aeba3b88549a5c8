"""StreamSource: durable work from a Redis stream, against a real Redis."""

from __future__ import annotations

import asyncio
import itertools
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
    settings: ReplicaSettings, handler: Handler, *, decode: bool = True, **kw: Any
) -> AsyncIterator[StreamSource]:
    """A started source on a client of its own (decoding replies unless told not to), stopped
    and closed after."""
    client = aioredis.Redis.from_url(settings.redis_url, decode_responses=decode)
    source = StreamSource(client, settings, handler, **kw)
    await source.pool.start()
    await source.start()
    try:
        yield source
    finally:
        try:
            await source.stop(timeout=5.0)
        finally:
            await client.aclose()


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
    async with running(make_settings(redis_url, fleet_name, workers=3), rec) as source:
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
    async with running(settings, rec) as source:
        await rec.wait(lambda: len(rec.started) == 2)
        await until(lambda: _equals(pending_count(redis, fleet_name), 3))
        assert source.held == 3
        assert source.pool.in_flight == 2 and source.pool.queued == 1
        gate.set()
        await rec.wait(lambda: len(rec.done) == 20)


async def _equals(aw: Awaitable[int], value: int) -> bool:
    return await aw == value


async def _buried(redis: aioredis.Redis, fleet_name: str, source: StreamSource) -> bool:
    return (source.stats().dead_lettered == 1
            and await redis.xlen(Keys(fleet_name).dead) == 1)


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

    settings = make_settings(redis_url, fleet_name, max_retries=3, retry_backoff=0.01)
    async with running(settings, handler) as s:
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

    settings = make_settings(redis_url, fleet_name, max_retries=2, retry_backoff=0.01)
    async with running(settings, handler) as source:
        # the test's own client may see the dead letter before the source's write returns
        # to it and is counted: wait for both
        await until(lambda: _buried(redis, fleet_name, source))
    assert attempts == 3  # the first attempt and two retries
    assert await pending_count(redis, fleet_name) == 0
    [(_, fields)] = await redis.xrange(Keys(fleet_name).dead)
    assert fields["entry"] == entry
    assert json.loads(fields[ITEM_FIELD]) == {"id": "i0"}
    assert fields["error"] == "ValueError: bad item i0"
    assert fields["runs"] == "3" and fields["replica"] == "r1"
    assert fields["deliveries"] == fields["runs"]  # the previous release's name, kept


async def test_malformed_entries_are_dead_lettered_and_counted(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xadd(keys.work, {"other": "x"})
    await redis.xadd(keys.work, {ITEM_FIELD: "{not json"})
    await enqueue(redis, fleet_name, 1)
    rec = Recorder()
    async with running(make_settings(redis_url, fleet_name), rec) as source:
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
    async with running(settings, rec) as source:
        await rec.wait(lambda: len(rec.done) == 5)
        await until(lambda: _zero(pending_count(redis, fleet_name)))
        assert source.stats().claimed == 5
    assert sorted(rec.done) == [f"i{i}" for i in range(5)]


async def _stopped_with_two_done_and_four_unstarted(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
    claim_idle: float,
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
    async with running(make_settings(redis_url, fleet_name, "second", claim_idle=0.3),
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
    async with running(settings, second) as peer:
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
    acked = asyncio.Event()
    source = StreamSource(redis, make_settings(redis_url, fleet_name, claim_idle=0.2), rec)
    send_acks = source.ledger.send_acks

    async def slow_send_acks(ids: Any) -> None:
        await asyncio.sleep(2.5)  # > claim_idle and > one read's BLOCK: sweeps run meanwhile
        await send_acks(ids)
        acked.set()

    source.ledger.send_acks = slow_send_acks  # type: ignore[method-assign]
    await source.pool.start()
    await source.start()
    try:
        await asyncio.wait_for(acked.wait(), 10)
    finally:
        await source.stop(timeout=5.0)
    assert rec.done == ["i0"]
    assert await pending_count(redis, fleet_name) == 0


async def test_a_replica_restarted_under_its_id_takes_its_own_pending_items_first(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    await enqueue(redis, fleet_name, 3)
    await redis.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=3)
    rec = Recorder()
    async with running(make_settings(redis_url, fleet_name, "r1"), rec) as source:
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
    async with running(settings, handler, breaker=breaker,
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
    async with running(a, slow) as first:
        await slow.wait(lambda: len(slow.started) == 2)
        b = make_settings(redis_url, fleet_name, "b", claim_idle=1.0)
        async with running(b, other) as second:
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

    settings = make_settings(redis_url, fleet_name, item_timeout=0.2, retry_backoff=0.01)
    async with running(settings, handler) as source:
        await until(lambda: _true(source.stats().done == 1))
        await until(lambda: _zero(pending_count(redis, fleet_name)))
        stats = source.stats()
        assert stats.timed_out == 1 and stats.retried == 1
        assert source.pool.stats().timed_out == 1


# ---------------------------------------------------------------------------- entries the
# source cannot decode or parse (issue 11, A.1)

NOT_UTF8 = b'"\xff\xfe"'
DEEP = b"[" * 1000 + b"]" * 1000  # past the JSON parser's recursion limit


async def dead_letters(redis_url: str, fleet: str) -> dict[str, dict[bytes, bytes]]:
    """The dead-letter stream as raw bytes, by the work entry each letter names."""
    raw = aioredis.Redis.from_url(redis_url)
    try:
        return {f[b"entry"].decode(): f for _, f in await raw.xrange(Keys(fleet).dead)}
    finally:
        await raw.aclose()


async def xadd_raw(redis_url: str, fleet: str, fields: dict[str, bytes]) -> str:
    raw = aioredis.Redis.from_url(redis_url)
    try:
        return (await raw.xadd(Keys(fleet).work, fields)).decode()  # type: ignore[arg-type]
    finally:
        await raw.aclose()


@pytest.mark.parametrize("decode", [True, False], ids=["decoding client", "bytes client"])
async def test_entries_that_cannot_be_decoded_are_dead_lettered_whole_and_the_good_ones_run(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, decode: bool
) -> None:
    not_utf8 = await xadd_raw(redis_url, fleet_name, {ITEM_FIELD: NOT_UTF8})
    await enqueue(redis, fleet_name, 3)  # read in the same batch as the entry before them
    deep = await xadd_raw(redis_url, fleet_name, {ITEM_FIELD: DEEP, "trace": b"t" * 3000})
    no_item = await xadd_raw(redis_url, fleet_name, {"other": b"\xff" * 2500})
    rec = Recorder()
    settings = make_settings(redis_url, fleet_name, workers=4)
    async with running(settings, rec, decode=decode) as source:
        await rec.wait(lambda: len(rec.done) == 3)
        await until(lambda: _equals(redis.xlen(Keys(fleet_name).dead), 3))
        await until(lambda: _zero(pending_count(redis, fleet_name)))
        assert source.stats().malformed == 3
        assert source.reader_task is not None and not source.reader_task.done()
    dead = await dead_letters(redis_url, fleet_name)
    assert dead[not_utf8][ITEM_FIELD.encode()] == NOT_UTF8
    assert dead[not_utf8][b"error"].startswith(b"malformed entry: item is not UTF-8")
    assert dead[deep][ITEM_FIELD.encode()] == DEEP  # whole, not cut to 2,000 characters
    assert dead[deep][b"field:trace"] == b"t" * 3000
    assert dead[deep][b"error"].startswith(b"malformed entry: item is not JSON")
    assert dead[no_item][b"field:other"] == b"\xff" * 2500
    assert dead[no_item][b"error"] == b"malformed entry: no 'item' field"
    assert {d[b"runs"] for d in dead.values()} == {b"0"}


async def test_a_poison_entry_a_dead_replica_left_pending_is_dead_lettered_by_the_claimer(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    poison = await xadd_raw(redis_url, fleet_name, {ITEM_FIELD: NOT_UTF8})
    await enqueue(redis, fleet_name, 2)
    raw = aioredis.Redis.from_url(redis_url)
    try:  # a replica that read them and died (it could not decode them either)
        await raw.xreadgroup(WORK_GROUP, "dead-replica", {keys.work: ">"}, count=3)
    finally:
        await raw.aclose()
    await enqueue(redis, fleet_name, 5, start=2)
    rec = Recorder()
    settings = make_settings(redis_url, fleet_name, claim_idle=0.2)
    async with running(settings, rec):
        await rec.wait(lambda: len(rec.done) == 7)
        await until(lambda: _zero(pending_count(redis, fleet_name)))
    assert list(await dead_letters(redis_url, fleet_name)) == [poison]


async def test_a_replica_restarted_with_a_poison_entry_of_its_own_pending_dead_letters_it(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    poison = await xadd_raw(redis_url, fleet_name, {ITEM_FIELD: DEEP})
    await enqueue(redis, fleet_name, 2)
    await redis.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=3)
    rec = Recorder()
    async with running(make_settings(redis_url, fleet_name, "r1"), rec):
        await rec.wait(lambda: len(rec.done) == 2)
        await until(lambda: _zero(pending_count(redis, fleet_name)))
    assert list(await dead_letters(redis_url, fleet_name)) == [poison]


# ---------------------------------------------------------------------------- runs, not
# deliveries (issue 11, B.4)


async def test_hand_offs_between_replicas_do_not_count_as_runs(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    (entry,) = await enqueue(redis, fleet_name, 1)
    # A rolling restart: three replicas held it in turn, none of them ran it.
    await redis.xreadgroup(WORK_GROUP, "old-1", {keys.work: ">"}, count=1)
    await redis.xclaim(keys.work, WORK_GROUP, "old-2", 0, [entry])
    await redis.xclaim(keys.work, WORK_GROUP, "old-3", 0, [entry])
    runs: list[str] = []

    async def handler(item: Any) -> None:
        runs.append(item["id"])
        if len(runs) == 1:
            raise RuntimeError("transient")

    settings = make_settings(redis_url, fleet_name, max_retries=1, claim_idle=0.2,
                             retry_backoff=0.01)
    async with running(settings, handler) as source:
        await until(lambda: _true(source.stats().done == 1))
        await until(lambda: _zero(pending_count(redis, fleet_name)))
    assert runs == ["i0", "i0"]  # its first run failed, its one retry succeeded
    assert await redis.xlen(keys.dead) == 0
    assert not await redis.hexists(f"{keys.prefix}:runs", entry)  # deleted with the XACK


async def test_runs_other_replicas_started_count_and_the_dead_letter_says_how_many_failed(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    (entry,) = await enqueue(redis, fleet_name, 1)
    # Three replicas ran it and died during the run (a poison that kills its process).
    await redis.hset(f"{keys.prefix}:runs", entry, 3)
    runs = 0

    async def handler(item: Any) -> None:
        nonlocal runs
        runs += 1
        raise ValueError("still poison")

    settings = make_settings(redis_url, fleet_name, max_retries=3, retry_backoff=0.01)
    async with running(settings, handler):
        await until(lambda: _equals(redis.xlen(keys.dead), 1))
    assert runs == 1  # the fourth run was its last
    [(_, fields)] = await redis.xrange(keys.dead)
    assert fields["runs"] == "4" and fields["entry"] == entry
    assert not await redis.hexists(f"{keys.prefix}:runs", entry)


async def test_an_item_whose_runs_are_used_up_is_dead_lettered_without_running(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    (entry,) = await enqueue(redis, fleet_name, 1)
    # Four replicas ran it and died during the run: with three retries, nothing is left.
    await redis.hset(keys.runs, entry, 4)
    rec = Recorder()
    settings = make_settings(redis_url, fleet_name, max_retries=3)
    async with running(settings, rec) as source:
        await until(lambda: _true(source.stats().dead_lettered == 1))
    assert rec.started == []
    [(_, fields)] = await redis.xrange(keys.dead)
    assert fields["runs"] == "4" and fields["entry"] == entry
    assert fields["error"] == "4 runs started and none of them finished"
    assert not await redis.hexists(keys.runs, entry)
    assert await pending_count(redis, fleet_name) == 0


async def test_a_run_cut_off_by_the_replicas_own_stop_gives_its_run_back(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    (entry,) = await enqueue(redis, fleet_name, 1)
    never = asyncio.Event()
    rec = Recorder(never)
    source = StreamSource(redis, make_settings(redis_url, fleet_name), rec)
    await source.pool.start()
    await source.start()
    try:
        await rec.wait(lambda: rec.started == ["i0"])
        await until(lambda: _equals(redis.hget(keys.runs, entry), "1"))  # the run is counted
    finally:
        await source.stop(timeout=0.2)  # cuts the run off
    assert source.pool.stats().cancelled == 1
    assert await redis.hget(keys.runs, entry) == "0"  # given back
    assert await pending_count(redis, fleet_name) == 1  # left pending for another replica


# ---------------------------------------------------------------------------- nothing is
# awaited between the pool handing an item over and its handler (no start after a pause)


async def test_a_handler_starts_at_once_while_redis_holds_writes_back(
    private_redis: Any, fleet_name: str
) -> None:
    """The run count is sent, not awaited, before the handler: with Redis holding every write
    (``CLIENT PAUSE ... WRITE``, as a failover does), an item's handler still starts at once,
    not once its ``HINCRBY`` is answered or given up (a give-up is a Redis error)."""
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    await enqueue(admin, fleet_name, 2)
    gate = asyncio.Event()
    errors_at_start: dict[str, int] = {}
    changed = asyncio.Event()

    async def handler(item: Any) -> None:
        errors_at_start[item["id"]] = source.stats().redis_errors
        changed.set()
        if item["id"] == "i0":
            await gate.wait()

    # One worker; a lease round only every 200 s, so no other command waits on Redis here.
    settings = make_settings(private_redis.url, fleet_name, workers=1, queue_size=2,
                             claim_idle=600.0)
    source = StreamSource(client, settings, handler)
    await source.pool.start()
    await source.start()
    try:
        # i0 runs, i1 waits in the pool; the pool is held, i0 ends and is acknowledged.
        await until(lambda: _true("i0" in errors_at_start and source.pool.queued == 1))
        source.pool.hold("maintenance", "operator")
        gate.set()
        await source.pool.wait_quiet(15.0)
        await until(lambda: _equals(pending_count(admin, fleet_name), 1))
        errors_before = source.stats().redis_errors
        await admin.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
        try:
            source.pool.resume("operator")
            async with asyncio.timeout(30.0):
                while "i1" not in errors_at_start:
                    changed.clear()
                    await changed.wait()
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
        assert errors_at_start["i1"] == errors_before, "i1 started only once its count gave up"
        await until(lambda: _zero(pending_count(admin, fleet_name)))
        assert source.stats().done == 2
    finally:
        try:
            await source.stop(timeout=5.0)
        finally:
            await client.aclose()
            await admin.aclose()


@pytest.mark.parametrize("item_timeout", [None, 30.0], ids=["no deadline", "a deadline"])
async def test_a_pause_at_the_first_chance_after_the_pool_hands_an_item_over_finds_it_running(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, item_timeout: float | None
) -> None:
    """The pool pops an item and calls the source in one step; the source must enter the
    user's handler in that same step. A hold applied at the very next turn of the loop (as
    the controller applies a pause) must find the handler entered, never about to be."""
    await enqueue(redis, fleet_name, 1)
    paused_at_entry: list[bool] = []
    entered = asyncio.Event()

    async def handler(item: Any) -> None:
        paused_at_entry.append(pool.paused)
        entered.set()

    source = StreamSource(redis, make_settings(redis_url, fleet_name,
                                               item_timeout=item_timeout), handler)
    pool = source.pool

    async def hold_at_the_first_chance() -> None:
        # Looks at every turn of the loop: no event could wake it any sooner.
        while pool.in_flight == 0:  # noqa: ASYNC110 - the turn after the hand-over is the point
            await asyncio.sleep(0)
        pool.hold("pause applied", "fleet")

    holding = asyncio.create_task(hold_at_the_first_chance())
    await pool.start()
    await source.start()
    try:
        async with asyncio.timeout(15.0):
            await holding
            await entered.wait()
    finally:
        holding.cancel()
        await source.stop(timeout=5.0)
    assert paused_at_entry == [False]


# ---------------------------------------------------------------------------- retries back
# off (issue 11, B.5)


async def test_retries_back_off_exponentially_with_jitter(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 1)
    times: list[float] = []
    loop = asyncio.get_running_loop()

    async def handler(item: Any) -> None:
        times.append(loop.time())
        raise RuntimeError("down")

    settings = make_settings(redis_url, fleet_name, max_retries=3, retry_backoff=0.2)
    async with running(settings, handler):
        await until(lambda: _equals(redis.xlen(Keys(fleet_name).dead), 1))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 3
    # Equal jitter: each wait is between half and all of 0.2 s, 0.4 s, 0.8 s (only the lower
    # bounds are checked: a loaded machine may be late, never early).
    assert [g >= 0.2 * 2**k / 2 for k, g in enumerate(gaps)] == [True, True, True], gaps


async def test_a_retry_waiting_out_its_backoff_is_not_in_flight_and_does_not_block_a_pause(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 1)
    never = asyncio.Event()
    runs = 0

    async def handler(item: Any) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("transient")
        await never.wait()  # a second run would still be in flight at the pause

    settings = make_settings(redis_url, fleet_name, retry_backoff=600)
    async with running(settings, handler) as source:
        await until(lambda: _true(source.stats().awaiting_retry == 1))
        await source.pool.pause("maintenance", source="operator", timeout=10.0)
        assert source.pool.in_flight == 0 and runs == 1
        assert await pending_count(redis, fleet_name, "r1") == 1  # still this replica's
    assert await pending_count(redis, fleet_name) == 1  # left pending at the stop: not lost


async def test_a_retry_that_falls_due_during_a_pause_runs_after_the_resume(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 1)
    holder: list[StreamSource] = []
    runs = 0

    async def handler(item: Any) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            holder[0].pool.hold("maintenance", "operator")  # paused before it falls due
            raise RuntimeError("transient")

    settings = make_settings(redis_url, fleet_name, retry_backoff=0.05)
    async with running(settings, handler) as source:
        holder.append(source)
        await until(lambda: _true(source.stats().retries_due == 1))
        assert runs == 1 and source.pool.in_flight == 0
        source.pool.resume("operator")
        await until(lambda: _true(source.stats().done == 1))
    assert runs == 2


# ---------------------------------------------------------------------------- trimming
# (issue 11, B.6)


async def test_acknowledged_entries_are_trimmed_from_the_work_stream(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    await enqueue(redis, fleet_name, 10)
    rec = Recorder()
    async with running(make_settings(redis_url, fleet_name, claim_idle=0.3), rec):
        await rec.wait(lambda: len(rec.done) == 10)
        await until(lambda: _zero(redis.xlen(Keys(fleet_name).work)))


async def test_trimming_keeps_what_another_group_has_not_read_or_acknowledged(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.xgroup_create(keys.work, "audit", id="0", mkstream=True)
    ids = await enqueue(redis, fleet_name, 10)
    await redis.xreadgroup("audit", "auditor", {keys.work: ">"}, count=3)
    await redis.xack(keys.work, "audit", ids[0])  # pending in "audit": ids[1], ids[2]
    rec = Recorder()
    async with running(make_settings(redis_url, fleet_name, claim_idle=0.3), rec) as s:
        await rec.wait(lambda: len(rec.done) == 10)
        await until(lambda: _true(s.stats().trimmed >= 1))
        assert [e for e, _ in await redis.xrange(keys.work)] == ids[1:]


@pytest.mark.parametrize(
    ("escaping", "error"),
    [(asyncio.CancelledError, b"HandlerCancelled"), (SystemExit, b"HandlerExited"),
     (KeyboardInterrupt, b"HandlerExited")],
)
async def test_a_handler_that_lets_a_base_exception_escape_fails_a_counted_run(
    redis: aioredis.Redis, redis_url: str, fleet_name: str,
    escaping: type[BaseException], error: bytes,
) -> None:
    """Issue 11, A.2: the pool reports such an escape as HandlerCancelled or HandlerExited; the
    source counts it as a failed run (retried, then dead-lettered), never forgets the item."""
    (entry,) = await enqueue(redis, fleet_name, 1)
    runs = 0

    async def handler(item: Any) -> None:
        nonlocal runs
        runs += 1
        raise escaping

    settings = make_settings(redis_url, fleet_name, max_retries=1, retry_backoff=0.01)
    async with running(settings, handler) as source:
        await until(lambda: _equals(redis.xlen(Keys(fleet_name).dead), 1))
        assert source.stats().failed == 2
    assert runs == 2
    letter = (await dead_letters(redis_url, fleet_name))[entry]
    assert letter[b"runs"] == b"2" and letter[b"error"].startswith(error)
    assert await pending_count(redis, fleet_name) == 0


async def test_a_replica_that_may_not_count_runs_or_trim_still_runs_and_acknowledges_all(
    private_redis: Any, fleet_name: str
) -> None:
    """An ACL without the runs hash and XTRIM: runs are counted in memory, nothing is trimmed,
    and every item is still run, retried and acknowledged."""
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        await admin.execute_command("ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*",
                                    "+@all", "-hincrby", "-hdel", "-xtrim")
        await enqueue(admin, fleet_name, 5)
        url = private_redis.url.replace("redis://", "redis://limited:pw@")
        runs: list[str] = []

        async def handler(item: Any) -> None:
            runs.append(item["id"])
            if runs.count("i0") == 1 and item["id"] == "i0":
                raise RuntimeError("transient")

        settings = make_settings(url, fleet_name, claim_idle=0.3, retry_backoff=0.01)
        async with running(settings, handler) as source:
            await until(lambda: _true(source.stats().done == 5))
            await until(lambda: _zero(pending_count(admin, fleet_name)))
            assert not source.ledger.runs_enabled
            await until(lambda: _true(not source.trimmer.enabled))
        assert sorted(runs) == ["i0", "i0", "i1", "i2", "i3", "i4"]
        assert await admin.xlen(Keys(fleet_name).work) == 5
        assert not await admin.exists(Keys(fleet_name).runs)
    finally:
        await admin.aclose()
