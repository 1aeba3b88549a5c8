"""Notifications (``coordinator.notify``) on a Sentinel group across a failover, and on a Redis
Cluster: the consumer reads the fleet's audit stream through the one connection factory."""

from __future__ import annotations

import asyncio

from coordinator.fleet.fleet import Fleet
from coordinator.notify.consumer import Notifier
from replica.link.connect import connect
from tests.notifykit import Hook, quick
from tests.topology import (  # noqa: F401 (the fixtures)
    Cluster,
    SentinelGroup,
    redis_cluster_fixture,
    sentinel_group_fixture,
)


async def test_a_notifier_on_sentinel_delivers_before_and_after_the_master_is_killed(
    sentinel_group: SentinelGroup, fleet_name: str
) -> None:
    client = connect(sentinel_group.url, decode_responses=True, socket_timeout=2,
                     socket_connect_timeout=1)
    fleet = Fleet(client, fleet_name)
    try:
        async with Hook() as hook, Notifier(client, fleet_name, quick(hook.url)):
            await fleet.pause("before the failover", by="alice")
            await hook.wait_for(1, accepted=True)
            await asyncio.to_thread(sentinel_group.wait_in_sync)
            old = sentinel_group.master()
            old.kill()
            await asyncio.to_thread(sentinel_group.wait_for_failover, old)
            await fleet.resume(by="alice")
            await hook.wait_for(2, accepted=True)
        events = [(r.json()["version"], r.json()["reason"]) for r in hook.accepted]
        assert events[0] == (1, "before the failover") and events[1][0] == 2  # the resume
    finally:
        await client.aclose()


async def test_a_notifier_on_a_cluster_delivers_the_changes_of_its_fleet(
    redis_cluster: Cluster, fleet_name: str
) -> None:
    client = connect(redis_cluster.url, decode_responses=True)
    fleet = Fleet(client, fleet_name, min_replicas_ack=0)
    try:
        async with Hook() as hook, Notifier(client, fleet_name, quick(hook.url)):
            await fleet.pause("on a cluster", by="alice")
            await fleet.resume(by="alice")
            await hook.wait_for(2, accepted=True)
        assert [r.json()["version"] for r in hook.accepted] == [1, 2]
    finally:
        await client.aclose()
