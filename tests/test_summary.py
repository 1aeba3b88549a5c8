"""A fleet's summary (``coordinator.fleet.summary``) from records the real record code wrote:
replicas frozen (SIGSTOP) before and during a pause, one with an item that will not finish,
one held on its own while the fleet runs; and ``fleetgate status``'s 20 rows."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.summary import (
    ATTENTION_CAP,
    WHY_NOT_QUIET,
    WHY_PAUSED_WHILE_RUNNING,
    WHY_SLOW_ACK,
    WHY_STALE,
    WHY_UNACKNOWLEDGED,
    FleetSummary,
    summarize,
)
from coordinator.settings import CoordinatorSettings
from tests.clikit import run
from tests.fleetkit import ReplicaThread, environment, replicas, until, wait_until
from tests.procs import Processes

PROC = str(Path(__file__).with_name("cp_replica_proc.py"))


async def frozen_replica(
    processes: Processes, url: str, fleet: str, prefix: str, heartbeat: float
) -> asyncio.subprocess.Process:
    """A replica process (tests/cp_replica_proc.py) that is up, then stopped by SIGSTOP."""
    proc = await processes.start_async(
        [sys.executable, PROC, url, fleet, prefix, "1", "0.2", str(heartbeat)])
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.strip() == b"READY"
    proc.send_signal(signal.SIGSTOP)
    return proc


async def summary_of(fleet: Fleet) -> FleetSummary:
    return summarize(await fleet.status())


async def test_the_summary_names_the_stale_the_unacknowledged_and_the_not_quiet_replicas(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, processes: Processes
) -> None:
    fleet = Fleet(redis, fleet_name)
    # frozen before the pause: one whose heartbeat (0.5 s) goes stale, one (10 s) still live
    gone = await frozen_replica(processes, redis_url, fleet_name, "gone", 0.5)
    behind = await frozen_replica(processes, redis_url, fleet_name, "behind", 10.0)
    async with replicas(redis_url, fleet_name, 2) as kit:
        kit.put(0, {"hold": True})
        await asyncio.wait_for(kit.held.wait(), 10)
        await fleet.pause("drill", by="t")  # r2 gets quiet, r1 stays in flight

        async def settled() -> bool:
            counts = (await summary_of(fleet)).counts()
            return bool(counts["stale"] == 1 and counts["quiet"] == 1)
        await until(settled)
        s = await summary_of(fleet)
        counts = s.counts()
        assert (counts["replicas"], counts["live"], counts["unacknowledged"]) == (4, 3, 1)
        assert (counts["not_quiet"], counts["in_flight"], counts["paused_while_running"]) == (1, 1, 0)
        assert counts["effectively_paused"] is True
        why = {a.replica.id: list(a.why) for a in s.figures.attention}
        assert [a.replica.id for a in s.figures.attention][:3] == ["gone-0", "behind-0", "r1"]
        assert why["gone-0"] == [WHY_STALE]
        assert why["behind-0"] == [WHY_UNACKNOWLEDGED]
        assert why["r1"][0] == WHY_NOT_QUIET
        # r2 acknowledged within milliseconds: among the slowest, named, but not slow
        assert "r2" not in why
        assert s.figures.attention_total == 3
        assert {a["id"] for a in counts["slowest_acks"]} == {"r1", "r2"}
        assert all(a["ack_s"] < 1.0 for a in counts["slowest_acks"])
        # slow is measured against a bound (FLEETGATE_SLOW_ACK), never a rank: at 0 s, any
        # acknowledgement is slow
        strict = summarize(await fleet.status(), slow_ack_s=0.0)
        strict_why = {a.replica.id: list(a.why) for a in strict.figures.attention}
        assert strict_why["r2"] == [WHY_SLOW_ACK]
        body = s.to_dict()
        assert set(body) == {"fleet", "state", "summary", "attention", "attention_total"}
        assert body["attention"][0]["why"] == [WHY_STALE] and body["attention"][0]["id"] == "gone-0"
        kit.release()
    for proc in (gone, behind):
        proc.send_signal(signal.SIGCONT)


async def test_the_summary_names_a_replica_held_on_its_own_while_the_fleet_runs(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with replicas(redis_url, fleet_name, 3) as kit:
        kit.replicas[1].pool.hold("disk full")

        async def held() -> bool:
            return bool((await summary_of(fleet)).counts()["paused_while_running"] == 1)
        await until(held)
        s = await summary_of(fleet)
        assert [(a.replica.id, a.why) for a in s.figures.attention] == [
            ("r2", (WHY_PAUSED_WHILE_RUNNING,))]
        assert s.counts()["effectively_paused"] is False and s.figures.attention_total == 1


ROW = re.compile(r"^(r\d+) ", re.MULTILINE)


def test_status_prints_at_most_20_rows_problem_ones_first_and_every_row_with_all(
    redis_url: str, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    held = [f"r{i}" for i in range(4, 26)]  # 22 of 25 held on their own while the fleet runs
    thread = ReplicaThread(redis_url, fleet_name, 25, workers=1)
    with thread as kit, environment(FLEETGATE_REDIS_URL=redis_url, FLEETGATE_FLEET=fleet_name):
        for r in kit.replicas:
            if r.id in held:
                thread.call(lambda pool=r.pool: pool.hold("maintenance"))

        def recorded() -> bool:
            code, out, _ = run(capsys, "status", "--json")
            return code == 0 and json.loads(out)["summary"]["paused_while_running"] == len(held)
        wait_until(recorded)

        code, out, _ = run(capsys, "status")
        assert code == 0
        rows = ROW.findall(out)
        assert len(rows) == 20 and set(rows) <= set(held)
        assert "paused while the fleet runs" in out
        assert "20 of 25 replicas shown (22 need attention); --all for every row" in out

        code, out, _ = run(capsys, "status", "--all")
        assert code == 0 and sorted(ROW.findall(out)) == sorted(r.id for r in kit.replicas)

        body = json.loads(run(capsys, "status", "--json")[1])
        assert "replicas" not in body and len(body["attention"]) == ATTENTION_CAP
        assert body["attention_total"] == 22 and body["summary"]["replicas"] == 25

        body = json.loads(run(capsys, "status", "--json", "--all")[1])
        assert set(body) == {"fleet", "state", "replicas", "summary"}
        assert len(body["replicas"]) == 25


def test_a_healthy_fleets_quick_acknowledgements_need_no_attention_and_a_bound_says_what_slow_is(
    redis_url: str, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    thread = ReplicaThread(redis_url, fleet_name, 3, workers=1)
    with thread, environment(FLEETGATE_REDIS_URL=redis_url, FLEETGATE_FLEET=fleet_name):
        code, _, err = run(capsys, "pause", "--reason", "drill", "--wait")
        assert code == 0, err
        code, out, _ = run(capsys, "status")
        assert code == 0
        assert "slow acknowledgement" not in out and "need attention" not in out, out
        assert "slowest acknowledgement of v" in out  # still named, for information
        body = json.loads(run(capsys, "status", "--json")[1])
        assert body["attention"] == []
        with environment(FLEETGATE_SLOW_ACK="2s"):  # the bound is a setting (a duration)
            assert CoordinatorSettings().slow_ack == 2.0


def test_status_names_each_hold_of_the_fleet(
    redis_url: str, fleet_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def hold_twice() -> None:
        redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            fleet = Fleet(redis, fleet_name)
            await fleet.pause("db failover", by="alice", hold="db")
            await fleet.pause("deploy 4.2", by="bob", hold="deploy")
        finally:
            await redis.aclose()

    asyncio.run(hold_twice())
    with environment(FLEETGATE_REDIS_URL=redis_url, FLEETGATE_FLEET=fleet_name):
        code, out, _ = run(capsys, "status")
    assert code == 0 and "PAUSED" in out
    assert "hold db (active): 'db failover' by alice" in out
    assert "hold deploy (active): 'deploy 4.2' by bob" in out
    assert out.count("db failover' by alice") == 1  # each hold once
