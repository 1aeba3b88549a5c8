"""Forgotten pauses: the fleet metrics read from Redis at scrape time, and the overdue watcher
that logs a structured warning while a pause outlives its window (and restores a lost state)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.fleet.fleet import Fleet
from coordinator.settings import CoordinatorSettings
from coordinator.web.api import create_app
from coordinator.web.metrics import OverdueWatcher, render_metrics
from replica.contract import Keys, format_time, now_utc
from tests.fleetkit import FLEETGATE, ROOT, replicas, until
from tests.procs import Processes

ADMIN = "metrics-admin-token-01234"


def samples(text: bytes | str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    raw = text.decode() if isinstance(text, bytes) else text
    out = {}
    for family in text_string_to_metric_families(raw):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return metrics[(name, tuple(sorted(labels.items())))]


@pytest.fixture
async def fleet(redis: aioredis.Redis, fleet_name: str) -> Fleet:
    return Fleet(redis, fleet_name)


async def write_state(redis: aioredis.Redis, fleet_name: str, **fields: str) -> None:
    """Write the state hash as an operator editing it by hand would (from_hash is lenient)."""
    await redis.hset(Keys(fleet_name).state, mapping={"version": "1", **fields})


async def write_record(
    redis: aioredis.Redis, fleet_name: str, rid: str, *, applied_version: int, age_s: float
) -> None:
    """A replica record with a heartbeat ``age_s`` old (10 s heartbeat interval)."""
    keys = Keys(fleet_name)
    beat = now_utc() - timedelta(seconds=age_s)
    await redis.hset(keys.replica(rid), mapping={
        "paused": "0", "applied_version": str(applied_version), "in_flight": "0", "queued": "0",
        "quiet": "0", "control": "connected", "heartbeat_at": format_time(beat),
        "heartbeat_interval": "10",
    })
    await redis.zadd(keys.replicas, {rid: int(beat.timestamp() * 1000)})


# ---------------------------------------------------------------------------- metrics


async def test_a_running_fleet_with_live_replicas(redis_url: str, fleet_name: str, fleet: Fleet) -> None:
    async with replicas(redis_url, fleet_name, 3):
        m = samples(await render_metrics(fleet, 1800))
    assert value(m, "fleetgate_fleet_paused", fleet=fleet_name, reason="") == 0
    assert value(m, "fleetgate_fleet_pause_age_seconds", fleet=fleet_name) == 0
    assert value(m, "fleetgate_fleet_pause_overdue", fleet=fleet_name) == 0
    assert value(m, "fleetgate_fleet_replicas", fleet=fleet_name, state="running") == 3
    for state in ("paused", "quiet", "stale"):
        assert value(m, "fleetgate_fleet_replicas", fleet=fleet_name, state=state) == 0
    assert value(m, "fleetgate_fleet_unacknowledged", fleet=fleet_name) == 0


async def test_a_paused_fleet_shows_its_reason_and_quiet_replicas(
    redis_url: str, fleet_name: str, fleet: Fleet
) -> None:
    async with replicas(redis_url, fleet_name, 2):
        state = await fleet.pause('db "failover"', by="alice", expected_for=timedelta(hours=1))
        assert (await fleet.wait(state.version, timeout=30)).ok
        m = samples(await render_metrics(fleet, 1800))
    assert value(m, "fleetgate_fleet_paused", fleet=fleet_name, reason='db "failover"') == 1
    assert value(m, "fleetgate_fleet_pause_age_seconds", fleet=fleet_name) >= 0
    assert value(m, "fleetgate_fleet_pause_overdue", fleet=fleet_name) == 0
    assert value(m, "fleetgate_fleet_replicas", fleet=fleet_name, state="quiet") == 2
    assert value(m, "fleetgate_fleet_state_version", fleet=fleet_name) == state.version


async def test_a_pause_past_its_expected_until_is_overdue(
    redis: aioredis.Redis, fleet_name: str, fleet: Fleet
) -> None:
    now = now_utc()
    await write_state(
        redis, fleet_name, paused="1", reason="maintenance", by="bob",
        since=format_time(now - timedelta(hours=2)), expected_until=format_time(now - timedelta(minutes=1)),
    )
    m = samples(await render_metrics(fleet, 1800))
    assert value(m, "fleetgate_fleet_pause_overdue", fleet=fleet_name) == 1
    assert value(m, "fleetgate_fleet_pause_age_seconds", fleet=fleet_name) >= 7200


async def test_a_long_window_is_not_overdue_before_it_ends_whatever_max_pause_says(
    redis: aioredis.Redis, fleet_name: str, fleet: Fleet
) -> None:
    now = now_utc()
    await write_state(
        redis, fleet_name, paused="1", reason="migration", by="bob",
        since=format_time(now - timedelta(hours=2)), expected_until=format_time(now + timedelta(hours=1)),
    )
    assert value(samples(await render_metrics(fleet, 1800)), "fleetgate_fleet_pause_overdue", fleet=fleet_name) == 0


@pytest.mark.parametrize(("age_min", "overdue"), [(29, 0), (31, 1)])
async def test_a_pause_without_a_window_is_overdue_past_max_pause(
    redis: aioredis.Redis, fleet_name: str, fleet: Fleet, age_min: int, overdue: int
) -> None:
    since = now_utc() - timedelta(minutes=age_min)
    await write_state(redis, fleet_name, paused="1", reason="forgotten", by="carol", since=format_time(since))
    m = samples(await render_metrics(fleet, 1800))
    assert value(m, "fleetgate_fleet_pause_overdue", fleet=fleet_name) == overdue


async def test_stale_and_unacknowledged_replicas_are_counted(
    redis: aioredis.Redis, fleet_name: str, fleet: Fleet
) -> None:
    await write_state(redis, fleet_name, version="3", paused="1", reason="x", by="d", since=format_time(now_utc()))
    await write_record(redis, fleet_name, "fresh-behind", applied_version=2, age_s=1)
    await write_record(redis, fleet_name, "fresh-current", applied_version=3, age_s=1)
    await write_record(redis, fleet_name, "silent", applied_version=1, age_s=600)
    m = samples(await render_metrics(fleet, 1800))
    assert value(m, "fleetgate_fleet_replicas", fleet=fleet_name, state="stale") == 1
    assert value(m, "fleetgate_fleet_replicas", fleet=fleet_name, state="running") == 2
    # the silent one is behind too, but it is stale, not unacknowledged
    assert value(m, "fleetgate_fleet_unacknowledged", fleet=fleet_name) == 1


async def test_a_member_of_the_replicas_set_that_is_not_a_replica_id_does_not_break_them(
    redis: aioredis.Redis, fleet_name: str, fleet: Fleet
) -> None:
    await write_record(redis, fleet_name, "fresh-1", applied_version=0, age_s=1)
    await redis.zadd(Keys(fleet_name).replicas, {"bad id": int(now_utc().timestamp() * 1000)})
    m = samples(await render_metrics(fleet, 1800))
    assert value(m, "fleetgate_fleet_replicas", fleet=fleet_name, state="running") == 1
    assert sum(value(m, "fleetgate_fleet_replicas", fleet=fleet_name, state=s)
               for s in ("running", "paused", "quiet", "stale")) == 1
    assert (await fleet.status()).unreadable == 1
    assert value(m, "fleetgate_fleet_replicas_unreadable", fleet=fleet_name) == 1


async def test_the_unreadable_gauge_is_0_while_every_entry_reads(
    redis: aioredis.Redis, fleet_name: str, fleet: Fleet
) -> None:
    await write_record(redis, fleet_name, "fresh-1", applied_version=0, age_s=1)
    m = samples(await render_metrics(fleet, 1800))
    assert value(m, "fleetgate_fleet_replicas_unreadable", fleet=fleet_name) == 0


async def test_get_metrics_serves_the_prometheus_text_without_a_token(
    redis_url: str, fleet_name: str
) -> None:
    settings = CoordinatorSettings.model_validate(
        {"redis_url": redis_url, "fleet": fleet_name, "admin_token": ADMIN}
    )
    app = create_app(settings, run_watcher=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://c"
    ) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "fleetgate_fleet_pause_overdue" in response.text


async def test_metrics_auth_makes_metrics_need_a_token(redis_url: str, fleet_name: str) -> None:
    settings = CoordinatorSettings.model_validate(
        {"redis_url": redis_url, "fleet": fleet_name, "admin_token": ADMIN, "metrics_auth": True}
    )
    app = create_app(settings, run_watcher=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://c"
    ) as client:
        assert (await client.get("/metrics")).status_code == 401
        ok = await client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
        assert ok.status_code == 200


# ---------------------------------------------------------------------------- watcher


def watcher_settings(**extra: Any) -> CoordinatorSettings:
    return CoordinatorSettings.model_validate(
        {"overdue_log_interval": 0.2, "restore_interval": 0.2, **extra}
    )


@pytest.fixture
async def overdue(redis: aioredis.Redis, fleet_name: str) -> AsyncIterator[None]:
    await write_state(
        redis, fleet_name, paused="1", reason="forgot to resume", by="erin",
        since=format_time(now_utc() - timedelta(hours=1)),
    )
    yield


async def test_the_watcher_logs_a_structured_warning_per_interval_while_overdue(
    overdue: None, fleet: Fleet, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.web.watcher")
    watcher = await OverdueWatcher(fleet, watcher_settings()).start()
    try:
        await until(lambda: _true(watcher.warnings >= 3), timeout=20)
    finally:
        await watcher.stop()
    records = [r for r in caplog.records if getattr(r, "event", None) == "pause_overdue"]
    assert len(records) >= 3
    first = records[0]
    assert first.levelno == logging.WARNING
    assert (first.fleet, first.reason, first.by) == (fleet_name, "forgot to resume", "erin")  # type: ignore[attr-defined]
    assert first.age_s >= 3600  # type: ignore[attr-defined]
    assert "fleet=" in first.getMessage() and "age=1h00m" in first.getMessage()
    # once per interval, never more often
    gaps = [b.created - a.created for a, b in itertools.pairwise(records)]
    assert all(gap >= 0.19 for gap in gaps), gaps


async def test_the_watcher_rate_limits_to_one_line_per_interval(
    overdue: None, fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    watcher = OverdueWatcher(fleet, watcher_settings(overdue_log_interval=3600))
    for _ in range(5):
        await watcher.check()
    assert watcher.warnings == 1


async def test_the_watcher_says_so_once_when_the_pause_is_over(
    overdue: None, fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.web.watcher")
    watcher = OverdueWatcher(fleet, watcher_settings())
    await watcher.check()
    await fleet.resume(by="erin")
    await watcher.check()
    await watcher.check()
    assert watcher.warnings == 1
    assert caplog.text.count("no longer overdue") == 1


async def test_the_watcher_is_silent_while_nothing_is_overdue(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    await fleet.pause("fresh", by="f", expected_for=timedelta(hours=1))
    watcher = OverdueWatcher(fleet, watcher_settings())
    await watcher.check()
    assert watcher.warnings == 0


async def test_the_watcher_restores_a_state_hash_redis_lost(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, fleet: Fleet
) -> None:
    # replicas that poll rarely, so the coordinator's watcher is the one that restores
    async with replicas(redis_url, fleet_name, 2, poll_interval=60, heartbeat_interval=30):
        state = await fleet.pause("keep me", by="gil")
        assert (await fleet.wait(state.version, timeout=30)).ok
        await redis.delete(Keys(fleet_name).state)
        watcher = OverdueWatcher(fleet, watcher_settings())
        await watcher.check()
        restored = await fleet.state()
    assert watcher.restores == 1
    assert restored.paused and restored.reason == "keep me" and restored.version == state.version


async def test_the_watcher_survives_redis_going_away(private_redis: LocalRedis, caplog: pytest.LogCaptureFixture) -> None:
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        watcher = await OverdueWatcher(Fleet(client, "away"), watcher_settings()).start()
        private_redis.kill()
        await watcher.check()
        await watcher.check()
        assert caplog.text.count("cannot reach Redis") == 1
        await watcher.stop()
        await watcher.stop()  # idempotent
    finally:
        await client.aclose()


@pytest.mark.slow
def test_fleetgate_serve_logs_overdue_pauses_as_json_lines(
    redis_url: str, fleet_name: str, processes: Processes
) -> None:
    """The serve process runs the watcher: a JSON warning line with fleet, reason, by, age."""
    import redis as syncredis

    client = syncredis.Redis.from_url(redis_url, decode_responses=True)
    client.hset(Keys(fleet_name).state, mapping={
        "version": "1", "paused": "1", "reason": "left paused", "by": "hal",
        "since": format_time(now_utc() - timedelta(hours=3)),
    })
    client.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env.update({
        "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_FLEET": fleet_name, "FLEETGATE_ADMIN_TOKEN": ADMIN,
        "FLEETGATE_OVERDUE_LOG_INTERVAL": "0.2",
    })
    proc = processes.start(
        [FLEETGATE, "serve", "--port", str(free_port()), "--json"],
        stdout=subprocess.DEVNULL, env=env, cwd=ROOT,
    )
    found: list[dict[str, Any]] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            record = json.loads(line)
            if record.get("event") == "pause_overdue":
                found.append(record)
                if len(found) == 2:
                    break
    finally:
        proc.terminate()
        _, rest = proc.communicate(timeout=20)
    assert proc.returncode == 0, rest  # serve ends a SIGTERM with status 0
    assert "Traceback" not in rest
    assert len(found) == 2, found
    assert found[0]["level"] == "WARNING"
    assert (found[0]["fleet"], found[0]["reason"], found[0]["by"]) == (fleet_name, "left paused", "hal")
    assert found[0]["age_s"] >= 3 * 3600


async def _true(condition: bool) -> bool:
    return condition


async def _slow_to_cancel() -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.3)  # a cleanup that takes a while
        raise


async def test_a_cancelled_stop_of_the_watcher_is_cancelled_itself(fleet: Fleet) -> None:
    """Always re-raise CancelledError: stop() waits for the watcher's task, and a cancellation of
    the caller in the meantime is the caller's, not swallowed as the task's."""
    watcher = OverdueWatcher(fleet, watcher_settings())
    inner = watcher._task = asyncio.create_task(_slow_to_cancel())
    await asyncio.sleep(0)
    stopping = asyncio.create_task(watcher.stop())
    await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await asyncio.wait([inner])
