"""Real ``fleetgate-replica`` processes and the CLI on a Sentinel group (issue 12, scenario 1).

The group (``tests.topology``): one master, one replica, three sentinels, a failover in about
2 to 3 s. The replicas and the CLI take the ``redis+sentinel://`` URL and nothing else; what
they show (``/pool``, their records on the new master, ``fleetgate status``) is the judge.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from coordinator.fleet.fleet import Fleet
from replica.contract import now_utc
from replica.link.connect import connect, topology
from tests.hakit import cli, logs, pools, status_json, until_following, until_pools
from tests.procs import base_env, done_counts, enqueue, replica_processes, wait_done
from tests.topology import SentinelGroup, sentinel_group_fixture  # noqa: F401 (the fixture)

REPLICAS = 3
ITEMS = 120


@pytest.mark.slow
async def test_a_pause_holds_through_a_killed_master_every_replica_follows_the_new_one_and_a_resume_works(
    sentinel_group: SentinelGroup, fleet_name: str, tmp_path: Path
) -> None:
    url = sentinel_group.url
    redis = connect(url, decode_responses=True, socket_timeout=2, socket_connect_timeout=1)
    assert topology(redis) == "sentinel"
    env = base_env(url, fleet_name, workers=2, demo_item_seconds=0.05, claim_idle=5)
    try:
        async with replica_processes(REPLICAS, env, tmp_path, prefix="sen") as procs, \
                httpx.AsyncClient(timeout=10) as http:
            try:
                ids = [rp.id for rp in procs]
                await enqueue(redis, fleet_name, ITEMS)
                await wait_done(redis, fleet_name, 10, timeout=60)

                paused = await cli("pause", "--reason", "failover drill", "--wait",
                                   url=url, fleet=fleet_name)
                assert paused.returncode == 0, paused.stderr
                version = (await Fleet(redis, fleet_name).state()).version
                await until_pools(http, procs,
                                  lambda s: "fleet" in s["holds"] and s["in_flight"] == 0)
                done_while_paused = len(await done_counts(redis, fleet_name))

                await asyncio.to_thread(sentinel_group.wait_in_sync)
                old = sentinel_group.master()
                killed_at = now_utc()
                old.kill()
                new = await asyncio.to_thread(sentinel_group.wait_for_failover, old)
                assert new is not old

                # every replica heartbeats to the new master, subscribed, at the pause's version
                after = await until_following(redis, fleet_name, ids, version, since=killed_at)
                assert all(r.fleet_held and r.paused for r in after.values())
                assert all("fleet" in s["holds"] for s in await pools(http, procs))
                state = await Fleet(redis, fleet_name).state()
                assert state.paused and state.version == version
                assert len(await done_counts(redis, fleet_name)) == done_while_paused

                status = status_json(await cli("status", "--json", url=url, fleet=fleet_name))
                assert status["state"]["paused"] is True
                assert status["state"]["version"] == version
                assert status["summary"]["replicas"] == REPLICAS

                resumed = await cli("resume", "--wait", url=url, fleet=fleet_name)
                assert resumed.returncode == 0, resumed.stderr
                await until_pools(http, procs, lambda s: "fleet" not in s["holds"])
                await wait_done(redis, fleet_name, ITEMS, timeout=90)
                assert (await Fleet(redis, fleet_name).state()).version == version + 1
            except BaseException:
                print(logs(procs))
                raise
    finally:
        await redis.aclose()


@pytest.mark.slow
async def test_the_cli_reads_and_changes_a_fleet_through_the_sentinels(
    sentinel_group: SentinelGroup, fleet_name: str
) -> None:
    url = sentinel_group.sentinel_url(query="socket_timeout=2&socket_connect_timeout=1")
    paused = await cli("pause", "--reason", "through sentinel", url=url, fleet=fleet_name)
    assert paused.returncode == 0, paused.stderr
    status = status_json(await cli("status", "--json", url=url, fleet=fleet_name))
    assert status["state"]["paused"] is True and status["state"]["reason"] == "through sentinel"
    with sentinel_group.master().client() as master:
        assert master.hget(f"fleetgate:{{{fleet_name}}}:state", "paused") == "1"
    resumed = await cli("resume", url=url, fleet=fleet_name)
    assert resumed.returncode == 0, resumed.stderr
    assert status_json(await cli("status", "--json", url=url, fleet=fleet_name))["state"]["paused"] is False
