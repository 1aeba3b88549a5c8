"""The backlog limit under the deployment's Redis ACL (issue 21, points 6 and 7), on the private
redis-server of tests/test_deploy_acl.py loaded with the rendered ACL: the coordinator user sets,
reads and clears a fleet's limit and enqueues through the limit's script (``EVALSHA``, ``SCRIPT
LOAD``, and inside it ``TYPE``, ``HMGET``, ``EXISTS``, ``XINFO GROUPS``, ``XLEN``, ``XRANGE``,
``XADD``: all already its commands on ``fleetgate:*``); a replica can neither write nor read the
limit, nor run the script."""

from __future__ import annotations

import pytest
import redis

from coordinator.fleet.fleet import Fleet
from replica.contract import ITEM_FIELD, WORK_GROUP, Keys
from replica.contract.scripts import ENQUEUE_LUA, SET_LIMITS_LUA
from replica.errors import BacklogFull
from tests import test_deploy_acl as acl
from tests.test_deploy_acl import FLEET, Server, _denied, key

# the private server of tests/test_deploy_acl.py, one for this module
server = acl.server
admin = acl.admin
coordinator = acl.coordinator
replica = acl.replica
fleet = acl.fleet


async def test_the_coordinator_sets_the_limit_and_enqueues_within_it(
    server: Server, fleet: str
) -> None:
    client = server.async_client("coordinator")
    try:
        gate = Fleet(client, fleet, min_replicas_ack=0)
        await gate.set_limit(3, by="ops")
        assert len(await gate.enqueue(["a", "b", "c"])) == 3  # SCRIPT LOAD, then EVALSHA
        with pytest.raises(BacklogFull):
            await gate.enqueue(["d"])
        assert (await gate.limit()).limit is not None
        assert (await gate.clear_limit(by="ops")).changed
        assert len(await gate.enqueue(["d"])) == 1
    finally:
        await client.aclose()


def test_a_replica_can_neither_write_nor_read_its_fleets_limit(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    limits = key(fleet, "limits")
    assert limits == Keys(FLEET).limits
    coordinator.hset(limits, mapping={"max_backlog": "10", "when_full": "reject"})
    _denied(lambda: replica.hset(limits, "max_backlog", "1000000"))
    _denied(lambda: replica.delete(limits))
    _denied(lambda: replica.unlink(limits))
    _denied(lambda: replica.hgetall(limits))
    _denied(lambda: replica.set(limits, "x"))
    _denied(lambda: replica.expire(limits, 1))
    assert coordinator.hgetall(limits) == {"max_backlog": "10", "when_full": "reject"}


@pytest.mark.parametrize("lua", [ENQUEUE_LUA, SET_LIMITS_LUA], ids=["enqueue", "set_limits"])
def test_a_replica_may_run_neither_limit_script(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str, lua: str
) -> None:
    keys = [key(fleet, "work"), key(fleet, "limits"), key(fleet, "audit")]
    args = [WORK_GROUP, ITEM_FIELD, '"x"']
    _denied(lambda: replica.register_script(lua)(keys=keys[:2], args=args))
    assert coordinator.exists(key(fleet, "work"), key(fleet, "limits")) == 0
