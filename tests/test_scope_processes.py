"""Holds for part of a fleet and canary resumes, with real ``fleetgate-replica`` processes and
the ``fleetgate`` CLI (issue 22 B and C): a selected hold holds only the replicas its selector
matches while ``--wait`` waits only for them; a dry run writes nothing; a canary resume
promotes when its canaries stay quiet and puts the hold back when they fail."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.models import ReplicaInfo
from replica.contract import Keys
from replica.demo import dependency_key
from tests.fleetkit import cli_logged, run_cli, until
from tests.procs import ReplicaProcess, base_env, enqueue, kill_all, start_healthy

EU, US = "zone=eu-west-1a", "zone=us-east-1a"
async def _start(started: list[ReplicaProcess], redis_url: str, fleet: str, tmp_path: Path,
                 labels: Mapping[str, str], **settings: Any) -> None:
    """Start a replica per id with its labels (each killed by ``started``'s fixture)."""
    env = base_env(redis_url, fleet, **settings)
    await start_healthy(started, {rid: {**env, "FLEETGATE_LABELS": lab}
                                  for rid, lab in labels.items()}, tmp_path)


@pytest.fixture
async def started() -> AsyncIterator[list[ReplicaProcess]]:
    procs: list[ReplicaProcess] = []
    try:
        yield procs
    finally:
        kill_all(procs)


async def _replicas(redis: aioredis.Redis, fleet: str) -> dict[str, ReplicaInfo]:
    return {r.id: r for r in (await Fleet(redis, fleet).status()).replicas}


@pytest.mark.timeout(300)
async def test_a_selected_hold_holds_only_its_replicas_while_wait_waits_only_for_them(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, tmp_path: Path,
    started: list[ReplicaProcess],
) -> None:
    await _start(started, redis_url, fleet_name, tmp_path,
                 {"eu-1": EU + ",version=1.4.2", "eu-2": EU, "us-1": US})

    async def labelled() -> bool:
        return all(r.labels for r in (await _replicas(redis, fleet_name)).values()) and \
            len(await _replicas(redis, fleet_name)) == 3
    await until(labelled)
    await enqueue(redis, fleet_name, 5000)

    done = await cli_logged(redis_url, fleet_name, "pause", "--hold", "zone-a", "--select", EU,
                      "--reason", "az failover", "--wait", "--timeout", "30s")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("added hold zone-a; ") or lines[0].startswith("paused")
    assert lines[0].endswith("select 'zone=eu-west-1a' matches 2 of 3 live replicas"), lines[0]
    waited = "\n".join(lines[1:])
    assert "eu-1" in waited and "eu-2" in waited and "us-1" not in waited

    replicas = await _replicas(redis, fleet_name)
    for rid in ("eu-1", "eu-2"):
        assert replicas[rid].holds == {"fleet:zone-a": "az failover"} and replicas[rid].quiet
    assert replicas["us-1"].holds == {}
    assert replicas["eu-1"].labels == {"zone": "eu-west-1a", "version": "1.4.2"}
    processed = replicas["us-1"].processed

    async def us_works() -> bool:  # the replica the selector does not match keeps working
        return (await _replicas(redis, fleet_name))["us-1"].processed > processed + 5
    await until(us_works)

    status = await cli_logged(redis_url, fleet_name, "status", "--all")
    assert "select 'zone=eu-west-1a', holds 2 of 3 replicas" in status.stdout
    body = json.loads((await cli_logged(redis_url, fleet_name, "status", "--json")).stdout)
    assert body["state"]["holds"]["zone-a"]["holding"] == 2
    assert body["state"]["holds"]["zone-a"]["select"] == "zone=eu-west-1a"

    # a selector that matches no live replica: said in the first line, and --wait fails
    none = await cli_logged(redis_url, fleet_name, "pause", "--hold", "zone-c", "--select",
                      "zone=ap-south-1a", "--reason", "x", "--wait")
    assert none.returncode == 3
    assert none.stdout.splitlines()[0].endswith(
        "select 'zone=ap-south-1a' matches no live replica (of 3)")
    assert none.stderr.strip().startswith("fleetgate: --wait: select 'zone=ap-south-1a' "
                                          "matches no live replica")

    # a dry run says what a resume would do and writes nothing
    version = await redis.hget(Keys(fleet_name).state, "version")
    audit = await redis.xlen(Keys(fleet_name).audit)
    dry = await cli_logged(redis_url, fleet_name, "resume", "--hold", "zone-a", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("dry run: hold released; fleet ")
    assert "would stay paused by zone-c" in dry.stdout
    assert "2 released (eu-1, eu-2)" in dry.stdout
    assert await redis.hget(Keys(fleet_name).state, "version") == version
    assert await redis.xlen(Keys(fleet_name).audit) == audit

    resumed = await cli_logged(redis_url, fleet_name, "resume", "--hold", "zone-a", "--wait")
    assert resumed.returncode == 0, resumed.stderr
    assert all(not r.holds for r in (await _replicas(redis, fleet_name)).values())


@pytest.mark.timeout(300)
async def test_a_canary_resume_promotes_when_its_canaries_stay_quiet_and_rolls_back_when_not(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, tmp_path: Path,
    started: list[ReplicaProcess],
) -> None:
    await _start(started, redis_url, fleet_name, tmp_path, {f"r-{i}": EU for i in range(4)},
                 handler="replica.demo:flaky", max_retries=0, retry_backoff=0)

    async def live() -> bool:
        return len(await _replicas(redis, fleet_name)) == 4
    await until(live)
    await enqueue(redis, fleet_name, 2000)
    paused = await cli_logged(redis_url, fleet_name, "pause", "--hold", "db", "-r", "pg", "--wait")
    assert paused.returncode == 0, paused.stderr

    # quiet canaries: promoted after the soak
    ok = await cli_logged(redis_url, fleet_name, "resume", "--hold", "db", "--canary", "25%",
                    "--soak", "2s", "--wait")
    assert ok.returncode == 0, ok.stderr
    first = ok.stdout.splitlines()[0]
    assert first.startswith("canary resume of hold db: released on 1 of 4 replicas (r-")
    assert "canaries stayed quiet for 2s: promoted, hold db released" in ok.stdout
    actions = [e["action"] for e in json.loads(
        (await cli_logged(redis_url, fleet_name, "history", "--json")).stdout)["events"]]
    assert actions[:2] == ["canary_promoted", "canary_started"]

    # the dependency goes down: the canaries fail their runs, and the hold goes back on them
    paused = await cli_logged(redis_url, fleet_name, "pause", "--hold", "db", "-r", "pg", "--wait")
    assert paused.returncode == 0, paused.stderr
    await redis.hset(dependency_key_of(fleet_name), "down", "1")
    await enqueue(redis, fleet_name, 2000)  # work for the canaries to fail at
    bad = await cli_logged(redis_url, fleet_name, "resume", "--hold", "db", "--canary", "2",
                     "--soak", "30s", "--wait")
    assert bad.returncode == 8, (bad.stdout, bad.stderr)
    canaries = bad.stdout.splitlines()[0].split("(")[1].split(")")[0].split(", ")
    assert len(canaries) == 2
    assert "rolled back" in bad.stdout
    assert "failed runs" in bad.stderr or "circuit breaker opened" in bad.stderr, bad.stderr
    state = json.loads((await cli_logged(redis_url, fleet_name, "status", "--json")).stdout)
    assert state["state"]["holds"]["db"]["canaries"] == []
    actions = [e["action"] for e in json.loads(
        (await cli_logged(redis_url, fleet_name, "history", "--json")).stdout)["events"]]
    assert actions[:2] == ["canary_rolled_back", "canary_started"]

    async def held_again() -> bool:
        return all(r.holds.get("fleet:db") for r in (await _replicas(redis, fleet_name)).values())
    await until(held_again)


def dependency_key_of(fleet: str) -> str:
    """The demo dependency's key of ``fleet`` (``replica.demo.dependency_key``)."""
    class _Ctx:
        keys = Keys(fleet)
    return dependency_key(_Ctx())  # type: ignore[arg-type]


@pytest.mark.timeout(300)
async def test_a_dry_run_for_all_fleets_previews_each_fleet_and_writes_nothing(
    private_redis: LocalRedis,
) -> None:
    """``pause --all-fleets --dry-run`` (issue 22 point 9): each fleet's preview, one paused
    and one running, and neither fleet's version nor audit trail moves."""
    url = private_redis.url
    redis = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        await Fleet(redis, "held").pause("pg upgrade", by="t", hold="db")
        running = Fleet(redis, "running")
        await running.pause("warm-up", by="t")
        await running.resume(by="t")
        keys = {name: Keys(name) for name in ("held", "running")}

        async def written() -> dict[str, tuple[Any, int]]:
            return {name: (await redis.hget(k.state, "version"), await redis.xlen(k.audit))
                    for name, k in keys.items()}
        before = await written()
        for extra in ((), ("--json",)):
            done = await asyncio.to_thread(
                run_cli, "pause", "--hold", "maint", "--reason", "window", "--all-fleets",
                "--dry-run", *extra, redis_url=url)
            assert done.returncode == 0, done.stderr
            if extra:
                rows = {row["fleet"]: row for row in json.loads(done.stdout)}
                assert set(rows) == {"held", "running"}
                assert all(row["ok"] and row["dry_run"]["dry_run"] for row in rows.values())
                assert list(rows["held"]["dry_run"]["holds_after"]) == ["db", "maint"]
                assert rows["running"]["dry_run"]["paused_before"] is False
                assert rows["running"]["dry_run"]["paused_after"] is True
                continue
            text = done.stdout
            assert "fleet held:\n" in text and "fleet running:\n" in text, text
            # each fleet its own section, in name order
            held, running_part = text.split("fleet running:\n")
            assert "fleet held would stay paused by db, maint" in held, text
            assert "fleet running would be paused by maint" in running_part, text
            assert "nothing was" in held and "nothing was" in running_part
        assert await written() == before  # no version, no audit entry, on either fleet
        assert (await Fleet(redis, "running").status()).state.paused is False
    finally:
        await redis.aclose()
