"""replica.control.controller: FleetController, the façade: start, stop, options, listeners,
and the whole control plane end to end against a real Redis."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, until

import replica.contract
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica import FleetController, PausablePool
from replica.contract import RECORD_FIELDS, Keys, format_time
from replica.control.options import ControllerSettings
from replica.errors import ConfigError, ContractError


async def test_a_controller_is_up_and_synced_when_start_returns(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    async with Replicas(redis_url, fleet_name, 1) as replicas:
        (controller,) = replicas.controllers
        assert controller.connected and controller.synced
        assert controller.applied_version == 0
        assert replicas.pools[0].holds == {}
        record = await redis.hgetall(Keys(fleet_name).replica("pod-0"))
        assert set(RECORD_FIELDS) <= set(record)
        assert record["control"] == "connected" and record["applied_version"] == "0"
        assert await redis.zscore(Keys(fleet_name).replicas, "pod-0") is not None
        await controller.start()  # idempotent
    assert not await redis.exists(Keys(fleet_name).replica("pod-0"))
    assert await redis.zscore(Keys(fleet_name).replicas, "pod-0") is None

@pytest.mark.parametrize("decode", [True, False])
async def test_pause_and_resume_reach_a_controller_whatever_the_client_decodes(
    redis_url: str, fleet_name: str, decode: bool
) -> None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=decode)
    try:
        fleet = Fleet(client, fleet_name)
        async with Replicas(redis_url, fleet_name, 1, decode=decode) as replicas:
            pool = replicas.pools[0]
            state = await fleet.pause("maintenance", by="alice")
            await asyncio.wait_for(pool.wait_for(True), 10)
            assert pool.holds == {"fleet": "maintenance"}
            assert (await fleet.wait(state.version, timeout=10)).ok
            state = await fleet.resume(by="alice")
            await asyncio.wait_for(pool.wait_for(False), 10)
            assert (await fleet.wait(state.version, timeout=10)).ok
            assert replicas.controllers[0].applied_version == state.version
            infos = await fleet.replicas()
            assert [i.applied_version for i in infos] == [state.version]
    finally:
        await client.aclose()

def test_bad_arguments_are_refused_at_construction() -> None:
    async def handler(item: Any) -> None:
        pass

    pool = PausablePool(handler)
    client = aioredis.Redis()
    with pytest.raises(ContractError):
        FleetController(pool, client, "Bad Name", "pod-1")
    with pytest.raises(ContractError):
        FleetController(pool, client, "orders", "pod 1")
    with pytest.raises(ConfigError):
        FleetController(pool, client, "orders", "pod-1", poll_interval=0)
    with pytest.raises(ConfigError, match="control_loss"):
        FleetController(pool, client, "orders", "pod-1", control_loss="drop")  # type: ignore[arg-type]

async def test_listeners_hear_every_applied_state_with_its_propagation(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    heard: list[tuple[int, float | None]] = []
    async with Replicas(redis_url, fleet_name, 1) as replicas:
        controller = replicas.controllers[0]
        controller.add_listener(lambda state, delay: heard.append((state.version, delay)))
        state = await Fleet(redis, fleet_name).pause("listen", by="t")
        await until(lambda: any(v == state.version for v, _ in heard))
        delay = dict(heard)[state.version]
        assert delay is not None and delay >= 0
        stats = controller.stats()
        assert stats.propagation == delay and stats.pushes >= 1 and stats.polls >= 1
        assert stats.applied_version == state.version and stats.fleet_held

async def test_a_replica_started_during_a_pause_takes_no_item_until_the_resume(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    paused = await fleet.pause("deploy", by="ci")
    replica = Replica(redis_url, fleet_name, "late-1")
    await replica.pool.start()
    starting = asyncio.ensure_future(replica.controller.start())
    await asyncio.sleep(0)  # start() holds the pool before its first await
    for n in range(10):
        replica.pool.put_nowait(n)
    try:
        await starting
        assert replica.pool.holds == {"fleet": "deploy"}
        assert replica.controller.applied_version == paused.version
        assert replica.ran == []
        resumed = await fleet.resume(by="ci")
        assert (await fleet.wait(resumed.version, timeout=10)).ok
        await until(lambda: len(replica.ran) == 10)
        assert replica.started_while_held == []
    finally:
        starting.cancel()
        await replica.stop()

async def test_a_controller_started_without_redis_holds_the_pool_until_the_first_read(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    private_redis.kill()
    replica = Replica(private_redis.url, fleet_name, "pod-1", poll_interval=0.2,
                      io_timeout=0.5, start_timeout=5.0)
    try:
        await replica.start()
        assert replica.pool.holds == {"control-plane": "syncing"}
        assert not replica.controller.connected and not replica.controller.synced
        replica.pool.put_nowait("waiting")
        private_redis.start()
        await until(lambda: replica.ran == ["waiting"], timeout=30)
        await until(lambda: replica.controller.connected)
        assert replica.pool.holds == {}
    finally:
        await replica.stop()

@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="no redis-cli on PATH")
@pytest.mark.parametrize("recipe", ["script", "hset-and-bump", "raw-hset"])
async def test_the_redis_cli_recipe_pauses_and_resumes_real_controllers(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, recipe: str
) -> None:
    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    keys = Keys(fleet_name)
    key = keys.state
    script = str(Path(replica.contract.__file__).with_name("set_state.lua"))

    def cli(*args: str) -> None:
        subprocess.run(["redis-cli", "-h", host, "-p", port, *args], check=True,
                       capture_output=True, timeout=10)

    def change(action: str, reason: str) -> None:
        now = format_time(datetime.now(UTC))
        if recipe == "script":  # the README's first recipe: the same script Fleet runs
            cli("--eval", script, keys.state, keys.audit, keys.control, keys.replicas, ",",
                action, reason, "oncall", now, "", "", "0", fleet_name, "10000", "1", "")
        elif recipe == "hset-and-bump":  # the second: write the fields, bump the version
            paused = "1" if action == "pause" else "0"
            cli("HSET", key, "paused", paused, "reason", reason, "by", "oncall", "since", now,
                "changed_at", now)
            cli("HINCRBY", key, "version", "1")
        else:  # no version bump at all: the poll still applies it
            cli("HSET", key, "paused", "1" if action == "pause" else "0", "reason", reason,
                "by", "oncall")

    async with Replicas(redis_url, fleet_name, 3, poll_interval=0.5) as replicas:
        await Fleet(redis, fleet_name).resume(by="nobody")  # a running fleet: changes nothing
        change("pause", "by hand")
        await asyncio.wait_for(
            asyncio.gather(*(p.wait_for(True) for p in replicas.pools)), 15
        )
        assert all(p.holds == {"fleet": "by hand"} for p in replicas.pools)
        change("resume", "")
        await asyncio.wait_for(
            asyncio.gather(*(p.wait_for(False) for p in replicas.pools)), 15
        )
        state = await Fleet(redis, fleet_name).state()
        assert not state.paused and state.by == "oncall"
        if recipe != "raw-hset":
            assert state.version == 2
            assert all(c.applied_version == 2 for c in replicas.controllers)


# ---------------------------------------------------------------------------- options


def test_the_options_come_as_keywords_or_as_settings_but_not_both() -> None:
    async def handler(item: Any) -> None:
        pass

    pool = PausablePool(handler)
    client = aioredis.Redis()
    by_keywords = FleetController(pool, client, "orders", "pod-1", poll_interval=0.5,
                                  host="h1", io_timeout=3.0)
    settings = ControllerSettings(poll_interval=0.5, host="h1", io_timeout=3.0)
    by_settings = FleetController(pool, client, "orders", "pod-1", settings=settings)
    assert by_keywords.settings == by_settings.settings == settings.resolved()
    assert by_settings.control_loss == "keep" and by_settings.control_loss_after == 1.5
    assert by_settings.poll_interval == 0.5 and by_settings.host == "h1"
    assert by_settings.io_timeout == 3.0 and by_settings.heartbeat_interval == 10.0
    with pytest.raises(ConfigError):
        FleetController(pool, client, "orders", "pod-1", poll_interval=2.0, settings=settings)


# ---------------------------------------------------------------------------- stop


@pytest.mark.parametrize("moment", ["a poll", "the first connection"])
async def test_stop_does_not_wait_for_a_redis_that_stops_answering_in_the_middle_of_a_call(
    private_redis: LocalRedis, fleet_name: str, moment: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="replica.control")
    admin = aioredis.Redis.from_url(private_redis.url)
    # Only stop's own bounds can end the stop within the 10 s it is given: Redis answers after
    # 30 s, and the round trip's timeout and the client's socket timeouts are 60 s
    url = f"{private_redis.url}?socket_timeout=60&socket_connect_timeout=60"
    replica = Replica(url, fleet_name, "pod-1", poll_interval=0.05, start_timeout=0.3,
                      io_timeout=60.0)
    link = replica.controller._link
    call = link.call
    entered = asyncio.Event()

    async def spy(commands: list[tuple[Any, ...]], quiet: Any = ()) -> list[Any]:
        entered.set()
        return await call(commands, quiet)

    link.call = spy  # type: ignore[method-assign]
    try:
        if moment == "the first connection":
            await admin.execute_command("CLIENT", "PAUSE", "30000", "ALL")
            await replica.start()  # returns after start_timeout, still connecting
            assert not replica.controller.synced
        else:
            await replica.start()
            await admin.execute_command("CLIENT", "PAUSE", "30000", "ALL")
            entered.clear()
        await entered.wait()  # a call went out to a Redis that answers nothing
        async with asyncio.timeout(10):  # a hang guard, far below the pause
            await replica.controller.stop()
        assert all(task.done() for task in replica.controller._tasks)
        # the record's removal was given up at its bound, and no cancellation was lost
        messages = [r.getMessage() for r in caplog.records]
        assert any("could not remove the record on stop" in m for m in messages), messages
        assert not any("did not stop within" in m for m in messages), messages
        await replica.controller.stop()  # idempotent
    finally:
        private_redis.kill()  # the pause would outlive the test
        await replica.stop()
        await admin.aclose()
