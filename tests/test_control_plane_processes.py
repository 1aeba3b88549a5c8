"""The control plane across real OS processes: three processes of replicas, one Fleet."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from cpkit import until

from coordinator import Fleet
from tests.procs import Processes

SCRIPT = Path(__file__).with_name("cp_replica_proc.py")


async def start_process(
    processes: Processes, url: str, fleet: str, prefix: str, n: int, heartbeat: float = 10.0
) -> asyncio.subprocess.Process:
    proc = await processes.start_async(
        [sys.executable, str(SCRIPT), url, fleet, prefix, str(n), "1.0", str(heartbeat)],
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.strip() == b"READY", line
    return proc


async def stop_process(proc: asyncio.subprocess.Process) -> dict[str, int]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"STOP\n")
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    await asyncio.wait_for(proc.wait(), 30)
    result: dict[str, int] = json.loads(line)
    return result


@pytest.mark.slow
async def test_three_processes_of_replicas_pause_and_resume_together_through_fleet(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, processes: Processes
) -> None:
    fleet = Fleet(redis, fleet_name)
    procs: list[asyncio.subprocess.Process] = []
    try:
        procs = list(await asyncio.gather(*(
            start_process(processes, redis_url, fleet_name, f"proc{p}", 2, heartbeat=0.5)
            for p in range(3)
        )))
        assert len(await fleet.replicas(include_stale=False)) == 6
        for _ in range(2):
            paused = await fleet.pause("three processes", by="t")
            report = await fleet.wait(paused.version, timeout=30)
            assert report.ok, report.to_dict()
            assert len(report.replicas) == 6
            assert all(r.quiet_at is not None for r in report.replicas)
            infos = await fleet.replicas(include_stale=False)
            assert all(i.fleet_held and i.applied_version == paused.version for i in infos)
            resumed = await fleet.resume(by="t")
            report = await fleet.wait(resumed.version, timeout=30)
            assert report.ok, report.to_dict()
        # one process dies without a word: its replicas go stale, the rest carry on. A wait
        # cannot tell a dead replica from a frozen one that may still run items: the two are
        # unreachable stragglers, never dropped, and the four others get there.
        victim = procs.pop()
        victim.kill()
        await victim.wait()
        await until(lambda: _live_count(fleet, 4), timeout=30, what="two replicas to go stale")
        paused = await fleet.pause("two processes left", by="t")
        report = await fleet.wait(paused.version, timeout=5)
        assert not report.ok and report.excused == []
        assert {r.id: r.why for r in report.stragglers} == {
            "proc2-0": "unreachable", "proc2-1": "unreachable"}
        assert sum(r.reached for r in report.replicas) == 4
        resumed = await fleet.resume(by="t")
        report = await fleet.wait(resumed.version, timeout=5)
        assert sorted(r.id for r in report.stragglers) == ["proc2-0", "proc2-1"]
        assert sum(r.reached for r in report.replicas) == 4
        results = [await stop_process(p) for p in procs]
        procs = []
        assert all(r["processed"] > 0 for r in results)
        assert all(r["started_while_held"] == 0 for r in results)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


async def _live_count(fleet: Fleet, n: int) -> bool:
    return len(await fleet.replicas(include_stale=False)) == n
