"""A replica cannot stop its own fleet from being paused (issue 19, D.11), on a private
redis-server loaded with the deployment's rendered ACL (the fixtures of tests/test_deploy_acl.py).

The replica user may add and remove members of its fleet's replicas set (ZADD, ZREM) and write
its record hash, and nothing else on those keys: no DEL or HSET that would turn the set into a
hash. And whoever retypes that key (an admin by hand, an older ACL), the change script reports
the key, skips it and makes the pause."""

from __future__ import annotations

import logging

import pytest
import redis

from coordinator.fleet.fleet import Fleet
from replica.contract import Keys
from tests import test_deploy_acl as acl
from tests.test_deploy_acl import Server, _denied, key

# the private server of tests/test_deploy_acl.py, one for this module
server = acl.server
admin = acl.admin
coordinator = acl.coordinator
replica = acl.replica
fleet = acl.fleet


def test_a_replica_cannot_delete_or_retype_its_fleets_replicas_set(
    replica: redis.Redis, coordinator: redis.Redis, fleet: str
) -> None:
    replicas = key(fleet, "replicas")
    assert replica.zadd(replicas, {"pod-a": 1_700_000_000}) == 1
    _denied(lambda: replica.delete(replicas))
    _denied(lambda: replica.unlink(replicas))
    _denied(lambda: replica.hset(replicas, "pod-a", "x"))
    _denied(lambda: replica.pexpire(replicas, 10))
    assert coordinator.type(replicas) == "zset"
    assert replica.zrem(replicas, "pod-a") == 1


def test_a_replica_cannot_write_a_sorted_set_where_its_record_belongs(
    replica: redis.Redis, fleet: str
) -> None:
    record = key(fleet, "replica:pod-a")
    _denied(lambda: replica.zadd(record, {"x": 1}))
    assert replica.hset(record, "state", "running") == 1
    assert replica.pexpire(record, 30_000) is True
    assert replica.delete(record) == 1


async def test_a_pause_is_made_and_the_replicas_key_reported_when_it_is_not_a_sorted_set(
    server: Server, admin: redis.Redis, fleet: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.fleet.changes")
    replicas = Keys(fleet).replicas
    # what the old ACL let a replica do: DEL, then HSET makes the set a hash
    admin.hset(replicas, "pod-a", "x")
    client = server.async_client("coordinator")
    try:
        gate = Fleet(client, fleet, min_replicas_ack=0)
        state = await gate.pause("db maintenance", by="ops")
        assert state.paused
        assert (await gate.state()).paused
        audit = await client.xrevrange(Keys(fleet).audit, count=1)
        assert audit[0][1]["action"] == "pause"
        assert any("is a hash, not a sorted set" in r.getMessage() for r in caplog.records)
        resumed = await gate.resume(by="ops")
        assert not resumed.paused
    finally:
        await client.aclose()
    assert admin.type(replicas) == "hash"  # reported and left alone, never deleted
