"""The watcher of ``fleetgate serve`` audits each schedule occurrence's start and end once,
however many servers watch (issue 22 A.4), and the notifier's sentences for them; an
occurrence ended early is audited by that change and never again by a watcher. Real Redis;
the windows recur every few seconds (a six-field cron with seconds), the tests wait on the
audit stream."""

from __future__ import annotations

import asyncio
from collections import Counter

import redis.asyncio as aioredis

from coordinator.fleet.fleet import Fleet
from coordinator.notify.alerts import Alerts
from coordinator.notify.events import Event
from coordinator.notify.windows import SCHEDULE_ENDED, SCHEDULE_STARTED
from coordinator.web.metrics import OverdueWatcher
from replica.contract import now_utc
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
