"""The replicated topologies of ``tests.topology`` start, fail over and tear down cleanly."""

from __future__ import annotations

import os

from tests.topology import (  # noqa: F401 (the fixtures)
    Cluster,
    SentinelGroup,
    redis_cluster_fixture,
    sentinel_group_fixture,
)


def test_a_sentinel_group_fails_over_to_its_replica_when_the_master_is_killed(
    sentinel_group: SentinelGroup,
) -> None:
    old = sentinel_group.master()
    with old.client() as c:
        c.set("k", "v")
    sentinel_group.wait_in_sync()
    old.kill()
    new = sentinel_group.wait_for_failover(old)
    assert new is not old
    with new.client() as c:
        assert c.get("k") == "v"


def _replicas_seen(group: SentinelGroup) -> list[set[tuple[int, str, int]]]:
    """Each sentinel's view of the replicas: (port, role reported, master port)."""
    views = []
    for s in group.sentinels:
        with s.client() as c:
            answer = c.execute_command("SENTINEL", "REPLICAS", group.SERVICE)
        views.append({(int(r["port"]), r["role-reported"], int(r["master-port"]))
                      for r in answer})
    return views


def test_after_a_failover_the_group_is_in_sync_only_once_every_sentinel_sees_the_old_master_a_replica(
    sentinel_group: SentinelGroup,
) -> None:
    """A failover asked before every sentinel saw the old master turn replica is undone by a
    sentinel's own +convert-to-slave of the server it promotes, and aborted (CI saw it): so
    ``wait_in_sync`` waits for every sentinel's view, and two failovers back to back work."""
    for _ in range(2):
        sentinel_group.wait_in_sync()
        old = sentinel_group.master()
        with sentinel_group.sentinels[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", sentinel_group.SERVICE)
        new = sentinel_group.wait_for_failover(old)
        sentinel_group.wait_in_sync()
        assert _replicas_seen(sentinel_group) == [{(old.port, "slave", new.port)}] * 3


def test_a_cluster_fails_over_the_slot_of_a_killed_primary(redis_cluster: Cluster) -> None:
    key = "fleetgate:{orders}:state"
    old = redis_cluster.primary_for(key)
    replica = redis_cluster.replica_of(old)
    old.kill()
    assert redis_cluster.wait_for_failover(old, key) is replica


def test_a_topology_leaves_no_process_and_no_directory_behind() -> None:
    group = SentinelGroup().start()
    pids = [n.pid for n in group.all]
    group.stop()
    assert not group.dir.exists()
    for pid in pids:
        assert pid is not None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"process {pid} still runs")
