"""coordinator.fleet.calls against private Redis servers: a change that was sent and got no
answer raises OutcomeUnknown (it may have been applied), one that could not be sent raises the
connection error as before.

To hold a change between "sent" and "answered" without racing it, the server is first paused
for writes (``CLIENT PAUSE ... WRITE``: the script waits in the server, seen in ``CLIENT
LIST``); then ``DEBUG SLEEP`` freezes the server past the client's socket timeout, and the
``CLIENT UNPAUSE`` queued behind it runs the script before the server reads that the client
hung up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from cpkit import until
from redis.exceptions import ConnectionError as RedisConnectionError

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica.contract import FleetState
from replica.errors import OutcomeUnknown

SOCKET_TIMEOUT_S = 1.0
SLEEP_S = 4
"""How long the server sleeps: past the client's socket timeout by more than the few
milliseconds the test takes between holding the script and sending the sleep, however loaded
the machine."""


@pytest.fixture
async def admin(debug_redis: LocalRedis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(debug_redis.url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def impatient(debug_redis: LocalRedis) -> AsyncIterator[aioredis.Redis]:
    """The coordinator's client: a short socket timeout."""
    client = aioredis.Redis.from_url(
        debug_redis.url, decode_responses=True, socket_timeout=SOCKET_TIMEOUT_S
    )
    try:
        yield client
    finally:
        await client.aclose()


async def _held_script(admin: aioredis.Redis) -> int:  # 0: none
    """The id of the client whose script waits in the paused server (0 while none does)."""
    for line in (await admin.execute_command("CLIENT", "LIST")).splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if fields.get("cmd") == "evalsha" and "b" in fields.get("flags", ""):
            return int(fields["id"])
    return 0


async def _hold_writes(admin: aioredis.Redis) -> None:
    await admin.execute_command("CLIENT", "PAUSE", "60000", "WRITE")


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_a_change_whose_answer_never_comes_raises_outcome_unknown_though_it_was_applied(
    admin: aioredis.Redis, impatient: aioredis.Redis, action: str
) -> None:
    fleet = Fleet(impatient, "orders")
    before = await fleet.pause("before", by="t")  # the server knows the script now
    if action == "pause":
        before = await fleet.resume(by="t")
    await _hold_writes(admin)
    change = asyncio.ensure_future(
        fleet.pause("during a hang", by="t") if action == "pause" else fleet.resume(by="t")
    )
    await until(lambda: _holding(admin), what="the script waiting in the server")
    sleeper = admin.pipeline(transaction=False)
    sleeper.execute_command("DEBUG", "SLEEP", str(SLEEP_S))
    sleeper.execute_command("CLIENT", "UNPAUSE")
    woke = asyncio.ensure_future(sleeper.execute())
    try:
        with pytest.raises(OutcomeUnknown) as caught:
            await change
    finally:
        await woke
    message = str(caught.value)
    assert f"{action} of fleet orders was sent" in message and "read the fleet's state" in message
    assert "unreachable" not in message
    # the state says what happened: the change was applied after all
    state = await Fleet(admin, "orders").state()
    assert state.version == before.version + 1
    assert state.paused is (action == "pause")


async def test_a_change_whose_connection_drops_after_sending_raises_outcome_unknown(
    admin: aioredis.Redis, impatient: aioredis.Redis
) -> None:
    fleet = Fleet(impatient, "orders")
    await fleet.resume(by="t")  # the server knows the script now
    await _hold_writes(admin)
    change = asyncio.ensure_future(fleet.pause("cut off", by="t"))
    held = await _held_id(admin)
    await admin.execute_command("CLIENT", "KILL", "ID", str(held))
    with pytest.raises(OutcomeUnknown):
        await change
    await admin.execute_command("CLIENT", "UNPAUSE")
    # here it had not run (the server dropped it with the connection): "unknown" was right
    assert await Fleet(admin, "orders").state() == FleetState.initial("orders")


async def _holding(admin: aioredis.Redis) -> bool:
    return await _held_script(admin) != 0


async def _held_id(admin: aioredis.Redis) -> int:
    await until(lambda: _holding(admin), what="the script waiting in the server")
    return await _held_script(admin)


async def test_a_change_that_cannot_be_sent_raises_the_connection_error(
    debug_redis: LocalRedis, impatient: aioredis.Redis
) -> None:
    fleet = Fleet(impatient, "orders")
    await fleet.resume(by="t")
    debug_redis.kill()
    debug_redis.stop()
    with pytest.raises(RedisConnectionError):
        await fleet.pause("nobody there", by="t")


async def test_a_change_after_a_redis_restart_goes_through_on_a_fresh_connection(
    debug_redis: LocalRedis, impatient: aioredis.Redis
) -> None:
    fleet = Fleet(impatient, "orders")
    await fleet.pause("before the restart", by="t")
    debug_redis.kill()  # no persistence: the state and the script cache are gone
    debug_redis.start()
    state = await fleet.pause("after the restart", by="t")  # the old connection is dead
    assert state.paused and state.version == 1 and state.reason == "after the restart"
