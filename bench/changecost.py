"""What a change costs as the fleet grows (issue 23 A.1): ``Fleet.pause()`` + ``resume()``
returning, with N registered replica records and no subscribers, at N = 10 and N = 5,000
(``QUICK``: 10 and 500).

The records are written as a replica writes them (``ReplicaRecord.commands()``: HSET of every
field, PEXPIRE, ZADD of the heartbeat score), pipelined, with no controller behind them: what a
change costs Redis and the coordinator then depends on the fleet's size alone, not on a fan-out.
Rounds alternate between the two fleets (one private Redis), so that whatever the machine does
meanwhile weighs on both alike; each figure is the median of ``ROUNDS`` after ``WARMUP``.

Also measured, from ``INFO commandstats`` deltas on the same private server (scripts' inner
calls included): the Redis commands one pause + resume round trip sends, at each size.

Run with ``python -m bench bench.changecost`` (``make bench`` runs it); ``run()`` returns the
rows.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import redis.asyncio as aioredis

from bench import QUICK
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica.contract import Keys
from replica.control.record import ReplicaRecord
from replica.pool import PausablePool

SIZES = (10, 500) if QUICK else (10, 5000)
ROUNDS = 5 if QUICK else 41
WARMUP = 2 if QUICK else 5
CHUNK = 500
"""Records per pipeline when registering."""


class _Idle:
    """A controller that is connected and holds nothing (``RecordSource``)."""

    fleet_held = False
    resume_at: datetime | None = None
    subscribed = True


async def _noop(item: Any) -> None:
    """The handler of a pool that never runs an item."""


def record_commands(keys: Keys, replica_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """What each replica of ``replica_ids`` writes at a heartbeat: its whole record, its
    expiry, its score (``ReplicaRecord.commands()``)."""
    pool = PausablePool(_noop, workers=1)
    source = _Idle()
    out: list[tuple[Any, ...]] = []
    for replica_id in replica_ids:
        record = ReplicaRecord(pool, source, keys, replica_id, heartbeat_interval=3600.0,
                               poll_interval=1.0, host="bench")
        out += record.commands()
    return out


async def register(redis: aioredis.Redis, keys: Keys, count: int, prefix: str = "pod") -> None:
    """Register ``count`` replica records of fleet ``keys`` (heartbeat 1 h: they stay live
    for the whole run), pipelined ``CHUNK`` at a time."""
    ids = [f"{prefix}-{i:05d}" for i in range(count)]
    for i in range(0, count, CHUNK):
        pipe = redis.pipeline(transaction=False)
        for command in record_commands(keys, ids[i:i + CHUNK]):
            pipe.execute_command(*command)
        await pipe.execute()


async def commands_by_name(admin: aioredis.Redis, what: str = "calls") -> dict[str, int]:
    """``INFO commandstats`` as calls (or ``usec``: Redis CPU microseconds) per command (lower
    case), ``info`` left out."""
    stats = await admin.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v[what]) for k, v in stats.items()
            if k.startswith("cmdstat_") and k != "cmdstat_info"}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The calls per command between two ``commands_by_name`` readings (non-zero only)."""
    return {k: n - before.get(k, 0) for k, n in sorted(after.items()) if n - before.get(k, 0)}


async def _round(fleet: Fleet) -> float:
    t0 = time.perf_counter()
    await fleet.pause("bench: change cost", by="bench")
    await fleet.resume(by="bench")
    return (time.perf_counter() - t0) * 1000


async def _bench(url: str) -> list[dict[str, Any]]:
    admin = aioredis.Redis.from_url(url)
    try:
        await admin.config_set("slowlog-log-slower-than", -1)
        fleets: list[Fleet] = []
        writes = 0
        usec_before = await commands_by_name(admin, "usec")
        for size in SIZES:
            fleet = Fleet(admin, f"cost-{size}-{uuid.uuid4().hex[:6]}", min_replicas_ack=0)
            await register(admin, fleet.keys, size)
            writes += size
            fleets.append(fleet)
        written = delta(usec_before, await commands_by_name(admin, "usec"))
        write_us = sum(written.get(c, 0) for c in ("hset", "pexpire", "zadd")) / writes
        poll_us = await _poll_us(admin, fleets[0])
        times: dict[int, list[float]] = {size: [] for size in SIZES}
        for r in range(WARMUP + ROUNDS):
            for size, fleet in zip(SIZES, fleets, strict=True):
                took = await _round(fleet)
                if r >= WARMUP:
                    times[size].append(took)
        per_round: dict[int, dict[str, int]] = {}
        script_us: dict[int, float] = {}
        for size, fleet in zip(SIZES, fleets, strict=True):
            before = await commands_by_name(admin)
            await _round(fleet)
            per_round[size] = delta(before, await commands_by_name(admin))
            usec = await commands_by_name(admin, "usec")
            counted = await commands_by_name(admin)
            for _ in range(ROUNDS):
                await _round(fleet)
            spent = delta(usec, await commands_by_name(admin, "usec")).get("evalsha", 0)
            script_us[size] = spent / delta(counted, await commands_by_name(admin))["evalsha"]
    finally:
        await admin.aclose()
    small, big = SIZES
    base = statistics.median(times[small])
    value = statistics.median(times[big])
    calls = {size: sum(d.values()) for size, d in per_round.items()}
    return [
        {"bench": "changecost", "case": f"Fleet.pause() + resume(), {big:,} replicas against "
         f"{small} (median of {ROUNDS})", "value": value, "unit": "ms", "baseline": base,
         "ratio": value / base if base else None, "goal": "<= 2x"},
        {"bench": "changecost", "case": f"Redis commands per pause + resume, {big:,} / {small} "
         "replicas (INFO commandstats, scripts' inner calls included)", "value": calls[big],
         "unit": "commands", "baseline": calls[small],
         "ratio": calls[big] / calls[small] if calls[small] else None,
         "goal": "the same", "detail": json.dumps(per_round[big], sort_keys=True)},
        {"bench": "changecost", "case": f"Redis CPU per change (set_state.lua, its inner calls "
         f"included), {big:,} / {small} replicas", "value": script_us[big], "unit": "us",
         "baseline": script_us[small],
         "ratio": script_us[big] / script_us[small] if script_us[small] else None,
         "goal": "the same"},
        {"bench": "changecost", "case": "Redis CPU per record write (HSET of every field, "
         "PEXPIRE, ZADD)", "value": write_us, "unit": "us"},
        {"bench": "changecost", "case": "Redis CPU per poll (HGETALL of the state hash)",
         "value": poll_us, "unit": "us"},
    ]


async def _poll_us(admin: aioredis.Redis, fleet: Fleet) -> float:
    """Redis CPU microseconds of one replica's poll (an HGETALL of the state hash)."""
    await fleet.pause("bench: a state to read", by="bench")
    polls = 1000 if QUICK else 10000
    before = await commands_by_name(admin, "usec")
    pipe = admin.pipeline(transaction=False)
    for _ in range(polls):
        pipe.hgetall(fleet.keys.state)
    await pipe.execute()
    spent = delta(before, await commands_by_name(admin, "usec")).get("hgetall", 0)
    await fleet.resume(by="bench")
    return spent / polls


def run() -> list[dict[str, Any]]:
    with LocalRedis() as server:
        return asyncio.run(_bench(server.url))


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
