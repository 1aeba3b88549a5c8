"""The Redis contract: names, keys, the state's conversions and the two Lua scripts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replica.contract import (
    AUDIT_MAXLEN,
    MAX_MESSAGE_BYTES,
    RESTORE_STATE_LUA,
    SET_STATE_LUA,
    Ack,
    FleetState,
    Keys,
    clock,
    format_time,
    parse_time,
    restore_args,
    stagger_offset,
    validate_fleet,
    validate_replica_id,
)
from replica.contract.names import S_RESTORED_AT
from replica.contract.scripts import RESTORE_RAISED
from replica.errors import ContractError, InvalidMessage

T0 = datetime(2026, 11, 30, 8, 0, 0, 123000, tzinfo=UTC)


def paused_state(fleet: str = "orders", version: int = 3) -> FleetState:
    return FleetState(
        fleet=fleet,
        paused=True,
        reason="db maintenance",
        by="alice",
        since=T0,
        version=version,
        expected_until=T0 + timedelta(minutes=30),
        auto_resume_at=None,
        resume_stagger_s=0.0,
        changed_at=T0,
    )


@pytest.mark.parametrize("name", ["orders", "a", "0", "orders-eu.1_b", "a" * 63])
def test_valid_fleet_names_are_accepted(name: str) -> None:
    assert validate_fleet(name) == name


@pytest.mark.parametrize("name", ["", "Orders", "-orders", "a" * 64, "or ders", "or{d}", "ä", "x\n"])
def test_invalid_fleet_names_raise_contract_error(name: str) -> None:
    with pytest.raises(ContractError):
        validate_fleet(name)


def test_invalid_replica_ids_raise_contract_error() -> None:
    assert validate_replica_id("pod-1.a_b:c@d") == "pod-1.a_b:c@d"
    for bad in ["", "a b", "a}b", "-a", "x" * 254]:
        with pytest.raises(ContractError):
            validate_replica_id(bad)


def test_every_key_carries_the_fleet_hash_tag() -> None:
    keys = Keys("orders")
    assert keys.state == "fleetgate:{orders}:state"
    assert keys.control == "fleetgate:{orders}:control"
    assert keys.acks == "fleetgate:{orders}:acks"
    assert keys.replicas == "fleetgate:{orders}:replicas"
    assert keys.replica("pod-1") == "fleetgate:{orders}:replica:pod-1"
    assert keys.audit == "fleetgate:{orders}:audit"
    assert keys.work == "fleetgate:{orders}:work"
    assert keys.dead == "fleetgate:{orders}:dead"
    assert keys.demo_done == "fleetgate:{orders}:demo:done"
    assert keys.demo_log == "fleetgate:{orders}:demo:log"
    with pytest.raises(ContractError):
        Keys("Bad")


def test_times_are_iso_8601_utc_with_milliseconds() -> None:
    assert format_time(T0) == "2026-11-30T08:00:00.123Z"
    assert format_time(None) == ""
    assert parse_time("2026-11-30T08:00:00.123Z") == T0
    assert parse_time(b"2026-11-30T09:00:00.123+01:00") == T0
    assert parse_time("2026-11-30T08:00:00.123") == T0
    assert parse_time("") is None
    with pytest.raises(ContractError):
        parse_time("yesterday")


def test_the_clock_gives_the_time_and_its_text_within_the_same_millisecond() -> None:
    before = datetime.now(UTC)
    texts = set()
    for _ in range(2000):
        now, now_text = clock()
        stamped = parse_time(now_text)
        assert stamped is not None
        # the text is the time cut to the millisecond (rounding to the microsecond may
        # carry the time into the next one)
        assert timedelta(0) <= now - stamped <= timedelta(milliseconds=1, microseconds=1)
        texts.add(now_text)
    assert before - timedelta(milliseconds=1) <= stamped <= datetime.now(UTC)
    assert len(texts) < 2000  # remembered within a millisecond


def test_state_round_trips_through_hash_and_json() -> None:
    state = paused_state()
    assert FleetState.from_hash("orders", state.to_hash()) == state
    assert FleetState.from_json(state.to_json(), "orders") == state
    encoded = {k.encode(): v.encode() for k, v in state.to_hash().items()}
    assert FleetState.from_hash("orders", encoded) == state
    d = state.to_dict()
    assert d["since"] == "2026-11-30T08:00:00.123Z"
    assert d["auto_resume_at"] is None
    assert json.loads(json.dumps(d)) == d


def test_a_hand_written_hash_reads_leniently() -> None:
    state = FleetState.from_hash("orders", {"paused": "yes", "reason": "by hand"})
    assert state.paused and state.version == 0 and state.since is None
    assert FleetState.from_hash("orders", {}) == FleetState.initial("orders")
    with pytest.raises(InvalidMessage) as info:
        FleetState.from_hash("orders", {"paused": "maybe"})
    assert info.value.kind == "bad_state"
    with pytest.raises(InvalidMessage):
        FleetState.from_hash("orders", {"paused": "1", "version": "seven"})


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (b"\xff\xfe", "not_json"),
        ("{", "not_json"),
        ("[1, 2]", "not_object"),
        ('{"fleet": "orders", "paused": true}', "missing_field"),
        ('{"fleet": "orders", "paused": "yes", "version": 1}', "bad_field"),
        ('{"fleet": "orders", "paused": true, "version": true}', "bad_field"),
        ('{"fleet": "orders", "paused": true, "version": -1}', "bad_field"),
        ('{"fleet": "orders", "paused": true, "version": 1, "since": "soon"}', "bad_field"),
        ('{"fleet": "orders", "paused": true, "version": 1, "resume_stagger_s": -5}', "bad_field"),
        ('{"fleet": "other", "paused": true, "version": 1}', "unknown_fleet"),
        ("x" * (MAX_MESSAGE_BYTES + 1), "oversized"),
    ],
)
def test_invalid_control_messages_raise_invalid_message_with_their_kind(
    message: str | bytes, kind: str
) -> None:
    with pytest.raises(InvalidMessage) as info:
        FleetState.from_json(message, "orders")
    assert info.value.kind == kind


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda children: st.lists(children, max_size=4)
            | st.dictionaries(
                st.sampled_from(["fleet", "paused", "version", "since", "reason", "x"]),
                children,
                max_size=6,
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps(v)),
    )
)
def test_parsing_any_message_raises_nothing_but_invalid_message(message: str | bytes) -> None:
    try:
        FleetState.from_json(message, "orders")
    except InvalidMessage:
        pass
    try:
        Ack.from_json(message)
    except InvalidMessage:
        pass


def test_acks_round_trip_through_json() -> None:
    ack = Ack("pod-1", 4, "quiet", fleet_held=True, quiet=True, in_flight=0, at=T0)
    assert Ack.from_json(ack.to_json()) == ack
    with pytest.raises(InvalidMessage):
        Ack.from_json('{"replica": "pod-1", "version": 1, "event": "bogus"}')


def test_stagger_offsets_spread_evenly_over_the_window() -> None:
    peers = [f"pod-{i}" for i in range(10)]
    offsets = sorted(stagger_offset(p, 30.0, peers) for p in peers)
    assert offsets == pytest.approx([3.0 * i for i in range(10)])
    lone = stagger_offset("pod-x", 30.0)
    assert 0.0 <= lone < 30.0
    assert stagger_offset("pod-x", 30.0) == lone  # derived from the id: the same every time
    assert stagger_offset("pod-x", 0.0) == 0.0


async def run_set_state(
    redis: aioredis.Redis, keys: Keys, action: str, reason: str = "", by: str = "alice",
    now: datetime = T0, allow_create: bool = False, auto_resume_at: str = "",
) -> list[str]:
    script = redis.register_script(SET_STATE_LUA)
    result = await script(
        keys=[keys.state, keys.audit, keys.control, keys.replicas],
        args=[action, reason, by, format_time(now), "", auto_resume_at, "0", keys.fleet,
              str(AUDIT_MAXLEN), "1" if allow_create else "0"],
    )
    return list(result)


async def test_set_state_script_bumps_version_audits_and_publishes(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    async with redis.pubsub() as pubsub:
        await pubsub.subscribe(keys.control)
        await pubsub.get_message(timeout=1.0)  # the subscribe confirmation
        result = await run_set_state(redis, keys, "pause", "db maintenance")
        assert result[0] == "ok"
        message = await pubsub.get_message(timeout=5.0)
        assert message is not None
        published = FleetState.from_json(message["data"], fleet_name)
    stored = FleetState.from_hash(fleet_name, await redis.hgetall(keys.state))
    assert published == stored
    assert stored.paused and stored.version == 1 and stored.since == T0
    later = T0 + timedelta(minutes=1)
    await run_set_state(redis, keys, "pause", "db maintenance, part 2", now=later)
    again = FleetState.from_hash(fleet_name, await redis.hgetall(keys.state))
    assert again.version == 2 and again.since == T0 and again.reason == "db maintenance, part 2"
    await run_set_state(redis, keys, "resume", now=later)
    noop = await run_set_state(redis, keys, "resume", now=later)
    assert noop[0] == "noop"
    entries = await redis.xrange(keys.audit)
    assert [e[1]["action"] for e in entries] == ["pause", "hold_updated", "resume"]
    assert [e[1]["version"] for e in entries] == ["1", "2", "3"]


async def test_set_state_script_refuses_to_recreate_a_forgotten_hash_while_replicas_exist(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await redis.zadd(keys.replicas, {"pod-1": 1})
    assert await run_set_state(redis, keys, "pause", "x") == ["missing"]
    assert (await run_set_state(redis, keys, "pause", "x", allow_create=True))[0] == "ok"


async def test_a_pause_past_its_auto_resume_time_counts_as_running(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    await run_set_state(redis, keys, "pause", "window", auto_resume_at=format_time(T0))
    later = T0 + timedelta(hours=1)
    await run_set_state(redis, keys, "pause", "another", now=later)
    state = FleetState.from_hash(fleet_name, await redis.hgetall(keys.state))
    assert state.since == later  # a new pause, not the continuation of the ended one


async def test_restore_script_creates_if_absent_and_the_newest_version_wins(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    script = redis.register_script(RESTORE_STATE_LUA)
    ks = [keys.state, keys.audit, keys.control]
    v5 = paused_state(fleet_name, 5)
    v4 = paused_state(fleet_name, 4)
    assert await script(keys=ks, args=restore_args(v5, "pod-1")) == 1
    assert await script(keys=ks, args=restore_args(v4, "pod-2")) == 0
    assert FleetState.from_hash(fleet_name, await redis.hgetall(keys.state)) == v5
    paused_v7 = paused_state(fleet_name, 7)
    assert await script(keys=ks, args=restore_args(paused_v7, "pod-3")) == 1
    assert FleetState.from_hash(fleet_name, await redis.hgetall(keys.state)) == paused_v7
    entries = await redis.xrange(keys.audit)
    assert [e[1]["action"] for e in entries] == ["restore", "restore"]


async def test_restore_script_keeps_an_older_pause_and_raises_it_above_a_newer_running_state(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    script = redis.register_script(RESTORE_STATE_LUA)
    ks = [keys.state, keys.audit, keys.control]
    v5 = paused_state(fleet_name, 5)
    await redis.hset(keys.state, mapping=dict(v5.to_hash()))
    running_v7 = FleetState(fleet_name, False, "", "bob", T0, 7)
    later = T0 + timedelta(minutes=1)
    answer = await script(keys=ks, args=restore_args(running_v7, "pod-2", now=later))
    assert answer == RESTORE_RAISED  # never unpauses, never goes back
    kept = FleetState.from_hash(fleet_name, await redis.hgetall(keys.state))
    assert kept.paused and kept.reason == v5.reason and kept.since == v5.since
    # only the version moves; changed_at stays as written, so holds stay trusted (issue 19,
    # C.8): the restore is stamped in restored_at
    assert (kept.version, kept.changed_at) == (8, v5.changed_at)
    assert (await redis.hget(keys.state, "restored_at")) == format_time(later)
    (_, entry), = await redis.xrange(keys.audit)
    assert (entry["action"], entry["version"], entry["by"]) == ("restore", "8", "pod-2")
    assert "kept" in entry["reason"] and "above v7" in entry["reason"]
    # the raised pause is newer than the running state now: a second restore of it is refused
    assert await script(keys=ks, args=restore_args(running_v7, "pod-3")) == 0


async def test_restore_script_stamps_restored_at_whenever_it_writes_the_hash(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    script = redis.register_script(RESTORE_STATE_LUA)
    ks = [keys.state, keys.audit, keys.control]
    at = T0 + timedelta(minutes=2)
    assert await script(keys=ks, args=restore_args(paused_state(fleet_name, 5), "pod-1",
                                                   now=at)) == 1
    assert await redis.hget(keys.state, S_RESTORED_AT) == format_time(at)
    # refused (a newer state is there): no new stamp
    assert await script(keys=ks, args=restore_args(paused_state(fleet_name, 4), "pod-2",
                                                   now=at + timedelta(minutes=1))) == 0
    assert await redis.hget(keys.state, S_RESTORED_AT) == format_time(at)
    # an older pause kept and raised over a newer running state: stamped too
    running = FleetState(fleet_name, False, "", "bob", T0, 7)
    raised_at = at + timedelta(minutes=3)
    assert await script(keys=ks, args=restore_args(running, "pod-3", now=raised_at)) == \
        RESTORE_RAISED
    assert await redis.hget(keys.state, S_RESTORED_AT) == format_time(raised_at)


async def test_set_state_script_keeps_restored_at_and_returns_it_with_the_state(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    at = format_time(T0 - timedelta(minutes=1))
    await redis.hset(keys.state, mapping={**paused_state(fleet_name, 5).to_hash(),
                                          S_RESTORED_AT: at})
    for action in ("resume", "pause"):
        status, fields, _members, *_ = await run_set_state(redis, keys, action, "x")
        assert status == "ok"
        returned = dict(zip(fields[::2], fields[1::2], strict=True))
        assert returned[S_RESTORED_AT] == at
        assert await redis.hget(keys.state, S_RESTORED_AT) == at
    # a hash never restored has no stamp, and none is made up
    await redis.delete(keys.state)
    status, fields, _members, *_ = await run_set_state(redis, keys, "pause", "y")
    assert S_RESTORED_AT not in fields[::2]
    assert not await redis.hexists(keys.state, S_RESTORED_AT)
