"""On a Redis Cluster a replica adds its fleet to the registry of fleets (issue 19, C.9).

The registry (``fleetgate:fleets``) has no hash tag: its slot is its own, most often served by
another primary than the fleet's ``{NAME}`` slot, which the controller's link reaches. The
redirect (redis-py's ``MovedError``, whose text holds no ``MOVED``) was taken for an ACL's
refusal, and the fleet was never registered.
"""

from __future__ import annotations

import asyncio

from cpkit import until

from replica import FleetController, PausablePool
from replica.contract import Keys
from replica.contract.keys import FLEETS_KEY
from replica.link.connect import connect
from replica.pool.holds import CONTROL_PLANE_SOURCE
from tests.topology import Cluster, shared_cluster_fixture  # noqa: F401 (the fixture)


async def _noop(item: object) -> None:
    return None


def fleet_elsewhere(cluster: Cluster, prefix: str) -> str:
    """A fleet name whose slot lives on another primary than the registry's."""
    registry = cluster.primary_for(FLEETS_KEY)
    for i in range(64):
        name = f"{prefix}-{i}"
        if cluster.primary_for(Keys(name).state) is not registry:
            return name
    raise AssertionError("no fleet name away from the registry's primary")


async def test_a_replica_on_a_cluster_registers_a_fleet_whose_slot_is_on_another_primary_than_the_registry(
    shared_cluster: Cluster, fleet_name: str
) -> None:
    fleet = await asyncio.to_thread(fleet_elsewhere, shared_cluster, fleet_name)
    client = connect(shared_cluster.url, decode_responses=True)
    pool = PausablePool(_noop, workers=1)
    controller = FleetController(pool, client, fleet, "pod-reg", poll_interval=0.1,
                                 heartbeat_interval=0.2)
    try:
        await pool.start()
        await controller.start()

        async def registered() -> bool:
            return await client.zscore(FLEETS_KEY, fleet) is not None

        await until(registered, what=f"{fleet} in the registry")
        assert CONTROL_PLANE_SOURCE not in pool.holds
        assert controller.control_error is None
    finally:
        await controller.stop()
        await pool.stop(timeout=2.0)
        await client.aclose()
