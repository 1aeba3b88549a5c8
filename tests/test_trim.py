"""Trimmer: the work stream loses only what every consumer group read and acknowledged."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError

from coordinator.demo.localredis import LocalRedis
from replica.contract import ITEM_FIELD, WORK_GROUP, Keys
from replica.service.trim import Trimmer, next_id, trim_point


def test_the_trim_point_is_the_oldest_entry_any_group_still_needs() -> None:
    assert next_id("5-0") == "5-1" and next_id("5") == "5-1"
    assert trim_point([]) is None
    assert trim_point([("0-0", None)]) == "0-1"  # nothing read yet: nothing goes
    assert trim_point([("9-3", None)]) == "9-4"  # all read and acknowledged
    assert trim_point([("9-3", "7-0")]) == "7-0"  # 7-0 is pending
    assert trim_point([("9-3", None), ("4-0", None)]) == "4-1"  # a slower group
    assert trim_point([("10-0", "2-5"), ("9-0", None)]) == "2-5"
    assert trim_point([("100-0", None), ("20-0", "3-0")]) == "3-0"


async def test_a_trim_keeps_unread_and_pending_entries_of_every_group(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    work = Keys(fleet_name).work
    ids = [await redis.xadd(work, {ITEM_FIELD: str(i)}) for i in range(8)]
    await redis.xgroup_create(work, "fast", id="0")
    await redis.xgroup_create(work, "slow", id="0")
    await redis.xreadgroup("fast", "c", {work: ">"}, count=8)
    await redis.xack(work, "fast", *ids[:6])  # fast: 6 and 7 pending
    await redis.xreadgroup("slow", "c", {work: ">"}, count=4)
    await redis.xack(work, "slow", *ids[:4])  # slow: read 4, acknowledged them; 4.. unread
    client = aioredis.Redis.from_url(redis_url)
    try:
        counts: Counter[str] = Counter()
        trimmer = Trimmer(client, work, counts)
        assert await trimmer.trim() == 4
        assert [e for e, _ in await redis.xrange(work)] == ids[4:]
        await redis.xreadgroup("slow", "c", {work: ">"}, count=4)
        await redis.xack(work, "slow", *ids[4:])
        assert await trimmer.trim() == 2  # fast still has 6 and 7 pending
        await redis.xack(work, "fast", *ids[6:])
        assert await trimmer.trim() == 2
        assert await redis.xlen(work) == 0 and counts["trimmed"] == 8
    finally:
        await client.aclose()


async def test_a_stream_nobody_consumes_is_not_trimmed(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    work = Keys(fleet_name).work
    await redis.xadd(work, {ITEM_FIELD: "1"})
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await Trimmer(client, work, Counter()).trim() == 0
    finally:
        await client.aclose()
    assert await redis.xlen(work) == 1


@contextlib.asynccontextmanager
async def _diverged(url: str, work: str, n: int) -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    """Two primaries of one failover (databases 1 and 2 of a private server): each has ``n``
    entries delivered to one consumer, and the old one alone has them acknowledged (the
    acknowledgement the failover lost)."""
    old = aioredis.Redis.from_url(url + "/1")
    new = aioredis.Redis.from_url(url + "/2")
    try:
        for r in (old, new):
            for i in range(n):
                await r.xadd(work, {ITEM_FIELD: str(i)}, id=f"{i + 1}-0")
            await r.xgroup_create(work, WORK_GROUP, id="0")
            await r.xreadgroup(WORK_GROUP, "c", {work: ">"}, count=n)
        await old.xack(work, WORK_GROUP, *(f"{i + 1}-0" for i in range(n)))
        yield old, new
    finally:
        for r in (old, new):
            await r.flushdb()
            await r.aclose()


class _FailingOver(aioredis.ConnectionPool):
    """A pool that meets a failover after its first connection: every later connection goes
    to the other server (here, another database of the same private server: a promoted node
    whose data differs)."""

    def __init__(self, url: str, after: int) -> None:
        super().__init__(**{**parse_url(url), "db": 1})
        self._after = after
        self.handed = 0

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.handed += 1
        if self.handed == 2:  # the failover: the old connections go, new ones meet db 2
            await self.disconnect()
            self.reset()  # no connection of the old server is handed out again
            self.connection_kwargs["db"] = self._after
        return await super().get_connection(*args, **kwargs)


async def test_a_trim_reads_and_trims_on_one_server_across_a_failover(
    private_redis: LocalRedis,
) -> None:
    """The acknowledgement the failover lost is on the old primary only: a trim point read
    there and applied on the new primary deleted an entry still pending there."""
    work = Keys("trim-failover").work
    async with _diverged(private_redis.url, work, 2) as (_, new):
        pool = _FailingOver(private_redis.url, after=2)
        client = aioredis.Redis(connection_pool=pool)
        try:
            await Trimmer(client, work, Counter()).trim()
        finally:
            await client.aclose()
            await pool.disconnect()  # a pool handed to a client is not the client's to close
        assert [e for e, _ in await new.xrange(work)] == [b"1-0", b"2-0"]
        assert (await new.xpending(work, WORK_GROUP))["pending"] == 2


class _Switching(aioredis.Connection):
    """A connection that drops after its first reply and would come back to another server
    (database 2): a failover between the trim's reads and its XTRIM, on one connection."""

    last = ""

    async def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.last = str(args[0])
        await super().send_command(*args, **kwargs)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = await super().read_response(*args, **kwargs)
        if self.last == "XINFO":  # the trim's first read: then the failover
            self.last = ""
            await self.disconnect()
            self.db = 2
        return reply


async def test_a_trim_whose_connection_drops_after_its_reads_trims_nothing(
    private_redis: LocalRedis,
) -> None:
    work = Keys("trim-reconnect").work
    async with _diverged(private_redis.url, work, 1) as (_, new):
        pool = aioredis.ConnectionPool(connection_class=_Switching,
                                       **{**parse_url(private_redis.url), "db": 1})
        client = aioredis.Redis(connection_pool=pool)
        try:
            with pytest.raises(RedisConnectionError):
                await Trimmer(client, work, Counter()).trim()
        finally:
            await client.aclose()
            await pool.disconnect()
        assert [e for e, _ in await new.xrange(work)] == [b"1-0"]
