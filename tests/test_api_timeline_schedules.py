"""Schedule occurrences on the timeline: computed from the schedule (as every replica does),
past ones from the time it was added, the one in force now open until its end, the next days'
planned, one ended early (``end_occurrence``) ending then, by whom; the schedule's own audit
entries are no garbage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import redis.asyncio as aioredis

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.timeline import read_timeline
from coordinator.notify.windows import WindowAudit
from replica.contract import format_time, now_utc
from replica.contract.schedules import occurrences


async def test_each_occurrence_of_a_schedule_is_a_span_and_one_ended_early_ends_then(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    fleet = Fleet(redis, fleet_name)
    now = now_utc()
    began = (now - timedelta(minutes=2)).replace(second=0, microsecond=0)
    current = await fleet.add_schedule(
        "hourly", f"{began.minute} * * * *", timedelta(minutes=20), "UTC", "cache flush",
        by="alice")
    nightly = await fleet.add_schedule(
        "nightly", "0 2 * * *", timedelta(hours=1), "Europe/Berlin", "backups", by="bob")
    line = await read_timeline(redis, fleet_name, now_utc(), hours=24, days=7)
    assert line.skipped == 0
    spans = [s.to_dict(line.now) for s in line.spans]
    hourly = [s for s in spans if s["hold"] == "hourly"]
    night = [s for s in spans if s["hold"] == "nightly"]
    # the one in force now (added during it: held from then), open until its end
    first = hourly[0]
    assert (first["kind"], first["open"], first["until"]) == (
        "schedule", True, format_time(began + timedelta(minutes=20)))
    assert first["start"] == format_time(current.created_at)
    assert (first["by"], first["reason"], first["schedule"]) == (
        "alice", "cache flush", f"{began.minute} * * * * (UTC)")
    # nothing before it was added; every later one planned, an hour apart, 20 minutes long
    assert len(hourly) == len(occurrences(current, line.now, line.right)) >= 7 * 24
    assert all(s["end"] is not None and s["duration_s"] == 1200 for s in hourly[1:])
    expected = occurrences(nightly, line.now, line.right)
    assert [(s["start"], s["end"]) for s in night] == [
        (format_time(o.start), format_time(o.end)) for o in expected]
    assert all(datetime.fromisoformat(s["start"]).astimezone(UTC).hour in (0, 1) for s in night)

    await fleet.end_occurrence("hourly", by="carol", reason="flushed early")
    ended_at = (await fleet.history(limit=1))[0].at
    after = await read_timeline(redis, fleet_name, now_utc(), hours=24, days=7)
    assert after.skipped == 0
    first = next(s for s in after.spans if s.hold == "hourly")
    assert (first.end, first.ended, first.ended_by) == (ended_at, "early", "carol")


async def test_a_removed_schedule_keeps_its_audited_occurrence_ended_at_its_removal(
    redis: aioredis.Redis, fleet_name: str
) -> None:
    """The watcher's own audit of the occurrence (``WindowAudit.check_schedules``), then the
    schedule removed: no schedule left to compute from, the trail alone draws it."""
    fleet = Fleet(redis, fleet_name)
    now = now_utc()
    began = (now - timedelta(minutes=2)).replace(second=0, microsecond=0)
    sch = await fleet.add_schedule(
        "hourly", f"{began.minute} * * * *", timedelta(minutes=20), "UTC", "cache flush",
        by="alice")
    audit = WindowAudit(redis, fleet_name)
    assert await audit.check_schedules([sch], 1, now_utc()) == 1  # schedule_started
    await fleet.remove_schedule("hourly", by="dave", reason="not needed")
    removed_at = (await fleet.history(limit=1))[0].at
    line = await read_timeline(redis, fleet_name, now_utc(), hours=24, days=7)
    assert line.skipped == 0
    [span] = line.spans
    assert (span.hold, span.kind, span.start, span.end, span.ended, span.ended_by) == (
        "hourly", "schedule", began, removed_at, "early", "dave")
    assert span.extras["schedule"] == f"{began.minute} * * * * (UTC)"
