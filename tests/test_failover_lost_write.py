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
import contextlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from coordinator.demo.localredis import free_port
from coordinator.fleet.durability import NotConfirmed
from coordinator.fleet.fleet import Fleet
from replica.contract import now_utc
from replica.link.connect import connect
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
from tests.fleetkit import FLEETGATE, ROOT, run_cli
from tests.hakit import logs, pools, until_following, until_pools
from tests.procs import AUTH, TOKEN, Processes, ReplicaProcess, enqueue, replica_processes
from tests.topology import SERVICE, SentinelGroup, sentinel_group_fixture  # noqa: F401

FLEET = "orders"
"""The fleet of the ACL case: its replica user is ``replica-orders``."""
PASSWORDS = {
    "REDIS_ADMIN_PASSWORD": "lw-admin-password-000001",
    "REDIS_COORDINATOR_PASSWORD": "lw-coordinator-password-01",
    "REDIS_REPLICA_PASSWORD_ORDERS": "lw-replica-orders-password-1",
}
RENDER_ACL = ROOT / "deploy" / "k8s" / "base" / "redis" / "render-acl.sh"
USERS_ACL = ROOT / "deploy" / "k8s" / "base" / "redis" / "users.acl"
REPLICAS = 3
ITEMS = 2000
"""More than the replicas can work through before the pause (0.05 s each, 2 workers each)."""


def load_deploy_users(group: SentinelGroup, rendered: Path) -> None:
    """deploy/'s users rendered for FLEET, loaded on both servers (the replica becomes the
    master) with ``ACL SETUSER``; ``default`` stays open (the fixture's probes, the sentinels,
    the replication link)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **PASSWORDS}
    done = subprocess.run(["sh", str(RENDER_ACL), str(USERS_ACL), str(rendered), FLEET], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    for server in group.servers:
        with server.client() as admin:
            for line in rendered.read_text(encoding="utf-8").splitlines():
                _, name, *rules = line.split()
                if name != "default":
                    admin.execute_command("ACL", "SETUSER", name, *rules)


async def lost_write_drill(
    sentinel_group: SentinelGroup, fleet_name: str, tmp_path: Path, *, replica_url: str,
    url: str, restorers: Callable[[list[str]], set[str]], cli_env: dict[str, str] | None = None,
) -> list[ReplicaProcess]:
    """The scenario, the replicas on ``replica_url`` and the operator (``Fleet``, the CLI) on
    ``url``; ``restorers(ids)`` are who may have written the ``restore``. Returns the replicas
    (stopped), for their logs."""
    history = tmp_path / "history"
    history.mkdir()
    env = chaos_env(replica_url, fleet_name, history, workers=2, demo_item_seconds=0.05,
                    claim_idle=5)
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
                    fleet=fleet_name, env=cli_env)
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
                assert restores and all(e["by"] in restorers(ids) for e in restores), restores
                assert max(int(e["version"]) for e in restores) == final

                # nothing started at a paused version, on any replica
                held_versions = set(range(version, final + 1))
                early = starts(history)
                assert early and not any(e["version"] in held_versions or e["held"] for e in early)

                # a resume is confirmed (or needs no replica) once no sentinel is still on a
                # failover: until then a primary without replicas cannot be told from one
                # being replaced, and the CLI says so (exit 4, the resume made all the same).
                # A sentinel may also try a failover of the new primary itself, having seen it
                # down for a second (just thawed, under load): exit 4 then says so, and that
                # sentinel's log shows the attempt
                await asyncio.to_thread(sentinel_group.wait_settled)
                resumed = await asyncio.to_thread(run_cli, "resume", "--redis-url", url,
                                                  fleet=fleet_name, env=cli_env)
                tried = f"+try-failover master {SERVICE} {new.host} {new.port}"
                assert resumed.returncode == 0 or (
                    resumed.returncode == 4 and "a failover may be replacing it" in
                    resumed.stderr and any(tried in s.log() for s in
                                           sentinel_group.sentinels)), (
                    resumed.stderr + "\n" + await asyncio.to_thread(sentinel_group.describe))
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
    return procs


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_pause_the_failover_lost_is_restored_by_the_replicas_that_applied_it(
    sentinel_group: SentinelGroup, fleet_name: str, tmp_path: Path
) -> None:
    url = sentinel_group.url
    procs = await lost_write_drill(sentinel_group, fleet_name, tmp_path, replica_url=url,
                                   url=url, restorers=set)
    assert any("restored the state hash" in rp.log() for rp in procs)

    # the new primary has no replica (the old one is dead): a change is confirmed without a
    # WAIT only when every sentinel names it the master; one that does not answer (a fourth,
    # dead, address in the URL) makes it wait, and the NotConfirmed says which one and why
    dead = free_port()
    hosts = ",".join(f"{h}:{p}" for h, p in sentinel_group.sentinel_addresses)
    with_dead = url.replace(hosts, f"{hosts},127.0.0.1:{dead}")
    assert with_dead != url
    redis = connect(with_dead, decode_responses=True, socket_timeout=2, socket_connect_timeout=1)
    try:
        with pytest.raises(NotConfirmed) as caught:
            await Fleet(redis, fleet_name, min_replicas_timeout=0.2).pause("doubt", by="tester")
    finally:
        await redis.aclose()
    assert caught.value.acked == 0
    assert f"sentinel 127.0.0.1:{dead} did not say it is the master" in str(caught.value), (
        f"{caught.value}\n{await asyncio.to_thread(sentinel_group.describe, 40)}")


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_under_the_deploy_acl_the_coordinators_watcher_restores_the_lost_pause_instead(
    sentinel_group: SentinelGroup, tmp_path: Path, processes: Processes
) -> None:
    """The replicas as ``replica-orders`` (they may not write the state: their restore is
    refused), the CLI and a real ``fleetgate serve`` as ``coordinator``, whose watcher puts the
    pause back from the replicas' records on the new primary."""
    await asyncio.to_thread(load_deploy_users, sentinel_group, tmp_path / "users.acl")
    url = sentinel_group.sentinel_url(user="coordinator",
                                      password=PASSWORDS["REDIS_COORDINATOR_PASSWORD"])
    replica_url = sentinel_group.sentinel_url(
        user=f"replica-{FLEET}", password=PASSWORDS["REDIS_REPLICA_PASSWORD_ORDERS"])
    port = free_port()
    serve_env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    serve_env.update({"FLEETGATE_REDIS_URL": url, "FLEETGATE_FLEET": FLEET,
                      "FLEETGATE_ADMIN_TOKEN": TOKEN, "FLEETGATE_RESTORE_INTERVAL": "0.5"})
    with (tmp_path / "serve.log").open("w") as log:
        serve = processes.start([FLEETGATE, "serve", "--port", str(port)], stdout=log,
                                stderr=log, env=serve_env, cwd=ROOT)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as api:

        async def serving() -> bool | None:
            with contextlib.suppress(httpx.TransportError):
                return True if (await api.get("/api/fleet", headers=AUTH)).status_code == 200 \
                    else None
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            return None

        async with asyncio.timeout(60):
            while True:
                if await serving():
                    break
                await asyncio.sleep(0.1)
    procs = await lost_write_drill(
        sentinel_group, FLEET, tmp_path, replica_url=replica_url, url=url,
        restorers=lambda ids: {"coordinator"}, cli_env={"FLEETGATE_REDIS_URL": url})
    assert any("cannot restore the state hash" in rp.log() for rp in procs)
    assert "restored" in (tmp_path / "serve.log").read_text()
