"""A fleet's backlog limit (issue 21, points 6 and 7), on real Redis servers: the limits hash
(``replica.contract.limits``), set and cleared by ``Fleet.set_limit``/``clear_limit`` and
audited, and obeyed by ``Fleet.enqueue`` in the script that adds each batch
(``replica/contract/enqueue.lua``): whole or nothing, no overshoot when producers race, ``wait``
released by a consumer acknowledging, and a garbage limits hash refusing every batch (fail
closed) without crashing a reader."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.snapshots import Snapshots
from coordinator.web.metrics import render_fleets
from replica.contract import WORK_GROUP, Keys
from replica.contract.limits import MAX_BACKLOG
from replica.errors import BacklogFull, BacklogLimitUnreadable, ContractError
from replica.link.connect import connect
from tests.fleetkit import until
from tests.topology import Cluster, shared_cluster_fixture  # noqa: F401 (the fixture)


@pytest.fixture(name="client")
async def client_fixture(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield redis
    finally:
        await redis.aclose()


def gate(client: aioredis.Redis, name: str) -> Fleet:
    return Fleet(client, name, min_replicas_ack=0)


async def consume(client: aioredis.Redis, name: str, n: int) -> list[str]:
    """Read ``n`` entries as a replica does (delivered, not acknowledged): their ids."""
    keys = Keys(name)
    try:
        await client.xgroup_create(keys.work, WORK_GROUP, id="0", mkstream=True)
    except aioredis.ResponseError:
        pass  # BUSYGROUP: made by an earlier call
    got = await client.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=n)
    return [entry_id for entry_id, _ in got[0][1]] if got else []


def items(n: int, tag: str = "i") -> list[dict[str, Any]]:
    return [{"id": f"{tag}-{i}", "n": i} for i in range(n)]


# ---------------------------------------------------------------------------- no limit


async def test_without_a_limit_enqueueing_goes_on_during_a_pause(
    client: aioredis.Redis, fleet_name: str
) -> None:
    fleet = gate(client, fleet_name)
    await fleet.pause("db maintenance", by="alice")
    assert (await fleet.limit()).to_dict() is None
    ids = await fleet.enqueue(items(300))
    assert len(ids) == 300 and await client.xlen(Keys(fleet_name).work) == 300
    entries = await client.xrange(Keys(fleet_name).work, count=1)
    assert json.loads(entries[0][1]["item"]) == {"id": "i-0", "n": 0}


# ---------------------------------------------------------------------------- reject


async def test_a_batch_past_the_limit_is_refused_whole_and_one_that_fits_is_written(
    client: aioredis.Redis, fleet_name: str
) -> None:
    fleet = gate(client, fleet_name)
    await fleet.set_limit(10, by="alice")
    assert len(await fleet.enqueue(items(8))) == 8
    with pytest.raises(BacklogFull) as caught:
        await fleet.enqueue(items(3, "late"))
    exc = caught.value
    assert (exc.backlog, exc.limit, exc.count, exc.exact) == (8, 10, 3, True)
    assert not isinstance(exc, BacklogLimitUnreadable)
    assert "8 not yet done, limit 10" in str(exc)
    assert await client.xlen(Keys(fleet_name).work) == 8  # nothing of the batch
    assert len(await fleet.enqueue(items(2, "fits"))) == 2
    with pytest.raises(BacklogFull):
        await fleet.enqueue(["one more"])
    assert await client.xlen(Keys(fleet_name).work) == 10


async def test_pending_entries_count_and_acknowledged_ones_make_room(
    client: aioredis.Redis, fleet_name: str
) -> None:
    """The limit counts the work not yet done: waiting plus pending. Acknowledged entries stay
    in the stream until a trim, and do not count."""
    fleet, work = gate(client, fleet_name), Keys(fleet_name).work
    await fleet.set_limit(5, by="alice")
    await fleet.enqueue(items(5))
    taken = await consume(client, fleet_name, 3)  # 2 waiting, 3 pending
    with pytest.raises(BacklogFull) as caught:
        await fleet.enqueue(["x"])
    assert caught.value.backlog == 5
    await client.xack(work, WORK_GROUP, *taken)
    assert await client.xlen(work) == 5  # still in the stream, done
    assert len(await fleet.enqueue(items(3, "room"))) == 3
    with pytest.raises(BacklogFull):
        await fleet.enqueue(["x"])


async def test_a_lag_redis_cannot_say_is_counted_by_the_script(
    client: aioredis.Redis, fleet_name: str
) -> None:
    """After an XDEL of an entry not yet delivered, XINFO GROUPS says lag nil: the script
    counts what waits after the last delivered entry itself."""
    fleet, work = gate(client, fleet_name), Keys(fleet_name).work
    ids = await fleet.enqueue(items(5))
    await consume(client, fleet_name, 2)
    await client.xdel(work, ids[3])
    assert (await client.xinfo_groups(work))[0]["lag"] is None  # what Redis says
    await fleet.set_limit(6, by="alice")  # 2 pending + 2 waiting = 4
    assert len(await fleet.enqueue(items(2, "fits"))) == 2
    with pytest.raises(BacklogFull) as caught:
        await fleet.enqueue(["x"])
    assert caught.value.backlog == 6


async def test_two_producers_racing_at_the_limit_never_write_past_it(
    redis_url: str, fleet_name: str
) -> None:
    """Two producers, each with its own client and connections, add batches of 3 as fast as
    they can until refused: the stream ends at the limit or just under it (100 is no multiple
    of 3), never past it, and every batch is there whole or not at all."""
    limit = 100
    clients = [aioredis.Redis.from_url(redis_url, decode_responses=True) for _ in range(2)]
    try:
        await gate(clients[0], fleet_name).set_limit(limit, by="alice")

        async def produce(client: aioredis.Redis, tag: str) -> int:
            fleet, written, refused = gate(client, fleet_name), 0, 0
            while refused < 5:  # refused now and then, as the other one fills the room
                try:
                    written += len(await fleet.enqueue(items(3, f"{tag}{written}")))
                except BacklogFull:
                    refused += 1
            return written

        written = await asyncio.gather(produce(clients[0], "a"), produce(clients[1], "b"))
        length = await clients[0].xlen(Keys(fleet_name).work)
        assert length == sum(written) and limit - 3 < length <= limit
        assert all(w > 0 for w in written), written  # both got in: they did race
        tags = [json.loads(f["item"])["id"].rsplit("-", 1)[0]
                for _, f in await clients[0].xrange(Keys(fleet_name).work)]
        assert all(tags.count(t) == 3 for t in tags)  # whole batches only
    finally:
        for client in clients:
            await client.aclose()


# ---------------------------------------------------------------------------- wait


async def test_a_waiting_producer_is_let_in_by_a_consumer_acknowledging(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        fleet, work = gate(client, fleet_name), Keys(fleet_name).work
        await fleet.set_limit(4, "wait", by="alice")
        await fleet.enqueue(items(4))

        async def script_runs() -> int:
            stats = await client.info("commandstats")
            return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

        before = await script_runs()
        waiting = asyncio.create_task(fleet.enqueue(["late"], timeout=60.0))
        await until(lambda: _at_least(script_runs, before + 3))  # refused, polled, refused
        assert not waiting.done() and await client.xlen(work) == 4
        taken = await consume(client, fleet_name, 1)
        await client.xack(work, WORK_GROUP, *taken)  # the replica's work is done: room
        async with asyncio.timeout(30):
            ids = await waiting
        assert len(ids) == 1 and await client.xlen(work) == 5
    finally:
        await client.aclose()


async def _at_least(read: Any, value: int) -> bool:
    return bool(await read() >= value)


async def test_a_waiting_producer_gives_up_at_its_timeout_with_nothing_written(
    client: aioredis.Redis, fleet_name: str
) -> None:
    fleet = gate(client, fleet_name)
    await fleet.set_limit(2, "wait", by="alice")
    await fleet.enqueue(items(2))
    with pytest.raises(BacklogFull) as caught:
        await fleet.enqueue(["late"], timeout=0.5)
    assert caught.value.waited_s >= 0.5 and "after waiting" in str(caught.value)
    assert await client.xlen(Keys(fleet_name).work) == 2


async def test_a_batch_larger_than_the_limit_is_refused_at_once_even_when_waiting(
    client: aioredis.Redis, fleet_name: str
) -> None:
    fleet = gate(client, fleet_name)
    await fleet.set_limit(3, "wait", by="alice")
    with pytest.raises(BacklogFull) as caught:
        await fleet.enqueue(items(4), timeout=3600)
    assert caught.value.waited_s < 3600 and "never fits" in str(caught.value)
    assert await client.xlen(Keys(fleet_name).work) == 0


# ---------------------------------------------------------------------------- garbage


GARBAGE = [
    {"max_backlog": "abc"},
    {"max_backlog": "0"},
    {"max_backlog": "-5"},
    {"max_backlog": "1e3"},
    {"max_backlog": " 5"},
    {"max_backlog": "99999999999999"},
    {"max_backlog": ""},
    {"max_backlog": "5", "when_full": "maybe"},
    {"when_full": "wait"},
    {"max_backlog": b"\xff\xfe"},
]


@pytest.mark.parametrize("fields", GARBAGE, ids=lambda f: repr(f)[:40])
async def test_a_garbage_limits_hash_refuses_every_batch_and_every_reader_says_why(
    client: aioredis.Redis, fleet_name: str, fields: dict[str, Any]
) -> None:
    """Fail closed: the operator wanted a bound, and one that cannot be read might be any
    number. Nothing is written, the reason is given, status and /metrics read on."""
    fleet, keys = gate(client, fleet_name), Keys(fleet_name)
    await fleet.enqueue(["before"])
    await client.hset(keys.limits, mapping=fields)
    with pytest.raises(BacklogLimitUnreadable) as caught:
        await fleet.enqueue(["refused"])
    assert isinstance(caught.value, BacklogFull) and caught.value.count == 1
    assert "cannot be read" in str(caught.value)
    assert await client.xlen(keys.work) == 1
    reading = await fleet.limit()
    assert reading.limit is None and reading.error
    text = await render_fleets(Snapshots(0.0), [fleet], 1800.0)
    got = _samples(text, fleet_name)
    assert "fleetgate_fleet_backlog_limit" not in got and got["fleetgate_fleet_backlog"] == 1
    summary = (await Snapshots(0.0).summary(fleet)).counts()
    assert summary["backlog_limit"]["error"] == reading.error
    assert (await fleet.clear_limit(by="alice")).changed
    assert len(await fleet.enqueue(["after"])) == 1  # cleared: obeyed again


async def test_a_limits_key_of_another_type_refuses_every_batch(
    client: aioredis.Redis, fleet_name: str
) -> None:
    fleet, keys = gate(client, fleet_name), Keys(fleet_name)
    await client.set(keys.limits, "5000")
    with pytest.raises(BacklogLimitUnreadable, match="not a hash"):
        await fleet.enqueue(["x"])
    assert "not a hash" in (await fleet.limit()).error
    assert (await Snapshots(0.0).summary(fleet)).counts()["backlog_limit"]["error"]
    change = await fleet.set_limit(7, by="alice")  # replaced, whatever it was
    assert change.before.error and (await fleet.limit()).limit.max_backlog == 7  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- set, clear, show


async def test_setting_and_clearing_the_limit_is_audited_with_who_and_when(
    client: aioredis.Redis, fleet_name: str
) -> None:
    fleet = gate(client, fleet_name)
    await fleet.pause("db", by="bob")
    first = await fleet.set_limit(5000, by="alice")
    assert first.before.to_dict() is None and first.limit is not None
    second = await fleet.set_limit(6000, "wait", by="carol")
    assert second.before.limit == first.limit
    reading = await fleet.limit()
    assert reading.limit is not None
    assert (reading.limit.max_backlog, reading.limit.when_full, reading.limit.by) == (6000, "wait", "carol")
    cleared = await fleet.clear_limit(by="dave")
    assert cleared.changed and cleared.before.limit == reading.limit
    assert not (await fleet.clear_limit(by="erin")).changed  # nothing to clear: nothing written
    events = await fleet.history(10)
    assert [(e.action, e.by) for e in events[:3]] == [
        ("limit_cleared", "dave"), ("limit_set", "carol"), ("limit_set", "alice")]
    assert events[1].reason == "max_backlog 6000, when full: wait"
    assert events[1].version == 1 and events[1].at is not None  # the state's version then
    raw = await client.xrevrange(Keys(fleet_name).audit, count=3)
    assert raw[1][1]["max_backlog"] == "6000" and raw[1][1]["when_full"] == "wait"


@pytest.mark.parametrize("bad", [0, -1, MAX_BACKLOG + 1, True, 2.5, "10"])
async def test_a_limit_that_is_not_a_whole_number_in_bounds_is_refused_before_anything_is_sent(
    client: aioredis.Redis, fleet_name: str, bad: Any
) -> None:
    fleet = gate(client, fleet_name)
    with pytest.raises(ContractError):
        await fleet.set_limit(bad, by="alice")
    with pytest.raises(ContractError):
        await fleet.set_limit(5, "sometimes", by="alice")
    assert not await client.exists(Keys(fleet_name).limits, Keys(fleet_name).audit)


async def test_status_and_metrics_show_the_limit_and_no_series_without_one(
    client: aioredis.Redis, fleet_name: str
) -> None:
    fleet = gate(client, fleet_name)
    await fleet.enqueue(items(3))
    text = await render_fleets(Snapshots(0.0), [fleet], 1800.0)
    assert "fleetgate_fleet_backlog_limit" not in _samples(text, fleet_name)
    assert (await Snapshots(0.0).summary(fleet)).counts()["backlog_limit"] is None
    await fleet.set_limit(50, by="alice")
    text = await render_fleets(Snapshots(0.0), [fleet], 1800.0)
    assert _samples(text, fleet_name)["fleetgate_fleet_backlog_limit"] == 50
    limit = (await Snapshots(0.0).summary(fleet)).counts()["backlog_limit"]
    assert limit["max_backlog"] == 50 and limit["when_full"] == "reject" and limit["error"] is None


def _samples(text: bytes, fleet: str) -> dict[str, float]:
    return {s.name: s.value for family in text_string_to_metric_families(text.decode())
            for s in family.samples if s.labels.get("fleet") == fleet}


# ---------------------------------------------------------------------------- cluster


async def test_the_limit_holds_on_a_redis_cluster(shared_cluster: Cluster) -> None:
    """The work stream and the limits hash share the fleet's hash tag: one slot, one script."""
    redis = connect(shared_cluster.url, decode_responses=True)
    try:
        for name in ("limited-a", "limited-b"):  # fleets of different slots
            fleet = gate(redis, name)
            await fleet.set_limit(4, by="alice")
            assert len(await fleet.enqueue(items(4))) == 4
            with pytest.raises(BacklogFull) as caught:
                await fleet.enqueue(["x"])
            assert (caught.value.backlog, caught.value.limit) == (4, 4)
            assert (await fleet.limit()).limit is not None
    finally:
        await redis.aclose()
