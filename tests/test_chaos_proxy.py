"""The chaos runner's link proxy, against a real Redis: passing, delaying, dropping and
black-holing the link between a client and the server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis

from bench.chaos.proxy import BLACKHOLE, DELAY, DROP, LinkProxy


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[LinkProxy]:
    target = urlparse(redis_url)
    link = await LinkProxy(target.hostname or "127.0.0.1", target.port or 6379).start()
    try:
        yield link
    finally:
        await link.stop()


def resp(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for arg in args:
        out += f"${len(arg.encode())}\r\n{arg}\r\n".encode()
    return out


async def open_raw(link: LinkProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", link.port)


async def close_raw(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass


async def test_a_client_talks_to_redis_through_the_proxy_in_pass_mode(
    proxy: LinkProxy, redis: aioredis.Redis
) -> None:
    key = f"proxy-{uuid.uuid4().hex}"
    client = aioredis.Redis(host="127.0.0.1", port=proxy.port, decode_responses=True)
    try:
        await client.set(key, "through")
        assert await client.get(key) == "through"
        assert await redis.get(key) == "through"
        assert proxy.connections == 1
    finally:
        await client.aclose()
        await redis.delete(key)


async def test_in_delay_mode_every_reply_comes_at_least_the_delay_later_and_in_order(
    proxy: LinkProxy,
) -> None:
    reader, writer = await open_raw(proxy)
    try:
        writer.write(resp("PING"))
        assert await reader.readline() == b"+PONG\r\n"  # connected before the delay
        proxy.set_mode(DELAY, 0.2)
        t0 = time.monotonic()
        writer.write(resp("ECHO", "a") + resp("ECHO", "b"))
        replies = [await reader.readline() for _ in range(4)]
        assert time.monotonic() - t0 >= 0.2
        assert replies == [b"$1\r\n", b"a\r\n", b"$1\r\n", b"b\r\n"]
    finally:
        await close_raw(writer)


async def test_drop_resets_open_connections_and_new_ones_until_the_link_heals(
    proxy: LinkProxy,
) -> None:
    reader, writer = await open_raw(proxy)
    writer.write(resp("PING"))
    assert await reader.readline() == b"+PONG\r\n"
    proxy.set_mode(DROP)
    try:
        assert await reader.read(100) == b""
    except ConnectionError:
        pass
    await close_raw(writer)
    reader, writer = await open_raw(proxy)  # accepted, then reset at once
    try:
        assert await reader.read(100) == b""
    except ConnectionError:
        pass
    await close_raw(writer)
    proxy.heal()
    reader, writer = await open_raw(proxy)
    try:
        writer.write(resp("PING"))
        assert await reader.readline() == b"+PONG\r\n"
    finally:
        await close_raw(writer)


async def test_a_black_hole_holds_a_command_from_redis_and_delivers_it_once_healed(
    proxy: LinkProxy, redis: aioredis.Redis
) -> None:
    key = f"proxy-{uuid.uuid4().hex}"
    reader, writer = await open_raw(proxy)
    try:
        writer.write(resp("PING"))
        assert await reader.readline() == b"+PONG\r\n"
        proxy.set_mode(BLACKHOLE)
        writer.write(resp("INCR", key))
        await asyncio.wait_for(proxy.holding.wait(), 10.0)
        assert await redis.get(key) is None  # held in the proxy: Redis never saw it
        assert proxy.connections == 1  # and nothing was closed
        proxy.heal()
        assert await reader.readline() == b":1\r\n"
        assert await redis.get(key) == "1"
    finally:
        await close_raw(writer)
        await redis.delete(key)


async def test_stopping_the_proxy_closes_its_connections(proxy: LinkProxy) -> None:
    reader, writer = await open_raw(proxy)
    writer.write(resp("PING"))
    assert await reader.readline() == b"+PONG\r\n"
    await proxy.stop()
    try:
        assert await reader.read(100) == b""
    except ConnectionError:
        pass
    await close_raw(writer)
    assert proxy.connections == 0
    with pytest.raises(OSError):
        await open_raw(proxy)


def test_an_unknown_mode_is_refused() -> None:
    link = LinkProxy("127.0.0.1", 6379)
    with pytest.raises(ValueError, match="unknown proxy mode"):
        link.set_mode("sideways")
