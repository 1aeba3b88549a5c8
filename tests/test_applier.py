"""replica.control.applier: the version rules, holds, automatic and staggered resumes, and
invalid messages, on a StateApplier alone and through real controllers."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, publish_state, state_at, until
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from coordinator import Fleet
from replica import PausablePool
from replica.contract import MAX_MESSAGE_BYTES, FleetState, Keys, now_utc
from replica.control.applier import StateApplier
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.errors import InvalidMessage
from replica.link.redisio import Link


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
    caplog.set_level(logging.WARNING, logger="replica.control.applier")
    async with Replicas(redis_url, fleet_name, 1, poll_interval=30.0) as replicas:
        controller = replicas.controllers[0]
        control = Keys(fleet_name).control
        other = state_at("another-fleet", 9, True)
        for message in ["not json", "not json either", other.to_json(), "[]", "y" * (MAX_MESSAGE_BYTES + 1)]:
            await redis.publish(control, message)
        await until(lambda: sum(controller.stats().invalid_messages.values()) == 5)
        assert controller.stats().invalid_messages == {
            "not_json": 2, "unknown_fleet": 1, "not_object": 1, "oversized": 1,
        }
        warnings = [r for r in caplog.records if "invalid control message" in r.getMessage()]
        assert len(warnings) == 4
        assert not replicas.pools[0].paused

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
        # and when the older hash is a pause while the replicas run, the pause applies, its
        # version raised above the running one (a version never goes back)
        resumed = await fleet.resume(by="ops")
        report = await fleet.wait(resumed.version, timeout=10)
        # all got there, but Redis lost its data just now (restored_at): not ok
        assert not report.stragglers and report.redis_lost_at is not None
        assert not report.ok
        older_pause = state_at(fleet_name, resumed.version - 1, True, "older pause")
        await redis.delete(keys.state)
        await redis.hset(keys.state, mapping=dict(older_pause.to_hash()))
        await asyncio.wait_for(
            asyncio.gather(*(p.wait_for(True) for p in replicas.pools)), 10
        )
        assert all(c.applied_version == resumed.version + 1 for c in replicas.controllers)

async def _version_is(fleet: Fleet, version: int) -> bool:
    return (await fleet.state()).version == version

class _Shown:
    """What the record reads from its controller (nothing asserted on here)."""

    fleet_held = False
    resume_at: datetime | None = None
    subscribed = False


def _applier(fleet: str) -> tuple[PausablePool, Outbox, StateApplier]:
    """A StateApplier on its own: its outbox is never sent (the link never connects)."""

    async def handler(item: Any) -> None:
        pass

    pool = PausablePool(handler)
    record = ReplicaRecord(pool, _Shown(), Keys(fleet), "pod-1", heartbeat_interval=10.0,
                           poll_interval=1.0, host="h")
    outbox = Outbox(Link(aioredis.Redis()), record, fleet)
    return pool, outbox, StateApplier(pool, record, outbox, fleet, "pod-1", pause_timeout=30.0)


def test_a_late_poll_never_undoes_a_newer_pause() -> None:
    pool, outbox, applier = _applier("orders")
    applier.consider(state_at("orders", 1, False), "poll", 0)
    seq = applier.apply_seq  # a poll is sent now...
    applier.consider(state_at("orders", 2, True, "newer"), "push")  # ...a push lands
    applier.consider(state_at("orders", 1, False), "poll", seq)  # ...the poll returns
    assert applier.applied_version == 2 and pool.holds == {"fleet": "newer"}
    assert applier.stale_ignored == 1 and not outbox.restore_due
    # a hash edited by hand (same version, other content) applies from a poll only
    edited = FleetState("orders", False, "", "oncall", now_utc(), 2)
    applier.consider(edited, "push")
    assert pool.holds == {"fleet": "newer"}
    applier.consider(edited, "poll", applier.apply_seq)
    assert pool.holds == {}


def test_the_first_state_applied_lifts_the_syncing_hold_and_leaves_an_ack_to_send() -> None:
    pool, outbox, applier = _applier("orders")
    pool.hold("syncing", "control-plane")  # what start() does
    applier.consider(state_at("orders", 3, True, "deploy"), "poll", 0)
    assert applier.synced and applier.fleet_held
    assert pool.holds == {"fleet": "deploy"}
    assert outbox.acks == {"applied"} and outbox.record_dirty and outbox.wake.is_set()


def test_a_poll_that_finds_the_hash_gone_or_older_asks_for_a_restore() -> None:
    pool, outbox, applier = _applier("orders")
    applier.consider(state_at("orders", 4, True, "kept"), "push")
    applier.on_poll({}, applier.apply_seq)  # Redis forgot the hash
    assert outbox.restore_due and applier.applied_version == 4
    outbox.restore_due = False
    older = state_at("orders", 3, False)  # a failover lost the last write
    applier.on_poll(dict(older.to_hash()), applier.apply_seq)
    assert outbox.restore_due and pool.holds == {"fleet": "kept"}
    assert applier.stale_ignored == 1


def test_an_older_pause_found_while_running_asks_for_a_restore_and_applies_only_if_refused(
) -> None:
    pool, outbox, applier = _applier("orders")
    applier.consider(state_at("orders", 7, False), "push")
    older = state_at("orders", 5, True, "older")
    applier.on_poll(dict(older.to_hash()), applier.apply_seq)
    assert outbox.restore_due and applier.applied_version == 7 and pool.holds == {}
    applier.on_restore_refused()  # the replica ACL: safety first, the older pause applies
    assert applier.applied_version == 5 and pool.holds == {"fleet": "older"}


def test_a_staggered_resume_waits_for_the_peer_list_then_takes_its_offset() -> None:
    pool, outbox, applier = _applier("orders")
    applier.consider(state_at("orders", 1, True), "push")
    now = now_utc()
    resumed = FleetState("orders", False, "", "ops", now, 2, changed_at=now,
                         resume_stagger_s=60.0)
    applier.consider(resumed, "push")
    assert applier.pending_stagger is resumed and applier.fleet_held
    assert applier.resume_at is not None  # the end of the window, until the peers are read
    applier.on_peers(["pod-0"])  # pod-1 comes second of two: half the window
    assert applier.pending_stagger is None and applier.fleet_held
    assert pool.holds == {"fleet": "test"} and "resumed" not in outbox.acks
    assert applier.resume_at is not None
    assert 25 <= (applier.resume_at - now).total_seconds() <= 35
