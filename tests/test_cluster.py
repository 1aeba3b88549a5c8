"""Real ``fleetgate-replica`` processes and the CLI on a Redis Cluster (issue 12, scenario 4).

The cluster (``tests.topology``): three primaries and three replicas, a failover in about 2 to
3 s. The fleet lives in the slot of ``{NAME}``; killing that slot's primary must leave nothing
behind: the sharded subscriptions (``PUBSUB SHARDNUMSUB`` on the new primary counts every
replica again), the polls and heartbeats, the change script and the work stream all recover.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from coordinator.fleet.fleet import Fleet
from coordinator.web.api import create_app
from replica.contract import Keys, now_utc
from replica.link.connect import connect, topology
from tests.apikit import ADMIN, auth, client_for, json_headers, make_settings
from tests.hakit import cli, logs, status_json, until_following, until_pools
from tests.procs import base_env, enqueue, replica_processes, wait_done
from tests.topology import Cluster, Node, redis_cluster_fixture  # noqa: F401 (the fixture)

REPLICAS = 3
ITEMS = 150


def shard_subscribers(node: Node, channel: str) -> int:
    with node.client() as c:
        reply = c.execute_command("PUBSUB", "SHARDNUMSUB", channel)
    return int(reply[1])


async def until_shard_subscribers(node: Node, channel: str, count: int, timeout: float = 30.0) -> None:
    """Poll ``PUBSUB SHARDNUMSUB`` (other processes subscribe: no event here)."""
    seen = -1
    try:
        async with asyncio.timeout(timeout):
            while True:
                seen = await asyncio.to_thread(shard_subscribers, node, channel)
                if seen == count:
                    return
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"{node} counts {seen} subscribers of {channel}, not {count}") from None


@pytest.mark.slow
async def test_killing_the_fleets_primary_leaves_subscriptions_polls_scripts_and_work_recovered(
    redis_cluster: Cluster, fleet_name: str, tmp_path: Path
) -> None:
    url = redis_cluster.url
    keys = Keys(fleet_name)
    redis = connect(url, decode_responses=True, socket_timeout=2, socket_connect_timeout=1)
    assert topology(redis) == "cluster"
    env = base_env(url, fleet_name, workers=2, demo_item_seconds=0.05, claim_idle=5)
    try:
        async with replica_processes(REPLICAS, env, tmp_path, prefix="clu") as procs, \
                httpx.AsyncClient(timeout=10) as http:
            try:
                ids = [rp.id for rp in procs]
                old = redis_cluster.primary_for(keys.state)
                await until_shard_subscribers(old, keys.control, REPLICAS)
                await enqueue(redis, fleet_name, ITEMS)
                await wait_done(redis, fleet_name, 10, timeout=60)

                await asyncio.to_thread(redis_cluster.wait_in_sync)
                killed_at = now_utc()
                old.kill()
                new = await asyncio.to_thread(redis_cluster.wait_for_failover, old, keys.state)
                assert new is not old

                # subscriptions: made again on the new primary, sharded
                await until_shard_subscribers(new, keys.control, REPLICAS)
                # polls and heartbeats: every record written again on the new primary
                version = (await Fleet(redis, fleet_name).state()).version
                await until_following(redis, fleet_name, ids, version, since=killed_at)

                # the change script (SPUBLISH) and the acks (SPUBLISH, SSUBSCRIBE) through it
                paused = await cli("pause", "--reason", "after the failover", "--wait",
                                   url=url, fleet=fleet_name)
                assert paused.returncode == 0, paused.stderr
                await until_pools(http, procs,
                                  lambda s: "fleet" in s["holds"] and s["in_flight"] == 0)
                state = await Fleet(redis, fleet_name).state()
                assert state.paused and state.version == version + 1
                status = status_json(await cli("status", "--json", url=url, fleet=fleet_name))
                assert status["state"]["paused"] is True
                assert status["summary"]["replicas"] == REPLICAS

                # the work stream: everything gets done once the fleet runs again
                resumed = await cli("resume", "--wait", url=url, fleet=fleet_name)
                assert resumed.returncode == 0, resumed.stderr
                await until_pools(http, procs, lambda s: "fleet" not in s["holds"])
                await wait_done(redis, fleet_name, ITEMS, timeout=90)
            except BaseException:
                print(logs(procs))
                raise
    finally:
        await redis.aclose()


async def test_the_api_pauses_lists_and_measures_fleets_in_several_slots_of_a_cluster(
    redis_cluster: Cluster,
) -> None:
    names = [f"api{i}" for i in range(4)]  # their slots spread over the primaries
    app = create_app(make_settings(redis_cluster.url, names[0]))
    async with client_for(app) as api:
        health = await api.get("/healthz")
        assert health.status_code == 200 and health.json()["redis"] == "up"
        for name in names:
            paused = await api.post(f"/api/fleets/{name}/pause", headers=json_headers(),
                                    json={"reason": "cluster"})
            assert paused.status_code == 200, paused.text
        listed = await api.get("/api/fleets", headers=auth(ADMIN))
        assert listed.status_code == 200, listed.text
        assert set(names) <= {f["fleet"] for f in listed.json()["fleets"]}
        for name in names:
            state = (await api.get(f"/api/fleets/{name}", headers=auth(ADMIN))).json()["state"]
            assert state["paused"] is True and state["version"] == 1
            with redis_cluster.primary_for(Keys(name).state).client() as node:
                assert node.hget(Keys(name).state, "paused") == "1"
        metrics = await api.get("/metrics")
        assert metrics.status_code == 200 and 'fleet="api3"' in metrics.text
