"""replica.control.outbox: a change sent at once on the link when it can be, the slow way
otherwise."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis.asyncio as aioredis
from cpkit import Replicas

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica import PausablePool
from replica.contract import Ack, Keys
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.link.redisio import Link


class _Shown:
    """What the record reads from its controller."""

    fleet_held = False
    resume_at: datetime | None = None
    subscribed = True


async def _noop(item: Any) -> None:
    return None


async def test_a_change_goes_straight_onto_the_link_once_open_and_connected(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    client = aioredis.Redis.from_url(redis_url)
    record = ReplicaRecord(PausablePool(_noop), _Shown(), keys, "pod-1",
                           heartbeat_interval=10.0, poll_interval=1.0, host="h")
    link = Link(client)
    outbox = Outbox(link, record, fleet_name)
    try:
        outbox.acks.add("applied")
        outbox.kick()  # not open yet (before start): the sync loop's job
        assert outbox.wake.is_set() and outbox.acks == {"applied"} and outbox.heartbeats == 0
        outbox.open = True
        outbox.wake.clear()
        outbox.kick()  # open, but the link is not connected
        assert outbox.wake.is_set() and outbox.acks == {"applied"}
        await link.call([("PING",)])
        outbox.wake.clear()
        async with redis.pubsub() as pubsub:
            await pubsub.subscribe(keys.acks)
            assert (await pubsub.get_message(timeout=10))["type"] == "subscribe"
            outbox.kick()  # at once, no round trip
            assert not outbox.wake.is_set() and outbox.acks == set()
            assert not outbox.record_dirty and outbox.heartbeats == 1
            message = await pubsub.get_message(timeout=10)
            assert message is not None and message["type"] == "message"
        ack = Ack.from_json(message["data"])
        assert ack.replica == "pod-1" and ack.event == "applied"
        written = await redis.hgetall(keys.replica("pod-1"))  # written before the ack
        assert written["applied_version"] == "0" and written["control"] == "connected"
    finally:
        await link.close()
        await client.aclose()


async def test_without_client_reply_the_acks_go_the_slow_way_and_still_arrive(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    await admin.execute_command(
        "ACL", "SETUSER", "noskip", "on", ">pw", "~*", "&*", "+@all", "-client|reply"
    )
    url = private_redis.url.replace("redis://", "redis://noskip:pw@")
    try:
        async with Replicas(url, fleet_name, 2) as replicas, \
                Fleet(admin, fleet_name) as fleet:
            for _ in range(2):
                state = await fleet.pause("no skip", by="t")
                assert (await fleet.wait(state.version, timeout=10)).ok
                state = await fleet.resume(by="t")
                assert (await fleet.wait(state.version, timeout=10)).ok
            assert all(c.stats().write_failures == 0 for c in replicas.controllers)
    finally:
        await admin.aclose()
