"""replica.control.channel: following the control channel, losing it, getting it back, pinging it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from cpkit import Replicas, until
from redis.exceptions import ResponseError

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica.control.channel import ControlChannel


class Follower:
    """A channel and what it reported."""

    def __init__(self, client: aioredis.Redis, channel: str, **kw: Any) -> None:
        self.messages: list[Any] = []
        self.subscribed: list[bool] = []
        self.lost: list[BaseException] = []
        self.channel = ControlChannel(
            client, channel, on_message=self.messages.append,
            on_subscribed=self.subscribed.append, on_lost=self.lost.append, **kw,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ControlChannel]:
        task = asyncio.create_task(self.channel.run())
        try:
            yield self.channel
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_messages_arrive_after_the_confirmed_subscription(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    follower = Follower(redis, f"{fleet_name}:control")
    async with follower.running() as channel:
        await until(lambda: channel.subscribed, timeout=5)
        assert follower.subscribed == [False] and channel.generation == 1
        await redis.publish(f"{fleet_name}:control", "one")
        await redis.publish(f"{fleet_name}:control", "two")
        await until(lambda: len(follower.messages) == 2, timeout=5)
        assert follower.messages == [b"one", b"two"] and not follower.lost


async def test_a_killed_subscription_is_reported_and_comes_back(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url)
    follower = Follower(admin, f"{fleet_name}:control")
    try:
        async with follower.running() as channel:
            await until(lambda: channel.subscribed, timeout=5)
            assert await admin.client_kill_filter(_type="pubsub") == 1
            await until(lambda: channel.generation == 2 and channel.subscribed, timeout=10)
            assert len(follower.lost) == 1 and follower.subscribed == [False, True]
            assert channel.reconnects == 1
            await admin.publish(f"{fleet_name}:control", "after")
            await until(lambda: follower.messages == [b"after"], timeout=5)
    finally:
        await admin.aclose()


async def test_a_refused_subscription_is_retried_slowly(
    no_subscribe_url: str, fleet_name: str
) -> None:
    client = aioredis.Redis.from_url(no_subscribe_url)
    follower = Follower(client, f"{fleet_name}:control", reconnect_cap=0.05)
    try:
        async with follower.running() as channel:
            await until(lambda: bool(follower.lost), timeout=5)
            assert isinstance(follower.lost[0], ResponseError)
            await asyncio.sleep(0.5)  # a refusal waits 2.5 s at least, not reconnect_cap
            assert len(follower.lost) == 1 and not channel.subscribed
    finally:
        await client.aclose()


async def test_an_idle_subscription_is_pinged_and_stays(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    follower = Follower(redis, f"{fleet_name}:control", ping_interval=0.05)
    async with follower.running() as channel:
        await until(lambda: channel.subscribed, timeout=5)
        first = channel.next_check()
        assert first is not None
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # the caller's loop, as the controller runs it
            channel.check()
            await asyncio.sleep(0.01)
        later = channel.next_check()
        assert later is not None and later > first  # pongs came back and count as activity
        assert channel.subscribed and channel.generation == 1 and not follower.lost


async def test_a_fault_in_handling_a_message_resubscribes_instead_of_going_deaf(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    async with Replicas(redis_url, fleet_name, 1) as replicas:
        (controller,) = replicas.controllers
        handle = controller._channel._on_message
        seen: list[Any] = []

        def faulty(data: Any) -> None:
            seen.append(data)
            if len(seen) == 1:
                raise RuntimeError("a bug of ours")
            handle(data)

        controller._channel._on_message = faulty  # what the channel hands messages to
        fleet = Fleet(redis, fleet_name)
        state = await fleet.pause("first", by="t")  # its push fails; the resubscribe re-reads
        assert (await fleet.wait(state.version, timeout=10)).ok
        await until(lambda: controller.stats().reconnects >= 1 and controller.connected)
        pushes = controller.stats().pushes
        state = await fleet.resume(by="t")  # and pushes work again
        assert (await fleet.wait(state.version, timeout=10)).ok
        assert replicas.pools[0].holds == {}
        await until(lambda: controller.stats().pushes == pushes + 1)
        assert len(seen) == 2

async def test_an_idle_subscription_is_pinged_and_one_that_stops_answering_is_replaced(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        async with Replicas(private_redis.url, fleet_name, 2, poll_interval=0.1,
                            pubsub_ping_interval=0.2, io_timeout=0.3) as replicas:
            controllers = replicas.controllers
            t0 = time.monotonic()
            await until(lambda: time.monotonic() - t0 > 1.0)  # five ping intervals, idle
            assert all(c.connected and c.stats().reconnects == 0 for c in controllers)
            # the server stops answering for a while: pings go unanswered, subscriptions are
            # dropped and made again once it answers
            await admin.execute_command("CLIENT", "PAUSE", "1500", "ALL")
            await until(lambda: all(c.stats().reconnects >= 1 for c in controllers),
                        timeout=30, what="every subscription to be replaced")
            await until(lambda: all(c.connected for c in controllers), timeout=30)
            state = await Fleet(admin, fleet_name).pause("after the stall", by="t")
            await asyncio.wait_for(
                asyncio.gather(*(p.wait_for(True) for p in replicas.pools)), 10
            )
            assert all(c.applied_version == state.version for c in controllers)
    finally:
        await admin.aclose()


async def test_a_wake_ends_a_long_reconnect_backoff_once_redis_answers_again(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url)
    follower = Follower(admin, f"{fleet_name}:control", reconnect_cap=600.0)
    try:
        async with follower.running() as channel:
            await until(lambda: channel.subscribed, timeout=5)
            private_redis.kill()
            await until(lambda: len(follower.lost) == 1, timeout=10)
            channel._backoff.base = 300.0  # an outage long enough to grow it: minutes apart
            await until(lambda: len(follower.lost) == 2, timeout=10)
            private_redis.start()
            channel.wake()  # what the sync loop does after a round trip that got through
            await until(lambda: channel.subscribed and channel.generation == 2, timeout=10)
            await admin.publish(f"{fleet_name}:control", "back")
            await until(lambda: follower.messages == [b"back"], timeout=5)
    finally:
        await admin.aclose()
