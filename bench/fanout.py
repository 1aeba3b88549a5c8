"""Control-plane benchmarks: fan-out of a pause, the same with pub/sub cut, steady Redis cost.

* Fan-out: time from ``Fleet.pause()`` to ``Fleet.wait()`` reporting every replica applied and
  quiet (idle pools), for 10, 100 and 1000 controllers spread over 4 processes, each with its
  own connections. The baseline is, in the same run, on the same server and in rounds
  alternating with the fleet's, the time for one PUBLISH to reach as many plain redis-py
  subscribers (4 processes, a connection each). Both sides run WARMUP rounds that are not
  counted; each figure is the median of ROUNDS.
  Goal: within 2x of raw delivery at every size (3x at least).
* Pub/sub cut: the controllers' user may not subscribe (an ACL without the control channel),
  so only the poll of the state hash brings the pause. Goal: every replica applied within
  ``poll_interval`` + 100 ms.
* Steady cost: commands per second per replica at ``poll_interval=1s``, every call in
  ``INFO commandstats`` (those run inside scripts included). Goal: at most 1.5.

Run with ``python -m bench fanout`` (or ``make bench``); ``run()`` returns the rows. Worker
processes are this module run as ``python -m bench.fanout ctl ...`` and ``bench.workers``.
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
from bench.workers import ROOT, RawSubscribers, run_controllers, split
from bench.workers import expect as _expect
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis

SIZES = (10,) if QUICK else (10, 100, 1000)
PROCESSES = 2 if QUICK else 4
"""Processes the replicas (and the baseline's raw subscribers) are spread over: each is an
interpreter to start, which the quick run inside `make test` keeps to a minimum."""
ROUNDS = 2 if QUICK else 15
WARMUP = 1 if QUICK else 2
"""Rounds run first and not counted, for both sides: the first deliveries after a start are
slow (code paths and connections not warm yet)."""
SETTLE_S = 0.05
"""Idle time before each measured round."""
CUT_ROUNDS = 1 if QUICK else 3
POLL_INTERVAL = 1.0
HEARTBEAT_INTERVAL = 10.0
STEADY_SIZE = 10 if QUICK else 100
STEADY_WINDOW_S = 3.0 if QUICK else 20.0


# ---------------------------------------------------------------------------- workers


async def _ctl_worker(url: str, fleet: str, prefix: str, n: int, poll: float) -> None:
    """n idle pools, each with a controller and a client of its own, until STOP on stdin."""
    await run_controllers([aioredis.Redis.from_url(url) for _ in range(n)], fleet, prefix,
                          poll_interval=poll, heartbeat_interval=HEARTBEAT_INTERVAL,
                          start_timeout=30.0)


# ---------------------------------------------------------------------------- parent side


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.fanout", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    return proc


def _split(size: int) -> list[int]:
    return split(size, PROCESSES)


async def _start_fleet(url: str, fleet: str, size: int) -> list[asyncio.subprocess.Process]:
    procs = [await _spawn("ctl", url, fleet, f"p{i}", str(n), str(POLL_INTERVAL))
             for i, n in enumerate(_split(size))]
    await asyncio.gather(*(_expect(p, "READY") for p in procs))
    return procs


async def _stop_fleet(procs: list[asyncio.subprocess.Process]) -> None:
    for p in procs:
        if p.stdin is not None and p.returncode is None:
            p.stdin.write(b"STOP\n")
            await p.stdin.drain()
    for p in procs:
        try:
            await asyncio.wait_for(p.wait(), 60)
        except TimeoutError:
            p.kill()
            await p.wait()


async def _pause_rounds(
    fleet: Fleet, size: int, rounds: int, applied: list[float] | None = None
) -> list[float]:
    """ms from pause() to wait() reporting every replica applied and quiet, per round; with
    ``applied``, also the latest replica's ms from the change to applying it (its clock)."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        state = await fleet.pause("bench", by="bench", for_wait=True)
        report = await fleet.wait(state.version, timeout=60)
        elapsed = (time.perf_counter() - t0) * 1000
        if not report.ok or len(report.replicas) != size:
            raise RuntimeError(f"pause not acknowledged by all {size}: {report.stragglers[:3]}")
        times.append(elapsed)
        if applied is not None:
            applied.append(1000 * max(r.applied_after_s or 0.0 for r in report.replicas))
        resumed = await fleet.resume(by="bench", for_wait=True)
        if not (await fleet.wait(resumed.version, timeout=60)).ok:
            raise RuntimeError("resume not acknowledged")
    return times


async def _commands(admin: aioredis.Redis) -> int:
    stats = await admin.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_")
               and k != "cmdstat_info")


async def _bench(url: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    admin = aioredis.Redis.from_url(url, decode_responses=True)
    await admin.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "nosub", "on", ">bench", "~*", "resetchannels",
        "&fleetgate:*:acks", "+@all",
    )
    cut_url = url.replace("redis://", "redis://nosub:bench@")
    try:
        for size in SIZES:
            name = f"bench-{size}-{uuid.uuid4().hex[:6]}"
            fleet = await Fleet(admin, name, wait_poll_interval=0.5).listen()
            procs = await _start_fleet(url, name, size)
            try:
                async with RawSubscribers(url, f"fleetgate-bench-raw-{uuid.uuid4().hex[:8]}", size,
                                          PROCESSES) as raw_subscribers:
                    # Rounds alternate between the two, so that whatever the machine does
                    # meanwhile (2 cores, shared) weighs on both alike.
                    raw_times: list[float] = []
                    times = []
                    for r in range(WARMUP + ROUNDS):
                        await asyncio.sleep(SETTLE_S)  # neither starts in the other's tail
                        raw_time = await raw_subscribers.round()
                        await asyncio.sleep(SETTLE_S)
                        (ack_time,) = await _pause_rounds(fleet, size, 1)
                        if r >= WARMUP:  # slow first deliveries on both sides
                            raw_times.append(raw_time)
                            times.append(ack_time)
                if size == STEADY_SIZE:
                    await asyncio.sleep(HEARTBEAT_INTERVAL / 2)
                    before = await _commands(admin)
                    t0 = time.monotonic()
                    await asyncio.sleep(STEADY_WINDOW_S)
                    after = await _commands(admin)
                    rate = (after - before) / (time.monotonic() - t0) / size
            finally:
                await _stop_fleet(procs)
                await fleet.aclose()
            raw = statistics.median(raw_times)
            ack = statistics.median(times)
            rows.append({
                "bench": "fanout", "case": f"pause ack+quiet, {size} replicas", "value": ack,
                "unit": "ms", "baseline": raw, "ratio": ack / raw if raw else None,
                "goal": "<= 2x raw PUBLISH delivery (3x at least)",
            })
            cut_fleet = await Fleet(admin, name + "-cut", wait_poll_interval=0.5).listen()
            procs = await _start_fleet(cut_url, cut_fleet.name, size)
            cut: list[float] = []
            try:
                await _pause_rounds(cut_fleet, size, CUT_ROUNDS, applied=cut)
            finally:
                await _stop_fleet(procs)
                await cut_fleet.aclose()
            worst = max(cut)
            rows.append({
                "bench": "fanout",
                "case": f"pause applied by the last replica, pub/sub cut, {size} replicas",
                "value": worst, "unit": "ms", "baseline": POLL_INTERVAL * 1000,
                "ratio": worst / (POLL_INTERVAL * 1000),
                "goal": f"<= poll_interval + 100 ms ({POLL_INTERVAL * 1000 + 100:.0f} ms)",
            })
            print(f"  {size}: raw {raw:.1f} ms, ack {ack:.1f} ms, cut worst {worst:.0f} ms",
                  file=sys.stderr, flush=True)
        rows.append({
            "bench": "fanout", "case": f"steady Redis commands/s per replica ({STEADY_SIZE})",
            "value": rate, "unit": "cmd/s", "baseline": None, "ratio": None,
            "goal": "<= 1.5 at poll_interval=1s",
        })
    finally:
        await admin.aclose()
    return rows


def run() -> list[dict[str, Any]]:
    with LocalRedis() as server:
        return asyncio.run(_bench(server.url))


def _worker_main(argv: list[str]) -> None:
    kind = argv[0]
    if kind == "ctl":
        asyncio.run(_ctl_worker(argv[1], argv[2], argv[3], int(argv[4]), float(argv[5])))
    else:
        raise SystemExit(f"unknown worker {kind!r}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        _worker_main(sys.argv[1:])
    else:
        for row in run():
            print(json.dumps(row))
