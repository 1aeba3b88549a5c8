"""The handler context's ``fleet_state``: what a handler may know of its replica's fleet state."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis
from pydantic import SecretStr

from coordinator.fleet.fleet import Fleet
from replica.contract import ITEM_FIELD, Keys
from replica.service.handlers import HandlerContext, LoadedHandler, context
from replica.service.service import ReplicaService
from replica.service.settings import ReplicaSettings

seen: list[tuple[str, tuple[int, bool]]] = []
started: asyncio.Event | None = None
release: asyncio.Event | None = None
finished: asyncio.Event | None = None


async def state_reporting_handler(item: Any) -> None:
    """Records ``fleet_state()`` when it starts and, for a held item, again when released."""
    ctx = context()
    assert ctx.fleet_state is not None
    seen.append((f"{item['id']}:start", ctx.fleet_state()))
    if item.get("hold") and started is not None and release is not None:
        started.set()
        await release.wait()
        seen.append((f"{item['id']}:released", ctx.fleet_state()))
    elif finished is not None:
        finished.set()


def settings_for(redis_url: str, fleet: str) -> ReplicaSettings:
    return ReplicaSettings(redis_url=redis_url, fleet=fleet, replica_id="ctx-1", port=0,
                           admin_token=SecretStr("ctx-token"), poll_interval=0.1, heartbeat_interval=0.3)


def test_a_context_built_outside_a_replica_has_no_fleet_state(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    ctx = HandlerContext(redis=redis, fleet=fleet_name, replica_id="r-1", keys=Keys(fleet_name))
    assert ctx.fleet_state is None


async def test_a_handler_sees_the_version_applied_and_whether_the_fleet_holds_its_pool(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    global started, release, finished
    seen.clear()
    started, release, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()
    handler = LoadedHandler(ref="tests:state_reporting_handler", func=state_reporting_handler)
    service = ReplicaService(settings_for(redis_url, fleet_name), handler)
    fleet = Fleet(redis, fleet_name)
    applied: dict[int, asyncio.Event] = {1: asyncio.Event(), 2: asyncio.Event()}
    await service.start()
    service.controller.add_listener(
        lambda state, _delay: applied[state.version].set() if state.version in applied else None
    )
    try:
        work = Keys(fleet_name).work
        await redis.xadd(work, {ITEM_FIELD: json.dumps({"id": "a", "hold": True})})
        await asyncio.wait_for(started.wait(), 15.0)
        state = await fleet.pause("context test", by="tests")
        await asyncio.wait_for(applied[state.version].wait(), 15.0)
        release.set()
        await service.pool.wait_quiet(15.0)
        state = await fleet.resume(by="tests")
        await asyncio.wait_for(applied[state.version].wait(), 15.0)
        await redis.xadd(work, {ITEM_FIELD: json.dumps({"id": "b"})})
        await asyncio.wait_for(finished.wait(), 15.0)
    finally:
        await service.stop()
    assert seen == [
        ("a:start", (0, False)),
        ("a:released", (state.version - 1, True)),
        ("b:start", (state.version, False)),
    ]
