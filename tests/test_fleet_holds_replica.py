"""The replica side of fleet holds and maintenance windows (issue 14, sections 1 and 2): one pool
hold per active fleet hold (``fleet`` for ``default``, ``fleet:NAME`` for the others), a
scheduled hold that starts and ends on each replica's own clock with no change written, a
replica started mid-window, states of an older release, restores that keep the holds, and what
/pool, /readyz and the metrics say. Real Redis, real controllers, and three real processes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from cpkit import Replica, Replicas, publish_state, until

from coordinator import Fleet
from replica import PausablePool
from replica.contract import (
    DEFAULT_HOLD,
    MAX_HOLDS,
    RESTORE_STATE_LUA,
    FleetState,
    Hold,
    Keys,
    format_time,
    now_utc,
    parse_time,
    restore_args,
)
from replica.control.applier import StateApplier
from replica.control.fleetholds import pause_end
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.link.redisio import Link
from replica.pool.holds import FLEET_SOURCE, fleet_source, is_fleet_source
from replica.service.http import create_app
from replica.service.metrics import ReplicaMetrics
from replica.service.settings import ReplicaSettings
from tests.procs import AUTH, base_env, replica_processes

TOKEN = "test-admin-token-000000000000000000000"


class Transitions:
    """Every event of a pool, with the replica's clock and the holds right after it."""

    def __init__(self, pool: PausablePool) -> None:
        self._pool = pool
        self.seen: list[tuple[str, datetime, dict[str, str]]] = []
        pool.add_listener(self)

    def __call__(self, event: str) -> None:
        self.seen.append((event, now_utc(), self._pool.holds))

    def events(self) -> list[str]:
        return [e for e, _, _ in self.seen]

    def first(self, event: str) -> tuple[datetime, dict[str, str]]:
        _, at, holds = next(s for s in self.seen if s[0] == event)
        return at, holds


def _applier(fleet: str) -> tuple[PausablePool, Outbox, StateApplier]:
    """A StateApplier on its own: its outbox is never sent (the link never connects)."""

    class Shown:
        fleet_held = False
        resume_at: datetime | None = None
        subscribed = False

    async def handler(item: Any) -> None:
        pass

    pool = PausablePool(handler)
    record = ReplicaRecord(pool, Shown(), Keys(fleet), "pod-1", heartbeat_interval=10.0,
                           poll_interval=1.0, host="h")
    outbox = Outbox(Link(aioredis.Redis()), record, fleet)
    return pool, outbox, StateApplier(pool, record, outbox, fleet, "pod-1", pause_timeout=30.0)


def _now() -> datetime:
    """Now, to the millisecond (what the state hash keeps)."""
    return parse_time(format_time(now_utc()))


def _state(fleet: str, version: int, *holds: Hold, paused: bool = True) -> FleetState:
    now = _now()
    return FleetState(fleet, paused, "", "ops", now, version, changed_at=now, holds=holds)


def _hold(name: str, reason: str, start_in: float | None = None,
          end_in: float | None = None) -> Hold:
    now = _now()
    starts = now + timedelta(seconds=start_in) if start_in is not None else None
    ends = now + timedelta(seconds=end_in) if end_in is not None else None
    return Hold(name, reason, "ops", starts or now, auto_resume_at=ends, starts_at=starts)


# ---------------------------------------------------------------------------- the pool sources


def test_the_default_hold_is_source_fleet_and_any_other_is_fleet_colon_name() -> None:
    assert fleet_source(DEFAULT_HOLD) == FLEET_SOURCE == "fleet"
    assert fleet_source("db") == "fleet:db"
    assert is_fleet_source("fleet") and is_fleet_source("fleet:payments")
    assert not any(is_fleet_source(s) for s in ("operator", "breaker", "fleetx", "control-plane"))


def test_a_change_of_active_holds_adds_the_new_pool_holds_before_releasing_the_old() -> None:
    pool, _, applier = _applier("orders")
    seen = Transitions(pool)
    applier.consider(_state("orders", 1, _hold("db", "migration")), "push")
    assert pool.holds == {"fleet:db": "migration"} and applier.fleet_held
    applier.consider(_state("orders", 2, _hold("db", "migration"), _hold("payments", "incident")),
                     "push")
    assert pool.holds == {"fleet:db": "migration", "fleet:payments": "incident"}
    applier.consider(_state("orders", 3, _hold("payments", "incident")), "push")
    assert pool.holds == {"fleet:payments": "incident"}
    applier.consider(_state("orders", 4, _hold(DEFAULT_HOLD, "deploy")), "push")
    assert pool.holds == {"fleet": "deploy"}
    assert seen.events() == ["paused", "quiet"]  # held from v1 to v4 without a gap
    applier.consider(_state("orders", 5, paused=False), "push")
    assert pool.holds == {} and not applier.fleet_held
    assert seen.events() == ["paused", "quiet", "resumed"]


def test_the_sync_loop_is_woken_when_a_scheduled_hold_starts_and_when_it_ends() -> None:
    pool, _, applier = _applier("orders")
    window = _hold("dbmaint", "pg upgrade", start_in=60, end_in=90)
    applier.consider(_state("orders", 1, window, paused=False), "push")
    assert pool.holds == {} and applier.transition_at == window.starts_at
    assert applier.resume_at is None
    due = applier.next_due(1000.0)
    assert due is not None and 1055 < due <= 1060
    applier.resume_due()  # not yet due: nothing changes
    assert pool.holds == {} and applier.transition_at == window.starts_at
    # one paused by a hold that ends by itself, and a window after it: the pause ends then
    db = _hold("db", "migration", end_in=30)
    later = _hold("later", "next window", start_in=20, end_in=40)
    state = _state("orders", 2, db, window, later)
    applier.consider(state, "push")
    assert pool.holds == {"fleet:db": "migration"}
    assert applier.transition_at == later.starts_at  # the next hold to start or end
    assert pause_end(state, now_utc()) == later.auto_resume_at == applier.resume_at


def test_a_state_of_an_older_release_pauses_by_its_paused_flag() -> None:
    pool, _, applier = _applier("orders")
    raw = dict(_state("orders", 4, paused=True).to_hash())
    raw["reason"] = "an old pause"
    raw["holds_version"] = "3"  # written by an older release after a newer one: not trusted
    applier.on_poll(raw, applier.apply_seq)
    assert applier.applied is not None and applier.applied.holds is None
    assert pool.holds == {"fleet": "an old pause"}
    running = dict(_state("orders", 5, _hold("db", "x"), paused=False).to_hash())
    running["holds_version"] = "4"  # its holds are an older version's: `paused` rules
    applier.on_poll(running, applier.apply_seq)
    assert pool.holds == {} and not applier.fleet_held
    no_field = {k: v for k, v in _state("orders", 6, paused=True).to_hash().items()
                if not k.startswith("holds")}
    applier.on_poll({**no_field, "reason": "by hand"}, applier.apply_seq)
    assert pool.holds == {"fleet": "by hand"}


async def test_the_restore_script_puts_back_active_and_scheduled_holds(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    state = _state(fleet_name, 9, _hold("db", "migration"),
                   _hold("dbmaint", "pg upgrade", start_in=3600, end_in=5400))
    args = restore_args(state, "pod-1")
    assert FleetState.from_json(args[5], fleet_name).holds == state.holds  # what it publishes
    assert await redis.eval(RESTORE_STATE_LUA, 3, keys.state, keys.audit, keys.control,
                            *args) == 1
    raw = await redis.hgetall(keys.state)
    assert raw["holds_version"] == raw["version"] == "9"
    back = FleetState.from_hash(fleet_name, raw)
    assert back.holds == state.holds and back.same_content(state)


# ---------------------------------------------------------------------------- real controllers


async def test_two_holds_hold_the_pool_and_releasing_one_keeps_it_held(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=0.5) as replicas:
        seen = [Transitions(p) for p in replicas.pools]
        db = await fleet.pause("migration", by="db-team", hold="db")
        pay = await fleet.pause("incident", by="payments-team", hold="payments")
        await until(lambda: all(c.applied_version == pay.version for c in replicas.controllers))
        both = {"fleet:db": "migration", "fleet:payments": "incident"}
        assert all(p.holds == both for p in replicas.pools)
        assert all(c.fleet_held for c in replicas.controllers) and db.version < pay.version
        for r in replicas:
            r.pool.put_nowait("after both")
        released = await fleet.resume(by="db-team", hold="db")
        assert released.paused
        await until(lambda: all(c.applied_version == released.version
                                for c in replicas.controllers))
        assert all(p.holds == {"fleet:payments": "incident"} for p in replicas.pools)
        assert all(r.ran == [] for r in replicas)
        last = await fleet.resume(by="payments-team", hold="payments")
        await asyncio.wait_for(asyncio.gather(*(p.wait_for(False) for p in replicas.pools)), 15)
        await until(lambda: all(r.ran == ["after both"] for r in replicas))
        assert all(c.applied_version == last.version for c in replicas.controllers)
        for s in seen:
            assert s.events() == ["paused", "quiet", "resumed"]  # never running in between
            assert s.first("paused")[1] == {"fleet:db": "migration"}
        assert all(r.started_while_held == [] for r in replicas)


async def test_a_hold_that_ends_by_itself_among_several_leaves_the_pool_held_by_the_others(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 2, poll_interval=0.5) as replicas:
        seen = [Transitions(p) for p in replicas.pools]
        await fleet.pause("migration", by="db-team", hold="db")
        short = await fleet.pause("cache flush", by="ops", hold="flush",
                                  auto_resume_after=timedelta(seconds=1))
        await until(lambda: all(c.applied_version == short.version
                                for c in replicas.controllers))
        assert all(c.resume_at is None for c in replicas.controllers)  # db has no end
        await until(lambda: all(p.holds == {"fleet:db": "migration"} for p in replicas.pools))
        assert all(s.events() == ["paused", "quiet"] for s in seen)
        assert (await fleet.state()).version == short.version  # by the clock alone
        await fleet.resume(by="db-team", hold="db")
        await asyncio.wait_for(asyncio.gather(*(p.wait_for(False) for p in replicas.pools)), 15)


async def test_a_scheduled_hold_starts_and_ends_on_the_replicas_clock_with_no_change_written(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, acks: Callable[..., Any]
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 3, poll_interval=0.5) as replicas:
        seen = [Transitions(p) for p in replicas.pools]
        state = await fleet.pause("pg 16 upgrade", by="dba", hold="dbmaint",
                                  starts_at=now_utc() + timedelta(seconds=1.5),
                                  auto_resume_after=timedelta(seconds=1.5))
        assert not state.paused and state.holds is not None
        (window,) = state.holds
        assert window.starts_at is not None and window.auto_resume_at is not None
        ids = {r.id for r in replicas}

        def each(event: str, held: bool) -> Callable[[list[dict[str, Any]]], bool]:
            return lambda got: ids <= {a["replica"] for a in got
                                       if a["event"] == event and a["fleet_held"] is held
                                       and a["version"] == state.version}

        # nothing more is written: the replicas follow the window on their own clocks
        await acks(each("quiet", True))
        await acks(each("resumed", False))
        for s, pool in zip(seen, replicas.pools, strict=True):
            held_at, holds = s.first("paused")
            assert held_at >= window.starts_at and holds == {"fleet:dbmaint": "pg 16 upgrade"}
            assert s.first("resumed")[0] >= window.auto_resume_at
            assert pool.holds == {}
        after = await fleet.state()
        assert after.version == state.version and not after.effectively_paused()
        assert all(c.resume_at is None and c.applied_version == state.version
                   for c in replicas.controllers)


async def test_the_end_of_a_window_is_spread_over_its_resume_stagger(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 3, poll_interval=0.5) as replicas:
        seen = {r.id: Transitions(r.pool) for r in replicas}
        state = await fleet.pause("reindex", by="dba", hold="reindex",
                                  starts_at=now_utc() + timedelta(seconds=1),
                                  auto_resume_after=timedelta(seconds=1),
                                  resume_stagger=timedelta(seconds=1.5))
        assert state.holds is not None and state.holds[0].auto_resume_at is not None
        end = state.holds[0].auto_resume_at
        await asyncio.wait_for(asyncio.gather(*(p.wait_for(True) for p in replicas.pools)), 15)
        await asyncio.wait_for(asyncio.gather(*(p.wait_for(False) for p in replicas.pools)), 15)
        resumed = {rid: s.first("resumed")[0] for rid, s in seen.items()}
        assert sorted(resumed, key=resumed.__getitem__) == ["pod-0", "pod-1", "pod-2"]
        # offsets 0, 0.5 and 1 s after the end (i * 1.5 / 3), each on its own clock
        assert resumed["pod-0"] >= end and resumed["pod-2"] >= end + timedelta(seconds=0.9)


async def test_a_replica_started_in_the_middle_of_a_window_is_held_from_its_first_read(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    now = _now()
    window = Hold("dbmaint", "pg 16 upgrade", "dba", now - timedelta(seconds=10),
                  auto_resume_at=now + timedelta(seconds=60),
                  starts_at=now - timedelta(seconds=10))
    # written before the window began: `paused` says running, the hold says otherwise
    await publish_state(redis, FleetState(fleet_name, False, "", "dba", now - timedelta(minutes=5),
                                          3, changed_at=now - timedelta(minutes=5),
                                          holds=(window,)))
    late = Replica(redis_url, fleet_name, "late-1")
    seen = Transitions(late.pool)
    await late.start()
    try:
        assert late.controller.applied_version == 3
        assert late.pool.holds == {"fleet:dbmaint": "pg 16 upgrade"}
        assert late.controller.fleet_held and late.controller.resume_at == window.auto_resume_at
        assert seen.events() == ["paused", "quiet"]  # syncing, then the window: no gap
    finally:
        await late.stop()


async def test_a_state_hash_of_an_older_release_still_pauses_by_paused(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 1, poll_interval=0.2) as replicas:
        fleet = Fleet(redis, fleet_name)
        state = await fleet.pause("migration", by="db-team", hold="db")
        await until(lambda: replicas.pools[0].holds == {"fleet:db": "migration"})
        # an older release pauses the fleet again: it writes `paused` and the version, and
        # leaves the `holds` field of the newer release (its holds_version now behind)
        await redis.hset(keys.state, mapping={"paused": "1", "reason": "old release",
                                              "version": str(state.version + 1)})
        await until(lambda: replicas.pools[0].holds == {"fleet": "old release"})
        # ...and resumes it: the stale `holds` (an active hold in it) no longer count
        await redis.hset(keys.state, mapping={"paused": "0", "reason": "",
                                              "version": str(state.version + 2)})
        await asyncio.wait_for(replicas.pools[0].wait_for(False), 15)
        assert not replicas.controllers[0].fleet_held


async def test_a_restored_state_hash_keeps_active_and_scheduled_holds(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    fleet = Fleet(redis, fleet_name)
    async with Replicas(redis_url, fleet_name, 1, poll_interval=0.2) as replicas:
        controller = replicas.controllers[0]
        await fleet.pause("migration", by="db-team", hold="db")
        state = await fleet.pause("pg upgrade", by="dba", hold="dbmaint",
                                  starts_at=now_utc() + timedelta(hours=1),
                                  auto_resume_after=timedelta(minutes=30))
        await until(lambda: controller.applied_version == state.version)
        applied = controller.applied_state
        assert applied is not None and applied.holds is not None and len(applied.holds) == 2
        applies = controller.stats().applied
        await redis.delete(keys.state)  # Redis forgot it
        await until(lambda: controller.stats().restores == 1)
        back = FleetState.from_hash(fleet_name, await redis.hgetall(keys.state))
        assert back.holds == applied.holds and back.same_content(applied)
        assert [h.status(now_utc()) for h in back.holds] == ["active", "scheduled"]
        assert replicas.pools[0].holds == {"fleet:db": "migration"}
        assert controller.stats().applied == applies  # the same state: nothing to apply


async def test_pool_readiness_and_metrics_name_the_fleet_hold(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    settings = ReplicaSettings(fleet=fleet_name, replica_id="pod-0", admin_token=TOKEN,
                               ready_when_fleet_paused=True)
    async with Replicas(redis_url, fleet_name, 1, poll_interval=0.5) as replicas:
        replica = replicas.items[0]
        metrics = ReplicaMetrics(replica.pool, control=replica.controller)
        app = create_app(replica.pool, settings, control=replica.controller, metrics=metrics)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://replica") as http:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            state = await fleet.pause("migration", by="db-team", hold="db")
            await until(lambda: replica.controller.applied_version == state.version)
            pool = (await http.get("/pool", headers=auth)).json()
            assert pool["paused"] and pool["holds"] == {"fleet:db": "migration"}
            assert (await http.get("/readyz")).status_code == 200  # only the fleet holds it
            text = (await http.get("/metrics")).text
            assert 'fleetgate_pool_paused{reason="fleet:db"} 1.0' in text
            assert 'fleetgate_pool_paused{reason="fleet"} 0.0' in text
            replica.pool.hold("checking", "operator")
            assert (await http.get("/readyz")).status_code == 503
            replica.pool.resume("operator")
            await fleet.resume(by="db-team", hold="db")
            await asyncio.wait_for(replica.pool.wait_for(False), 15)
            text = (await http.get("/metrics")).text
            assert 'fleetgate_pool_paused{reason="fleet:db"} 0.0' in text  # stays, at 0
            # the pool resumes before the record saying so reaches Redis: wait for the record
            await until(lambda: _field_is(redis, Keys(fleet_name).replica("pod-0"),
                                          "fleet_held", "0"))


def test_fleet_hold_series_are_bounded_by_max_holds() -> None:
    pool, _, _ = _applier("orders")
    metrics = ReplicaMetrics(pool)
    for i in range(MAX_HOLDS + 5):
        pool.hold("x", f"fleet:h{i}")
        metrics.render()
        pool.resume(f"fleet:h{i}")
    text = metrics.render().decode()
    assert text.count('reason="fleet:') == MAX_HOLDS
    assert 'reason="fleet:h0"' not in text and f'reason="fleet:h{MAX_HOLDS + 4}"' in text


# ---------------------------------------------------------------------------- real processes


@pytest.mark.slow
async def test_three_replica_processes_follow_a_window_with_no_coordinator(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, tmp_path: Path,
    acks: Callable[..., Any],
) -> None:
    env = base_env(redis_url, fleet_name, workers=2, demo_item_seconds=0.05)
    async with replica_processes(3, env, tmp_path) as procs:
        ids = {rp.id for rp in procs}
        fleet = Fleet(redis, fleet_name)
        await until(lambda: _registered(redis, fleet_name, ids))
        state = await fleet.pause("pg 16 upgrade", by="dba", hold="dbmaint",
                                  starts_at=now_utc() + timedelta(seconds=2),
                                  auto_resume_after=timedelta(seconds=1.5))
        assert state.holds is not None
        (window,) = state.holds
        assert window.starts_at is not None and window.auto_resume_at is not None

        def each(event: str, held: bool) -> Callable[[list[dict[str, Any]]], bool]:
            return lambda got: ids <= {a["replica"] for a in got
                                       if a["event"] == event and a["fleet_held"] is held
                                       and a["version"] == state.version}

        got = await acks(each("quiet", True), timeout=30)
        async with httpx.AsyncClient(timeout=10) as http:
            for rp in procs:
                pool = (await http.get(rp.url + "/pool", headers=AUTH)).json()
                assert pool["holds"] in ({"fleet:dbmaint": "pg 16 upgrade"}, {}), rp.log()
        got = await acks(each("resumed", False), timeout=30)
        for rp in procs:
            quiet = next(a for a in got if a["replica"] == rp.id and a["event"] == "quiet")
            resumed = next(a for a in got if a["replica"] == rp.id and a["event"] == "resumed")
            assert datetime.fromisoformat(quiet["at"]) >= window.starts_at, rp.log()
            assert datetime.fromisoformat(resumed["at"]) >= window.auto_resume_at, rp.log()
        assert (await fleet.state()).version == state.version  # nothing else was written


async def _registered(redis: aioredis.Redis, fleet: str, ids: set[str]) -> bool:
    return ids <= set(await redis.zrange(Keys(fleet).replicas, 0, -1))


async def _field_is(redis: aioredis.Redis, key: str, field: str, value: str) -> bool:
    return bool(await redis.hget(key, field) == value)
