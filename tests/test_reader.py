"""StreamReader: a held replica reads nothing from the work stream, and a blocked read costs
neither a stop nor Redis anything, against a real Redis (a private one where the test counts
the server's clients or commands)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from replica.contract import ITEM_FIELD, WORK_GROUP, Keys
from replica.pool.holds import FLEET_SOURCE
from replica.service import reader as reader_module
from replica.service.source import StreamSource
from tests.test_source import Recorder, enqueue, make_settings, running, until

CLAIM_IDLE = 60.0
"""Far longer than any of these tests: an entry pending this long was handed back."""


async def blocked_reads(admin: aioredis.Redis) -> int:
    """Clients of the server blocked in an XREADGROUP."""
    return sum(1 for client in await admin.client_list()
               if client.get("cmd") == "xreadgroup" and "b" in client.get("flags", ""))


async def _is(aw: Awaitable[int], value: int) -> bool:
    return await aw == value


async def xreadgroup_calls(admin: aioredis.Redis) -> int:
    stats = await admin.info("commandstats")
    return int(stats.get("cmdstat_xreadgroup", {}).get("calls", 0))


async def pending(admin: aioredis.Redis, fleet: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = await admin.xpending_range(
        Keys(fleet).work, WORK_GROUP, "-", "+", 10_000
    )
    return rows


def reserved(rows: Sequence[dict[str, Any]], consumers: set[str]) -> list[dict[str, Any]]:
    """The pending entries ``consumers`` still reserve: not handed back (idle < CLAIM_IDLE)."""
    return [row for row in rows if row["consumer"] in consumers
            and row["time_since_delivered"] < CLAIM_IDLE * 1000]


async def parked(*sources: StreamSource, timeout: float = 15.0) -> None:
    """Until every source's reader waits for its pool with nothing of its own in progress."""
    async with asyncio.timeout(timeout):
        await asyncio.gather(*(s.reader.parked.wait() for s in sources))


@contextlib.asynccontextmanager
async def long_reads(server: LocalRedis, fleet: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A started source whose reads block for a minute, on a client that waits as long."""
    monkeypatch.setattr(reader_module, "READ_BLOCK_S", 60.0)
    client = aioredis.Redis.from_url(server.url, socket_timeout=120.0)
    settings = make_settings(server.url, fleet, "r1", claim_idle=CLAIM_IDLE)
    source = StreamSource(client, settings, Recorder())
    try:
        await source.pool.start()
        await source.start()
        yield source
    finally:
        try:
            await source.stop(timeout=5.0)
        finally:
            await client.aclose()


@contextlib.asynccontextmanager
async def admin_of(server: LocalRedis) -> Any:
    client = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def test_replicas_paused_while_their_reads_block_reserve_none_of_the_items_enqueued_meanwhile(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    url = private_redis.url
    recorders = [Recorder() for _ in range(4)]
    async with admin_of(private_redis) as admin, contextlib.AsyncExitStack() as stack:
        sources = [
            await stack.enter_async_context(
                running(make_settings(url, fleet_name, f"r{i}", claim_idle=CLAIM_IDLE), rec)
            )
            for i, rec in enumerate(recorders)
        ]
        await until(lambda: _is(blocked_reads(admin), 4))  # every replica idle in a read
        for source in sources:
            source.pool.hold("db maintenance", FLEET_SOURCE)
        ids = await enqueue(admin, fleet_name, 10)
        await parked(*sources)
        assert [s.held for s in sources] == [0, 0, 0, 0]
        assert reserved(await pending(admin, fleet_name), {s.consumer for s in sources}) == []
        assert all(rec.started == [] for rec in recorders)

        for source in sources:
            source.pool.resume(FLEET_SOURCE)

        async def all_done() -> bool:
            done = sorted(i for rec in recorders for i in rec.done)
            return done == sorted(f"i{n}" for n in range(len(ids)))

        await until(all_done)
        await until(lambda: _is(_count(pending(admin, fleet_name)), 0))


async def _count(aw: Awaitable[list[Any]]) -> int:
    return len(await aw)


async def test_entries_a_read_returns_after_the_pool_was_held_go_back_to_the_group_at_once(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    held_by_a = Recorder()
    settings_a = make_settings(redis_url, fleet_name, "a", claim_idle=CLAIM_IDLE)
    async with running(settings_a, held_by_a) as a:
        learn_runs = a.ledger.learn_runs

        async def held_while_admitting(works: Any, timeout: float) -> None:
            # The hold lands between the reply and the admission of its entries.
            a.pool.hold("db maintenance", FLEET_SOURCE)
            await learn_runs(works, timeout)

        a.ledger.learn_runs = held_while_admitting  # type: ignore[method-assign]
        ids = await enqueue(redis, fleet_name, 5)
        await parked(a)
        assert a.held == 0 and held_by_a.started == []
        rows = await pending(redis, fleet_name)
        assert rows, "the read returned entries after the hold"
        assert reserved(rows, {"a"}) == []

        peer = Recorder()
        settings_b = make_settings(redis_url, fleet_name, "b", claim_idle=CLAIM_IDLE)
        async with running(settings_b, peer):
            # Well before claim_idle: the peer's first claim sweep takes them.
            await peer.wait(lambda: len(peer.done) == len(ids), timeout=15.0)
        assert sorted(peer.done) == [f"i{n}" for n in range(5)] and held_by_a.done == []


async def test_taking_back_what_it_handed_back_is_logged_as_such_not_as_a_claim(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    settings = make_settings(redis_url, fleet_name, "a", claim_idle=CLAIM_IDLE)
    async with running(settings, recorder) as a:
        learn_runs = a.ledger.learn_runs

        async def held_while_admitting(works: Any, timeout: float) -> None:
            a.pool.hold("db maintenance", FLEET_SOURCE)
            await learn_runs(works, timeout)

        a.ledger.learn_runs = held_while_admitting  # type: ignore[method-assign]
        # both in one transaction, so one read takes both (two XADDs let a loaded reader
        # take the first alone: 'took back 1', the other read after the resume)
        async with redis.pipeline(transaction=True) as pipe:
            for i in range(2):
                pipe.xadd(Keys(fleet_name).work, {ITEM_FIELD: json.dumps({"id": f"i{i}"})})
            await pipe.execute()
        await parked(a)
        a.ledger.learn_runs = learn_runs  # type: ignore[method-assign]
        with caplog.at_level("INFO", logger=reader_module.__name__):
            a.pool.resume(FLEET_SOURCE)
            await recorder.wait(lambda: len(recorder.done) == 2, timeout=15.0)
    messages = [r.getMessage() for r in caplog.records if r.name == reader_module.__name__]
    assert any(m.startswith("took back 2 items it had handed back") for m in messages), messages
    assert not any(m.startswith("claimed") for m in messages), messages


async def test_entries_delivered_to_a_read_the_pause_aborted_go_back_to_the_group(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    """What Redis delivered on the read's connection as it was closed is pending for this
    replica, though it never saw it. A read of the same consumer from elsewhere leaves the same
    trace: here, in one transaction with the entries' XADD, so the replica's blocked read gets
    none of them and is still blocked when the pause aborts it."""
    work = Keys(fleet_name).work
    async with admin_of(private_redis) as admin:
        settings = make_settings(private_redis.url, fleet_name, "r1", claim_idle=CLAIM_IDLE)
        async with running(settings, Recorder()) as source:
            await until(lambda: _is(blocked_reads(admin), 1))
            async with admin.pipeline(transaction=True) as tx:
                for n in range(3):
                    tx.xadd(work, {ITEM_FIELD: json.dumps({"id": f"i{n}"})})
                tx.xreadgroup(WORK_GROUP, "r1", {work: ">"}, count=10)
                await tx.execute()
            assert await blocked_reads(admin) == 1
            source.pool.hold("db maintenance", FLEET_SOURCE)
            await parked(source)
            assert source.held == 0
            rows = await pending(admin, fleet_name)
            assert len(rows) == 3 and reserved(rows, {"r1"}) == []


async def test_a_pause_ends_a_blocked_read_at_once(
    private_redis: LocalRedis, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with admin_of(private_redis) as admin, \
            long_reads(private_redis, fleet_name, monkeypatch) as source:
        await until(lambda: _is(blocked_reads(admin), 1))
        source.pool.hold("db maintenance", FLEET_SOURCE)
        await parked(source, timeout=10.0)  # not while its read is blocked (for 60 s)
        assert await blocked_reads(admin) == 0


async def test_a_stop_while_a_long_read_is_blocked_ends_within_about_a_second(
    private_redis: LocalRedis, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with admin_of(private_redis) as admin:
        async with long_reads(private_redis, fleet_name, monkeypatch) as source:
            await until(lambda: _is(blocked_reads(admin), 1))
            reader = source.reader_task
            assert reader is not None
            async with asyncio.timeout(30):  # a hang guard, below the 60 s read
                await source.stop(timeout=5.0)
            # the read was aborted and the reader ended by itself: not cancelled by stop's
            # fallback, which comes only after REDIS_OP_TIMEOUT_S + 1 s of waiting for it
            assert reader.done() and not reader.cancelled(), reader
        assert await blocked_reads(admin) == 0


async def test_an_idle_replica_sends_at_most_one_read_per_block_time(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    async with admin_of(private_redis) as admin:
        settings = make_settings(private_redis.url, fleet_name, "r1", claim_idle=CLAIM_IDLE)
        async with running(settings, Recorder()):
            await until(lambda: _is(blocked_reads(admin), 1))
            loop = asyncio.get_running_loop()
            before, began = await xreadgroup_calls(admin), loop.time()
            await asyncio.sleep(3.0)  # the window measured: nothing to synchronise on
            calls, took = await xreadgroup_calls(admin) - before, loop.time() - began
    # At most about one per READ_BLOCK_S, and that is seconds: 5,000 idle replicas read too.
    assert calls <= 1 + took / reader_module.READ_BLOCK_S, f"{calls} reads in {took:.1f}s"
    assert calls <= 1 + took / 4.0, f"{calls} reads in {took:.1f}s of idling"
