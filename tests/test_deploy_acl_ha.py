"""The deploy ACL on replicated topologies (issue 12, scenario 5 of section 3).

``render-acl.sh`` renders the sentinels' template (``sentinel-users.acl``: no fleet) and the
Redis servers' users of a replicated topology (``sentinel``, ``replication``: only when their
passwords are given). Then the rendered users run for real, loaded the way deploy/README.md
says a managed or self-run Redis takes them (``ACL SETUSER`` lines):

* on a Sentinel group (``tests.topology``): the Redis servers take ``users.acl``, the sentinels
  ``sentinel-users.acl``; the sentinels log in to the servers as ``sentinel``, the Redis replica
  to its master as ``replication``; the real ``Fleet`` (as ``coordinator``, its change confirmed
  by the replica through ``ROLE`` and ``WAIT``) and real controllers (as ``replica-<FLEET>``)
  reach the master through the sentinels as ``fleetgate``; the master is killed, the sentinels
  promote the replica with no more than the ``sentinel`` user's rights, and the fleet is
  resumed through the new master;
* on a Cluster: every node takes ``users.acl``, the replicas log in as ``replication``; the
  real ``Fleet`` and controllers discover the slots and use sharded pub/sub as their users; the
  primary of the fleet's slot is killed and the fleet is resumed through the new one.

Every node's ``ACL LOG`` is empty at the end: nothing any of these users sent was refused. The
fixtures' own ``default`` user stays open (their probes use it); that ``default`` is off in the
rendered file is tested in ``tests/test_deploy_acl.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from coordinator.fleet.fleet import Fleet
from replica import FleetController, PausablePool
from replica.link.connect import connect
from tests.topology import (  # noqa: F401 (fixtures)
    Cluster,
    Node,
    SentinelGroup,
    redis_cluster_fixture,
    sentinel_group_fixture,
)

REDIS_DIR = Path(__file__).resolve().parent.parent / "deploy" / "k8s" / "base" / "redis"
RENDER_ACL = REDIS_DIR / "render-acl.sh"
USERS = REDIS_DIR / "users.acl"
SENTINEL_USERS = REDIS_DIR / "sentinel-users.acl"

FLEET = "orders"
PASSWORDS = {
    "REDIS_ADMIN_PASSWORD": "ha-admin-password-0001",
    "REDIS_COORDINATOR_PASSWORD": "ha-coordinator-password-01",
    "REDIS_REPLICA_PASSWORD_ORDERS": "ha-replica-orders-password-1",
    "REDIS_SENTINEL_PASSWORD": "ha-sentinel-client-password1",
    "REDIS_SENTINEL_PEER_PASSWORD": "ha-sentinel-peer-password-01",
    "REDIS_REPLICATION_PASSWORD": "ha-replication-password-001",
}
FLOW_TIMEOUT_S = 60.0


def render(template: Path, out: Path, *fleets: str, **passwords: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **passwords}
    return subprocess.run(["sh", str(RENDER_ACL), str(template), str(out), *fleets], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def users_of(path: Path) -> list[str]:
    return [line.split()[1] for line in path.read_text(encoding="utf-8").splitlines()]


# ---------------------------------------------------------------------------- rendering


def test_the_sentinels_template_renders_with_no_fleet(tmp_path: Path) -> None:
    out = tmp_path / "sentinel.acl"
    done = render(SENTINEL_USERS, out, **PASSWORDS)
    assert done.returncode == 0, done.stderr
    assert users_of(out) == ["default", "admin", "sentinel", "fleetgate"]
    text = out.read_text(encoding="utf-8")
    assert not [p for p in PASSWORDS.values() if p in text]


def test_the_sentinels_template_refuses_a_fleet_and_a_missing_client_password(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sentinel.acl"
    named = render(SENTINEL_USERS, out, FLEET, **PASSWORDS)
    assert named.returncode != 0 and "name no fleet" in named.stderr
    without = dict(PASSWORDS)
    del without["REDIS_SENTINEL_PASSWORD"]
    missing = render(SENTINEL_USERS, out, **without)
    assert missing.returncode != 0 and "REDIS_SENTINEL_PASSWORD is empty or unset" in missing.stderr
    assert not out.exists()


def test_the_servers_replicated_topology_users_come_only_with_their_passwords(
    tmp_path: Path,
) -> None:
    out = tmp_path / "users.acl"
    base = {k: v for k, v in PASSWORDS.items() if "SENTINEL" not in k and "REPLICATION" not in k}
    plain = render(USERS, out, FLEET, **base)
    assert plain.returncode == 0, plain.stderr
    assert users_of(out) == ["default", "admin", "coordinator", "replica-orders"]
    assert "REDIS_REPLICATION_PASSWORD is unset" in plain.stderr
    full = render(USERS, out, FLEET, **PASSWORDS)
    assert full.returncode == 0, full.stderr
    assert users_of(out) == ["default", "admin", "coordinator", "replica-orders", "sentinel",
                             "replication"]


@pytest.mark.parametrize("variable", ["REDIS_SENTINEL_PEER_PASSWORD", "REDIS_REPLICATION_PASSWORD"])
@pytest.mark.parametrize(("value", "complaint"), [
    ("REPLACE_ME_a_password_0001", "placeholder"),
    ("short-one", "shorter than 16"),
    ("ha-admin-password-0001", "same password"),
])
def test_a_replicated_topology_password_is_held_to_the_same_rules(
    tmp_path: Path, variable: str, value: str, complaint: str
) -> None:
    done = render(USERS, tmp_path / "users.acl", FLEET, **{**PASSWORDS, variable: value})
    assert done.returncode != 0
    assert complaint in done.stderr


# ---------------------------------------------------------------------------- real topologies


def load_users(node: Node, rendered: Path) -> None:
    """``ACL SETUSER`` each rendered user but ``default`` (the recipe of deploy/README.md; Redis
    7 joins a selector's words back together)."""
    with node.client() as admin:
        for line in rendered.read_text(encoding="utf-8").splitlines():
            _, name, *rules = line.split()
            if name != "default":
                admin.execute_command("ACL", "SETUSER", name, *rules)


def acl_log(node: Node) -> list[Any]:
    with node.client() as admin:
        entries: list[Any] = admin.execute_command("ACL", "LOG")
    return entries


def users_connected(node: Node) -> set[str]:
    with node.client() as admin:
        clients: list[dict[str, Any]] = admin.client_list()
    return {c["user"] for c in clients}


def until(what: str, probe: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)


async def until_async(what: str, probe: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + FLOW_TIMEOUT_S
    while not await probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {FLOW_TIMEOUT_S}s: {what}")
        await asyncio.sleep(0.05)


def replicate_as_the_replication_user(nodes: Sequence[Node]) -> None:
    """Every node's replica link logs in as ``replication``: set it, then drop the links (and
    whatever else logged in as ``default``) so that they log in again."""
    for node in nodes:
        with node.client() as admin:
            admin.config_set("masteruser", "replication")
            admin.config_set("masterauth", PASSWORDS["REDIS_REPLICATION_PASSWORD"])
    for node in nodes:
        with node.client() as admin, contextlib.suppress(Exception):
            admin.execute_command("CLIENT", "KILL", "USER", "default", "SKIPME", "yes")


@contextlib.asynccontextmanager
async def controllers(url: str, n: int = 2) -> AsyncIterator[list[FleetController]]:
    """``n`` real controllers of FLEET (idle pools) on clients of ``url``."""
    async with contextlib.AsyncExitStack() as stack:
        found = []
        for i in range(n):
            client = connect(url, decode_responses=True, socket_timeout=2,
                             socket_connect_timeout=1)
            stack.push_async_callback(client.aclose)

            async def handle(item: Any) -> None:
                await asyncio.sleep(0)

            pool = PausablePool(handle, workers=1, name=f"ha{i}", shutdown_grace_period_s=2.0)
            await stack.enter_async_context(pool)
            controller = FleetController(pool, client, FLEET, f"ha{i}", poll_interval=0.2,
                                         heartbeat_interval=0.5, host="testhost")
            await stack.enter_async_context(controller)
            found.append(controller)
        yield found


async def pause_then_resume_after(
    coordinator_url: str, replica_url: str, fail_over: Callable[[], None], wait_count: Callable[[], int]
) -> None:
    """Pause (confirmed by a Redis replica: WAIT ran) with every controller quiet, fail over,
    then resume with every controller running again."""
    client = connect(coordinator_url, decode_responses=True, socket_timeout=5,
                     socket_connect_timeout=1)
    try:
        async with Fleet(client, FLEET, wait_poll_interval=0.2) as fleet, \
                controllers(replica_url) as members:
            paused = await fleet.pause("ha acl", by="tester")  # NotConfirmed would raise
            assert (await fleet.wait(paused.version, timeout=FLOW_TIMEOUT_S)).ok
            assert wait_count() >= 1
            await asyncio.to_thread(fail_over)

            async def resumed() -> bool:
                try:
                    state = await fleet.resume(by="tester")
                except Exception:  # the old connections die with the old primary: try again
                    return False
                return not state.paused

            await until_async("a resume through the new primary", resumed)
            state = await fleet.state()

            async def following() -> bool:
                return all(m.applied_version == state.version for m in members)

            await until_async("every controller to follow the resume", following)
            assert (await fleet.wait(state.version, timeout=FLOW_TIMEOUT_S)).ok
    finally:
        await client.aclose()


def waits_on(node: Node) -> int:
    with node.client() as admin:
        stats = admin.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


@pytest.mark.slow
async def test_the_deploy_users_run_a_fleet_through_a_sentinel_failover(
    sentinel_group: SentinelGroup, tmp_path: Path
) -> None:
    servers_acl, sentinels_acl = tmp_path / "users.acl", tmp_path / "sentinel.acl"
    assert render(USERS, servers_acl, FLEET, **PASSWORDS).returncode == 0
    assert render(SENTINEL_USERS, sentinels_acl, **PASSWORDS).returncode == 0
    master = sentinel_group.master()
    peer = PASSWORDS["REDIS_SENTINEL_PEER_PASSWORD"]
    for server in sentinel_group.servers:
        load_users(server, servers_acl)
    for sentinel in sentinel_group.sentinels:
        load_users(sentinel, sentinels_acl)
        with sentinel.client() as admin:
            service = sentinel_group.SERVICE
            admin.execute_command("SENTINEL", "SET", service, "auth-user", "sentinel")
            admin.execute_command("SENTINEL", "SET", service, "auth-pass", peer)
            admin.execute_command("SENTINEL", "CONFIG", "SET", "sentinel-user", "sentinel")
            admin.execute_command("SENTINEL", "CONFIG", "SET", "sentinel-pass", peer)
    replicate_as_the_replication_user(sentinel_group.servers)
    for sentinel in sentinel_group.sentinels:
        with sentinel.client() as admin, contextlib.suppress(Exception):
            admin.execute_command("CLIENT", "KILL", "USER", "default", "SKIPME", "yes")
    until("the sentinels and the replica to log in to the master as their users",
          lambda: {"sentinel", "replication"} <= users_connected(master))
    until("the sentinels to log in to each other as sentinel",
          lambda: all("sentinel" in users_connected(s) for s in sentinel_group.sentinels))
    await asyncio.to_thread(sentinel_group.wait_in_sync)

    query = ("sentinel_username=fleetgate&sentinel_password="
             + PASSWORDS["REDIS_SENTINEL_PASSWORD"])
    coordinator_url = sentinel_group.sentinel_url(
        user="coordinator", password=PASSWORDS["REDIS_COORDINATOR_PASSWORD"], query=query)
    replica_url = sentinel_group.sentinel_url(
        user=f"replica-{FLEET}", password=PASSWORDS["REDIS_REPLICA_PASSWORD_ORDERS"], query=query)

    def fail_over() -> None:
        master.kill()
        sentinel_group.wait_for_failover(master)

    await pause_then_resume_after(coordinator_url, replica_url, fail_over,
                                  lambda: waits_on(master))
    live = [n for n in (*sentinel_group.servers, *sentinel_group.sentinels) if n.running]
    assert {repr(n): acl_log(n) for n in live} == {repr(n): [] for n in live}


@pytest.mark.slow
async def test_the_deploy_users_run_a_fleet_through_a_cluster_failover(
    redis_cluster: Cluster, tmp_path: Path
) -> None:
    rendered = tmp_path / "users.acl"
    assert render(USERS, rendered, FLEET, **PASSWORDS).returncode == 0
    for node in redis_cluster.nodes:
        load_users(node, rendered)
    replicate_as_the_replication_user(redis_cluster.nodes)
    state_key = f"fleetgate:{{{FLEET}}}:state"
    primary = redis_cluster.primary_for(state_key)
    until("the replica of the fleet's slot to log in to its primary as replication",
          lambda: "replication" in users_connected(primary))
    await asyncio.to_thread(redis_cluster.wait_in_sync)

    seeds = ",".join(f"{n.host}:{n.port}" for n in redis_cluster.nodes)
    coordinator_url = (f"redis+cluster://coordinator:{PASSWORDS['REDIS_COORDINATOR_PASSWORD']}"
                       f"@{seeds}")
    replica_url = (f"redis+cluster://replica-{FLEET}:{PASSWORDS['REDIS_REPLICA_PASSWORD_ORDERS']}"
                   f"@{seeds}")

    def fail_over() -> None:
        primary.kill()
        redis_cluster.wait_for_failover(primary, state_key)

    await pause_then_resume_after(coordinator_url, replica_url, fail_over,
                                  lambda: waits_on(primary))
    live = [n for n in redis_cluster.nodes if n.running]
    assert {repr(n): acl_log(n) for n in live} == {repr(n): [] for n in live}
