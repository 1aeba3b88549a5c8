"""A fleet's schedules on its timeline (``schedule_spans``): each occurrence a span.

The occurrences are computed from the schedules themselves (``replica.contract.schedules``,
the evaluation every replica makes), past and ahead alike, so a timeline shows them with no
watcher having audited any, from the time the schedule was added. One ended early
(``schedule_ended`` or a canary resume's ``canary_promoted`` in the audit trail, the
schedule's ``ended_early``) ends at that entry's time, by its ``by``. A canary resume of an
occurrence (``canary_started``, ``canary_rolled_back``, ``canary_promoted`` with its
``starts_at``) is its span's ``canary`` phase, as for a hold of the state. A schedule's own hold
spans rebuilt from the trail (the watcher's ``schedule_started``/``schedule_ended``) are left to
the occurrences; those of a schedule removed since stay, from the trail alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.client import NEVER_DECODE

from coordinator.fleet.calls import again
from coordinator.fleet.spans import SCHEDULE, Entry, Span
from replica.contract import Keys, format_time
from replica.contract.schedules import ScheduleSet, occurrences, schedules_from_hash


async def read_schedules(redis: Redis, keys: Keys) -> ScheduleSet:
    """The fleet's schedules (entries that cannot be read are named in ``unreadable``)."""
    raw: Any = await again(lambda: redis.execute_command(  # type: ignore[no-untyped-call]
        "HGETALL", keys.schedules, **{NEVER_DECODE: True}))
    if isinstance(raw, list):  # RESP2 without the client's callback: a flat list
        raw = dict(zip(raw[::2], raw[1::2], strict=False))
    return schedules_from_hash(raw or {})


def schedule_spans(
    schedules: ScheduleSet, entries: Iterable[Entry], left: datetime, right: datetime,
    now: datetime,
) -> list[Span]:
    """A span per occurrence of each schedule overlapping ``left``..``right``."""
    early: dict[tuple[str, datetime], Entry] = {}
    phases: dict[tuple[str, datetime], dict[str, Any]] = {}
    for entry in entries:
        e = entry.event
        if e.starts_at is None or e.at is None:
            continue
        if e.action in ("schedule_ended", "canary_promoted"):
            early[(e.hold, e.starts_at)] = entry
        if e.action == "canary_started":
            phases[(e.hold, e.starts_at)] = {
                "start": format_time(e.at), "end": None, "outcome": None, "by": e.by,
                "replicas": [r for r in str(entry.extras.get("canaries", "")).split(",") if r]}
        elif e.action in ("canary_rolled_back", "canary_promoted") \
                and (e.hold, e.starts_at) in phases:
            phases[(e.hold, e.starts_at)].update(
                end=format_time(e.at),
                outcome="promoted" if e.action == "canary_promoted" else "rolled_back")
    out: list[Span] = []
    for sch in schedules.schedules:
        what = {"schedule": f"{sch.cron} ({sch.timezone})"}
        for occ in occurrences(sch, left, right):
            start = occ.start
            if sch.created_at is not None and start < sch.created_at:
                if occ.end <= sch.created_at:
                    continue  # before the schedule was added: nothing held then
                start = sch.created_at
            span = Span(sch.name, SCHEDULE, start, occ.end, sch.by, sch.reason, occ.end,
                        "auto", extras=dict(what))
            if (sch.name, occ.start) in phases:
                span.extras["canary"] = phases[(sch.name, occ.start)]
            ended = early.get((sch.name, occ.start))
            if ended is not None and ended.event.at is not None and ended.event.at < occ.end:
                how = "promoted" if ended.event.action == "canary_promoted" else "early"
                span.end, span.ended, span.ended_by = ended.event.at, how, ended.event.by
            elif sch.ended_early == occ.start and occ.start <= now:
                span.end, span.ended = min(now, occ.end), "early"
            elif occ.start <= now < occ.end:
                span.end, span.ended = None, ""  # in force now, until its end
            elif occ.start > now:
                span.ended = ""  # planned
            out.append(span)
    return out


def without_schedule_holds(spans: Sequence[Span], schedules: ScheduleSet) -> list[Span]:
    """``spans`` but the trail's spans of a schedule's own hold (its occurrences show it)."""
    names = {s.name for s in schedules.schedules}
    return [s for s in spans if s.hold not in names]


__all__ = ["read_schedules", "schedule_spans", "without_schedule_holds"]
