"""The cost of ``WAIT`` on a change (issue 12 section 4): a pause acknowledged and quiet, with
and without waiting for a Redis replica to confirm it.

A Redis primary with one replica (``redis-server --replicaof``), SIZE controllers spread over
the fan-out bench's worker processes (``bench.fanout``). Two ``Fleet`` objects on the same
fleet take turns, round by round: one with ``min_replicas_ack=1`` (the default: ``WAIT 1``
after the script, on its connection), one with ``min_replicas_ack=0`` (no ``WAIT``, the
baseline). Each round is ``pause()`` to ``wait()`` reporting every controller applied and
quiet, as in ``bench.fanout``; the figure is the median of ROUNDS, after WARMUP rounds of each.
The change alone (``pause()`` returning) is reported too, with and without.

Run with ``python -m bench durability`` (or ``make bench``).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from bench import QUICK
from bench.fanout import _start_fleet, _stop_fleet
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis

SIZE = 10
ROUNDS = 3 if QUICK else 25
WARMUP = 1 if QUICK else 3
SETTLE_S = 0.05
"""Idle time before each measured round (as in bench.fanout)."""


async def _in_sync(primary: aioredis.Redis, timeout: float = 20.0) -> None:
    """Return once the replica confirms a write (``WAIT 1``; see tests/replication.py)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await primary.incr("bench:durability:sync")
        if int(await primary.execute_command("WAIT", 1, 100)) >= 1:  # type: ignore[no-untyped-call]
            return
    raise TimeoutError("the replica did not get in sync")


async def _round(fleet: Fleet) -> tuple[float, float]:
    """(ms to pause() returning, ms to every controller applied and quiet); then resumes."""
    t0 = time.perf_counter()
    state = await fleet.pause("bench", by="bench", for_wait=True)
    changed = time.perf_counter()
    report = await fleet.wait(state.version, timeout=60)
    done = time.perf_counter()
    if not report.ok or len(report.replicas) != SIZE:
        raise RuntimeError(f"pause not acknowledged by all {SIZE}: {report.stragglers[:3]}")
    resumed = await fleet.resume(by="bench", for_wait=True)
    if not (await fleet.wait(resumed.version, timeout=60)).ok:
        raise RuntimeError("resume not acknowledged")
    return (changed - t0) * 1000, (done - t0) * 1000


async def _bench(url: str) -> list[dict[str, Any]]:
    admin = aioredis.Redis.from_url(url, decode_responses=True)
    name = f"bench-wait-{uuid.uuid4().hex[:6]}"
    try:
        await _in_sync(admin)
        waiting = await Fleet(admin, name, min_replicas_ack=1).listen()
        plain = await Fleet(admin, name, min_replicas_ack=0).listen()
        procs = await _start_fleet(url, name, SIZE)
        with_wait: list[tuple[float, float]] = []
        without: list[tuple[float, float]] = []
        waits_before = await _waits(admin)
        try:
            for r in range(WARMUP + ROUNDS):
                await asyncio.sleep(SETTLE_S)
                a = await _round(waiting)
                await asyncio.sleep(SETTLE_S)
                b = await _round(plain)
                if r >= WARMUP:
                    with_wait.append(a)
                    without.append(b)
        finally:
            await _stop_fleet(procs)
            await waiting.aclose()
            await plain.aclose()
        waits = await _waits(admin) - waits_before
    finally:
        await admin.aclose()
    # two changes (pause, resume) per round of the waiting fleet: every one sent a WAIT (the
    # first one twice: the fleet's state hash did not exist yet)
    if waits < 2 * (WARMUP + ROUNDS):
        raise RuntimeError(f"expected a WAIT per change of the waiting fleet, Redis saw {waits}")
    change = statistics.median(x for x, _ in with_wait)
    change0 = statistics.median(x for x, _ in without)
    ack = statistics.median(y for _, y in with_wait)
    ack0 = statistics.median(y for _, y in without)
    print(f"  WAIT: change {change:.2f} / {change0:.2f} ms, acknowledged {ack:.2f} / {ack0:.2f} ms",
          file=sys.stderr, flush=True)
    return [
        {
            "bench": "durability", "case": f"pause ack+quiet, {SIZE} replicas, WAIT 1 Redis replica",
            "value": ack, "unit": "ms", "baseline": ack0, "ratio": ack / ack0 if ack0 else None,
            "goal": "the cost of WAIT (min_replicas_ack=1 against 0)",
        },
        {
            "bench": "durability", "case": "pause() returning, WAIT 1 Redis replica",
            "value": change, "unit": "ms", "baseline": change0,
            "ratio": change / change0 if change0 else None, "goal": "",
        },
    ]


async def _waits(admin: aioredis.Redis) -> int:
    stats = await admin.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def run() -> list[dict[str, Any]]:
    with LocalRedis(extra_args=["--repl-diskless-sync-delay", "0"]) as primary:
        replica = LocalRedis(extra_args=["--replicaof", primary.host, str(primary.port)])
        with replica:
            return asyncio.run(_bench(primary.url))


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
