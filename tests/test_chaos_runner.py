"""The chaos runner: its schedule, its handler, its command line, and short real runs that end
with the table and the last line and leave no process behind, whatever happens."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio as aioredis

from bench.chaos.__main__ import main as chaos_main
from bench.chaos.faults import (
    FAILOVER,
    KINDS,
    LOSSY_FAILOVER,
    PRIMARY_KILL,
    SENTINEL_KILL,
    SHARD_KILL,
    TAIL_S,
    _busy_key,
    draw_schedule,
    kinds_for,
)
from bench.chaos.handler import HISTORY_ENV, ToldToFail, handle
from bench.chaos.history import read_history, read_lines
from bench.chaos.settings import TOPOLOGIES, ChaosSettings, topology_of_seed
from replica.contract import Keys
from replica.service.handlers import HandlerContext, use_context
from tests.procs import Processes

REPO = Path(__file__).resolve().parents[1]
RUN_ENV = {**os.environ, "PYTHONPATH": str(REPO)}
LAST_LINE = re.compile(
    r"chaos: seed=\d+ duration=\d+s topology=(single|sentinel|cluster) faults=\d+ items=\d+ lost=\d+ "
    r"starts-after-apply=\d+ duplicates=\d+ \(explained \d+\) wait-lies=\d+: (ok|failed)"
)


def chaos_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench.chaos", *args]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def started_pids(history: list[dict[str, Any]]) -> set[int]:
    """Every replica and Redis process the run says it started."""
    pids = {int(e["pid"]) for e in history if e["ev"] == "spawn"}
    pids |= {int(e["pid"]) for e in history if e["ev"] == "start" and e.get("pid")}
    pids |= {int(e["pid"]) for e in history  # Redis, a Redis node or a sentinel started again
             if e["ev"] == "fault-end" and e.get("pid")}
    return pids


# ---------------------------------------------------------------------------- the schedule


def test_the_schedule_is_a_function_of_the_seed() -> None:
    assert draw_schedule(ChaosSettings(seed=5, duration=120)) == \
        draw_schedule(ChaosSettings(seed=5, duration=120))
    assert draw_schedule(ChaosSettings(seed=5, duration=120)) != \
        draw_schedule(ChaosSettings(seed=6, duration=120))


@pytest.mark.parametrize("seed", range(20))
def test_even_a_60_second_schedule_has_every_kind_of_fault(seed: int) -> None:
    schedule = draw_schedule(ChaosSettings(seed=seed, duration=60))
    assert {f.kind for f in schedule} == set(KINDS)


@pytest.mark.parametrize("seed", range(20))
def test_no_target_gets_two_faults_at_once_and_none_starts_in_the_last_seconds(
    seed: int,
) -> None:
    settings = ChaosSettings(seed=seed, duration=300)
    schedule = draw_schedule(settings)
    assert [f.id for f in schedule] == list(range(1, len(schedule) + 1))
    assert all(f.at < settings.duration - TAIL_S for f in schedule)
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for f in schedule:
        by_key[_busy_key(f.kind, f.target)].append((f.at, f.end))
    for spans in by_key.values():
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end


def test_freezes_outlive_the_heartbeat_and_some_outlive_the_claim_idle_time() -> None:
    settings = ChaosSettings(seed=1, duration=600)
    freezes = [f for f in draw_schedule(settings) if f.kind == "freeze"]
    assert all(f.duration > settings.heartbeat_interval for f in freezes)
    assert any(f.duration > settings.claim_idle for f in freezes)


# ---------------------------------------------------------------------------- the handler


@pytest.fixture
def handler_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    redis: aioredis.Redis) -> HandlerContext:
    monkeypatch.setenv(HISTORY_ENV, str(tmp_path))
    return HandlerContext(redis=redis, fleet="chaos", replica_id="chaos-9", keys=Keys("chaos"),
                          settings=SimpleNamespace(item_timeout=0.05, demo_item_seconds=0.0),
                          fleet_state=lambda: (3, False))


def lines(tmp_path: Path) -> list[dict[str, Any]]:
    (path,) = tmp_path.glob("replica-chaos-9-*.jsonl")
    return [{k: v for k, v in e.items() if k not in ("t", "pid")} for e in read_lines(path)]


async def test_the_chaos_handler_writes_each_start_with_the_fleet_state_and_each_end(
    handler_context: HandlerContext, tmp_path: Path
) -> None:
    with use_context(handler_context):
        await handle({"id": "i-1", "kind": "ok", "ms": 1})
    assert lines(tmp_path) == [
        {"ev": "item-start", "replica": "chaos-9", "item": "i-1", "kind": "ok", "version": 3,
         "held": False},
        {"ev": "item-end", "replica": "chaos-9", "item": "i-1", "outcome": "ok"},
    ]


async def test_an_item_told_to_fail_fails_and_its_end_says_so(
    handler_context: HandlerContext, tmp_path: Path
) -> None:
    with use_context(handler_context), pytest.raises(ToldToFail, match="i-2 was told to fail"):
        await handle({"id": "i-2", "kind": "fail"})
    assert lines(tmp_path)[-1] == {"ev": "item-end", "replica": "chaos-9", "item": "i-2",
                                   "outcome": "error"}


async def test_an_item_told_to_hang_runs_past_its_timeout_until_cut_off(
    handler_context: HandlerContext, tmp_path: Path
) -> None:
    with use_context(handler_context), pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):  # the replica's item_timeout
            await handle({"id": "i-3", "kind": "hang"})
    assert lines(tmp_path)[-1] == {"ev": "item-end", "replica": "chaos-9", "item": "i-3",
                                   "outcome": "cancelled"}


# ---------------------------------------------------------------------------- the command line


def test_help_offers_the_three_topologies_and_the_seeds_choice() -> None:
    done = subprocess.run(chaos_command("--help"), cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "not available" not in text
    for word in ("single (one Redis)", "sentinel (a Sentinel group", "cluster (three primaries",
                 "or seed"):
        assert word in text


def test_the_seed_chooses_each_topology_in_turn() -> None:
    assert [topology_of_seed(n) for n in range(6)] == [*TOPOLOGIES, *TOPOLOGIES]


@pytest.mark.parametrize(("topology", "own"), [("sentinel", SENTINEL_KILL),
                                               ("cluster", SHARD_KILL)])
@pytest.mark.parametrize("seed", range(10))
def test_a_60_second_replicated_schedule_meets_every_failover_and_no_single_server_fault(
    topology: str, own: str, seed: int
) -> None:
    schedule = draw_schedule(ChaosSettings(seed=seed, duration=60, topology=topology))
    kinds = {f.kind for f in schedule}
    assert kinds == set(kinds_for(ChaosSettings(seed=seed, duration=60, topology=topology)))
    assert {PRIMARY_KILL, FAILOVER, LOSSY_FAILOVER, own} <= kinds
    assert not kinds & {"redis-restart", "link"}


@pytest.mark.parametrize("args", [["--duration", "soon"], ["--seed", "-3"],
                                  ["--topology", "ring"], ["--replicas", "0"]])
def test_bad_usage_is_one_line_on_stderr_and_exit_2(args: list[str]) -> None:
    done = subprocess.run(chaos_command(*args), cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("chaos: ") and done.stderr.count("\n") == 1


def test_checking_a_history_that_never_finished_fails_and_a_missing_one_is_bad_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert chaos_main(["--check", str(tmp_path)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(": failed")
    assert chaos_main(["--check", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"chaos: no history at {tmp_path / 'nowhere'}\n"


# ---------------------------------------------------------------------------- real runs


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_short_run_prints_the_table_and_the_last_line_and_leaves_no_process(
    tmp_path: Path, processes: Processes
) -> None:
    proc = await processes.start_async(
        chaos_command("--seed", "3", "--duration", "12", "--replicas", "2", "--rate", "20",
                      "--workdir", str(tmp_path)),
        env=RUN_ENV, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 280)
    out = stdout.decode().strip().splitlines()
    assert out[0].startswith("chaos: seed=3 (from --seed), duration 12s, 2 replicas")
    assert any(line.startswith("| rule 7: no unexpected exit") for line in out)
    assert LAST_LINE.fullmatch(out[-1]), out[-1]
    assert proc.returncode == (0 if out[-1].endswith(": ok") else 1), stderr.decode()
    history = read_history(tmp_path / "history")
    assert history[-1]["ev"] == "run-end" and history[-1]["phase"] == "done"
    assert {e["kind"] for e in history if e["ev"] == "fault-start"} <= set(KINDS)
    pids = started_pids(history)
    assert len(pids) >= 3 and all(gone(pid) for pid in pids)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_run_stopped_by_sigterm_stops_every_process_it_started(
    tmp_path: Path, processes: Processes
) -> None:
    proc = await processes.start_async(
        chaos_command("--seed", "4", "--duration", "120", "--replicas", "2",
                      "--workdir", str(tmp_path)),
        env=RUN_ENV, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
    )
    runner_history = tmp_path / "history" / "runner.jsonl"
    async with asyncio.timeout(120):  # another process's file: read until the chaos began
        while not (runner_history.exists()
                   and any(e["ev"] == "schedule" for e in read_lines(runner_history))):
            assert proc.returncode is None
            await asyncio.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 1
    assert stdout.decode().strip().splitlines()[-1].endswith(": failed")
    history = read_history(tmp_path / "history")
    assert history[-1]["ev"] == "run-end" and history[-1]["phase"] == "chaos"
    pids = started_pids(history)
    assert len(pids) >= 3 and all(gone(pid) for pid in pids)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("topology", ["sentinel", "cluster"])
async def test_a_short_replicated_run_meets_its_failovers_and_leaves_no_process(
    topology: str, tmp_path: Path, processes: Processes
) -> None:
    proc = await processes.start_async(
        chaos_command("--seed", "5", "--duration", "25", "--replicas", "2", "--rate", "20",
                      "--topology", topology, "--workdir", str(tmp_path)),
        env=RUN_ENV, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 280)
    out = stdout.decode().strip().splitlines()
    assert out[0].endswith(f"topology {topology}"), out[0]
    assert LAST_LINE.fullmatch(out[-1]) and f"topology={topology}" in out[-1], out[-1]
    history = read_history(tmp_path / "history")
    assert history[-1]["ev"] == "run-end" and history[-1]["phase"] == "done", stderr.decode()
    ended = [e for e in history if e["ev"] == "fault-end"
             and e["kind"] in (PRIMARY_KILL, FAILOVER, LOSSY_FAILOVER)]
    assert ended and all("new" in e and "error" not in e for e in ended), ended
    pids = started_pids(history)
    assert len(pids) >= 5 and all(gone(pid) for pid in pids)
