"""Big fleets: what the coordinator costs at 100, 1,000 and 5,000 replicas (issue 15 section 2).

The replicas are real: ``FleetController`` + ``PausablePool`` each, with a connection pair of
its own, writing real records and heartbeats (``poll_interval`` 1 s, heartbeat 10 s) to a
private Redis, several hundred per process, spread over one process per core (the workers are
``bench.fanout``'s). The coordinator is a real ``fleetgate serve`` process (default settings:
``FLEETGATE_REFRESH_INTERVAL`` 1 s), measured from outside:

* ``GET /api/fleets/{name}`` (the summary shape), cold (the first request after the snapshot
  expired: the records are read) and warm (the snapshot answers), median of COLD / WARM;
* the coordinator's CPU per second of wall time (``/proc/<pid>/stat``) with DASHBOARDS clients
  each polling ``GET /api/fleets/{name}`` once a second, against the same process idle;
* the acknowledged fan-out: ``Fleet.pause()`` to every replica applied and quiet, against one
  PUBLISH reaching as many plain subscribers spread over as many processes (rounds alternate,
  median of ROUNDS after WARMUP);
* the Redis commands per second per replica (``INFO commandstats``, scripts' inner calls
  included), idle and with the dashboards open.

Run with ``python -m bench bench.bigfleet`` (``make bench`` runs it); ``run()`` returns the rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from bench import QUICK
from bench.fanout import POLL_INTERVAL, _commands, _stop_fleet
from bench.workers import ROOT, RawSubscribers, split
from bench.workers import expect as _expect
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis, free_port

SIZES = (20,) if QUICK else (100, 1000, 5000)
PROCESSES = 2 if QUICK else 4 * (os.cpu_count() or 1)
"""Replica processes (and raw subscriber processes): four per core, so that no event loop holds
more than a few hundred controllers whose polls (every second, all started together) come in
bursts: with 2,500 controllers a process, a busy machine stretched a burst past the controllers'
2 s I/O timeout and they dropped their connections."""
LIVE_TIMEOUT_S = 60.0
COLD = 3 if QUICK else 5
WARM = 5 if QUICK else 20
DASHBOARDS = 10
CPU_WINDOW_S = 1.0 if QUICK else 8.0
STEADY_WINDOW_S = 1.0 if QUICK else 8.0
ROUNDS = 2 if QUICK else 7
WARMUP = 1 if QUICK else 2
SETTLE_S = 0.05
REFRESH_S = 1.0
FLEETGATE = str(Path(sys.executable).with_name("fleetgate"))
_TICK = os.sysconf("SC_CLK_TCK")


def _split(size: int) -> list[int]:
    return split(size, PROCESSES)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class _Coordinator:
    """``fleetgate serve`` for one fleet on a free port (no auth: a bench on localhost)."""

    def __init__(self, url: str, fleet: str) -> None:
        self.port = free_port()
        self.fleet = fleet
        env = {**os.environ, "FLEETGATE_REDIS_URL": url, "FLEETGATE_FLEET": fleet,
               "FLEETGATE_REFRESH_INTERVAL": str(REFRESH_S)}
        self._env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.base = f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> _Coordinator:
        self.proc = await asyncio.create_subprocess_exec(
            FLEETGATE, "serve", "--insecure-no-auth", "--port", str(self.port), env=self._env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                try:
                    if (await client.get(self.base + "/healthz")).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("fleetgate serve did not answer /healthz")

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


async def _get_ms(client: httpx.AsyncClient, path: str) -> float:
    t0 = time.perf_counter()
    response = await client.get(path)
    elapsed = (time.perf_counter() - t0) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:200]}")
    return elapsed


async def _dashboards(base: str, path: str, stop: asyncio.Event) -> int:
    """DASHBOARDS clients, each polling ``path`` once a second (spread over the second)."""

    async def one(i: int) -> int:
        polls = 0
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await asyncio.sleep(i / DASHBOARDS)
            while not stop.is_set():
                t0 = time.monotonic()
                await _get_ms(client, path)
                polls += 1
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, 1.0 - (time.monotonic() - t0)))
                except TimeoutError:
                    pass
        return polls

    return sum(await asyncio.gather(*(one(i) for i in range(DASHBOARDS))))


async def _rate(admin: aioredis.Redis, seconds: float) -> float:
    before = await _commands(admin)
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    return (await _commands(admin) - before) / (time.monotonic() - t0)


async def _size(url: str, admin: aioredis.Redis, size: int) -> dict[str, Any]:
    name = f"big-{size}-{uuid.uuid4().hex[:6]}"
    out: dict[str, Any] = {"size": size}
    t0 = time.monotonic()
    procs = await _start_fleet_spread(url, name, size)
    out["start_s"] = time.monotonic() - t0
    fleet = await Fleet(admin, name, wait_poll_interval=0.5).listen()
    try:
        out["live_wait_s"] = await _all_live(fleet, size)
        async with _Coordinator(url, name) as coordinator:
            path = f"/api/fleets/{name}"
            # idle: the replicas' own cost, and the coordinator doing nothing
            cpu0, w0 = _cpu_s(coordinator.pid), time.monotonic()
            out["cmds_idle"] = await _rate(admin, STEADY_WINDOW_S) / size
            out["cpu_idle"] = (_cpu_s(coordinator.pid) - cpu0) / (time.monotonic() - w0)
            async with httpx.AsyncClient(base_url=coordinator.base, timeout=30) as client:
                cold, warm = [], []
                for _ in range(COLD):
                    await asyncio.sleep(REFRESH_S + 0.05)  # the snapshot expired
                    cold.append(await _get_ms(client, path))
                    for _ in range(WARM // COLD + 1):
                        warm.append(await _get_ms(client, path))
                body = (await client.get(path)).json()
                out["summary_bytes"] = len(json.dumps(body))
                out["live"] = body["summary"]["live"]
                out["control_down"] = body["summary"]["control_down"]
            out["cold_ms"], out["warm_ms"] = statistics.median(cold), statistics.median(warm)
            stop = asyncio.Event()
            polling = asyncio.create_task(_dashboards(coordinator.base, path, stop))
            await asyncio.sleep(1.0)  # every dashboard has started
            cpu0, w0 = _cpu_s(coordinator.pid), time.monotonic()
            out["cmds_dashboards"] = await _rate(admin, CPU_WINDOW_S) / size
            out["cpu_dashboards"] = (_cpu_s(coordinator.pid) - cpu0) / (time.monotonic() - w0)
            stop.set()
            out["polls"] = await polling
        raw_times, ack_times = [], []
        async with RawSubscribers(url, f"fleetgate-bench-big-{uuid.uuid4().hex[:8]}", size,
                                  PROCESSES) as raw:
            for r in range(WARMUP + ROUNDS):
                await asyncio.sleep(SETTLE_S)
                raw_time = await raw.round()
                await asyncio.sleep(SETTLE_S)
                t0 = time.perf_counter()
                state = await fleet.pause("bench", by="bench", for_wait=True)
                report = await fleet.wait(state.version, timeout=60)
                ack_time = (time.perf_counter() - t0) * 1000
                if not report.ok or len(report.replicas) != size:
                    raise RuntimeError(f"pause not acknowledged by all {size}")
                if not (await fleet.wait((await fleet.resume(by="bench", for_wait=True)).version, 60)).ok:
                    raise RuntimeError("resume not acknowledged")
                if r >= WARMUP:
                    raw_times.append(raw_time)
                    ack_times.append(ack_time)
        out["raw_ms"], out["ack_ms"] = statistics.median(raw_times), statistics.median(ack_times)
    finally:
        await _stop_fleet(procs)
        await fleet.aclose()
    return out


async def _start_fleet_spread(url: str, fleet: str, size: int) -> list[asyncio.subprocess.Process]:
    """``bench.fanout``'s controller workers, over ``PROCESSES`` processes."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.fanout", "ctl", url, fleet, f"p{i}", str(n),
            str(POLL_INTERVAL), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, cwd=ROOT)  # the summary counts what they log
        for i, n in enumerate(_split(size))
    ]
    try:
        await asyncio.gather(*(_expect(p, "READY", timeout=180) for p in procs))
    except BaseException:
        await _stop_fleet(procs)
        raise
    return procs


async def _all_live(fleet: Fleet, size: int) -> float:
    """Seconds until every replica is live and connected (at most ``LIVE_TIMEOUT_S``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIVE_TIMEOUT_S:
        status = await fleet.status()
        if sum(1 for r in status.replicas if r.reachable) == size:
            break
        await asyncio.sleep(0.5)
    return time.monotonic() - t0


def _rows(m: dict[str, Any]) -> list[dict[str, Any]]:
    n = f"{m['size']:,} replicas"
    ratio = m["ack_ms"] / m["raw_ms"] if m["raw_ms"] else None
    cpu_ratio = m["cpu_dashboards"] / m["cpu_idle"] if m["cpu_idle"] else None
    return [
        {"bench": "bigfleet", "case": f"GET /api/fleets/{{name}} cold (records read), {n}",
         "value": m["cold_ms"], "unit": "ms", "baseline": None, "ratio": None,
         "goal": f"summary body {m['summary_bytes']:,} bytes"},
        {"bench": "bigfleet", "case": f"GET /api/fleets/{{name}} warm (snapshot), {n}",
         "value": m["warm_ms"], "unit": "ms", "baseline": m["cold_ms"],
         "ratio": m["warm_ms"] / m["cold_ms"] if m["cold_ms"] else None, "goal": "< cold"},
        {"bench": "bigfleet", "case": f"coordinator CPU, {DASHBOARDS} dashboards polling 1/s, {n}",
         "value": m["cpu_dashboards"], "unit": "CPU s/s", "baseline": m["cpu_idle"],
         "ratio": cpu_ratio, "goal": "baseline: the same process idle"},
        {"bench": "bigfleet", "case": f"pause ack+quiet, {n} over {PROCESSES} processes",
         "value": m["ack_ms"], "unit": "ms", "baseline": m["raw_ms"], "ratio": ratio,
         "goal": "<= 2x raw PUBLISH delivery (3x at least)"},
        {"bench": "bigfleet", "case": f"Redis commands/s per replica, {n}",
         "value": m["cmds_idle"], "unit": "cmd/s", "baseline": None, "ratio": None,
         "goal": "<= 1.5 at poll_interval=1s"},
        {"bench": "bigfleet", "case": f"the same, {DASHBOARDS} dashboards open, {n}",
         "value": m["cmds_dashboards"], "unit": "cmd/s", "baseline": m["cmds_idle"],
         "ratio": m["cmds_dashboards"] / m["cmds_idle"] if m["cmds_idle"] else None,
         "goal": "<= 1.5 at poll_interval=1s"},
    ]


async def _bench(url: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    admin = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        for size in SIZES:
            t0 = time.monotonic()
            m = await _size(url, admin, size)
            print(f"  {size}: started in {m['start_s']:.1f}s (all live {m['live_wait_s']:.1f}s "
                  f"later; {m['live']} live, {m['control_down']} control down when measured), GET cold {m['cold_ms']:.1f} ms / "
                  f"warm {m['warm_ms']:.1f} ms, CPU {m['cpu_dashboards']:.3f} s/s "
                  f"({m['cpu_idle']:.3f} idle, {m['polls']} polls), ack {m['ack_ms']:.1f} ms / raw "
                  f"{m['raw_ms']:.1f} ms, {m['cmds_idle']:.2f} cmd/s per replica "
                  f"({m['cmds_dashboards']:.2f} with dashboards); {time.monotonic() - t0:.0f}s",
                  file=sys.stderr, flush=True)
            rows.extend(_rows(m))
    finally:
        await admin.aclose()
    return rows


def run() -> list[dict[str, Any]]:
    with LocalRedis(extra_args=["--maxclients", "16000"]) as server:
        return asyncio.run(_bench(server.url))


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
