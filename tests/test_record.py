"""replica.control.record: a replica's record and acknowledgements, as a change and a heartbeat write them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import hiredis
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, until

from coordinator import Fleet
from replica import PausablePool
from replica.contract import RECORD_FIELDS, RECORD_TTL_HEARTBEATS, Ack, FleetState, Keys
from replica.control.record import CHANGE_FIELDS, ReplicaRecord


class Source:
    """What a controller shows the record, settable."""

    def __init__(self) -> None:
        self.fleet_held = False
        self.resume_at: datetime | None = None
        self.subscribed = True


async def _noop(item: Any) -> None:
    return None


def _record(source: Source, **kw: Any) -> tuple[PausablePool, ReplicaRecord]:
    pool = PausablePool(_noop)
    record = ReplicaRecord(pool, source, Keys("orders"), "pod-1", heartbeat_interval=10.0,
                           poll_interval=1.0, host="h", **kw)
    return pool, record


def _commands(wire: bytes) -> list[list[Any]]:
    reader = hiredis.Reader(encoding="utf-8")
    reader.feed(wire)
    out = []
    while (command := reader.gets()) is not False:
        out.append(command)
    return out


def test_a_heartbeat_writes_every_field_and_a_change_only_its_own() -> None:
    source = Source()
    _pool, record = _record(source, extra_fields=lambda: {"shard": 3, "paused": "no!"})
    full = record.fields()
    assert set(RECORD_FIELDS) <= set(full) and full["shard"] == "3"
    assert full["paused"] == "0"  # extra fields never override the contract's
    assert set(record.fields(full=False)) == set(CHANGE_FIELDS)
    commands = record.commands()
    assert [c[0] for c in commands] == ["HSET", "PEXPIRE", "ZADD"]
    assert commands[1][2] == 30_000  # three heartbeats
    assert record.remove_commands() == [("DEL", record.key),
                                        ("ZREM", Keys("orders").replicas, "pod-1")]


def test_a_failing_extra_fields_callback_still_leaves_a_whole_record() -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("broken")

    _pool, record = _record(Source(), extra_fields=broken)
    assert set(RECORD_FIELDS) <= set(record.fields())


def test_the_hand_built_change_matches_the_record_fields_and_a_real_ack() -> None:
    source = Source()
    pool, record = _record(source)
    pool.hold("db down", "fleet")
    source.fleet_held = True
    source.resume_at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    record.set_applied(7, '{"version": 7}', "2026-11-30T08:00:00.000Z")
    record.set_quiet_at("2026-11-30T08:00:00.001Z")
    commands = _commands(record.change_wire({"quiet", "applied"}))
    assert [c[0] for c in commands] == ["CLIENT", "HSET", "CLIENT", "PEXPIRE", "CLIENT",
                                        "PUBLISH"]
    hset = commands[1]
    written = dict(zip(hset[2::2], hset[3::2], strict=True))
    expected = record.fields(full=False)
    written.pop("heartbeat_at"), expected.pop("heartbeat_at")
    assert written == expected
    assert json.loads(written["holds"]) == {"fleet": "db down"}
    assert written["applied_version"] == "7" and written["quiet"] == "1"
    ack = Ack.from_json(commands[5][2])
    assert (ack.replica, ack.version, ack.event, ack.fleet_held, ack.quiet) == (
        "pod-1", 7, "applied", True, True)
    assert ack.resume_at == source.resume_at
    assert commands[5][2] == Ack(ack.replica, ack.version, ack.event, ack.fleet_held,
                                 ack.quiet, ack.in_flight, ack.at, ack.resume_at).to_json()


async def test_a_change_writes_the_same_record_fields_a_heartbeat_would(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    """The fast path (change_wire, RESP built by hand) and fields(full=False) must agree."""
    async with Replicas(redis_url, fleet_name, 1, heartbeat_interval=30.0) as replicas:
        (controller,) = replicas.controllers
        fleet = Fleet(redis, fleet_name)
        for step in ("pause", "resume"):
            if step == "pause":
                state = await fleet.pause("compare", by="t")
            else:
                state = await fleet.resume(by="t")
            assert (await fleet.wait(state.version, timeout=10)).ok
            reader = hiredis.Reader(encoding="utf-8")
            reader.feed(controller._record.change_wire({"applied"}))
            commands = []
            while (command := reader.gets()) is not False:
                commands.append(command)
            hset = next(c for c in commands if c[0] == "HSET")
            assert hset[1] == Keys(fleet_name).replica("pod-0")
            written = dict(zip(hset[2::2], hset[3::2], strict=True))
            expected = controller._record.fields(full=False)
            assert set(expected) == set(CHANGE_FIELDS)
            assert set(written) == set(expected)
            written.pop("heartbeat_at"), expected.pop("heartbeat_at")
            assert written == expected
            assert written["applied_version"] == str(state.version)
            publish = next(c for c in commands if c[0] == "PUBLISH")
            ack = Ack.from_json(publish[2])
            assert ack.version == state.version and ack.fleet_held is (step == "pause")
            assert publish[2] == Ack(ack.replica, ack.version, ack.event, ack.fleet_held,
                                     ack.quiet, ack.in_flight, ack.at, ack.resume_at).to_json()
            record = await redis.hgetall(Keys(fleet_name).replica("pod-0"))
            assert {k: record[k] for k in expected} == expected


async def test_the_record_expires_a_few_heartbeats_after_the_last_one(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    async with Replicas(redis_url, fleet_name, 1, heartbeat_interval=2.0):
        ttl = await redis.pttl(Keys(fleet_name).replica("pod-0"))
        assert 0 < ttl <= 2000 * RECORD_TTL_HEARTBEATS
        record = await redis.hgetall(Keys(fleet_name).replica("pod-0"))
        assert record["heartbeat_interval"] == "2"

async def test_the_record_carries_extra_fields_and_the_pool_counters(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    replica = Replica(redis_url, fleet_name, "pod-x", heartbeat_interval=0.2,
                      extra_fields=lambda: {"queue_capacity": 7, "paused": "overridden?"})
    await replica.start()
    try:
        replica.pool.put_nowait("one")
        await until(lambda: replica.pool.stats().processed == 1)
        fleet = Fleet(redis, fleet_name)
        state = await fleet.pause("counting", by="t")  # a change writes the record at once
        assert (await fleet.wait(state.version, timeout=10)).ok
        key = Keys(fleet_name).replica("pod-x")
        await until(lambda: _field_is(redis, key, "processed", "1"))  # the next heartbeat
        record = await redis.hgetall(key)
        assert record["queue_capacity"] == "7"
        assert record["paused"] == "1"  # extra fields never override the contract's
        assert record["processed"] == "1" and record["failed"] == "0"
        assert json.loads(record["holds"]) == {"fleet": "counting"}
        assert FleetState.from_json(record["applied_state"], fleet_name) == state
    finally:
        await replica.stop()

async def _field_is(redis: aioredis.Redis, key: str, field: str, value: str) -> bool:
    return bool(await redis.hget(key, field) == value)
