"""The lost write (issue 12, scenario 2 of section 3): a pause every replica applied, which the
failover then loses, is put back by the replicas.

On a Sentinel group (``tests.topology``) with real ``fleetgate-replica`` processes working a
stream: the Redis replica that will be promoted is frozen (SIGSTOP) and its replication link
filled, so the pause stays in the primary's memory (``tests.failoverkit.starve_replicas``);
``fleetgate pause`` then reports it not confirmed (exit 4: ``WAIT`` got no replica); every
fleetgate replica applies it (their records on the old primary say so); the primary is killed,
the frozen node thawed and promoted without the pause. The fleet must end up paused again at a
version not lower than the pause's, restored (``restore`` in the audit stream of the new
primary, which holds no trace of the pause itself), and no item may have started at a paused
version (the chaos handler writes each start with the version its replica had applied).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from coordinator.fleet.fleet import Fleet
from replica.contract import now_utc
from replica.control.connect import connect
from tests.failoverkit import (
    all_applied,
    audit_on,
    chaos_env,
    ends,
    repl_offset,
    starts,
    starve_replicas,
    state_on,
    unsent,
    until,
)
from tests.fleetkit import run_cli
from tests.hakit import logs, pools, until_following, until_pools
from tests.procs import enqueue, replica_processes
from tests.topology import SentinelGroup, sentinel_group_fixture  # noqa: F401 (the fixture)

REPLICAS = 3
ITEMS = 2000
"""More than the replicas can work through before the pause (0.05 s each, 2 workers each)."""


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_pause_the_failover_lost_is_restored_by_the_replicas_that_applied_it(
    sentinel_group: SentinelGroup, fleet_name: str, tmp_path: Path
) -> None:
    url = sentinel_group.url
    history = tmp_path / "history"
    history.mkdir()
    env = chaos_env(url, fleet_name, history, workers=2, demo_item_seconds=0.05, claim_idle=5)
    redis = connect(url, decode_responses=True, socket_timeout=2, socket_connect_timeout=1)
    try:
        async with replica_processes(REPLICAS, env, tmp_path, prefix="lw") as procs, \
                httpx.AsyncClient(timeout=10) as http:
            try:
                ids = [rp.id for rp in procs]
                fleet = Fleet(redis, fleet_name)
                # the state the promoted node will hold: running, at a version of its own
                await fleet.pause("before the drill", by="tester")
                running = await fleet.resume(by="tester")
                await until_following(redis, fleet_name, ids, running.version, since=now_utc())
                await enqueue(redis, fleet_name, ITEMS)
                await until("items to be worked", lambda: True if len(ends(history)) >= 20 else None)

                await asyncio.to_thread(sentinel_group.wait_in_sync)
                old = sentinel_group.master()
                (frozen,) = sentinel_group.replica_nodes()
                frozen.freeze()
                await asyncio.to_thread(starve_replicas, old)

                before_pause = repl_offset(old)
                paused = await asyncio.to_thread(
                    run_cli, "pause", "--reason", "lost write drill", "--redis-url", url,
                    fleet=fleet_name)
                assert paused.returncode == 4, paused.stdout + paused.stderr
                assert "not confirmed by a replica" in paused.stderr
                version = int(state_on(old, fleet_name)["version"])
                assert version > running.version
                # every fleetgate replica applied it (its record on the old primary), idle
                await until("every replica's record on the old primary to apply the pause",
                            lambda: all_applied(old, fleet_name, ids, version))
                await until_pools(http, procs,
                                  lambda s: "fleet" in s["holds"] and s["in_flight"] == 0)
                # the pause and everything after it are still behind the junk: never sent
                assert unsent(old) > repl_offset(old) - before_pause

                killed_at = now_utc()
                old.kill()
                frozen.thaw()
                new = await asyncio.to_thread(sentinel_group.wait_for_failover, old)
                assert new is frozen

                def restored() -> dict[str, str] | None:
                    state = state_on(new, fleet_name)
                    ok = state.get("paused") == "1" and int(state.get("version", 0)) >= version
                    return state if ok else None

                state = await until("the pause restored on the new primary", restored)
                final = int(state["version"])
                after = await until_following(redis, fleet_name, ids, final, since=killed_at)
                assert all(r.fleet_held and r.paused for r in after.values())
                assert all("fleet" in s["holds"] for s in await pools(http, procs))

                audit = audit_on(new, fleet_name)
                assert not any(e.get("version") == str(version) and e.get("action") != "restore"
                               for e in audit), f"the pause reached the promoted node: {audit}"
                restores = [e for e in audit if e.get("action") == "restore"]
                assert restores and all(e["by"] in ids for e in restores)
                assert max(int(e["version"]) for e in restores) == final

                # nothing started at a paused version, on any replica
                held_versions = set(range(version, final + 1))
                early = starts(history)
                assert early and not any(e["version"] in held_versions or e["held"] for e in early)

                resumed = await asyncio.to_thread(run_cli, "resume", "--redis-url", url,
                                                  fleet=fleet_name)
                assert resumed.returncode == 0, resumed.stderr
                await until("items to start again after the resume",
                            lambda: True if any(e["version"] > final for e in starts(history))
                            else None)
                assert not any(e["version"] in held_versions or e["held"]
                               for e in starts(history))
            except BaseException:
                print(logs(procs))
                raise
    finally:
        await redis.aclose()
