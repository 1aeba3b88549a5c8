"""A real ``fleetgate-replica`` holds when it cannot read its fleet's state (issue 19, A.2).

A state hash written by hand with bytes that are not UTF-8 (the state running, so only the
replica's own judgement can hold it): the replica holds its pool with ``control-plane``,
``/readyz`` says why, no item starts; once the hash is fixed it follows the fleet again and runs the items.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from cpkit import publish_state, state_at, until

from replica.contract import Keys
from tests.hakit import logs
from tests.procs import base_env, demo_log, enqueue, pending, replica_processes, wait_done

ITEMS = 5


async def readyz(http: httpx.AsyncClient, pred: Any, timeout: float = 30.0) -> dict[str, Any]:
    """``/readyz`` once ``pred(status, body)`` holds (another process: polled, bounded)."""
    async with asyncio.timeout(timeout):
        while True:
            r = await http.get("/readyz")
            body: dict[str, Any] = r.json()
            if pred(r.status_code, body):
                return body
            await asyncio.sleep(0.05)


async def test_a_replica_process_holds_on_a_state_hash_that_is_not_utf8_says_why_and_follows_again_once_fixed(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, tmp_path: Path
) -> None:
    keys = Keys(fleet_name)
    await publish_state(redis, state_at(fleet_name, 1, False))
    env = base_env(redis_url, fleet_name, workers=2, demo_item_seconds=0.01)
    raw = aioredis.Redis.from_url(redis_url)
    async with replica_processes(1, env, tmp_path, prefix="utf8") as procs:
        rp = procs[0]
        async with httpx.AsyncClient(base_url=rp.url, timeout=5.0) as http:
            try:
                await readyz(http, lambda code, _b: code == 200)
                running = dict(state_at(fleet_name, 2, False).to_hash())
                running["reason"] = "数".encode() * 3 + b"\xe6\x95"  # cut inside a character
                await raw.delete(keys.state)
                await raw.hset(keys.state, mapping=running)

                body = await readyz(http, lambda code, b: code == 503
                                    and "control-plane" in b["holds"])
                assert "control loop state failed" in body["reason"], body
                assert "not UTF-8" in body["reason"], body

                await enqueue(redis, fleet_name, ITEMS)
                # a few more heartbeats of the held replica: still nothing started
                beat = await redis.hget(keys.replica(rp.id), "heartbeat_at")

                async def beat_again() -> bool:
                    return await redis.hget(keys.replica(rp.id), "heartbeat_at") != beat

                await until(beat_again, timeout=30, what="a heartbeat while held")
                assert await demo_log(redis, fleet_name) == []
                assert await pending(redis, fleet_name) == 0

                await publish_state(redis, state_at(fleet_name, 3, False))  # fixed by hand
                await readyz(http, lambda code, _b: code == 200)
                await wait_done(redis, fleet_name, ITEMS, timeout=60)
                assert "control loop state recovered" in rp.log()
                assert rp.log().count("ERROR replica.control.faults") == 1, logs(procs)
            finally:
                await raw.aclose()
