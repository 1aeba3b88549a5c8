"""A replica process for the multi-process control-plane tests.

    python tests/cp_replica_proc.py URL FLEET PREFIX N [POLL_INTERVAL] [HEARTBEAT_INTERVAL]

Runs N replicas (a pool fed with items, a FleetController, a Redis client each) in one
event loop, prints ``READY`` once every controller is up, and on ``STOP`` (or end of input)
stops them all and prints one JSON line: items processed, and items a pool started while
it was held (always 0, or the pool is broken).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import redis.asyncio as aioredis

from replica import FleetController, PausablePool


async def main(url: str, fleet: str, prefix: str, n: int, poll: float, heartbeat: float) -> None:
    started_while_held = 0
    pools: list[PausablePool] = []
    clients: list[aioredis.Redis] = []
    controllers: list[FleetController] = []

    def make_handler(index: int) -> Any:
        async def handler(item: Any) -> None:
            nonlocal started_while_held
            if pools[index].holds:
                started_while_held += 1
            await asyncio.sleep(0.01)
        return handler

    for i in range(n):
        pool = PausablePool(make_handler(i), workers=2, maxsize=50)
        await pool.start()
        client = aioredis.Redis.from_url(url)
        pools.append(pool)
        clients.append(client)
        controllers.append(FleetController(pool, client, fleet, f"{prefix}-{i}",
                                           poll_interval=poll, heartbeat_interval=heartbeat))
    await asyncio.gather(*(c.start() for c in controllers))

    async def feed() -> None:
        n_item = 0
        while True:
            for pool in pools:
                if pool.queued < 10:
                    n_item += 1
                    pool.put_nowait(n_item)
            await asyncio.sleep(0.005)

    feeder = asyncio.create_task(feed())
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "STOP":
            break
    feeder.cancel()
    await asyncio.gather(feeder, return_exceptions=True)
    for c in controllers:
        await c.stop()
    processed = 0
    for pool in pools:
        await pool.stop(timeout=2.0)
        processed += pool.stats().processed
    for client in clients:
        await client.aclose()
    print(json.dumps({"processed": processed, "started_while_held": started_while_held}),
          flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], int(args[3]),
                     float(args[4]) if len(args) > 4 else 1.0,
                     float(args[5]) if len(args) > 5 else 10.0))
