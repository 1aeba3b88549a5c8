"""Prometheus metrics of a replica: names, values at scrape time, one registry per app."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from replica.contract import AUDIT_MAXLEN, ITEM_FIELD, SET_STATE_LUA, Keys, format_time, now_utc
from replica.control.controller import FleetController
from replica.pool.pool import PausablePool
from replica.service.metrics import ReplicaMetrics
from replica.service.settings import ReplicaSettings
from replica.service.source import SourceStats, StreamSource


def samples(metrics: ReplicaMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: ReplicaMetrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, tuple(sorted(labels.items())))]


@pytest.fixture
async def pool() -> AsyncIterator[PausablePool]:
    gate = asyncio.Event()
    started = asyncio.Event()

    async def handler(item: Any) -> None:
        if item == "block":
            started.set()
            await gate.wait()

    async with PausablePool(handler, workers=2, maxsize=10, name="metrics") as p:
        p.block_started = started  # type: ignore[attr-defined]
        yield p
        gate.set()


async def test_pool_gauges_are_read_at_scrape_time(pool: PausablePool) -> None:
    metrics = ReplicaMetrics(pool)
    assert value(metrics, "fleetgate_pool_paused", reason="fleet") == 0
    assert value(metrics, "fleetgate_pool_queue_capacity") == 10
    assert value(metrics, "fleetgate_pool_workers") == 2
    await pool.put("block")
    await asyncio.wait_for(pool.block_started.wait(), 5)  # type: ignore[attr-defined]
    pool.hold("maintenance", "fleet")
    pool.hold("checking", "custom-source")
    for i in range(3):
        await pool.put(i)
    assert value(metrics, "fleetgate_pool_paused", reason="fleet") == 1
    assert value(metrics, "fleetgate_pool_paused", reason="operator") == 0
    assert value(metrics, "fleetgate_pool_paused", reason="custom-source") == 1
    assert value(metrics, "fleetgate_pool_queued") == 3
    assert value(metrics, "fleetgate_pool_in_flight") == 1
    assert value(metrics, "fleetgate_pool_pause_seconds") >= 0
    pool.resume("fleet")
    pool.resume("custom-source")
    await pool.put("x")
    assert value(metrics, "fleetgate_pool_paused", reason="fleet") == 0
    assert value(metrics, "fleetgate_pool_pause_seconds") == 0


async def test_items_by_outcome_come_from_the_pool_without_a_source(pool: PausablePool) -> None:
    metrics = ReplicaMetrics(pool)
    for i in range(4):
        await pool.put(i)
    await pool.join(5)
    assert value(metrics, "fleetgate_items_total", outcome="done") == 4
    for outcome in ("failed", "timed_out", "dead_lettered", "malformed"):
        assert value(metrics, "fleetgate_items_total", outcome=outcome) == 0


async def test_items_by_outcome_come_from_the_stream_source(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    for i in range(3):
        await redis.xadd(keys.work, {ITEM_FIELD: json.dumps({"id": i, "fail": i == 0})})
    await redis.xadd(keys.work, {ITEM_FIELD: "{not json"})
    dead = asyncio.Event()

    async def handler(item: Any) -> None:
        if item["fail"]:
            raise ValueError("poison")

    settings = ReplicaSettings(redis_url=redis_url, fleet=fleet_name, replica_id="m1",
                               insecure_no_auth=True, max_retries=1, retry_backoff=0.01)
    client = aioredis.Redis.from_url(redis_url)
    source = StreamSource(client, settings, handler)
    metrics = ReplicaMetrics(source.pool, source=source)
    await source.pool.start()
    await source.start()
    try:
        async with asyncio.timeout(15):
            while not dead.is_set():
                if value(metrics, "fleetgate_items_total", outcome="dead_lettered") == 1 and \
                        value(metrics, "fleetgate_items_total", outcome="done") == 2:
                    dead.set()
                await asyncio.sleep(0.02)
        assert value(metrics, "fleetgate_items_total", outcome="failed") == 2
        assert value(metrics, "fleetgate_items_total", outcome="malformed") == 1
        assert value(metrics, "fleetgate_source_held") == 0
        assert value(metrics, "fleetgate_source_awaiting_retry") == 0
        assert value(metrics, "fleetgate_source_reading") == 1
    finally:
        await source.stop(timeout=5)
        await client.aclose()


async def test_a_work_source_that_stopped_reading_shows_as_not_reading(
    pool: PausablePool,
) -> None:
    class StoppedSource:
        def stats(self) -> SourceStats:
            numbers = {f.name: 0 for f in dataclasses.fields(SourceStats) if f.type == "int"}
            return SourceStats(**numbers, group_ready=True, stopped="RuntimeError('boom')")

    metrics = ReplicaMetrics(pool, source=StoppedSource())
    assert value(metrics, "fleetgate_source_reading") == 0


async def test_control_gauges_and_the_propagation_histogram_follow_the_controller(
    redis: aioredis.Redis, fleet_name: str, pool: PausablePool
) -> None:
    controller = FleetController(pool, redis, fleet_name, "m1", poll_interval=0.1,
                                 heartbeat_interval=0.5)
    metrics = ReplicaMetrics(pool, control=controller)
    controller.add_listener(metrics.observe_propagation)
    async with controller:
        assert value(metrics, "fleetgate_control_connected") == 1
        keys = Keys(fleet_name)
        await redis.eval(  # type: ignore[misc]
            SET_STATE_LUA, 4, keys.state, keys.audit, keys.control, keys.replicas, "pause",
            "metrics test", "tests", format_time(now_utc()), "", "", "0", fleet_name,
            str(AUDIT_MAXLEN), "1",
        )
        await asyncio.wait_for(pool.wait_for(True), 10)
        assert value(metrics, "fleetgate_fleet_version") == 1
        assert value(metrics, "fleetgate_propagation_seconds_count") == 1
        assert value(metrics, "fleetgate_pool_paused", reason="fleet") == 1
    assert value(metrics, "fleetgate_control_connected") == 0


async def test_two_apps_in_one_process_have_separate_registries(pool: PausablePool) -> None:
    first, second = ReplicaMetrics(pool), ReplicaMetrics(pool)
    first.observe_propagation(None, 0.2)
    assert value(first, "fleetgate_propagation_seconds_count") == 1
    assert value(second, "fleetgate_propagation_seconds_count") == 0
