"""Trimmer: the work stream loses only what every consumer group read and acknowledged."""

from __future__ import annotations

from collections import Counter

import redis.asyncio as aioredis

from replica.contract import ITEM_FIELD, Keys
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
