"""coordinator.fleet.fallback: ``wait``'s fallback poll of the silent replicas' records waits
while acknowledgements keep resolving replicas (at a change to thousands of replicas they take
longer than an interval to come in), and runs once an interval passes without one, or at once
when the acknowledgements channel is lost. The clock's rules on their own, then a listening
wait on a real Redis whose replicas acknowledge while one stays silent."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import redis.asyncio as aioredis
from cpkit import Replicas, until

from coordinator import Fleet
from coordinator.fleet.fallback import FallbackPoll
from replica.contract import Keys, format_time, now_utc


def test_a_poll_is_not_due_before_its_interval() -> None:
    poll = FallbackPoll(0.5, now=100.0)
    assert not poll.due(100.4, listening=True)
    assert poll.due(100.5, listening=True)
    assert (poll.polls, poll.postponed) == (1, 0)


def test_a_due_poll_passes_while_acks_resolve_replicas_and_runs_after_an_interval_without() -> None:
    poll = FallbackPoll(0.5, now=0.0)
    poll.resolved()
    assert not poll.due(0.5, listening=True)  # acks came in the interval: postponed
    assert poll.due_at == 1.0
    poll.resolved()
    poll.resolved()
    assert not poll.due(1.0, listening=True)
    assert poll.due(1.5, listening=True)  # an interval with none resolved
    assert (poll.polls, poll.postponed) == (1, 2)


def test_each_postponement_takes_a_replica_resolved_so_a_poll_comes_within_as_many() -> None:
    poll = FallbackPoll(0.1, now=0.0)
    t = 0.0
    for _ in range(5):  # five replicas resolved, one per interval
        poll.resolved()
        t = poll.due_at
        assert not poll.due(t, listening=True)
    assert poll.due(poll.due_at, listening=True)
    assert poll.postponed == 5


def test_without_the_acknowledgements_channel_a_due_poll_runs_whatever_was_resolved() -> None:
    poll = FallbackPoll(0.5, now=0.0)
    poll.resolved()
    assert poll.due(0.5, listening=False)


def test_after_a_poll_the_next_is_due_an_interval_after_it_ended() -> None:
    poll = FallbackPoll(0.5, now=0.0)
    assert poll.due(0.5, listening=True)
    poll.polled(0.8)  # the poll's round trip took 0.3 s
    assert not poll.due(1.2, listening=True)
    assert poll.due(1.3, listening=True)


async def test_a_listening_wait_polls_the_silent_replica_once_the_others_acked_and_ends_on_its_record(
    redis_url: str, redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Three replicas acknowledge; a fourth, live by its record, never does: once the others'
    acks are in, the fallback polls that one record alone, and the wait waits on it until its
    record says paused and quiet."""
    caplog.set_level(logging.DEBUG, logger="coordinator.fleet.waiting")
    keys = Keys(fleet_name)
    async with Replicas(redis_url, fleet_name, 3), \
            Fleet(redis, fleet_name, wait_poll_interval=0.1) as fleet:
        await redis.hset(keys.replica("silent-1"), mapping={
            "applied_version": "0", "control": "connected", "heartbeat_interval": "10",
            "heartbeat_at": format_time(now_utc())})
        await redis.zadd(keys.replicas, {"silent-1": int(time.time() * 1000)})
        await fleet.listen()
        state = await fleet.pause("fallback", by="t", for_wait=True)
        waiting = asyncio.ensure_future(fleet.wait(state.version, timeout=60))
        try:
            await until(lambda: "polling the records of 1 pending" in caplog.text,
                        what="the silent replica's record polled")
            assert not waiting.done()
            await redis.hset(keys.replica("silent-1"), mapping={
                "applied_version": str(state.version), "fleet_held": "1", "quiet": "1",
                "heartbeat_at": format_time(now_utc())})
            report = await waiting
        finally:
            waiting.cancel()
    assert report.ok, report.to_dict()
    assert sorted(r.id for r in report.replicas) == ["pod-0", "pod-1", "pod-2", "silent-1"]
