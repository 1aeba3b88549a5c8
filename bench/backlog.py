"""What reading the backlog costs per refresh: 1,000 fleets, each with a work stream.

A coordinator refreshes every fleet's snapshot (``coordinator.fleet.snapshots``) at most once
per ``FLEETGATE_REFRESH_INTERVAL``; since issue 21 each refresh also reads the fleet's backlog
(``coordinator.fleet.backlog``: ``XINFO GROUPS`` and two ``XLEN`` in one round trip, alongside
the records' first read, and an ``XRANGE ... COUNT 1`` when entries wait). Here every fleet has
a state, two replica records and a work stream with entries waiting and pending, and one
refresh reads every fleet's snapshot the way ``/metrics`` does (``FLEET_READS`` fleets at once):
with the backlog (``Snapshots(backlog=True)``) against the baseline without it, rounds
alternating so a load on the machine weighs on both alike. Reported: the median refresh time
of each and their ratio, and the Redis commands per fleet each refresh costs.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import redis.asyncio as aioredis

from bench import QUICK
from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import FLEET_READS, read_each
from coordinator.fleet.snapshots import Snapshots
from replica.contract import WORK_GROUP, Keys, format_time, now_utc

FLEETS = 100 if QUICK else 1000
ROUNDS = 3 if QUICK else 9
ENTRIES = 20
"""Entries per work stream: 5 read by a replica (pending), the rest waiting."""
REPLICAS = 2


async def _populate(redis: aioredis.Redis, names: list[str]) -> None:
    now = now_utc()
    for i in range(0, len(names), 100):
        pipe = redis.pipeline(transaction=False)
        for name in names[i:i + 100]:
            keys = Keys(name)
            for r in range(REPLICAS):
                rid = f"r{r}"
                pipe.hset(keys.replica(rid), mapping={
                    "paused": "0", "holds": "{}", "fleet_held": "0", "applied_version": "1",
                    "in_flight": "0", "queued": "0", "quiet": "0", "control": "connected",
                    "heartbeat_at": format_time(now), "heartbeat_interval": "3600",
                    "poll_interval": "1", "host": "bench",
                })
                pipe.zadd(keys.replicas, {rid: int(now.timestamp() * 1000)})
            for n in range(ENTRIES):
                pipe.xadd(keys.work, {"n": str(n)})
            pipe.xgroup_create(keys.work, WORK_GROUP, id="0")
            pipe.xreadgroup(WORK_GROUP, "r0", {keys.work: ">"}, count=5)
        await pipe.execute()
    for name in names[::2]:  # half the fleets paused
        await Fleet(redis, name).pause("bench", by="bench")


async def _refresh(snapshots: Snapshots, fleets: list[Fleet]) -> float:
    t0 = time.perf_counter()
    await read_each(fleets, snapshots.snap, FLEET_READS)
    return time.perf_counter() - t0


async def _commands(redis: aioredis.Redis) -> int:
    return int((await redis.info("stats"))["total_commands_processed"])


async def _measure(url: str) -> dict[str, Any]:
    redis = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        names = [f"bench-{i:04d}" for i in range(FLEETS)]
        await _populate(redis, names)
        fleets = [Fleet(redis, name) for name in names]
        cases = {"without": Snapshots(0.0, backlog=False), "with": Snapshots(0.0, backlog=True)}
        times: dict[str, list[float]] = {name: [] for name in cases}
        commands: dict[str, int] = {}
        for snapshots in cases.values():  # warm the connection pool
            await _refresh(snapshots, fleets)
        for _ in range(ROUNDS):
            for name, snapshots in cases.items():
                before = await _commands(redis)
                times[name].append(await _refresh(snapshots, fleets))
                commands[name] = await _commands(redis) - before - 1  # INFO itself
        backlog = (await cases["with"].summary(fleets[1])).counts()
        assert (backlog["backlog"], backlog["pending"]) == (ENTRIES - 5, 5), backlog
        return {"times": times, "commands": commands}
    finally:
        await redis.aclose()


def run() -> list[dict[str, Any]]:
    with LocalRedis() as server:
        m = asyncio.run(_measure(server.url))
    base = statistics.median(m["times"]["without"])
    value = statistics.median(m["times"]["with"])
    per_fleet = {k: v / FLEETS for k, v in m["commands"].items()}
    return [
        {"bench": "backlog",
         "case": f"one refresh of {FLEETS:,} fleets' snapshots with the backlog read "
                 f"(median of {ROUNDS})",
         "value": round(value * 1000, 1), "unit": "ms", "baseline": round(base * 1000, 1),
         "ratio": round(value / base, 2),
         "goal": "baseline: the same refresh without the backlog read"},
        {"bench": "backlog",
         "case": "Redis commands per fleet per refresh, with the backlog read",
         "value": round(per_fleet["with"], 2), "unit": "commands",
         "baseline": round(per_fleet["without"], 2),
         "ratio": round(per_fleet["with"] / per_fleet["without"], 2),
         "goal": "baseline: without it (2 XLEN, XINFO GROUPS and, when entries wait, XRANGE more)"},
    ]
