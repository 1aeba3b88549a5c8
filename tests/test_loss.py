"""replica.control.loss: FLEETGATE_CONTROL_LOSS=keep|hold against a real Redis that goes away
(killed, frozen, or refusing one replica alone while the fleet carries on)."""

from __future__ import annotations

import logging
import os
import signal
from datetime import datetime
from typing import Any

import pytest
import redis.asyncio as aioredis
from cpkit import Replica, until

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica.contract import now_utc

LOSS_LOG = "replica.control.loss"
POLL = 0.2
AFTER = 1.0


def lost_since(reason: str) -> datetime:
    """The time a "control plane lost since <time>" hold names."""
    prefix = "control plane lost since "
    assert reason.startswith(prefix), reason
    return datetime.fromisoformat(reason[len(prefix):].replace("Z", "+00:00"))


def loss_lines(caplog: pytest.LogCaptureFixture, replica_id: str) -> tuple[int, int]:
    """The INFO lines of the loss policy for ``replica_id``: (holds, releases)."""
    lines = [r.getMessage() for r in caplog.records
             if r.name == LOSS_LOG and f"replica {replica_id}:" in r.getMessage()]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == LOSS_LOG)
    return (sum("holding the pool" in m for m in lines),
            sum("released the control-plane hold" in m for m in lines))


async def test_with_hold_a_replica_without_redis_is_held_after_the_configured_time_and_released_when_redis_answers(
    private_redis: LocalRedis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOSS_LOG)
    replica = Replica(private_redis.url, fleet_name, "pod-1", poll_interval=POLL,
                      io_timeout=0.5, control_loss="hold", control_loss_after=AFTER)
    await replica.start()
    try:
        controller = replica.controller
        assert controller.control_loss == "hold" and controller.control_loss_after == AFTER
        private_redis.kill()
        await until(lambda: "control-plane" in replica.pool.holds, timeout=AFTER + 15,
                    what="the control-plane hold")
        seen = now_utc()
        reason = replica.pool.holds["control-plane"]
        assert replica.pool.holds == {"control-plane": reason}
        # not before the configured time without a read (the reason names the last read)
        assert (seen - lost_since(reason)).total_seconds() >= AFTER - 0.01
        stats = controller.stats()
        assert stats.control_lost and stats.control_losses == 1 and controller.control_lost
        replica.pool.put_nowait("during the loss")
        private_redis.start()
        await until(lambda: replica.ran == ["during the loss"], timeout=30,
                    what="the item held during the loss to run")
        assert replica.pool.holds == {} and replica.started_while_held == []
        stats = controller.stats()
        assert not stats.control_lost and stats.control_losses == 1
        assert loss_lines(caplog, "pod-1") == (1, 1)
    finally:
        await replica.stop()


async def test_with_keep_a_replica_without_redis_keeps_running_while_a_holding_one_is_held(
    private_redis: LocalRedis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOSS_LOG)
    options: dict[str, Any] = {"poll_interval": POLL, "io_timeout": 0.5,
                               "control_loss_after": AFTER}
    keep = Replica(private_redis.url, fleet_name, "keep-1", **options)  # keep: the default
    hold = Replica(private_redis.url, fleet_name, "hold-1", control_loss="hold", **options)
    await keep.start()
    await hold.start()
    try:
        assert keep.controller.control_loss == "keep"
        private_redis.kill()
        await until(lambda: "control-plane" in hold.pool.holds, timeout=AFTER + 15,
                    what="the holding replica to hold")
        last_read = keep.controller.stats().last_poll_at
        assert last_read is not None
        await until(lambda: (now_utc() - last_read).total_seconds() > AFTER + POLL,
                    what="the keeping replica to be as long without a read")
        assert not keep.controller.connected
        assert keep.pool.holds == {}
        keep.pool.put_nowait("kept running")
        await until(lambda: keep.ran == ["kept running"], what="the item to run")
        stats = keep.controller.stats()
        assert not stats.control_lost and stats.control_losses == 0
        assert loss_lines(caplog, "keep-1") == (0, 0)
    finally:
        await hold.stop()
        await keep.stop()


async def test_with_hold_a_replica_cut_off_alone_stays_held_through_a_pause_it_reads_back(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    await admin.execute_command("ACL", "SETUSER", "cutoff", "on", ">pw", "~*", "&*", "+@all")
    url = private_redis.url.replace("redis://", "redis://cutoff:pw@")
    fleet = Fleet(admin, fleet_name)
    replica = Replica(url, fleet_name, "pod-1", poll_interval=POLL, io_timeout=0.5,
                      control_loss="hold", control_loss_after=AFTER)
    await replica.start()
    try:
        # Redis refuses this replica alone: the rest of the fleet carries on
        await admin.execute_command("ACL", "SETUSER", "cutoff", "off")
        await admin.execute_command("CLIENT", "KILL", "USER", "cutoff")
        paused = await fleet.pause("migration", by="ops")
        await until(lambda: "control-plane" in replica.pool.holds, timeout=AFTER + 15,
                    what="the control-plane hold")
        assert "fleet" not in replica.pool.holds  # it never heard of the pause
        for n in range(3):
            replica.pool.put_nowait(n)
        await admin.execute_command("ACL", "SETUSER", "cutoff", "on")
        await until(lambda: "control-plane" not in replica.pool.holds, timeout=30,
                    what="the hold to be released")
        # the state read applied before the release: the pause holds the pool, nothing ran
        assert replica.pool.holds == {"fleet": "migration"}
        assert replica.controller.applied_version == paused.version
        assert replica.ran == []
        resumed = await fleet.resume(by="ops")
        assert (await fleet.wait(resumed.version, timeout=15)).ok
        await until(lambda: replica.ran == [0, 1, 2])
        assert replica.started_while_held == []
    finally:
        await replica.stop()
        await admin.aclose()


async def test_with_hold_the_pool_is_held_on_time_while_a_round_trip_hangs_on_a_frozen_redis(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    pid = int((await admin.info("server"))["process_id"])
    await admin.aclose()
    # a round trip waits up to 30 s: the hold must not wait for it to fail
    replica = Replica(private_redis.url, fleet_name, "pod-1", poll_interval=POLL,
                      io_timeout=30.0, control_loss="hold", control_loss_after=AFTER)
    await replica.start()
    frozen = False
    try:
        os.kill(pid, signal.SIGSTOP)  # a black hole: nothing refused, nothing answered
        frozen = True
        await until(lambda: "control-plane" in replica.pool.holds, timeout=AFTER + 15,
                    what="the control-plane hold")
        assert replica.controller.stats().poll_failures == 0  # the round trip still hangs
        os.kill(pid, signal.SIGCONT)
        frozen = False
        await until(lambda: replica.pool.holds == {}, timeout=30, what="the release")
        assert replica.controller.stats().control_losses == 1
    finally:
        if frozen:
            os.kill(pid, signal.SIGCONT)
        await replica.stop()


async def test_a_controller_stopped_while_the_control_plane_is_lost_arms_no_hold(
    private_redis: LocalRedis, fleet_name: str
) -> None:
    replica = Replica(private_redis.url, fleet_name, "pod-1", poll_interval=POLL,
                      io_timeout=0.5, control_loss="hold", control_loss_after=AFTER)
    await replica.start()
    controller = replica.controller
    try:
        private_redis.kill()
        await until(lambda: not controller.connected, what="the controller to notice")
        await controller.stop()
        # the deadline would have fallen by now: a stopped controller holds nothing
        last = controller.stats().last_poll_at
        assert last is not None
        await until(lambda: (now_utc() - last).total_seconds() > AFTER + POLL + 0.5)
        assert replica.pool.holds == {} and not controller.control_lost
    finally:
        await replica.stop()
