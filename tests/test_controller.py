"""FleetController against a real Redis: pushes, polls, versions, restarts, restores."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, until
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import replica.contract
from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica import FleetController, PausablePool
from replica.contract import (
    RECORD_FIELDS,
    RECORD_TTL_HEARTBEATS,
    FleetState,
    Keys,
    format_time,
    now_utc,
)
from replica.errors import ConfigError, ContractError, InvalidMessage


def state_at(fleet: str, version: int, paused: bool, reason: str = "test") -> FleetState:
    now = now_utc()
    return FleetState(fleet, paused, reason if paused else "", "tester", now, version,
                      changed_at=now)


async def publish_state(redis: aioredis.Redis, state: FleetState, write_hash: bool = True) -> None:
    keys = Keys(state.fleet)
    if write_hash:
        await redis.delete(keys.state)
        await redis.hset(keys.state, mapping=dict(state.to_hash()))
    await redis.publish(keys.control, state.to_json())


# ---------------------------------------------------------------------------- basics


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


async def test_a_heartbeat_rides_on_a_poll_rather_than_a_round_trip_of_its_own(
    redis_url: str, fleet_name: str
) -> None:
    replica = Replica(redis_url, fleet_name, "pod-hb", poll_interval=0.05,
                      heartbeat_interval=0.2)
    await replica.start()
    try:
        link = replica.controller._link
        call = link.call
        trips: list[list[str]] = []

        async def spy(commands: list[tuple[Any, ...]], quiet: Any = ()) -> list[Any]:
            trips.append([str(c[0]) for c in [*commands, *quiet]])
            return await call(commands, quiet)

        link.call = spy  # type: ignore[method-assign]

        def beats() -> list[list[str]]:  # record writes without an ack (not a change's)
            return [t for t in trips if "HSET" in t and "PUBLISH" not in t]

        await until(lambda: len(beats()) >= 4, what="four heartbeats")
        assert all("HGETALL" in t for t in beats()), trips
        assert sum("HGETALL" in t for t in trips) > len(beats())
    finally:
        await replica.stop()


async def test_a_fault_in_handling_a_message_resubscribes_instead_of_going_deaf(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    async with Replicas(redis_url, fleet_name, 1) as replicas:
        (controller,) = replicas.controllers
        handle = controller._on_message
        seen: list[Any] = []

        def faulty(data: Any) -> None:
            seen.append(data)
            if len(seen) == 1:
                raise RuntimeError("a bug of ours")
            handle(data)

        controller._channel._on_message = faulty  # what the channel hands messages to
        fleet = Fleet(redis, fleet_name)
        state = await fleet.pause("first", by="t")  # its push fails; the resubscribe re-reads
        assert (await fleet.wait(state.version, timeout=10)).ok
        await until(lambda: controller.stats().reconnects >= 1 and controller.connected)
        pushes = controller.stats().pushes
        state = await fleet.resume(by="t")  # and pushes work again
        assert (await fleet.wait(state.version, timeout=10)).ok
        assert replicas.pools[0].holds == {}
        await until(lambda: controller.stats().pushes == pushes + 1)
        assert len(seen) == 2


async def _field_is(redis: aioredis.Redis, key: str, field: str, value: str) -> bool:
    return bool(await redis.hget(key, field) == value)


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


async def test_local_holds_stay_independent_of_the_fleet(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 1) as replicas:
        pool = replicas.pools[0]
        pool.hold("local maintenance", source="operator")
        state = await fleet.pause("fleet maintenance", by="bob")
        await until(lambda: "fleet" in pool.holds)
        state = await fleet.resume(by="bob")
        assert (await fleet.wait(state.version, timeout=10)).ok
        assert pool.holds == {"operator": "local maintenance"}
        pool.resume(source="operator")
        assert not pool.paused


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


# ---------------------------------------------------------------------------- required cases


async def test_subscriptions_killed_just_before_a_pause_still_pause_every_replica_within_a_poll(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    poll = 2.0
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 5, poll_interval=poll) as replicas:
        killed = await redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        assert int(killed) >= 5
        t0 = time.monotonic()
        await fleet.pause("after the kill", by="t")
        await asyncio.wait_for(
            asyncio.gather(*(p.wait_for(True) for p in replicas.pools)), poll + 5.0
        )
        # one poll interval, plus slack for a machine shared with other test runs
        assert time.monotonic() - t0 < poll + 1.0
        await until(lambda: all(c.connected for c in replicas.controllers))
        assert all(c.stats().reconnects >= 1 for c in replicas.controllers)


async def test_redis_restarted_empty_during_a_pause_runs_nothing_and_the_state_is_restored(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    fleet = Fleet(admin, fleet_name)
    keys = Keys(fleet_name)
    try:
        async with Replicas(private_redis.url, fleet_name, 3, poll_interval=0.5,
                            heartbeat_interval=1.0) as replicas:
            paused = await fleet.pause("before the crash", by="ops")
            assert (await fleet.wait(paused.version, timeout=10)).ok
            for i, pool in enumerate(replicas.pools):
                for n in range(5):
                    pool.put_nowait((i, n))
            private_redis.kill()
            await until(lambda: not any(c.connected for c in replicas.controllers),
                        what="every controller to notice")
            assert all(r.ran == [] for r in replicas)
            assert all(c.applied_version == paused.version for c in replicas.controllers)
            private_redis.start()  # empty: no persistence
            await admin.connection_pool.disconnect()  # the test's own client: no stale sockets
            await until(lambda: all(c.connected for c in replicas.controllers), timeout=30,
                        what="every controller to reconnect")
            await until(lambda: admin.exists(keys.state), timeout=10)
            restored = await fleet.state()
            assert restored.version == paused.version and restored.paused
            assert restored.reason == "before the crash" and restored.since == paused.since
            assert sum(c.stats().restores for c in replicas.controllers) >= 1
            assert all(r.ran == [] for r in replicas)
            assert any(e.action == "restore" for e in await fleet.history())
            resumed = await fleet.resume(by="ops")
            assert resumed.version == paused.version + 1
            assert (await fleet.wait(resumed.version, timeout=15)).ok
            await until(lambda: all(len(r.ran) == 5 for r in replicas))
            assert all(r.started_while_held == [] for r in replicas)
    finally:
        await admin.aclose()


async def test_out_of_order_and_replayed_messages_are_ignored_by_version(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    async with Replicas(redis_url, fleet_name, 1, poll_interval=30.0) as replicas:
        controller = replicas.controllers[0]
        pool = replicas.pools[0]
        v5 = state_at(fleet_name, 5, True, "five")
        await publish_state(redis, v5)
        await until(lambda: controller.applied_version == 5)
        pushes = controller.stats().pushes
        for old in (state_at(fleet_name, 3, False), state_at(fleet_name, 4, False), v5,
                    state_at(fleet_name, 1, False)):
            await publish_state(redis, old, write_hash=False)
        await until(lambda: controller.stats().pushes == pushes + 4)
        assert controller.applied_version == 5 and pool.holds == {"fleet": "five"}
        assert controller.stats().stale_ignored == 3
        v6 = state_at(fleet_name, 6, False)
        await publish_state(redis, v6)
        await until(lambda: controller.applied_version == 6)
        assert not pool.paused


garbage = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300),
    st.builds(
        lambda d: json.dumps(d),
        st.dictionaries(
            st.sampled_from(["fleet", "paused", "version", "since", "reason", "by",
                             "resume_stagger_s", "auto_resume_at"]),
            st.one_of(st.none(), st.booleans(), st.integers(-5, 10**20), st.floats(),
                      st.text(max_size=30)),
            max_size=8,
        ),
    ),
    st.just("x" * 10_000),
)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(messages=st.lists(garbage, min_size=1, max_size=6))
def test_garbage_on_the_control_channel_changes_nothing(redis_url: str, messages: list[Any]) -> None:
    fleet_name = f"g-{uuid.uuid4().hex[:12]}"
    for m in messages:
        try:
            FleetState.from_json(m, fleet_name)
        except InvalidMessage:
            continue
        assume(False)  # a valid state is no garbage

    async def scenario() -> None:
        admin = aioredis.Redis.from_url(redis_url)
        replica = Replica(redis_url, fleet_name, "pod-g", poll_interval=30.0)
        try:
            await replica.start()
            v2 = state_at(fleet_name, 2, True, "held")
            await publish_state(admin, v2)
            controller = replica.controller
            await until(lambda: controller.applied_version == 2)
            for m in messages:
                await admin.publish(Keys(fleet_name).control, m)
            await until(lambda: sum(controller.stats().invalid_messages.values()) == len(messages))
            assert controller.applied_version == 2
            assert replica.pool.holds == {"fleet": "held"}
            await admin.publish(Keys(fleet_name).control, state_at(fleet_name, 3, False).to_json())
            await until(lambda: controller.applied_version == 3)  # still listening
        finally:
            await replica.stop()
            await admin.delete(*(Keys(fleet_name).state, Keys(fleet_name).audit))
            await admin.aclose()

    asyncio.run(scenario())


async def test_invalid_messages_are_logged_once_per_kind_and_counted(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="replica.control.controller")
    async with Replicas(redis_url, fleet_name, 1, poll_interval=30.0) as replicas:
        controller = replicas.controllers[0]
        control = Keys(fleet_name).control
        other = state_at("another-fleet", 9, True)
        for message in ["not json", "not json either", other.to_json(), "[]", "y" * 9000]:
            await redis.publish(control, message)
        await until(lambda: sum(controller.stats().invalid_messages.values()) == 5)
        assert controller.stats().invalid_messages == {
            "not_json": 2, "unknown_fleet": 1, "not_object": 1, "oversized": 1,
        }
        warnings = [r for r in caplog.records if "invalid control message" in r.getMessage()]
        assert len(warnings) == 4
        assert not replicas.pools[0].paused


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


async def test_an_auto_resume_time_ends_the_pause_on_every_replica_with_no_coordinator(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 3, poll_interval=0.5) as replicas:
        state = await fleet.pause("window", by="ops", auto_resume_after=timedelta(seconds=1.5))
        assert state.auto_resume_at is not None
        assert (await fleet.wait(state.version, timeout=10)).ok
        assert all(c.resume_at == state.auto_resume_at for c in replicas.controllers)
        for r in replicas:
            r.pool.put_nowait("after the window")
        # nothing talks to Redis on the coordinator side from here on
        await asyncio.wait_for(
            asyncio.gather(*(p.wait_for(False) for p in replicas.pools)), 20
        )
        assert now_utc() >= state.auto_resume_at
        await until(lambda: all(r.ran == ["after the window"] for r in replicas))
        assert (await fleet.state()).paused  # the hash was not touched...
        assert not (await fleet.state()).effectively_paused()  # ...but the window is over
        late = Replica(redis_url, fleet_name, "late-1")
        await late.start()
        try:
            assert late.pool.holds == {}  # a replica that starts after the window runs
        finally:
            await late.stop()
        again = await fleet.pause("a new pause", by="ops")
        assert again.since != state.since  # the window ended: this is a new pause
        assert (await fleet.wait(again.version, timeout=10)).ok


async def test_a_staggered_resume_spreads_the_replicas_evenly_over_the_window(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    window = 1.6
    async with Replicas(redis_url, fleet_name, 4, poll_interval=0.5) as replicas:
        paused = await fleet.pause("herd", by="ops")
        assert (await fleet.wait(paused.version, timeout=10)).ok
        resumed_at: dict[str, float] = {}
        for r in replicas:
            r.pool.add_listener(
                lambda event, rid=r.id: resumed_at.setdefault(rid, time.monotonic())
                if event == "resumed" else None
            )
        resumed = await fleet.resume(by="ops", stagger=timedelta(seconds=window))
        assert resumed.resume_stagger_s == window
        report = await fleet.wait(resumed.version, timeout=20)
        assert report.ok, report.to_dict()
        order = sorted(resumed_at, key=resumed_at.__getitem__)
        assert order == ["pod-0", "pod-1", "pod-2", "pod-3"]  # i-th id waits i * window / n
        # the offsets are 0, 0.4, 0.8 and 1.2 s: the last resumes well after the first
        assert resumed_at["pod-3"] - resumed_at["pod-0"] >= 0.8
        assert (await redis.hgetall(Keys(fleet_name).state))["resume_stagger_s"] == "1.6"


async def test_a_staggered_resume_is_overtaken_by_a_new_pause(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 3, poll_interval=0.5) as replicas:
        paused = await fleet.pause("one", by="ops")
        assert (await fleet.wait(paused.version, timeout=10)).ok
        resumed = await fleet.resume(by="ops", stagger=timedelta(seconds=60))
        await until(lambda: all(c.applied_version == resumed.version
                                for c in replicas.controllers))
        waiting = [c for c in replicas.controllers if c.resume_at is not None]
        assert len(waiting) >= 2  # pod-0 goes at once, the others wait their offsets
        report = await fleet.wait(resumed.version, timeout=0.3)
        assert not report.ok
        assert {s.why for s in report.stragglers} == {"resume pending"}
        again = await fleet.pause("two", by="ops")
        assert (await fleet.wait(again.version, timeout=10)).ok
        assert all(c.resume_at is None for c in replicas.controllers)


async def test_the_control_field_reads_disconnected_while_pubsub_is_refused(
    private_redis: LocalRedis, no_subscribe_url: str, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    url = no_subscribe_url
    fleet = Fleet(admin, fleet_name)
    try:
        replica = Replica(url, fleet_name, "pod-1", poll_interval=0.3, start_timeout=5.0)
        await replica.start()
        try:
            assert replica.controller.synced and not replica.controller.connected
            assert replica.pool.holds == {}
            t0 = time.monotonic()
            await fleet.pause("polled", by="ops")
            await asyncio.wait_for(replica.pool.wait_for(True), 10)
            assert time.monotonic() - t0 < 0.3 + 1.0  # one poll interval, plus slack
            record = await admin.hgetall(Keys(fleet_name).replica("pod-1"))
            assert record["control"] == "disconnected"
        finally:
            await replica.stop()
    finally:
        await admin.aclose()


async def test_a_replica_without_write_access_to_the_state_counts_the_failed_restore_and_stays(
    private_redis: LocalRedis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="replica.control.controller")
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    await admin.execute_command(
        "ACL", "SETUSER", "replica", "on", ">pw", "resetkeys", "~fleetgate:*:replica:*",
        "~fleetgate:*:replicas", "%R~fleetgate:*:state", "resetchannels",
        "&fleetgate:*:control", "&fleetgate:*:acks", "+@all",
    )
    url = private_redis.url.replace("redis://", "redis://replica:pw@")
    fleet = Fleet(admin, fleet_name)
    keys = Keys(fleet_name)
    try:
        async with Replicas(url, fleet_name, 2, poll_interval=0.2) as replicas:
            paused = await fleet.pause("acl", by="ops")
            assert (await fleet.wait(paused.version, timeout=10)).ok
            await admin.delete(keys.state)  # Redis forgot the state
            await until(lambda: all(c.stats().restore_failures >= 2
                                    for c in replicas.controllers))
            assert all(p.holds == {"fleet": "acl"} for p in replicas.pools)
            failures = [r for r in caplog.records if "cannot restore" in r.getMessage()]
            assert len(failures) == 2  # logged once per replica
            assert await fleet.restore_if_missing()
            assert (await fleet.state()).version == paused.version
            assert not await fleet.restore_if_missing()
            resumed = await fleet.resume(by="ops")
            assert (await fleet.wait(resumed.version, timeout=10)).ok
    finally:
        await admin.aclose()


async def test_a_hash_that_went_back_in_time_is_put_back_and_a_pause_still_wins(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=0.2) as replicas:
        paused = await fleet.pause("newest", by="ops")
        assert (await fleet.wait(paused.version, timeout=10)).ok
        # a failover lost the last write: the hash says an older running version
        older = state_at(fleet_name, paused.version - 1, False)
        await redis.delete(keys.state)
        await redis.hset(keys.state, mapping=dict(older.to_hash()))
        await until(lambda: _version_is(fleet, paused.version), timeout=10)
        assert (await fleet.state()).paused
        assert all(p.holds == {"fleet": "newest"} for p in replicas.pools)
        # and when the older hash is a pause while the replicas run, the pause applies
        resumed = await fleet.resume(by="ops")
        assert (await fleet.wait(resumed.version, timeout=10)).ok
        older_pause = state_at(fleet_name, resumed.version - 1, True, "older pause")
        await redis.delete(keys.state)
        await redis.hset(keys.state, mapping=dict(older_pause.to_hash()))
        await asyncio.wait_for(
            asyncio.gather(*(p.wait_for(True) for p in replicas.pools)), 10
        )
        assert all(c.applied_version == resumed.version - 1 for c in replicas.controllers)


async def _version_is(fleet: Fleet, version: int) -> bool:
    return (await fleet.state()).version == version


async def test_a_late_poll_never_undoes_a_newer_pause(
    redis_url: str, fleet_name: str
) -> None:
    async def handler(item: Any) -> None:
        pass

    pool = PausablePool(handler)
    client = aioredis.Redis.from_url(redis_url)
    controller = FleetController(pool, client, fleet_name, "pod-1")
    try:
        controller._consider(state_at(fleet_name, 1, False), "poll", 0)
        seq = controller._apply_seq  # a poll is sent now...
        controller._consider(state_at(fleet_name, 2, True, "newer"), "push")  # ...a push lands
        controller._consider(state_at(fleet_name, 1, False), "poll", seq)  # ...the poll returns
        assert controller.applied_version == 2 and pool.holds == {"fleet": "newer"}
        assert controller.stats().stale_ignored == 1
        # a hash edited by hand (same version, other content) applies from a poll only
        edited = FleetState(fleet_name, False, "", "oncall", now_utc(), 2)
        controller._consider(edited, "push")
        assert pool.holds == {"fleet": "newer"}
        controller._consider(edited, "poll", controller._apply_seq)
        assert pool.holds == {}
    finally:
        await client.aclose()


async def test_an_idle_subscription_is_pinged_and_one_that_stops_answering_is_replaced(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        async with Replicas(private_redis.url, fleet_name, 2, poll_interval=0.1,
                            pubsub_ping_interval=0.2, io_timeout=0.3) as replicas:
            controllers = replicas.controllers
            t0 = time.monotonic()
            await until(lambda: time.monotonic() - t0 > 1.0)  # five ping intervals, idle
            assert all(c.connected and c.stats().reconnects == 0 for c in controllers)
            # the server stops answering for a while: pings go unanswered, subscriptions are
            # dropped and made again once it answers
            await admin.execute_command("CLIENT", "PAUSE", "1500", "ALL")
            await until(lambda: all(c.stats().reconnects >= 1 for c in controllers),
                        timeout=30, what="every subscription to be replaced")
            await until(lambda: all(c.connected for c in controllers), timeout=30)
            state = await Fleet(admin, fleet_name).pause("after the stall", by="t")
            await asyncio.wait_for(
                asyncio.gather(*(p.wait_for(True) for p in replicas.pools)), 10
            )
            assert all(c.applied_version == state.version for c in controllers)
    finally:
        await admin.aclose()


async def test_without_client_reply_the_acks_go_the_slow_way_and_still_arrive(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    await admin.execute_command(
        "ACL", "SETUSER", "noskip", "on", ">pw", "~*", "&*", "+@all", "-client|reply"
    )
    url = private_redis.url.replace("redis://", "redis://noskip:pw@")
    try:
        async with Replicas(url, fleet_name, 2) as replicas, \
                Fleet(admin, fleet_name) as fleet:
            for _ in range(2):
                state = await fleet.pause("no skip", by="t")
                assert (await fleet.wait(state.version, timeout=10)).ok
                state = await fleet.resume(by="t")
                assert (await fleet.wait(state.version, timeout=10)).ok
            assert all(c.stats().write_failures == 0 for c in replicas.controllers)
    finally:
        await admin.aclose()
