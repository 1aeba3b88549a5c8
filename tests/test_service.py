"""ReplicaService in-process: every part in one loop, two-phase stop, the handler context."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from rich.console import Console

from replica.contract import ITEM_FIELD, WORK_GROUP, Keys
from replica.errors import ConfigError
from replica.service.handlers import LoadedHandler, context, load_handler
from replica.service.service import ReplicaService, bind_socket
from replica.service.settings import ReplicaSettings

TOKEN = "service-token"
seen_contexts: list[tuple[str, str]] = []
gate: asyncio.Event | None = None


async def recording_handler(item: Any) -> None:
    """A handler (loaded by reference, like a user's) that records its context."""
    ctx = context()
    seen_contexts.append((ctx.fleet, ctx.replica_id))
    if gate is not None and item.get("hold"):
        await gate.wait()


def settings_for(redis_url: str, fleet: str, **kw: Any) -> ReplicaSettings:
    return ReplicaSettings(redis_url=redis_url, fleet=fleet, replica_id="svc-1", port=0,
                           admin_token=TOKEN, poll_interval=0.1, heartbeat_interval=0.3, **kw)


async def enqueue(redis: aioredis.Redis, fleet: str, items: list[dict[str, Any]]) -> None:
    for item in items:
        await redis.xadd(Keys(fleet).work, {ITEM_FIELD: json.dumps(item)})


async def until(cond: Any, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if await cond():
                return
            await asyncio.sleep(0.02)


async def test_a_service_runs_items_serves_probes_and_removes_its_record_on_stop(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    seen_contexts.clear()
    handler = LoadedHandler(ref="tests:recording_handler", func=recording_handler)
    service = ReplicaService(settings_for(redis_url, fleet_name), handler)
    await service.start()
    try:
        assert service.port > 0
        base = f"http://127.0.0.1:{service.port}"
        await enqueue(redis, fleet_name, [{"id": i} for i in range(5)])
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(base + "/healthz")).status_code == 200

            async def all_done() -> bool:
                r = await http.get(base + "/pool", headers={"Authorization": f"Bearer {TOKEN}"})
                return bool(r.json()["processed"] == 5)

            await until(all_done)
            assert (await http.get(base + "/readyz")).status_code == 200
            metrics = (await http.get(base + "/metrics")).text
            assert 'fleetgate_items_total{outcome="done"} 5.0' in metrics
        record = Keys(fleet_name).replica("svc-1")
        await until(lambda: _field(redis, record, "done", "5"))  # the next heartbeat has it
        fields = await redis.hgetall(record)
        assert fields["handler"] == "tests:recording_handler" and fields["dead_lettered"] == "0"
    finally:
        await service.stop()
    assert set(seen_contexts) == {(fleet_name, "svc-1")}
    assert not await redis.exists(Keys(fleet_name).replica("svc-1"))
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(timeout=2) as http:
            await http.get(f"http://127.0.0.1:{service.port}/healthz")


async def _field(redis: aioredis.Redis, key: str, name: str, value: str) -> bool:
    return bool(await redis.hget(key, name) == value)


async def test_stopping_fails_readiness_finishes_in_flight_and_leaves_the_rest_pending(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    global gate
    gate = asyncio.Event()
    handler = LoadedHandler(ref="tests:recording_handler", func=recording_handler)
    settings = settings_for(redis_url, fleet_name, workers=1, queue_size=3)
    service = ReplicaService(settings, handler)
    await service.start()
    try:
        await enqueue(redis, fleet_name, [{"id": i, "hold": True} for i in range(5)])
        await until(lambda: _true(service.pool.in_flight == 1 and service.source.held == 3))
        stopping = asyncio.create_task(service.stop(timeout=10))
        base = f"http://127.0.0.1:{service.port}"
        async with httpx.AsyncClient(timeout=5) as http:
            async def draining() -> bool:
                r = await http.get(base + "/readyz")
                return r.status_code == 503 and "drain" in r.json()["reason"]

            await until(draining)  # HTTP stays up through phase 1 and shows the drain
            assert (await http.get(base + "/healthz")).status_code == 200
        gate.set()
        await stopping
    finally:
        gate.set()
        gate = None
        await service.stop()
    pending = await redis.xpending_range(Keys(fleet_name).work, WORK_GROUP, "-", "+", 10)
    assert [p["consumer"] for p in pending] == ["svc-1", "svc-1"]  # handed back, not acked
    assert await redis.xlen(Keys(fleet_name).work) == 5


async def _true(value: bool) -> bool:
    return value


async def test_a_handler_with_a_breaker_gets_its_pool_paused_while_open(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETGATE_BREAKER_CHECK_INTERVAL", "0.05")
    from replica.service.breaker import AsyncCircuitBreaker
    from replica.service.settings import load_breaker_settings

    handler = load_handler("replica.demo:flaky")
    breaker = AsyncCircuitBreaker(fail_max=1, reset_timeout=60)
    monkeypatch.setattr(handler.func, "breaker", breaker)
    handler = load_handler("replica.demo:flaky")
    service = ReplicaService(settings_for(redis_url, fleet_name), handler,
                             breaker_settings=load_breaker_settings())
    await service.start()
    try:
        breaker.open()
        await asyncio.wait_for(service.pool.wait_for(True), 10)
        assert "breaker" in service.pool.holds
        breaker.close()
        await asyncio.wait_for(service.pool.wait_for(False), 10)
    finally:
        await service.stop()


def test_a_port_in_use_is_a_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            bind_socket("127.0.0.1", port)


async def test_an_outage_with_one_worker_dead_letters_nothing_before_the_breaker_opens(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11, B.5: replica.demo:flaky, the dependency down, FLEETGATE_WORKERS=1."""
    from replica.service.breaker import AsyncCircuitBreaker
    from replica.service.settings import load_breaker_settings

    monkeypatch.setenv("FLEETGATE_BREAKER_CHECK_INTERVAL", "0.05")
    breaker = AsyncCircuitBreaker(fail_max=5, reset_timeout=0.5, name="demo-dependency")
    monkeypatch.setattr(load_handler("replica.demo:flaky").func, "breaker", breaker)
    handler = load_handler("replica.demo:flaky")
    keys = Keys(fleet_name)
    dependency = f"{keys.prefix}:demo:dependency"
    await redis.hset(dependency, "down", "1")
    await enqueue(redis, fleet_name, [{"id": f"i{i}"} for i in range(10)])
    settings = settings_for(redis_url, fleet_name, workers=1, demo_item_seconds=0)
    service = ReplicaService(settings, handler, breaker_settings=load_breaker_settings())
    await service.start()
    try:
        await until(lambda: _true(breaker.opened_count >= 1))
        assert await redis.xlen(keys.dead) == 0
        await redis.hset(dependency, "down", "0")
        await until(lambda: _count(redis.hlen(keys.demo_done), 10), timeout=60)
    finally:
        await service.stop()
    assert await redis.xlen(keys.dead) == 0


async def _count(aw: Any, n: int) -> bool:
    return bool(await aw == n)


async def test_a_stopped_work_source_makes_the_replica_unready_and_shows_in_status(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coordinator.fleet.fleet import Fleet
    from coordinator.render import replica_table

    handler = LoadedHandler(ref="tests:recording_handler", func=recording_handler)
    service = ReplicaService(settings_for(redis_url, fleet_name), handler)

    async def broken(*args: Any) -> int:  # stands in for a defect of the reader itself
        raise RuntimeError("a bug in the reader")

    monkeypatch.setattr(service.source.reader, "_claim", broken)
    await service.start()
    try:
        base = f"http://127.0.0.1:{service.port}"
        async with httpx.AsyncClient(timeout=5) as http:
            async def unready() -> bool:
                return (await http.get(base + "/readyz")).status_code == 503

            await until(unready)
            body = (await http.get(base + "/readyz")).json()
            assert body["reason"] == "work source stopped: RuntimeError('a bug in the reader')"
        record = Keys(fleet_name).replica("svc-1")
        await until(lambda: _field(redis, record, "source",
                                   "stopped: RuntimeError('a bug in the reader')"))
        [info] = await Fleet(redis, fleet_name).replicas()
        state = await Fleet(redis, fleet_name).state()
        console = Console(width=200, record=True)
        console.print(replica_table(state, [info], info.heartbeat_at or state.changed_at))
        assert "source stopped" in console.export_text()
    finally:
        await service.stop()


async def test_liveness_fails_naming_the_pool_worker_that_is_gone(
    redis_url: str, fleet_name: str
) -> None:
    """Issue 11, A.2: a replica whose pool lost a worker is not alive, and says which."""
    handler = LoadedHandler(ref="tests:recording_handler", func=recording_handler)
    service = ReplicaService(settings_for(redis_url, fleet_name, workers=2), handler)
    await service.start()
    try:
        assert service.alive() is None
        name = f"pool[{fleet_name}/svc-1]-worker-1"
        worker = next(t for t in asyncio.all_tasks() if t.get_name() == name)
        worker.cancel()  # handlers cannot end a worker: only a cancellation from outside can
        await asyncio.wait([worker])
        assert service.alive() == f"a pool worker {name} was cancelled"
        async with httpx.AsyncClient(timeout=5) as http:
            r = await http.get(f"http://127.0.0.1:{service.port}/healthz")
        assert r.status_code == 503 and r.json()["reason"] == service.alive()
    finally:
        await service.stop()
    assert service.alive() is None
