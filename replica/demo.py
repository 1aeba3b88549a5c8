"""Built-in handlers for demos and tests.

``replica.demo:sleep`` sleeps ``FLEETGATE_DEMO_ITEM_SECONDS`` per item and records each item in
Redis, so a demo or a test can count items lost, duplicated, or started during a pause:

* ``fleetgate:{NAME}:demo:log`` (stream): ``item``, ``replica``, ``event`` (``start`` | ``end``)
  and ``at`` (ms since the epoch, this host's clock) for every start and every end;
* ``fleetgate:{NAME}:demo:done`` (hash): item id -> times completed (HINCRBY at the end).

The item id is ``item["id"]`` for a JSON object that has one (``fleetgate enqueue --count N``
makes ``{"id": "item-000001", ...}``), else the item's JSON.

``replica.demo:flaky`` is the same with a dependency that can be taken down: before sleeping it
reads the hash ``fleetgate:{NAME}:demo:dependency`` and raises ``DependencyDown`` while its
field ``down`` is ``1``. It calls the dependency through ``flaky.breaker``, an
``AsyncCircuitBreaker`` (FLEETGATE_BREAKER_FAIL_MAX / _RESET_TIMEOUT), so the replica pauses its
pool while the dependency is down: the guide's breaker scenario, end to end.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Final

from replica.service.breaker import AsyncCircuitBreaker
from replica.service.handlers import HandlerContext, context

DEFAULT_ITEM_SECONDS: Final = 0.05
START: Final = "start"
END: Final = "end"


class DependencyDown(Exception):
    """The demo dependency is down (its hash has ``down`` = 1)."""


def item_id(item: Any) -> str:
    """``item["id"]`` when the item is an object with an id, else its JSON."""
    if isinstance(item, dict) and "id" in item:
        return str(item["id"])
    return json.dumps(item, sort_keys=True, separators=(",", ":"), default=str)


def dependency_key(ctx: HandlerContext) -> str:
    return f"{ctx.keys.prefix}:demo:dependency"


def _seconds(ctx: HandlerContext) -> float:
    value = getattr(ctx.settings, "demo_item_seconds", None)
    return DEFAULT_ITEM_SECONDS if value is None else float(value)


async def _record(ctx: HandlerContext, ident: str, event: str) -> None:
    await ctx.redis.xadd(
        ctx.keys.demo_log,
        {"item": ident, "replica": ctx.replica_id, "event": event, "at": str(int(time.time() * 1000))},
    )


async def _work(ctx: HandlerContext, ident: str) -> None:
    await _record(ctx, ident, START)
    await asyncio.sleep(_seconds(ctx))
    # The end is written before the count, so the log never shows fewer ends than the hash.
    await _record(ctx, ident, END)
    await ctx.redis.hincrby(ctx.keys.demo_done, ident, 1)


async def sleep(item: Any) -> None:
    """Sleep FLEETGATE_DEMO_ITEM_SECONDS and record the start and end of ``item``."""
    ctx = context()
    await _work(ctx, item_id(item))


async def _call_dependency(ctx: HandlerContext) -> None:
    down = await ctx.redis.hget(dependency_key(ctx), "down")
    if down == "1":
        raise DependencyDown("the demo dependency is down")


async def flaky(item: Any) -> None:
    """Like ``sleep``, after a call to the demo dependency through ``flaky.breaker``."""
    ctx = context()
    async with flaky.breaker:  # type: ignore[attr-defined]
        await _call_dependency(ctx)
    await _work(ctx, item_id(item))


flaky.breaker = AsyncCircuitBreaker(name="demo-dependency")  # type: ignore[attr-defined]

__all__ = ["DependencyDown", "flaky", "item_id", "sleep"]
