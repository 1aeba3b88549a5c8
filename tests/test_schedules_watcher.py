"""The watcher of ``fleetgate serve`` audits each schedule occurrence's start and end once,
however many servers watch (issue 22 A.4), and the notifier's sentences for them; an
occurrence ended early is audited by that change and never again by a watcher. Real Redis;
the windows recur every few seconds (a six-field cron with seconds), the tests wait on the
audit stream."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import timedelta

import pytest
import redis.asyncio as aioredis

from coordinator.fleet.fleet import Fleet
from coordinator.notify.alerts import Alerts
from coordinator.notify.events import Event
from coordinator.notify.windows import (
    SCHEDULE_ENDED,
    SCHEDULE_LOOKBACK,
    SCHEDULE_STARTED,
    WindowAudit,
    schedule_edges,
)
from coordinator.web.metrics import OverdueWatcher
from replica.contract import Keys, now_utc
from replica.contract.schedules import Schedule
from tests.apikit import make_settings, watchers
from tests.fleetkit import audit, until


async def test_two_watchers_audit_each_occurrence_start_and_end_once(
    redis: aioredis.Redis, redis_url: str, fleet_name: str, clients: list[aioredis.Redis]
) -> None:
    fleet = Fleet(redis, fleet_name)
    schedule = await fleet.add_schedule("flush", "*/3 * * * * *", 1, "UTC", "cache flush",
                                        by="alice")
    many = watchers(redis_url, fleet_name, clients, max_pause=3600) * 2

    async def two_ends() -> bool:
        await asyncio.gather(*(w.check() for w in many))  # all at once, again and again
        ends = [e for e in await audit(redis, fleet_name) if e["action"] == SCHEDULE_ENDED]
        return len(ends) >= 2
    await until(two_ends, timeout=30)
    entries = [e for e in await audit(redis, fleet_name) if e["action"].startswith("schedule_")]
    assert entries[0]["action"] == "schedule_added"
    edges = Counter((e["action"], e["starts_at"]) for e in entries[1:])
    assert edges and set(edges.values()) == {1}  # each edge once
    ends = [e for e in entries if e["action"] == SCHEDULE_ENDED]
    for end in ends:
        assert (SCHEDULE_STARTED, end["starts_at"]) in edges
        started = next(e for e in entries if e["action"] == SCHEDULE_STARTED
                       and e["starts_at"] == end["starts_at"])
        assert started["at"] == end["starts_at"] and end["at"] == end["auto_resume_at"]
        assert (end["hold"], end["reason"], end["by"], end["cron"]) == (
            "flush", "cache flush", "alice", schedule.cron)
    event = Event.from_entry(fleet_name, "audit", "1-0", ends[0])
    assert event.event == "schedule_ended"
    assert event.text.startswith(f"Fleet {fleet_name}: recurring window flush ended by alice")


async def test_an_occurrence_ended_early_is_audited_once_by_its_change(
    redis: aioredis.Redis, redis_url: str, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    now = now_utc()
    await fleet.add_schedule("freeze", f"{now.minute} {now.hour} * * *", 23 * 3600, "UTC",
                             "freeze", by="alice")
    watcher = OverdueWatcher(fleet, make_settings(redis_url, fleet_name), Alerts(redis,
                                                                                 fleet_name))
    await watcher.check()
    await fleet.end_occurrence("freeze", by="bob", reason="thaw")
    await watcher.check()
    fresh = OverdueWatcher(Fleet(redis, fleet_name), make_settings(redis_url, fleet_name),
                           Alerts(redis, fleet_name))
    await fresh.check()
    actions = [e["action"] for e in await audit(redis, fleet_name)]
    assert actions == ["schedule_added", "schedule_started", "schedule_ended"]
    ended = (await audit(redis, fleet_name))[-1]
    assert ended["by"] == "bob" and ended["early"] == "1"
    text = Event.from_entry(fleet_name, "audit", "1-0", ended).text
    assert "recurring window freeze ended early (the schedule stays) by bob: thaw" in text


async def _every_two_seconds(redis: aioredis.Redis, fleet_name: str) -> Schedule:
    fleet = Fleet(redis, fleet_name)
    await fleet.add_schedule("flush", "*/2 * * * * *", 1, "UTC", "cache flush", by="alice")
    (schedule,) = (await fleet.schedules()).schedules
    assert schedule.created_at is not None
    return schedule


async def _edges(redis: aioredis.Redis, fleet_name: str) -> Counter[tuple[str, str]]:
    return Counter((e["action"], e["starts_at"]) for e in await audit(redis, fleet_name)
                   if e["action"] in (SCHEDULE_STARTED, SCHEDULE_ENDED))


async def test_a_server_that_starts_later_audits_none_of_the_occurrences_another_audited(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    schedule = await _every_two_seconds(redis, fleet_name)
    assert schedule.created_at is not None
    first, later = schedule.created_at + timedelta(seconds=20), \
        schedule.created_at + timedelta(seconds=30)
    expected = len(schedule_edges([schedule], first))
    assert expected >= 16  # ten occurrences' starts and ends, within the lookback
    running = WindowAudit(redis, fleet_name)
    assert await running.check_schedules([schedule], 1, first) == expected
    # a restart of serve, or a second server: all but the latest occurrence were written
    # again when "once" meant "not this very time"
    started = WindowAudit(redis, fleet_name)
    assert await started.check_schedules([schedule], 1, first) == 0
    more = len(schedule_edges([schedule], later)) - expected
    assert await started.check_schedules([schedule], 1, later) == more > 0
    assert await running.check_schedules([schedule], 1, later) == 0
    edges = await _edges(redis, fleet_name)
    assert sum(edges.values()) == expected + more and set(edges.values()) == {1}


@pytest.mark.parametrize("records", [
    # > any time, compared as text
    {"schedule_started:flush": "zzzz", "schedule_ended:flush": "9999-99-99 garbage"},
    {"schedule_started:flush": b"\xff\xfe2026"},  # not UTF-8: read as unknown
], ids=["not-a-time", "not-utf8"])
async def test_a_record_of_the_last_occurrence_that_is_not_a_time_is_written_over(
    redis: aioredis.Redis, fleet_name: str, records: dict[str, str | bytes]
) -> None:
    schedule = await _every_two_seconds(redis, fleet_name)
    assert schedule.created_at is not None
    now = schedule.created_at + timedelta(seconds=10)
    await redis.hset(Keys(fleet_name).alerted, mapping=records)
    expected = len(schedule_edges([schedule], now))
    assert await WindowAudit(redis, fleet_name).check_schedules([schedule], 1, now) == expected
    assert await WindowAudit(redis, fleet_name).check_schedules([schedule], 1, now) == 0
    assert sum((await _edges(redis, fleet_name)).values()) == expected


async def test_ten_minutes_of_occurrences_are_audited_in_full_and_logged_in_one_line(
    redis: aioredis.Redis, fleet_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = await _every_two_seconds(redis, fleet_name)
    assert schedule.created_at is not None
    now = schedule.created_at + SCHEDULE_LOOKBACK
    expected = len(schedule_edges([schedule], now))
    assert expected > 500  # a coordinator down since the schedule was added
    with caplog.at_level(logging.INFO, logger="coordinator.notify.windows"):
        assert await WindowAudit(redis, fleet_name).check_schedules([schedule], 1, now) \
            == expected
    lines = [r.getMessage() for r in caplog.records if r.name == "coordinator.notify.windows"]
    assert len(lines) == 1, lines[:3]
    assert f"schedule flush: {expected} edges of occurrences from" in lines[0]
    assert sum((await _edges(redis, fleet_name)).values()) == expected
    # the next occurrence's start is one line of its own again
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="coordinator.notify.windows"):
        await WindowAudit(redis, fleet_name).check_schedules(
            [schedule], 1, now + timedelta(seconds=2))
    lines = [r.getMessage() for r in caplog.records if r.name == "coordinator.notify.windows"]
    assert 1 <= len(lines) <= 2 and all("schedule started flush" in line
                                        or "schedule ended flush" in line for line in lines)
