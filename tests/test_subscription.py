"""replica.link.subscription: push and pull modes against a real Redis, over TCP and over TLS."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replicas, until
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis, free_port
from replica.link.subscription import Subscription


def _raise_errors(reply: Any) -> None:
    if isinstance(reply, ResponseError):
        raise reply


async def test_push_mode_hands_every_reply_to_the_callback_in_order(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    channel = f"{fleet_name}:ch"
    replies: list[Any] = []
    sub = Subscription(redis, channel)
    await sub.open(replies.append)
    try:
        await until(lambda: bool(replies), timeout=5)
        assert replies[0] == [b"subscribe", channel.encode(), 1]
        pipe = redis.pipeline(transaction=False)
        for i in range(500):
            pipe.publish(channel, str(i))
        await pipe.execute()
        await until(lambda: len(replies) == 501, timeout=10)
        assert [r[2] for r in replies[1:]] == [str(i).encode() for i in range(500)]
    finally:
        await sub.close()


async def test_pull_mode_reads_in_order_and_times_out_when_quiet(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    channel = f"{fleet_name}:ch"
    sub = Subscription(redis, channel)
    await sub.open()
    try:
        assert (await sub.read(5.0))[0] == b"subscribe"
        assert await sub.read(0.05) is None
        await redis.publish(channel, "a")
        await redis.publish(channel, "b")
        assert (await sub.read(5.0))[2] == b"a"
        assert (await sub.read(5.0))[2] == b"b"
        assert sub.buffered() is None
    finally:
        await sub.close()


async def test_an_aborted_subscription_ends_with_a_connection_error(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    replies: list[Any] = []
    sub = Subscription(redis, f"{fleet_name}:ch")
    await sub.open(replies.append)
    try:
        await until(lambda: bool(replies), timeout=5)
        sub.abort()
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(sub.closed(), 5)
        with pytest.raises(RedisConnectionError):
            sub.send("PING")
    finally:
        await sub.close()


async def test_a_server_that_drops_the_connection_ends_it(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    redis = aioredis.Redis.from_url(private_redis.url)
    replies: list[Any] = []
    sub = Subscription(redis, f"{fleet_name}:ch")
    await sub.open(replies.append)
    try:
        await until(lambda: bool(replies), timeout=5)
        assert await redis.client_kill_filter(_type="pubsub") == 1
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(sub.closed(), 5)
    finally:
        await sub.close()
        await redis.aclose()


async def test_a_refused_subscribe_ends_push_mode_with_the_error(
    no_subscribe_url: str, fleet_name: str
) -> None:
    client = aioredis.Redis.from_url(no_subscribe_url)
    sub = Subscription(client, f"{fleet_name}:ch")
    try:
        await sub.open(_raise_errors)
        with pytest.raises(ResponseError, match="NOPERM"):
            await asyncio.wait_for(sub.closed(), 5)
    finally:
        await sub.close()
        await client.aclose()


# ---------------------------------------------------------------------------- over TLS


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[LocalRedis, str]]:
    """A private server that also listens with TLS; yields it and a ``rediss://`` URL."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    tls_port = free_port()
    server = LocalRedis(extra_args=[
        "--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
    ])
    try:
        server.start()
    except RuntimeError as exc:  # a server built without TLS refuses the options
        pytest.skip(f"redis-server without TLS support: {exc}")
    try:
        yield server, f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={cert}"
    finally:
        server.stop()


async def _pause_and_resume(url: str, fleet_name: str) -> None:
    """Three controllers (pushes in push mode) and a listening Fleet (acks in pull mode)."""
    admin = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        async with Replicas(url, fleet_name, 3) as replicas, Fleet(admin, fleet_name) as fleet:
            assert all(c.connected for c in replicas.controllers)
            state = await fleet.pause("over another transport", by="t")
            report = await fleet.wait(state.version, timeout=10)
            assert report.ok and len(report.replicas) == 3
            assert all(p.holds == {"fleet": "over another transport"} for p in replicas.pools)
            assert all(c.stats().pushes >= 1 for c in replicas.controllers)
            state = await fleet.resume(by="t")
            assert (await fleet.wait(state.version, timeout=10)).ok
            assert all(p.holds == {} for p in replicas.pools)
    finally:
        await admin.aclose()


async def test_pause_wait_and_resume_work_over_tls(
    tls_redis: tuple[LocalRedis, str], fleet_name: str
) -> None:
    await _pause_and_resume(tls_redis[1], fleet_name)


async def test_a_burst_over_tls_arrives_whole_and_in_order(
    tls_redis: tuple[LocalRedis, str], fleet_name: str
) -> None:
    """Many TLS records in one read: the buffered protocol must not lose any of them."""
    client = aioredis.Redis.from_url(tls_redis[1])
    channel = f"{fleet_name}:ch"
    replies: list[Any] = []
    sub = Subscription(client, channel)
    await sub.open(replies.append)
    try:
        await until(lambda: bool(replies), timeout=5)
        payloads = [(f"{i:05d}-" + "x" * 1000).encode() for i in range(2000)]
        pipe = client.pipeline(transaction=False)
        for payload in payloads:
            pipe.publish(channel, payload)
        await pipe.execute()
        await until(lambda: len(replies) >= 2001, timeout=20)
        assert [r[2] for r in replies[1:]] == payloads
    finally:
        await sub.close()
        await client.aclose()


async def test_pause_wait_and_resume_work_over_a_unix_socket(
    tmp_path: Path, fleet_name: str
) -> None:
    path = tmp_path / "redis.sock"
    with LocalRedis(extra_args=["--unixsocket", str(path), "--unixsocketperm", "700"]):
        await _pause_and_resume(f"unix://{path}?db=0", fleet_name)
