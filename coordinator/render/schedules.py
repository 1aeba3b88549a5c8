"""A fleet's schedules as ``schedule list``, ``status`` and the API show them.

JSON (``schedule list --json``, ``GET /api/fleets/{name}/schedules``): ``{"fleet", "now",
"schedules": [...], "unreadable": [{"name", "why"}]}``; each schedule is its stored fields
(``replica.contract.schedules``) plus its ``name``, ``active`` (an occurrence is in force at
``now``) and ``next``: the occurrence in force (unless ended early) and the following ones,
three in all, each ``{"start", "end"}`` in UTC and ``{"local_start", "local_end"}`` in the
schedule's zone (ISO 8601 with the offset); ``canaries_in_force``: the replicas a canary resume
released the occurrence in force on (``[]``: none; ``canaries`` as stored may name an
occurrence that is over).

Text: one line per schedule, then one per occurrence::

    schedule backup: '0 2 * * SUN' for 2h in Europe/Berlin, 'weekly backup' by alice
      next 2026-12-06 02:00 CET (2026-12-06T01:00:00.000Z) to 04:00 CET (2026-12-06T03:00:00.000Z)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from coordinator.render.ink import Text
from coordinator.render.text import printable
from replica.contract import format_time
from replica.contract.recurrence import Occurrence, zone
from replica.contract.schedules import Schedule, ScheduleSet, next_occurrences

NEXT: int = 3
"""How many occurrences ``schedule list`` shows per schedule."""


def span(seconds: float) -> str:
    """``2h``, ``90m``, ``1h30m``, ``45s``, ``1d``."""
    s = int(seconds)
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += f"{s // size}{unit}"
            s %= size
    return out or "0s"


def occurrence_dict(schedule: Schedule, occ: Occurrence) -> dict[str, Any]:
    tz = zone(schedule.timezone)
    return {
        "start": format_time(occ.start),
        "end": format_time(occ.end),
        "local_start": occ.start.astimezone(tz).isoformat(timespec="minutes"),
        "local_end": occ.end.astimezone(tz).isoformat(timespec="minutes"),
    }


def schedule_dict(schedule: Schedule, now: datetime, count: int = NEXT) -> dict[str, Any]:
    nexts = next_occurrences(schedule, now, count)
    active = bool(nexts) and nexts[0].active(now)
    return {
        "name": schedule.name,
        **schedule.to_dict(),
        "active": active,
        "canaries_in_force": list(schedule.canaries_for(nexts[0])) if active else [],
        "next": [occurrence_dict(schedule, o) for o in nexts],
    }


def schedules_dict(fleet: str, found: ScheduleSet, now: datetime) -> dict[str, Any]:
    return {
        "fleet": fleet,
        "now": format_time(now),
        "schedules": [schedule_dict(s, now) for s in found.schedules],
        "unreadable": [{"name": n, "why": w} for n, w in found.unreadable],
    }


def _local(dt: datetime, schedule: Schedule, date: bool = True) -> str:
    local = dt.astimezone(zone(schedule.timezone))
    return local.strftime("%Y-%m-%d %H:%M %Z" if date else "%H:%M %Z")


def occurrence_line(schedule: Schedule, occ: Occurrence, now: datetime) -> str:
    """``now 2026-12-06 02:00 CET (T) to 04:00 CET (T)`` or ``next ...``."""
    same_day = occ.start.astimezone(zone(schedule.timezone)).date() == \
        occ.end.astimezone(zone(schedule.timezone)).date()
    word = "now " if occ.active(now) else "next"
    canaries = schedule.canaries_for(occ) if occ.active(now) else ()
    return (f"{word} {_local(occ.start, schedule)} ({format_time(occ.start)}) to "
            f"{_local(occ.end, schedule, date=not same_day)} ({format_time(occ.end)})"
            + (f", released on canaries {printable(', '.join(canaries))} (canary resume)"
               if canaries else ""))


def schedule_head(schedule: Schedule) -> str:
    parts = [f"schedule {schedule.name}: {schedule.cron!r} for {span(schedule.duration_s)} in "
             f"{schedule.timezone}, {printable(schedule.reason)!r} by "
             f"{printable(schedule.by or '-')}"]
    if schedule.starting is not None:
        parts.append(f"starting {format_time(schedule.starting)}")
    if schedule.until is not None:
        parts.append(f"until {format_time(schedule.until)}")
    if schedule.skip:
        parts.append("skipping " + ", ".join(d.isoformat() for d in schedule.skip))
    return ", ".join(parts)


def schedules_text(found: ScheduleSet, now: datetime, count: int = NEXT) -> Text:
    out = Text()
    if not found.schedules:
        out.append("no schedules")
    for i, schedule in enumerate(found.schedules):
        if i:
            out.append("\n")
        out.append(schedule_head(schedule))
        nexts = next_occurrences(schedule, now, count)
        if not nexts:
            out.append("\n  no more occurrences", style="dim")
        for occ in nexts:
            out.append("\n  " + occurrence_line(schedule, occ, now),
                       style="yellow" if occ.active(now) else "cyan")
    for name, why in found.unreadable:
        out.append(f"\nschedule {printable(name)}: unreadable ({printable(why)}), skipped",
                   style="red")
    return out


def next_line(found: ScheduleSet, now: datetime) -> Text:
    """For ``status``: one line per schedule with its occurrence in force or its next one::

        schedule backup (2h '0 2 * * SUN' Europe/Berlin): next 2026-12-06 02:00 CET (T) to ...
    """
    lines: list[tuple[str, str]] = []
    for schedule in found.schedules:
        nexts = next_occurrences(schedule, now, 1)
        head = (f"schedule {schedule.name} ({span(schedule.duration_s)} {schedule.cron!r} "
                f"{schedule.timezone}): ")
        if not nexts:
            lines.append((head + "no more occurrences", "dim"))
            continue
        occ = nexts[0]
        lines.append((head + occurrence_line(schedule, occ, now),
                      "yellow" if occ.active(now) else "cyan"))
    for name, why in found.unreadable:
        lines.append((f"schedule {printable(name)}: unreadable ({printable(why)}), skipped",
                      "red"))
    out = Text()
    for i, (line, style) in enumerate(lines):
        out.append(("\n" if i else "") + line, style=style)
    return out


__all__ = [
    "NEXT",
    "next_line",
    "occurrence_dict",
    "occurrence_line",
    "schedule_dict",
    "schedule_head",
    "schedules_dict",
    "schedules_text",
    "span",
]
