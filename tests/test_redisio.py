"""replica.link.redisio: the raw RESP writer, Link, and the cancellation and backoff helpers."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, ResponseError

from coordinator.demo.localredis import LocalRedis
from replica.link.redisio import (
    Backoff,
    Link,
    as_mapping,
    bounded,
    cancel_bounded,
    pack,
    uncancelled,
)


def test_pack_writes_what_redis_py_writes() -> None:
    command: tuple[Any, ...] = ("HSET", "k", "f", b"\x00bytes", "n", 42, "x", 1.5, "é", "ü")
    ours = pack(command)
    theirs = b"".join(Connection().pack_command(*command))
    assert ours == theirs


def test_an_hgetall_reply_reads_as_a_mapping_either_way() -> None:
    assert as_mapping([b"a", b"1", b"b", b"2"]) == {b"a": b"1", b"b": b"2"}
    assert as_mapping({b"a": b"1"}) == {b"a": b"1"}
    assert as_mapping(None) == {}


async def test_a_link_skips_the_replies_of_quiet_commands_and_keeps_in_step(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    link = Link(redis)
    try:
        key = f"{fleet_name}:k"
        replies = await link.call([("PING",)], quiet=[("SET", key, "1"), ("INCR", key)])
        assert replies == [b"PONG"] or replies == ["PONG"]
        assert link.skips
        assert link.write_raw(pack(("CLIENT", "REPLY", "SKIP")) + pack(("INCR", key)))
        (value,) = await link.call([("GET", key)])
        assert int(value) == 3  # both quiet writes landed, and no reply got out of step
        assert link.take_errors() == []
    finally:
        await link.close()
    assert not link.write_raw(pack(("PING",)))  # closed: the caller takes the slow way


async def test_without_client_reply_quiet_commands_still_land_and_errors_are_kept(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url)
    await admin.execute_command(
        "ACL", "SETUSER", "noskip", "on", ">pw", f"~{fleet_name}:*", "&*", "+@all",
        "-client|reply",
    )
    client = aioredis.Redis.from_url(private_redis.url.replace("redis://", "redis://noskip:pw@"))
    link = Link(client)
    try:
        key = f"{fleet_name}:k"
        await link.call([("PING",)])
        assert not link.skips
        assert not link.write_raw(pack(("INCR", key)))  # it needs CLIENT REPLY SKIP
        await link.call([], quiet=[("SET", key, "1"), ("SET", "elsewhere", "1")])
        (value,) = await link.call([("GET", key)])
        assert value == b"1"
        errors = link.take_errors()
        # the error's class (NOPERM), not its English text: Valkey says "No permissions"
        assert len(errors) == 1 and isinstance(errors[0], NoPermissionError), errors
    finally:
        await link.close()
        await client.aclose()
        await admin.aclose()


async def test_a_cancellation_a_call_swallowed_is_raised_after_it() -> None:
    async def swallowing() -> str:  # what redis-py 8.1 can do with a cancel mid-call
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "returned normally"
        return "slept"

    plain = asyncio.create_task(swallowing())
    guarded = asyncio.create_task(uncancelled(swallowing()))
    await asyncio.sleep(0)
    plain.cancel()
    guarded.cancel()
    assert await plain == "returned normally"  # the cancel is lost
    with pytest.raises(asyncio.CancelledError):
        await guarded


async def test_a_cancellation_a_call_turned_into_an_error_is_raised_after_it() -> None:
    async def converting() -> str:  # the other thing redis-py 8.1 can do with a cancel
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RedisConnectionError("Connection closed by server.") from None
        return "slept"

    plain = asyncio.create_task(converting())
    guarded = asyncio.create_task(uncancelled(converting()))
    await asyncio.sleep(0)
    plain.cancel()
    guarded.cancel()
    with pytest.raises(RedisConnectionError):
        await plain  # the cancel is lost: a caller that retries on errors runs on
    with pytest.raises(asyncio.CancelledError):
        await guarded


async def test_an_error_without_a_cancellation_comes_through_as_it_is() -> None:
    async def failing() -> None:
        raise RedisConnectionError("refused")

    with pytest.raises(RedisConnectionError):
        await uncancelled(failing())
    with pytest.raises(TimeoutError):  # a timeout of the caller's own is no cancellation
        async with asyncio.timeout(0.01):
            await uncancelled(asyncio.sleep(10))


async def test_cleanup_that_swallows_a_cancellation_lets_it_through() -> None:
    async def swallowing() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return

    task = asyncio.create_task(bounded(swallowing(), 5.0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_script_runs_on_the_link_and_loads_itself_when_redis_does_not_know_it(
    private_redis: LocalRedis,
) -> None:
    client = aioredis.Redis.from_url(private_redis.url)
    link = Link(client)
    script = "return {KEYS[1], ARGV[1]}"
    try:
        await client.script_flush()
        assert await link.evalsha(script, keys=["k"], args=["v"]) == [b"k", b"v"]
        assert await client.script_exists(hashlib.sha1(script.encode()).hexdigest()) == [True]
        assert await link.evalsha(script, keys=["k2"], args=[2]) == [b"k2", b"2"]
        with pytest.raises(ResponseError):
            await link.evalsha("return redis.call('NOSUCHCOMMAND')", keys=[], args=[])
        assert (await link.call([("PING",)])) == [b"PONG"]  # still in step
    finally:
        await link.close()
        await client.aclose()


def test_backoff_grows_with_jitter_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(base=0.1, cap=1.0)
    steps = [backoff.next() for _ in range(8)]
    for i, step in enumerate(steps):
        nominal = min(1.0, 0.1 * 2**i)
        assert nominal / 2 <= step <= nominal
    backoff.reset()
    assert backoff.next() <= 0.1


async def test_cleanup_is_bounded_and_a_task_that_swallows_a_cancel_still_ends() -> None:
    await bounded(asyncio.sleep(10), 0.05)  # returns after the bound, no error

    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # swallowed once, as redis-py 8.1 can
        await asyncio.sleep(10)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await cancel_bounded(task, timeout=5.0)
    assert task.cancelled()



async def test_what_a_call_was_given_reaches_redis_before_a_later_raw_write(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    # A record computed before a change must never land after the change's own write (the
    # fast path's write_raw), or the record goes back a version while the acknowledgement
    # says otherwise. redis-py writes through a task when the connection has a socket timeout
    # (its default: 5 s), a turn of the event loop in which the fast path could write first.
    link = Link(redis)
    key = f"{fleet_name}:order"
    try:
        await link.call([("PING",)])  # connected, CLIENT REPLY probed
        call = asyncio.ensure_future(link.call([("PING",)], quiet=[("SET", key, "old")]))
        await asyncio.sleep(0)  # the call runs up to its first wait
        assert link.write_raw(pack(("CLIENT", "REPLY", "SKIP")) + pack(("SET", key, "new")))
        await call
        assert await redis.get(key) == "new"
    finally:
        await link.close()
