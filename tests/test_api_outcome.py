"""Writes against a Redis that hangs (``DEBUG SLEEP`` on a private server): the request's
``timeout`` bounds the whole write, and a change that got no answer is reported as an unknown
outcome (504: check the state), not as "Redis unreachable", since it may have been applied."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis
from coordinator.web.api import create_app
from replica.contract import (
    CONTROL_CONNECTED,
    R_APPLIED_VERSION,
    R_CONTROL,
    R_HEARTBEAT_AT,
    R_HEARTBEAT_INTERVAL,
    Keys,
    format_time,
    now_utc,
)
from tests.apikit import ADMIN, VIEW, auth, client_for, make_settings, strict_json
from tests.cpkit import until

FLEET = "hung"
GUARD_S = 30.0
"""A hang guard on a request (not a measurement): far below the 60 s hangs it waits beside."""


@asynccontextmanager
async def coordinator(server: LocalRedis, **extra: object) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(make_settings(server.url, FLEET, **extra), run_watcher=False)
    async with client_for(app) as api:
        assert (await api.get("/api/fleet", headers=auth(VIEW))).status_code == 200
        yield api


def hang(server: LocalRedis, seconds: int) -> socket.socket:
    """Make the server sleep for ``seconds`` from now: every command sent after this one
    waits. Returns the connection that sent it (close it, or kill the server).

    The connection answers a ``PING`` first: the server accepts a new connection in one turn
    of its event loop and reads it in a later one, so a ``DEBUG SLEEP`` sent on a connection
    just opened could be read after a command that an established connection (the app's
    pool) sent just after it, and that command would be answered before the sleep (a pause
    answered "not confirmed: Timeout reading" by its ``WAIT``, instead of 504). Accepted and
    read once, the connection is read no later than one whose bytes came after its own."""
    sock = socket.create_connection((server.host, server.port), timeout=GUARD_S)
    sock.sendall(b"PING\r\n")
    answer = b""
    while not answer.endswith(b"\r\n"):
        chunk = sock.recv(64)
        assert chunk, "the server closed the connection before answering PING"
        answer += chunk
    assert answer == b"+PONG\r\n", answer
    sock.sendall(b"DEBUG SLEEP %d\r\n" % seconds)
    return sock


def still_asleep(sock: socket.socket) -> bool:
    """Redis has not yet answered the ``DEBUG SLEEP`` that ``sock`` sent: what came back
    meanwhile was not waiting for Redis."""
    sock.setblocking(False)
    try:
        sock.recv(64)  # its reply, or b"" when the connection closed
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)
    return False


def assert_unknown_outcome(response: httpx.Response) -> None:
    assert response.status_code == 504, response.text
    detail = strict_json(response)["detail"]
    assert "outcome is unknown" in detail and "check the state" in detail.lower()
    assert "unreachable" not in detail


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_a_change_with_no_answer_within_its_timeout_gets_504_and_may_have_been_applied(
    debug_redis: LocalRedis, action: str
) -> None:
    async with coordinator(debug_redis) as api:
        # a change first, so the server knows the script (else its EVALSHA would fail)
        await api.post("/api/fleet/pause", headers=auth(ADMIN), json={"reason": "before"})
        if action == "pause":
            await api.post("/api/fleet/resume", headers=auth(ADMIN))
        before = (await api.get("/api/fleet", headers=auth(VIEW))).json()["state"]["version"]
        body = {"reason": "during a hang", "timeout": 1}
        sleeper = hang(debug_redis, 8)
        try:
            started = time.monotonic()
            async with asyncio.timeout(GUARD_S):
                response = await api.post(f"/api/fleet/{action}", headers=auth(ADMIN),
                                          json=body)
            elapsed = time.monotonic() - started
            # it waited its timeout, and answered without waiting for Redis
            assert elapsed >= 1.0 and still_asleep(sleeper)
            assert_unknown_outcome(response)
            # once Redis answers again: the change had been applied, as "unknown" allowed
            state = (await api.get("/api/fleet", headers=auth(VIEW))).json()["state"]
            assert state["version"] == before + 1
            assert state["paused"] is (action == "pause")
        finally:
            sleeper.close()


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_a_wait_against_a_hung_redis_ends_within_its_timeout(
    debug_redis: LocalRedis, action: str
) -> None:
    async with coordinator(debug_redis) as api:
        if action == "resume":
            await api.post("/api/fleet/pause", headers=auth(ADMIN), json={"reason": "before"})
        body = {"reason": "hung", "wait": True, "timeout": 2}
        sleeper = hang(debug_redis, 60)
        started = time.monotonic()
        async with asyncio.timeout(GUARD_S):
            response = await api.post(f"/api/fleet/{action}", headers=auth(ADMIN), json=body)
        elapsed = time.monotonic() - started
        asleep = still_asleep(sleeper)
        sleeper.close()
        debug_redis.kill()
    assert_unknown_outcome(response)
    # it waited its timeout, and answered without waiting for Redis
    assert elapsed >= 2.0 and asleep


async def test_an_applied_pause_whose_wait_redis_stops_answering_gets_202_with_its_state(
    debug_redis: LocalRedis,
) -> None:
    keys = Keys(FLEET)
    client = aioredis.Redis.from_url(debug_redis.url, decode_responses=True)
    try:
        # a live replica that will never acknowledge: the wait polls its record
        await client.zadd(keys.replicas, {"r1": time.time() * 1000})
        await client.hset(keys.replica("r1"), mapping={
            R_HEARTBEAT_AT: format_time(now_utc()), R_HEARTBEAT_INTERVAL: "3600",
            R_APPLIED_VERSION: "0", R_CONTROL: CONTROL_CONNECTED,
        })
        async with coordinator(debug_redis) as api:
            body = {"reason": "hung while waiting", "wait": True, "timeout": 5}
            request = asyncio.create_task(
                api.post("/api/fleet/pause", headers=auth(ADMIN), json=body)
            )
            # the wait has begun (it subscribes to the acks first), so the change has had its
            # answer: the audit entry alone comes before the change's last call returns
            await until(lambda: _waiting(client, keys), timeout=GUARD_S,
                        what="the request's wait to subscribe")
            assert await client.xlen(keys.audit), "the pause never reached the audit stream"
            sleeper = hang(debug_redis, 60)
            async with asyncio.timeout(GUARD_S):
                response = await request
            asleep = still_asleep(sleeper)  # the answer did not wait for Redis
            sleeper.close()
            debug_redis.kill()
    finally:
        await client.aclose()
    assert response.status_code == 202, response.text
    answer = strict_json(response)
    assert answer["state"]["version"] == 1 and answer["state"]["paused"] is True
    assert answer["wait"]["ok"] is False
    assert "applied" in answer["detail"] and "check the state" in answer["detail"]
    assert asleep


async def _waiting(client: aioredis.Redis, keys: Keys) -> bool:
    ((_, subscribers),) = await client.pubsub_numsub(keys.acks)
    return bool(subscribers)


@pytest.mark.slow
async def test_a_change_whose_reply_times_out_on_the_client_gets_504_not_unreachable(
    debug_redis: LocalRedis,
) -> None:
    """The issue's reproduction: a pause during ``DEBUG SLEEP 12`` answered 503 "Redis
    unreachable" after the client's 10 s socket timeout, though it was applied."""
    async with coordinator(debug_redis) as api:
        # a change first, so the server knows the script (else its EVALSHA would fail)
        await api.post("/api/fleet/resume", headers=auth(ADMIN), json={"reason": "warm up"})
        sleeper = hang(debug_redis, 12)
        try:
            response = await api.post(
                "/api/fleet/pause", headers=auth(ADMIN), json={"reason": "db failover"}
            )
            assert_unknown_outcome(response)
            state = (await api.get("/api/fleet", headers=auth(VIEW))).json()["state"]
            assert state["paused"] is True
        finally:
            sleeper.close()
