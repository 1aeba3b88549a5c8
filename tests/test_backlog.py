"""A fleet's backlog (issue 21, point 1): what waits in its work stream, read on a private Redis
(``coordinator.fleet.backlog``), shown by ``fleetgate status``/``fleets``, the API and
``/metrics``, and read once per snapshot however many ask."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.backlog import Backlog, id_time, read_backlog
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.snapshots import Snapshots
from coordinator.web.api import create_app
from coordinator.web.metrics import render_fleets
from replica.contract import WORK_GROUP, Keys
from replica.link.connect import connect
from tests.apikit import VIEW, auth, client_for, make_settings, strict_json
from tests.clikit import run
from tests.fleetkit import until
from tests.procs import base_env, enqueue, replica_processes
from tests.topology import Cluster, redis_cluster_fixture  # noqa: F401 (the fixture)


async def two_pending(redis: aioredis.Redis, fleet: str) -> bool:
    """The replica (capacity 2, each item a long sleep) took its two items."""
    return (await read_backlog(redis, Keys(fleet))).pending == 2


@pytest.fixture(name="client")
async def client_fixture(private_redis: LocalRedis) -> AsyncIterator[aioredis.Redis]:
    """A client of the test's own server (decoded replies)."""
    redis = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        yield redis
    finally:
        await redis.aclose()


async def add(redis: aioredis.Redis, fleet: str, n: int) -> list[str]:
    return [await redis.xadd(Keys(fleet).work, {"n": str(i)}) for i in range(n)]


async def consume(redis: aioredis.Redis, fleet: str, n: int) -> None:
    """Read ``n`` entries as a replica does (XREADGROUP, not acknowledged)."""
    keys = Keys(fleet)
    await redis.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    await redis.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=n)


def samples(text: bytes, fleet: str) -> dict[str, float]:
    return {s.name: s.value for family in text_string_to_metric_families(text.decode())
            for s in family.samples if s.labels.get("fleet") == fleet}


async def test_a_fleet_with_no_work_stream_has_nothing_waiting(
    client: aioredis.Redis, fleet_name: str
) -> None:
    b = await read_backlog(client, Keys(fleet_name))
    assert (b.backlog, b.pending, b.dead_letters, b.oldest_waiting_s()) == (0, 0, 0, 0.0)
    assert b.stream is False


async def test_every_entry_waits_before_a_replica_creates_the_group(
    client: aioredis.Redis, fleet_name: str
) -> None:
    ids = await add(client, fleet_name, 5)
    b = await read_backlog(client, Keys(fleet_name))
    assert (b.backlog, b.pending, b.group) == (5, 0, False)
    assert b.oldest_waiting_at == id_time(ids[0])


async def test_entries_read_but_not_acknowledged_are_pending_and_the_rest_wait(
    client: aioredis.Redis, fleet_name: str
) -> None:
    ids = await add(client, fleet_name, 10)
    await consume(client, fleet_name, 3)
    b = await read_backlog(client, Keys(fleet_name))
    assert (b.backlog, b.pending, b.length) == (7, 3, 10)
    assert b.oldest_waiting_at == id_time(ids[3])  # the first entry after last-delivered-id
    await client.xack(Keys(fleet_name).work, WORK_GROUP, ids[0])
    assert (await read_backlog(client, Keys(fleet_name))).pending == 2


async def test_the_backlog_is_unknown_after_an_xdel_redis_cannot_account_for(
    client: aioredis.Redis, fleet_name: str
) -> None:
    ids = await add(client, fleet_name, 5)
    await consume(client, fleet_name, 2)
    await client.xdel(Keys(fleet_name).work, ids[3])  # an undelivered entry: lag is now nil
    groups = await client.xinfo_groups(Keys(fleet_name).work)
    assert groups[0]["lag"] is None  # what Redis says, so the test means what it says
    b = await read_backlog(client, Keys(fleet_name))
    assert b.backlog is None and b.pending == 2
    assert b.oldest_waiting_at == id_time(ids[2])  # still known: the first undelivered entry
    text = await render_fleets(Snapshots(0.0), [Fleet(client, fleet_name)], 1800.0)
    got = samples(text, fleet_name)
    assert "fleetgate_fleet_backlog" not in got  # unknown: no series, never a wrong number
    assert got["fleetgate_fleet_pending"] == 2


async def test_nothing_after_the_last_delivered_entry_is_no_backlog_even_when_lag_is_nil(
    client: aioredis.Redis, fleet_name: str
) -> None:
    ids = await add(client, fleet_name, 4)
    await consume(client, fleet_name, 2)
    await client.xdel(Keys(fleet_name).work, ids[2])
    await client.xreadgroup(WORK_GROUP, "r1", {Keys(fleet_name).work: ">"}, count=10)
    b = await read_backlog(client, Keys(fleet_name))
    assert (b.backlog, b.pending, b.oldest_waiting_s()) == (0, 3, 0.0)


async def test_dead_letters_are_the_length_of_the_dead_letter_stream(
    client: aioredis.Redis, fleet_name: str
) -> None:
    for i in range(3):
        await client.xadd(Keys(fleet_name).dead, {"n": str(i)})
    assert (await read_backlog(client, Keys(fleet_name))).dead_letters == 3


async def test_a_work_key_that_is_not_a_stream_leaves_the_backlog_unknown_not_the_fleet(
    client: aioredis.Redis, fleet_name: str
) -> None:
    await client.set(Keys(fleet_name).work, "oops")
    fleet = Fleet(client, fleet_name)
    await fleet.pause("drill", by="t")
    b = await read_backlog(client, Keys(fleet_name))
    assert b.backlog is None and b.pending is None and "WRONGTYPE" in b.error
    summary = (await Snapshots(0.0).summary(fleet)).to_dict()
    assert summary["summary"]["effectively_paused"] is True
    assert summary["summary"]["backlog"] is None


async def test_the_backlog_is_read_once_per_snapshot_however_many_ask(
    client: aioredis.Redis, fleet_name: str
) -> None:
    await add(client, fleet_name, 3)
    fleet = Fleet(client, fleet_name)
    await fleet.pause("drill", by="t")
    snapshots = Snapshots(interval=60)
    before = (await client.info("commandstats")).get("cmdstat_xinfo|groups", {}).get("calls", 0)
    summaries = await asyncio.gather(*(snapshots.summary(fleet) for _ in range(20)))
    after = (await client.info("commandstats")).get("cmdstat_xinfo|groups", {}).get("calls", 0)
    assert int(after) - int(before) == 1
    assert {s.counts()["backlog"] for s in summaries} == {3}


async def test_the_api_and_metrics_show_what_a_replica_left_waiting(
    private_redis: LocalRedis, client: aioredis.Redis, fleet_name: str, tmp_path: Path
) -> None:
    """A real replica takes two items (capacity 2, each sleeps a minute); the rest wait."""
    await enqueue(client, fleet_name, 12)
    env = base_env(private_redis.url, fleet_name, workers=2, queue_size=2,
                   demo_item_seconds=120)
    async with replica_processes(1, env, tmp_path):
        await until(lambda: two_pending(client, fleet_name), 30)
        b = await read_backlog(client, Keys(fleet_name))
        assert b.backlog == 10
        first_waiting = (await client.xrange(Keys(fleet_name).work, count=3))[2][0]
        assert b.oldest_waiting_at == id_time(first_waiting)
        app = create_app(make_settings(private_redis.url, fleet_name), run_watcher=False)
        async with client_for(app) as api:
            body = strict_json(await api.get(f"/api/fleets/{fleet_name}", headers=auth(VIEW)))
            metrics = (await api.get("/metrics")).content
    s = body["summary"]
    assert (s["backlog"], s["pending"], s["dead_letters"]) == (10, 2, 0)
    assert s["oldest_waiting_s"] is not None and s["oldest_waiting_s"] >= 0
    got = samples(metrics, fleet_name)
    assert got["fleetgate_fleet_backlog"] == 10 and got["fleetgate_fleet_pending"] == 2
    assert got["fleetgate_fleet_dead_letters"] == 0
    assert got["fleetgate_fleet_oldest_waiting_seconds"] >= 0


async def pause(url: str, fleet: str) -> None:
    async with aioredis.Redis.from_url(url, decode_responses=True) as redis:
        await Fleet(redis, fleet).pause("drill", by="t")


def test_status_and_fleets_print_the_backlog(
    private_redis: LocalRedis, fleet_name: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import redis as syncredis

    monkeypatch.setenv("FLEETGATE_REDIS_URL", private_redis.url)
    with syncredis.Redis.from_url(private_redis.url, decode_responses=True) as c:
        keys = Keys(fleet_name)
        for i in range(4):
            c.xadd(keys.work, {"n": str(i)})
        c.xgroup_create(keys.work, WORK_GROUP, id="0")
        c.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=1)
        c.xadd(keys.dead, {"n": "x"})
    asyncio.run(pause(private_redis.url, fleet_name))
    code, out, err = run(capsys, "status", "--fleet", fleet_name, "--json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert (s["backlog"], s["pending"], s["dead_letters"]) == (3, 1, 1)
    code, out, err = run(capsys, "status", "--fleet", fleet_name)
    assert code == 0, err
    assert "backlog 3 waiting" in out and "1 pending, 1 dead letters" in out
    code, out, err = run(capsys, "fleets", "--json")
    assert code == 0, err
    row = next(r for r in json.loads(out)["fleets"] if r["fleet"] == fleet_name)
    assert (row["backlog"], row["pending"], row["dead_letters"]) == (3, 1, 1)


def test_a_backlog_not_read_is_unknown_not_zero() -> None:
    b = Backlog(None, None, None, None)
    assert b.figures() == {"backlog": None, "pending": None, "dead_letters": None,
                           "oldest_waiting_s": None}


async def test_the_backlog_of_fleets_in_several_slots_of_a_cluster_is_read_in_one_slot_each(
    redis_cluster: Cluster,
) -> None:
    redis = connect(redis_cluster.url, decode_responses=True)
    try:
        for i, name in enumerate(f"slot{i}" for i in range(3)):
            await add(redis, name, 3 + i)
            b = await read_backlog(redis, Keys(name))
            assert (b.backlog, b.pending, b.dead_letters) == (3 + i, 0, 0)
        assert (await read_backlog(redis, Keys("slot-none"))).backlog == 0
    finally:
        await redis.aclose()
