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
