"""Pool benchmarks: throughput against a bare asyncio.Queue, and pause/resume precision."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench import QUICK
from replica import PausablePool

ITEMS = 20_000 if QUICK else 200_000
WORKERS = 4
ROUNDS = 2 if QUICK else 5


async def _noop(item: Any) -> None:
    return None


async def _baseline_once(n: int) -> float:
    """A bare asyncio.Queue with 4 workers: what a pool that cannot pause costs."""
    q: asyncio.Queue[Any] = asyncio.Queue()

    async def worker() -> None:
        while True:
            item = await q.get()
            try:
                await _noop(item)
            finally:
                q.task_done()

    tasks = [asyncio.create_task(worker()) for _ in range(WORKERS)]
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    for i in range(n):
        q.put_nowait(i)
    await q.join()
    elapsed = time.perf_counter() - t0
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return elapsed


async def _pool_once(n: int) -> float:
    async with PausablePool(_noop, workers=WORKERS) as pool:
        t0 = time.perf_counter()
        for i in range(n):
            pool.put_nowait(i)
        await pool.join()
        return time.perf_counter() - t0


async def throughput() -> list[dict[str, Any]]:
    base: list[float] = []
    ours: list[float] = []
    for _ in range(ROUNDS):  # interleaved, so drift hits both alike
        base.append(await _baseline_once(ITEMS))
        ours.append(await _pool_once(ITEMS))
    b = ITEMS / statistics.median(base)
    p = ITEMS / statistics.median(ours)
    return [
        {
            "bench": "pool",
            "case": f"throughput, no-op handler, {ITEMS:,} items, {WORKERS} workers",
            "value": round(p),
            "unit": "items/s",
            "baseline": round(b),
            "baseline_name": "asyncio.Queue + 4 workers",
            "ratio": round(p / b, 2),
            "goal": "ratio >= 1.0",
        }
    ]


async def precision(trials: int = 20 if QUICK else 200) -> list[dict[str, Any]]:
    """Last in-flight item finishing -> pause() returning; resume() -> next item starting."""
    pause_lag: list[float] = []
    resume_lag: list[float] = []
    ends: list[float] = []
    starts: list[float] = []

    async def handler(item: float) -> None:
        starts.append(time.perf_counter())
        await asyncio.sleep(item)
        ends.append(time.perf_counter())

    async with PausablePool(handler, workers=WORKERS) as pool:
        for trial in range(trials):
            ends.clear()
            for k in range(WORKERS):
                pool.put_nowait(0.001 + 0.0005 * ((trial + k) % 4))
            await asyncio.sleep(0.0005)
            await pool.pause("bench", timeout=10)
            returned = time.perf_counter()
            pause_lag.append(returned - max(ends))
            pool.put_nowait(0.0)
            starts.clear()
            t0 = time.perf_counter()
            pool.resume()
            await pool.join()
            resume_lag.append(starts[0] - t0)
    return [
        {
            "bench": "pool",
            "case": "last in-flight item finishing -> pause() returning (median)",
            "value": round(statistics.median(pause_lag) * 1000, 3),
            "unit": "ms",
            "p99": round(sorted(pause_lag)[int(trials * 0.99) - 1] * 1000, 3),
            "goal": "< 2 ms median",
        },
        {
            "bench": "pool",
            "case": "resume() -> next item starting (median)",
            "value": round(statistics.median(resume_lag) * 1000, 3),
            "unit": "ms",
            "p99": round(sorted(resume_lag)[int(trials * 0.99) - 1] * 1000, 3),
            "goal": "< 1 ms median",
        },
    ]


def run() -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        return [*(await throughput()), *(await precision())]

    return asyncio.run(main())
