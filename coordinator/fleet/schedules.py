"""A fleet's schedules from the operator's side: add, list, remove, and end the current
occurrence early (``Fleet.add_schedule``, ``Fleet.schedules``, ``Fleet.remove_schedule``,
``Fleet.end_occurrence``).

Each write is one script (``replica/contract/schedule_write.lua``): write the schedules hash,
append to the audit stream, and publish ``{"fleet", "schedules"}`` on the control channel so
every replica reads the schedules at once (each reads them at every poll anyway). What is
added is checked first: the cron expression, the zone, the duration, that an occurrence never
overlaps the next one (``replica.contract.recurrence.check_no_overlap``), that it occurs at
all, and that no hold of the state has its name (the script checks that again, atomically).

A canary resume of the occurrence in force (``canary_step``) is a write of the same kind: the
schedule's ``canaries`` and ``canary_for`` (``canary``, audited ``canary_started``), cleared
(``rollback``, ``canary_rolled_back``), or cleared with the occurrence ended early
(``promote``, ``canary_promoted``); each compares the entry with the JSON it was computed
from, and reads again when another write came first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Final

from redis.asyncio import Redis

from coordinator.fleet import registry
from coordinator.fleet.calls import ChangeScript, again
from replica.contract import (
    AUDIT_MAXLEN,
    Keys,
    check_by,
    check_optional_reason,
    check_reason,
    format_time,
    now_utc,
    text,
)
from replica.contract.holds import validate_hold
from replica.contract.recurrence import (
    Occurrence,
    check_no_overlap,
    validate_cron,
    validate_duration,
    zone,
)
from replica.contract.schedules import (
    MAX_SCHEDULES,
    Schedule,
    ScheduleSet,
    schedules_from_hash,
)
from replica.contract.scripts import SCHEDULE_WRITE_LUA
from replica.errors import ContractError, HoldConflict
from replica.link.connect import sharded

log = logging.getLogger(__name__)

MAX_END_TRIES: Final = 5
CANARY_STEPS: Final = ("canary", "rollback", "promote")
"""The canary steps of an occurrence (``Schedules.canary_step``)."""


class ScheduleConflict(HoldConflict):
    """A schedule write refused: ``clash`` (a hold of the state has the name), ``too_many``
    (past ``MAX_SCHEDULES``), ``unknown`` (no such schedule), ``not_active`` (an early end or
    a canary step outside an occurrence), ``no_canary`` (a promote or rollback of an
    occurrence no canary resume runs on). Nothing changed."""

    def __init__(self, kind: str, fleet: str, name: str, message: str) -> None:
        ContractError.__init__(self, message)
        self.kind = kind
        self.fleet = fleet
        self.holds = (name,)
        self.hold = name


def occurrence_in_force(fleet: str, schedule: Schedule, now: datetime) -> Occurrence:
    """``schedule``'s occurrence in force at ``now``. Raises ``ScheduleConflict``
    (``not_active``) saying when the next one starts, when none is."""
    occ = schedule.current_or_next(now)
    if occ is None or not occ.active(now):
        then = (f"its next one starts at {format_time(occ.start)}" if occ is not None
                else "it has no more occurrences")
        raise ScheduleConflict("not_active", fleet, schedule.name,
                               f"schedule {schedule.name} of fleet {fleet} is not in an "
                               f"occurrence now ({then}): no hold to resume")
    return occ


class Schedules:
    """The schedules of one fleet (``Fleet`` delegates to it)."""

    def __init__(self, redis: Redis, name: str, keys: Keys) -> None:
        self._redis = redis
        self._name = name
        self._keys = keys
        self._script = ChangeScript(redis, SCHEDULE_WRITE_LUA)
        self._sharded = sharded(redis)

    async def read(self) -> ScheduleSet:
        """Every schedule (sorted by name) and the entries that cannot be read."""
        raw = await again(lambda: self._redis.hgetall(self._keys.schedules))
        return schedules_from_hash(raw or {})

    async def add(
        self, name: str, cron: str, duration: timedelta | float, timezone: str, reason: str,
        by: str, *, starting: datetime | None = None, until: datetime | None = None,
        skip: Iterable[date] = (), now: datetime | None = None,
    ) -> Schedule:
        """Add the schedule ``name`` (or replace the one of that name). Raises
        ``ContractError`` for a bad value or a window that overlaps its next occurrence,
        ``ScheduleConflict`` for a name a hold has or past ``MAX_SCHEDULES``."""
        now = now or now_utc()
        validate_hold(name)
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        schedule = Schedule(
            name=name, cron=validate_cron(cron), duration_s=validate_duration(seconds),
            timezone=timezone, reason=check_reason(reason), by=check_by(by), created_at=now,
            starting=starting, until=until, skip=tuple(sorted(set(skip))),
        )
        tz = zone(timezone)
        check_no_overlap(schedule.cron, tz, schedule.duration_s, max(now, starting or now))
        if schedule.current_or_next(now) is None:
            raise ContractError(f"schedule {name} would never occur (between --starting and "
                                "--until, less the skipped dates, from now)")
        result = await self._write("add", schedule, schedule.to_json(), by, schedule.reason,
                                   now)
        status = text(result[0])
        if status == "clash":
            raise ScheduleConflict("clash", self._name, name,
                                   f"fleet {self._name} has a hold named {name}: a schedule "
                                   "must have a name of its own (release the hold or pick "
                                   "another name)")
        if status == "too_many":
            raise ScheduleConflict("too_many", self._name, name,
                                   f"fleet {self._name} has {MAX_SCHEDULES} schedules, the "
                                   "most it may have: remove one first")
        await registry.touch(self._redis, self._name)
        log.info("fleet %s: %s %s by %s (%s, %s, %s)", self._name,
                 text(result[1]).replace("_", " "), name, by, schedule.cron,
                 schedule.duration_s, timezone)
        return schedule

    async def refuse_hold_named_as_schedule(self, hold: str) -> None:
        """Raise ``ScheduleConflict`` (kind ``clash``) when ``hold`` is a schedule's name: a
        pause may not add a hold that shares it (checked before the change; the schedule's
        own script checks the other way atomically)."""
        if await again(lambda: self._redis.hexists(self._keys.schedules, hold)):
            raise ScheduleConflict("clash", self._name, hold,
                                   f"fleet {self._name} has a schedule named {hold}: a hold "
                                   "must have a name of its own (pick another --hold, or "
                                   f"'fleetgate resume --hold {hold}' ends its occurrence)")

    async def remove(self, name: str, by: str, reason: str = "") -> None:
        """Remove the schedule ``name`` (an occurrence in force ends on every replica).
        Raises ``ScheduleConflict`` (``unknown``) when there is none."""
        validate_hold(name)
        result = await self._write("remove", None, "", check_by(by), reason, now_utc(),
                                   name=name)
        if text(result[0]) == "unknown":
            raise ScheduleConflict("unknown", self._name, name,
                                   f"fleet {self._name} has no schedule {name}")
        log.info("fleet %s: schedule removed %s by %s", self._name, name, by)

    async def end_occurrence(self, name: str, by: str, reason: str = "") -> Schedule:
        """End the occurrence of ``name`` in force now: the replicas release its hold and do
        not hold again until its next occurrence; the schedule stays. Raises
        ``ScheduleConflict`` (``unknown``, ``not_active``)."""
        by = check_by(by)
        for _ in range(MAX_END_TRIES):
            raw = await again(lambda: self._redis.hget(self._keys.schedules, name))
            if raw is None:
                raise ScheduleConflict("unknown", self._name, name,
                                       f"fleet {self._name} has no schedule {name}")
            old = text(raw)
            schedule = Schedule.from_json(name, old)
            now = now_utc()
            occ = schedule.current_or_next(now)
            if occ is None or not occ.active(now):
                raise ScheduleConflict("not_active", self._name, name,
                                       f"schedule {name} of fleet {self._name} is not in an "
                                       "occurrence now: nothing to end")
            ended = replace(schedule, ended_early=occ.start)
            result = await self._write("end", ended, ended.to_json(), by, reason, now,
                                       expected=old, occurrence=occ.start)
            status = text(result[0])
            if status == "ok":
                log.info("fleet %s: occurrence of schedule %s (from %s) ended early by %s",
                         self._name, name, format_time(occ.start), by)
                return ended
            if status == "unknown":
                raise ScheduleConflict("unknown", self._name, name,
                                       f"fleet {self._name} has no schedule {name}")
        raise ContractError(f"schedule {name} kept changing: try again")

    async def in_force(self, name: str, now: datetime) -> tuple[Schedule, Occurrence, str]:
        """The schedule ``name``, its occurrence in force at ``now`` and its JSON as read.
        Raises ``ScheduleConflict``: ``unknown``, or ``not_active`` (``occurrence_in_force``)."""
        raw = await again(lambda: self._redis.hget(self._keys.schedules, name))
        if raw is None:
            raise ScheduleConflict("unknown", self._name, name,
                                   f"fleet {self._name} has no schedule {name}")
        old = text(raw)
        schedule = Schedule.from_json(name, old)
        return schedule, occurrence_in_force(self._name, schedule, now), old

    async def canary_step(
        self, name: str, step: str, by: str, reason: str = "", canaries: Iterable[str] = (),
        *, dry_run: bool = False,
    ) -> tuple[Schedule, Schedule, Occurrence]:
        """Take a canary resume of the occurrence of ``name`` in force now a step (see the
        module): ``canary`` releases its hold on the replica ids ``canaries`` only,
        ``rollback`` puts it back on them, ``promote`` ends the occurrence early. Returns the
        schedule before and after and the occurrence (``dry_run``: nothing written). Raises
        ``ScheduleConflict`` (``unknown``, ``not_active``, ``no_canary``)."""
        if step not in CANARY_STEPS:
            raise ContractError(f"unknown canary step {step!r}")
        by, ids = check_by(by), tuple(sorted(set(canaries)))
        reason = check_optional_reason(reason or None) or ""
        if (step == "canary") != bool(ids):
            raise ContractError("a canary resume names the replicas it releases, and only it")
        for _ in range(MAX_END_TRIES):
            now = now_utc()
            schedule, occ, old = await self.in_force(name, now)
            if step == "canary":
                after = replace(schedule, canaries=ids, canary_for=occ.start)
            else:
                if not schedule.canaries_for(occ):
                    raise ScheduleConflict(
                        "no_canary", self._name, name,
                        f"schedule {name} of fleet {self._name} has no canary resume running "
                        f"in its occurrence: start one with resume --hold {name} --canary N, or "
                        f"end the occurrence with resume --hold {name}")
                after = replace(schedule, canaries=(), canary_for=None,
                                ended_early=occ.start if step == "promote" else
                                schedule.ended_early)
            if dry_run:
                return schedule, after, occ
            result = await self._write(step, after, after.to_json(), by, reason, now,
                                       expected=old, occurrence=occ.start, canaries=ids)
            status = text(result[0])
            if status == "ok":
                log.info("fleet %s: %s of schedule %s's occurrence (from %s) by %s%s",
                         self._name, text(result[1]).replace("_", " "), name,
                         format_time(occ.start), by, f": {', '.join(ids)}" if ids else "")
                return schedule, after, occ
            if status == "unknown":
                raise ScheduleConflict("unknown", self._name, name,
                                       f"fleet {self._name} has no schedule {name}")
        raise ContractError(f"schedule {name} kept changing: try again")

    async def _write(
        self, op: str, schedule: Schedule | None, value: str, by: str, reason: str,
        now: datetime, *, name: str | None = None, expected: str = "",
        occurrence: datetime | None = None, canaries: Iterable[str] = (),
    ) -> list[object]:
        keys = self._keys
        sname = name if schedule is None else schedule.name
        args = [
            op, sname or "", value, format_time(now), by, self._name, str(MAX_SCHEDULES),
            str(AUDIT_MAXLEN), "1" if self._sharded else "0", reason, expected,
            format_time(occurrence),
            schedule.cron if schedule is not None else "",
            f"{schedule.duration_s:g}" if schedule is not None else "",
            schedule.timezone if schedule is not None else "",
            ",".join(canaries),
        ]
        result = await self._script(
            [keys.schedules, keys.state, keys.audit, keys.control, keys.alerted], args,
            f"schedule {op} of fleet {self._name}")
        return list(result)


__all__ = ["CANARY_STEPS", "ScheduleConflict", "Schedules", "occurrence_in_force"]
