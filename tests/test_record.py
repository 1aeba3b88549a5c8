"""replica.control.record: a replica's record and acknowledgements, as a change and a heartbeat write them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import hiredis
import redis.asyncio as aioredis
from cpkit import Replicas

from coordinator import Fleet
from replica import PausablePool
from replica.contract import RECORD_FIELDS, Ack, Keys
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
