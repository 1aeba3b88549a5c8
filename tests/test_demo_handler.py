"""replica.demo: the sleep handler's records in Redis, and the flaky dependency behind a breaker."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from replica import demo
from replica.contract import Keys
from replica.service.breaker import AsyncCircuitBreaker, BreakerOpen
from replica.service.handlers import HandlerContext, use_context
from replica.service.settings import ReplicaSettings


def ctx(redis: aioredis.Redis, fleet: str, seconds: float = 0.0) -> HandlerContext:
    settings = ReplicaSettings(fleet=fleet, replica_id="demo-r1", insecure_no_auth=True,
                               demo_item_seconds=seconds)
    return HandlerContext(redis=redis, fleet=fleet, replica_id="demo-r1", keys=Keys(fleet),
                          settings=settings)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"id": "item-000001", "n": 1}, "item-000001"),
        ({"id": 7}, "7"),
        ({"no": "id", "a": 1}, json.dumps({"a": 1, "no": "id"}, separators=(",", ":"))),
        ("plain", '"plain"'),
        (42, "42"),
    ],
)
def test_the_item_id_is_its_id_field_or_its_json(item: Any, expected: str) -> None:
    assert demo.item_id(item) == expected


async def test_sleep_records_start_end_and_one_completion_per_item(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    with use_context(ctx(redis, fleet_name, seconds=0.01)):
        await demo.sleep({"id": "a"})
        await demo.sleep({"id": "a"})
        await demo.sleep({"id": "b"})
    assert await redis.hgetall(keys.demo_done) == {"a": "2", "b": "1"}
    log = [f for _, f in await redis.xrange(keys.demo_log)]
    assert [(r["item"], r["event"]) for r in log] == [
        ("a", "start"), ("a", "end"), ("a", "start"), ("a", "end"), ("b", "start"), ("b", "end"),
    ]
    assert all(r["replica"] == "demo-r1" for r in log)
    starts_and_ends = [int(r["at"]) for r in log]
    assert starts_and_ends == sorted(starts_and_ends)


async def test_sleep_takes_the_configured_time_per_item(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    with use_context(ctx(redis, fleet_name, seconds=0.2)):
        task = asyncio.create_task(demo.sleep({"id": "slow"}))
        await asyncio.sleep(0.05)
        assert not task.done()
        await task


async def test_flaky_fails_while_its_dependency_is_down_and_opens_its_breaker(
    redis: aioredis.Redis, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = ctx(redis, fleet_name)
    monkeypatch.setattr(demo.flaky, "breaker", AsyncCircuitBreaker(fail_max=2, reset_timeout=60))
    await redis.hset(demo.dependency_key(c), "down", "1")
    with use_context(c):
        for _ in range(2):
            with pytest.raises(demo.DependencyDown):
                await demo.flaky({"id": "x"})
        with pytest.raises(BreakerOpen):
            await demo.flaky({"id": "x"})
        await redis.hset(demo.dependency_key(c), "down", "0")
        demo.flaky.breaker.close()  # type: ignore[attr-defined]
        await demo.flaky({"id": "x"})
    assert await redis.hgetall(Keys(fleet_name).demo_done) == {"x": "1"}
