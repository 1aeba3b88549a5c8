"""The guide's measurement, run for real: 4 workers, 100 items of 50 ms, pause, hold, resume.

Prints what it measured: pause() latency against the remaining in-flight time, items started
during the hold, completed, lost and duplicated. Exit status 0 when every check held.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass

from replica.pool import PausablePool


@dataclass
class PoolDemoResult:
    pause_latency_ms: float
    remaining_item_ms: float
    in_flight_at_pause: int
    started_during_hold: int
    completed: int
    lost: int
    duplicated: int
    fifo: bool
    total_s: float

    @property
    def ok(self) -> bool:
        return (
            self.started_during_hold == 0
            and self.lost == 0
            and self.duplicated == 0
            and self.completed == 100
            and self.fifo
        )


async def run_pool_demo(
    items: int = 100, workers: int = 4, item_s: float = 0.05, hold_s: float = 0.5
) -> PoolDemoResult:
    starts: list[tuple[float, int]] = []
    ends: dict[int, float] = {}

    async def handler(item: int) -> None:
        starts.append((time.monotonic(), item))
        await asyncio.sleep(item_s)
        ends[item] = time.monotonic()

    t_begin = time.monotonic()
    async with PausablePool(handler, workers=workers, name="demo") as pool:
        for i in range(items):
            pool.put_nowait(i)
        # pause mid-flight: 2.5 item-times in, the third batch is half done
        await asyncio.sleep(item_s * 2.5)
        in_flight = pool.in_flight
        newest_start = max(t for t, _ in starts)
        t0 = time.monotonic()
        await pool.pause("demo: hold", timeout=10)
        t1 = time.monotonic()
        hold_began = len(starts)
        await asyncio.sleep(hold_s)
        started_during_hold = len(starts) - hold_began
        pool.resume()
        await pool.join(timeout=60)
    total = time.monotonic() - t_begin
    counts = Counter(item for _, item in starts)
    return PoolDemoResult(
        pause_latency_ms=(t1 - t0) * 1000,
        remaining_item_ms=max(0.0, (newest_start + item_s - t0) * 1000),
        in_flight_at_pause=in_flight,
        started_during_hold=started_during_hold,
        completed=len(ends),
        lost=sum(1 for i in range(items) if i not in ends),
        duplicated=sum(1 for c in counts.values() if c > 1),
        fifo=[item for _, item in starts] == list(range(items)),
        total_s=total,
    )


def main() -> int:
    print("pool demo: 4 workers, 100 items of 50 ms; pause mid-flight, hold 0.5 s, resume")
    r = asyncio.run(run_pool_demo())
    print(f"  in flight at pause      {r.in_flight_at_pause}")
    print(
        f"  pause() returned after  {r.pause_latency_ms:.1f} ms"
        f" (in-flight items had {r.remaining_item_ms:.1f} ms left)"
    )
    print(f"  started during the hold {r.started_during_hold}")
    print(f"  completed               {r.completed}/100")
    print(f"  lost                    {r.lost}")
    print(f"  duplicated              {r.duplicated}")
    print(f"  started in put order    {'yes' if r.fifo else 'NO'}")
    print(f"  total                   {r.total_s:.2f} s")
    print("all checks held" if r.ok else "A CHECK FAILED")
    return 0 if r.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
