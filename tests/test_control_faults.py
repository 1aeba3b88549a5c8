"""A replica that cannot follow its fleet holds its pool (issue 19, A.2).

Each loop of the controller gets a failure it does not expect injected into the real object
(a method that raises a few times), against a real Redis: the pool is held by
``control-plane`` with what broke, the failure is logged once with its traceback, the loop
keeps trying, the record says it, and the hold goes once the loop works again. A state hash
with bytes that are not UTF-8 is held, counted and reported, never a crash.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, publish_state, state_at, until

from replica.contract import Keys
from replica.contract.keys import FLEETS_KEY
from replica.control import sync as sync_module
from replica.pool.holds import CONTROL_PLANE_SOURCE
from tests.hakit import cli

FAULTS_LOGGER = "replica.control.faults"


def control_hold(replica: Replica) -> str | None:
    return replica.pool.holds.get(CONTROL_PLANE_SOURCE)


def spy_holds(replica: Replica) -> list[str]:
    """Every reason the pool is held by ``control-plane`` with, in order (a fault may be
    over before a poll of the holds would see it)."""
    seen: list[str] = []
    hold = replica.pool.hold

    def spy(reason: str, source: str = "operator") -> bool:
        if source == CONTROL_PLANE_SOURCE:
            seen.append(reason)
        return hold(reason, source)

    replica.pool.hold = spy  # type: ignore[method-assign]
    return seen


def fault_logs(caplog: pytest.LogCaptureFixture, loop: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == FAULTS_LOGGER and f"control loop {loop} failed" in r.getMessage()]


async def record_field(redis: aioredis.Redis, fleet: str, replica_id: str, name: str) -> Any:
    return await redis.hget(Keys(fleet).replica(replica_id), name)


async def started(redis_url: str, fleet: str, replica_id: str, **kw: Any) -> Replica:
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("heartbeat_interval", 0.2)
    return await Replica(redis_url, fleet, replica_id, **kw).start()


async def test_a_state_hash_that_is_not_utf8_holds_the_pool_runs_nothing_and_following_resumes_once_fixed(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-utf8")
    raw = aioredis.Redis.from_url(redis_url)  # bytes, as an operator's redis-cli writes them
    try:
        assert replica.controller.applied_version == 1 and not replica.pool.holds
        keys = Keys(fleet_name)
        paused = dict(state_at(fleet_name, 2, True, "数" * 10).to_hash())
        paused["reason"] = ("数" * 10).encode()[:-1]  # cut inside a character
        await raw.delete(keys.state)
        await raw.hset(keys.state, mapping=paused)
        await until(lambda: control_hold(replica) is not None, what="the control-plane hold")
        hold = control_hold(replica)
        assert hold is not None and "control loop state failed" in hold and "UTF-8" in hold
        assert replica.controller.stats().invalid_messages.get("not_utf8", 0) >= 1
        assert "UTF-8" in (replica.controller.control_error or "")
        await until(lambda: record_has(redis, fleet_name, "pod-utf8", "UTF-8"),
                    what="the record to say what broke")
        polls = replica.controller.stats().polls
        for n in range(3):
            replica.pool.put_nowait(n)
        await until(lambda: replica.controller.stats().polls >= polls + 5, what="more polls")
        assert replica.ran == [] and control_hold(replica) == hold  # still held, nothing ran
        assert len(fault_logs(caplog, "state")) == 1  # once, not every poll

        await publish_state(redis, state_at(fleet_name, 3, False))  # the hash fixed
        await until(lambda: replica.controller.applied_version == 3, what="v3 applied")
        await until(lambda: len(replica.ran) == 3, what="the items to run")
        assert control_hold(replica) is None and replica.controller.control_error is None
        await until(lambda: record_has(redis, fleet_name, "pod-utf8", ""),
                    what="the record's control_error to be cleared")
    finally:
        await raw.aclose()
        await replica.stop()


async def record_has(redis: aioredis.Redis, fleet: str, replica_id: str, text: str) -> bool:
    value = await record_field(redis, fleet, replica_id, "control_error")
    return value is not None and (text in value if text else value == "")


async def test_a_state_key_of_another_type_holds_the_pool_until_it_is_a_state_hash_again(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-type")
    try:
        keys = Keys(fleet_name)
        await redis.delete(keys.state)
        await redis.set(keys.state, "paused maybe")
        await until(lambda: control_hold(replica) is not None, what="the control-plane hold")
        assert "WRONGTYPE" in (control_hold(replica) or "")
        await publish_state(redis, state_at(fleet_name, 2, True, "back"))
        await until(lambda: control_hold(replica) is None, what="the hold to go")
        assert replica.controller.fleet_held
    finally:
        await replica.stop()


async def test_a_sync_loop_failing_holds_the_pool_logs_once_with_the_traceback_and_releases_on_recovery(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-sync")
    try:
        link = replica.controller._link
        call = link.call
        failures = 0

        async def broken(commands: list[tuple[Any, ...]], quiet: Any = ()) -> list[Any]:
            nonlocal failures
            if failures < 4:
                failures += 1
                raise RuntimeError("injected into the sync loop")
            return await call(commands, quiet)

        seen = spy_holds(replica)
        link.call = broken  # type: ignore[method-assign]
        await until(lambda: failures == 4, what="four failed round trips")
        await until(lambda: control_hold(replica) is None, what="the hold to go on recovery")
        assert any("control loop sync failed: RuntimeError: injected" in s for s in seen), seen
        logged = fault_logs(caplog, "sync")
        assert len(logged) == 1 and logged[0].exc_info is not None
        await publish_state(redis, state_at(fleet_name, 2, True))  # still following
        await until(lambda: replica.controller.fleet_held, what="the pause to apply")
        assert replica.controller.stats().control_faults == 1
    finally:
        await replica.stop()


async def test_a_control_channel_handler_failing_holds_the_pool_until_a_poll_after_resubscribing(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-chan", poll_interval=0.5)
    try:
        channel = replica.controller._channel
        on_message = channel._on_message
        generation = channel.generation

        def broken(data: Any) -> None:
            raise RuntimeError("injected into the channel")

        seen = spy_holds(replica)
        channel._on_message = broken
        await publish_state(redis, state_at(fleet_name, 2, True, "pushed"))
        await until(lambda: channel.generation > generation, what="the channel to resubscribe")
        channel._on_message = on_message
        await until(lambda: control_hold(replica) is None and replica.controller.fleet_held,
                    what="the pause, read by a poll, and the hold gone")
        assert any("control loop channel failed: RuntimeError" in s for s in seen), seen
        assert len(fault_logs(caplog, "channel")) == 1
    finally:
        await replica.stop()


async def test_the_state_applier_failing_holds_the_pool_and_a_later_poll_applies_the_state(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-apply")
    try:
        applier = replica.controller._applier
        on_poll = applier.on_poll
        failures = 0

        def broken(raw: Any, poll_seq: int) -> None:
            nonlocal failures
            if failures < 3:
                failures += 1
                raise TypeError("injected into the applier")
            on_poll(raw, poll_seq)

        seen = spy_holds(replica)
        applier.on_poll = broken  # type: ignore[method-assign]
        await until(lambda: failures == 3, what="three failed applies")
        await until(lambda: control_hold(replica) is None, what="the hold to go")
        assert any("control loop applier failed: TypeError: injected" in s for s in seen), seen
        logged = fault_logs(caplog, "applier")
        assert len(logged) == 1 and logged[0].exc_info is not None
        await publish_state(redis, state_at(fleet_name, 2, True), )
        await until(lambda: replica.controller.fleet_held, what="the pause")
    finally:
        await replica.stop()


async def test_the_record_failing_holds_the_pool_and_still_heartbeats_what_broke(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-rec")
    try:
        record = replica.controller._record
        commands = record.commands
        broken_now = True

        def broken(full: bool = True) -> list[tuple[Any, ...]]:
            if broken_now:
                raise ValueError("injected into the record")
            return commands(full)

        record.commands = broken  # type: ignore[method-assign]
        await until(lambda: record_has(redis, fleet_name, "pod-rec", "control loop record failed"),
                    what="the record to say what broke")
        assert "ValueError: injected" in (control_hold(replica) or "")
        beat = await record_field(redis, fleet_name, "pod-rec", "heartbeat_at")
        await until(lambda: _changed(redis, fleet_name, "pod-rec", "heartbeat_at", beat),
                    what="a heartbeat while broken")
        assert len(fault_logs(caplog, "record")) == 1
        broken_now = False
        await until(lambda: control_hold(replica) is None, what="the hold to go")
        await until(lambda: record_has(redis, fleet_name, "pod-rec", ""), what="cleared")
    finally:
        await replica.stop()


async def _changed(redis: aioredis.Redis, fleet: str, replica_id: str, name: str,
                   before: Any) -> bool:
    return await record_field(redis, fleet, replica_id, name) != before


async def test_the_registration_failing_holds_the_pool_and_registers_once_it_works(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = Replica(redis_url, fleet_name, "pod-reg", poll_interval=0.05,
                      heartbeat_interval=0.2)
    link = replica.controller._link
    call = link.call
    failures = 0

    async def broken(commands: list[tuple[Any, ...]], quiet: Any = ()) -> list[Any]:
        nonlocal failures
        if commands and commands[0][:2] == ("ZADD", FLEETS_KEY) and failures < 2:
            failures += 1
            raise RuntimeError("injected into the registration")
        return await call(commands, quiet)

    link.call = broken  # type: ignore[method-assign]
    seen = spy_holds(replica)
    await replica.start()
    try:
        await until(lambda: failures == 2, what="two failed registrations")
        await until(lambda: _registered(redis, fleet_name), what="the fleet registered")
        await until(lambda: control_hold(replica) is None, what="the hold to go")
        assert any("control loop registration failed: RuntimeError" in s for s in seen), seen
        assert len(fault_logs(caplog, "registration")) == 1
    finally:
        await replica.stop()


async def _registered(redis: aioredis.Redis, fleet: str) -> bool:
    return await redis.zscore(FLEETS_KEY, fleet) is not None


async def test_a_fault_that_lasts_past_its_bound_makes_the_controller_unrecoverable_until_it_ends(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-fatal", fault_fatal_after=0.3)
    try:
        link = replica.controller._link
        call = link.call
        broken_now = True

        async def broken(commands: list[tuple[Any, ...]], quiet: Any = ()) -> list[Any]:
            if broken_now:
                raise RuntimeError("injected for good")
            return await call(commands, quiet)

        link.call = broken  # type: ignore[method-assign]
        await until(lambda: control_hold(replica) is not None, what="the hold")
        assert replica.controller.unrecoverable() is None  # held, not yet past the bound
        await until(lambda: replica.controller.unrecoverable() is not None, what="the bound")
        assert "control loop sync has failed" in (replica.controller.unrecoverable() or "")
        broken_now = False
        await until(lambda: control_hold(replica) is None, what="recovery")
        assert replica.controller.unrecoverable() is None
    finally:
        await replica.stop()


async def test_a_loop_that_raises_out_of_itself_is_restarted_and_its_fault_holds_meanwhile(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-crash")
    try:
        timers = sync_module.SyncLoop._next_wakeup
        crashes = 0

        def crashing(self: Any, next_poll: float, next_heartbeat: float) -> float:
            nonlocal crashes
            if crashes < 2:
                crashes += 1
                raise KeyError("injected outside the round trip")
            return timers(self, next_poll, next_heartbeat)

        seen = spy_holds(replica)
        monkeypatch.setattr(sync_module.SyncLoop, "_next_wakeup", crashing)
        await until(lambda: crashes == 2, what="two crashes")
        await until(lambda: control_hold(replica) is None, what="the hold to go")
        assert any("control loop sync failed: KeyError" in s for s in seen), seen
        assert replica.controller.unrecoverable() is None
        await publish_state(redis, state_at(fleet_name, 2, True))
        await until(lambda: replica.controller.fleet_held, what="still following")
    finally:
        await replica.stop()


async def test_fleetgate_status_shows_a_replica_whose_loop_fails_as_needing_attention_with_what_broke(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-status")
    try:
        applier = replica.controller._applier

        def broken(raw: Any, poll_seq: int) -> None:
            raise TypeError("injected for the status")

        applier.on_poll = broken  # type: ignore[method-assign]
        await until(lambda: record_has(redis, fleet_name, "pod-status", "injected for the status"),
                    what="the record to say what broke")
        done = await cli("status", url=redis_url, fleet=fleet_name)
        assert done.returncode == 0, done.stderr
        text = " ".join(done.stdout.split())  # the table may wrap the reason
        assert "control error: control loop applier failed: TypeError: injected" in text, \
            done.stdout
        done = await cli("status", "--json", url=redis_url, fleet=fleet_name)
        attention = json.loads(done.stdout)["attention"]
        assert [(a["id"], a["why"][0]) for a in attention] == [("pod-status", "control error")]
    finally:
        await replica.stop()


async def test_the_applier_clock_failing_holds_the_pool_and_is_retried_at_the_poll_pace_not_in_a_spin(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    await publish_state(redis, state_at(fleet_name, 1, False))
    replica = await started(redis_url, fleet_name, "pod-clock", poll_interval=0.2)
    try:
        applier = replica.controller._applier
        resume_due = applier.resume_due
        calls = 0
        broken_now = True

        def broken() -> None:
            nonlocal calls
            calls += 1
            if broken_now:
                raise ZeroDivisionError("injected into the applier's clock")
            resume_due()

        applier.resume_due = broken  # type: ignore[method-assign]
        await until(lambda: control_hold(replica) is not None, what="the hold")
        assert "control loop applier failed: ZeroDivisionError" in (control_hold(replica) or "")
        polls = replica.controller.stats().polls
        await until(lambda: replica.controller.stats().polls >= polls + 5, what="five polls")
        assert calls <= 5 + 2, calls  # about one try a poll interval
        broken_now = False
        await until(lambda: control_hold(replica) is None, what="recovery")
    finally:
        await replica.stop()
