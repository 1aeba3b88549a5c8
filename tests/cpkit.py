"""Helpers for the control-plane tests: several replicas (pool + controller + own client) in
one event loop, a way to wait for a condition without fixed sleeps, and states written by hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import redis.asyncio as aioredis

from replica import FleetController, PausablePool
from replica.contract import FleetState, Keys, now_utc


async def until(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 15.0, what: str = ""
) -> float:
    """Wait until ``predicate()`` is true; returns the seconds it took. Fails after
    ``timeout`` (generous: other test runs share the machine)."""
    t0 = time.monotonic()
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(0.005)


def state_at(fleet: str, version: int, paused: bool, reason: str = "test") -> FleetState:
    """A state of ``fleet`` at ``version``, changed now."""
    now = now_utc()
    return FleetState(fleet, paused, reason if paused else "", "tester", now, version,
                      changed_at=now)


async def publish_state(redis: aioredis.Redis, state: FleetState, write_hash: bool = True) -> None:
    """Write ``state`` as the state hash (unless not ``write_hash``) and publish it."""
    keys = Keys(state.fleet)
    if write_hash:
        await redis.delete(keys.state)
        await redis.hset(keys.state, mapping=dict(state.to_hash()))
    await redis.publish(keys.control, state.to_json())


class Replica:
    """One replica: a pool whose handler records what it ran, a controller, its own client."""

    def __init__(
        self, url: str, fleet: str, replica_id: str, *, decode: bool = True,
        handler: Callable[[Any], Awaitable[Any]] | None = None, **controller_kw: Any,
    ) -> None:
        self.id = replica_id
        self.ran: list[Any] = []
        self.started_while_held: list[Any] = []
        self.client = aioredis.Redis.from_url(url, decode_responses=decode)
        self._handler = handler
        self.pool = PausablePool(self._run, workers=2)
        self.controller = FleetController(self.pool, self.client, fleet, replica_id, **controller_kw)

    async def _run(self, item: Any) -> None:
        if self.pool.holds:  # a pool never starts an item while held
            self.started_while_held.append(item)
        self.ran.append(item)
        if self._handler is not None:
            await self._handler(item)

    async def start(self) -> Replica:
        await self.pool.start()
        await self.controller.start()
        return self

    async def stop(self) -> None:
        try:
            await self.controller.stop()
            await self.pool.stop(timeout=2.0)
        finally:
            await self.client.aclose()


class Replicas:
    """``n`` replicas of one fleet, started together, stopped together."""

    def __init__(self, url: str, fleet: str, n: int, prefix: str = "pod", **kw: Any) -> None:
        self.items = [Replica(url, fleet, f"{prefix}-{i}", **kw) for i in range(n)]

    def __iter__(self) -> Any:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def controllers(self) -> list[FleetController]:
        return [r.controller for r in self.items]

    @property
    def pools(self) -> list[PausablePool]:
        return [r.pool for r in self.items]

    async def __aenter__(self) -> Replicas:
        try:
            await asyncio.gather(*(r.start() for r in self.items))
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.items), return_exceptions=True)

    def fleet_held(self) -> list[bool]:
        return ["fleet" in p.holds for p in self.pools]
