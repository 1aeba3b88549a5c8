"""The edges of maintenance windows in the audit trail, each once: ``WindowAudit``.

Replicas start and end a scheduled hold on their own clocks; nothing is written then. The
watcher of ``fleetgate serve`` (``OverdueWatcher``) hands each state it reads to
``WindowAudit.check``, which appends to the fleet's audit stream

* ``window_started`` when a hold's ``starts_at`` has passed (a scheduled hold began), and
* ``window_ended`` when a hold's ``auto_resume_at`` has passed (it ended by itself),

with the fields ``action``, ``hold``, ``reason`` and ``by`` (the hold's), ``version`` (the
state's), ``at`` (the edge's time, not the time it was noticed), ``starts_at`` and
``auto_resume_at``. The notifier then announces them like any audit entry.

Each edge is written once however many servers watch the fleet: one script records in the
fleet's ``alerted`` hash, under ``window_started:HOLD`` or ``window_ended:HOLD``, the time of
the edge it was written for, and appends the entry only when that time is new (HGET, HSET and
XADD: commands the coordinator's ACL grants). The hash keeps one field per hold name and edge.
A hold released before its edge, or dropped by a change made after the edge and before a
watcher looked (every ``FLEETGATE_OVERDUE_LOG_INTERVAL``-bounded tick, 5 s at most), gets no
entry: the change that dropped it is audited itself.

A schedule's occurrences (``replica.contract.schedules``) are audited the same way by
``check_schedules``: ``schedule_started`` at an occurrence's start and ``schedule_ended`` at its
end, with ``starts_at``/``auto_resume_at`` (the occurrence), ``cron`` and ``timezone``, each
once under ``schedule_started:NAME``/``schedule_ended:NAME`` keyed by the occurrence's start.
A schedule's occurrences come in time order, so there "once" means "after the last one
audited": ``OCCURRENCE_ONCE_LUA`` appends an edge only when its occurrence starts after the one
recorded, and a server that starts (or a second one) writes none of the occurrences another
already audited, however many passed within the lookback. (Comparing for equality, as for a
hold, wrote every occurrence but the last again at each restart of ``serve``.) A record that
is not such a time (a hand edit, garbage) is written over. Only occurrences that end within
``SCHEDULE_LOOKBACK`` of now are looked at: a watcher that was down longer audits the last
ones only, and a schedule that recurs every few seconds has at most that many minutes of
edges to catch up with, logged as one line per schedule, not one per edge. An occurrence
ended early (``resume --hold NAME``) had its ``schedule_ended`` written by that change
(``early``: 1), which records its start, so the watcher writes none. A schedule replaced under
the same name audits the occurrences that start after the last one audited.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from redis.asyncio import Redis

from replica.contract import (
    A_ACTION,
    A_AT,
    A_BY,
    A_HOLD,
    A_REASON,
    A_VERSION,
    AUDIT_MAXLEN,
    FleetState,
    Keys,
    format_time,
)
from replica.contract.holds import Hold
from replica.contract.recurrence import Occurrence
from replica.contract.schedules import Schedule
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

WINDOW_STARTED: Final = "window_started"
WINDOW_ENDED: Final = "window_ended"
SCHEDULE_STARTED: Final = "schedule_started"
SCHEDULE_ENDED: Final = "schedule_ended"
SCHEDULE_LOOKBACK: Final = timedelta(minutes=10)
"""How far back ``check_schedules`` looks for occurrences' edges."""

EDGE_ONCE_LUA: Final = """
-- fleetgate: append a window's edge to the audit stream unless it was written for this time.
-- KEYS[1] fleetgate:{NAME}:alerted   KEYS[2] fleetgate:{NAME}:audit
-- ARGV[1] field (window_started:HOLD)   ARGV[2] the edge's time   ARGV[3] stream cap
-- ARGV[4..] the entry's field, value pairs.  Returns 1 when appended, 0 when written already.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
return 1
"""


OCCURRENCE_ONCE_LUA: Final = """
-- fleetgate: append a schedule occurrence's edge to the audit stream unless the edge of this
-- occurrence or of a later one was written (a schedule's occurrences come in time order).
-- KEYS[1] fleetgate:{NAME}:alerted   KEYS[2] fleetgate:{NAME}:audit
-- ARGV[1] field (schedule_started:NAME)   ARGV[2] the occurrence's start (ISO 8601 UTC, ms)
-- ARGV[3] stream cap   ARGV[4..] the entry's field, value pairs.
-- A recorded value that is not such a time is written over.  Returns 1 appended, 0 not.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and string.match(cur, '^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$')
    and cur >= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
return 1
"""
_RECORDED: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
"""What ``format_time`` writes (fixed width: compared as text, in time order)."""
_EDGES_LOGGED: Final = 2
"""Edges of one schedule that one pass logs line by line; more are one summary line."""


def due_edges(state: FleetState, now: datetime) -> list[tuple[str, Hold, datetime]]:
    """The edges of ``state``'s holds that have passed at ``now``, in time order: a scheduled
    hold's start, a hold's end by its ``auto_resume_at``."""
    edges: list[tuple[str, Hold, datetime]] = []
    for hold in state.effective_holds():
        if hold.starts_at is not None and hold.starts_at <= now:
            edges.append((WINDOW_STARTED, hold, hold.starts_at))
        if hold.auto_resume_at is not None and hold.auto_resume_at <= now:
            edges.append((WINDOW_ENDED, hold, hold.auto_resume_at))
    return sorted(edges, key=lambda e: (e[2], e[0] == WINDOW_ENDED, e[1].name))


def schedule_edges(
    schedules: Iterable[Schedule], now: datetime
) -> list[tuple[str, Schedule, Occurrence, datetime]]:
    """The edges of the schedules' occurrences that passed within ``SCHEDULE_LOOKBACK`` of
    ``now``, in time order: (action, schedule, occurrence, the edge's time). No end for an
    occurrence ended early (that change audited it), nothing of an occurrence that ended
    before the schedule was added."""
    edges: list[tuple[str, Schedule, Occurrence, datetime]] = []
    for schedule in schedules:
        for occ in schedule.iter_from(now - SCHEDULE_LOOKBACK):
            if occ.start > now:
                break
            if schedule.created_at is not None and occ.end <= schedule.created_at:
                continue
            edges.append((SCHEDULE_STARTED, schedule, occ, occ.start))
            early = schedule.ended_early is not None and schedule.ended_early == occ.start
            if occ.end <= now and not early:
                edges.append((SCHEDULE_ENDED, schedule, occ, occ.end))
    return sorted(edges, key=lambda e: (e[3], e[0] == SCHEDULE_ENDED, e[1].name))


class WindowAudit:
    """Writes a fleet's window edges into its audit stream, each once."""

    def __init__(self, redis: Redis, fleet: str) -> None:
        self.keys = Keys(fleet)
        self._redis = redis
        self._script = redis.register_script(EDGE_ONCE_LUA)
        self._occurrence_script = redis.register_script(OCCURRENCE_ONCE_LUA)
        self._written: set[tuple[str, str]] = set()
        """Holds' edges this server knows are in the stream (no round trip for them again)."""
        self._latest: dict[str, str] = {}
        """``schedule_started:NAME`` / ``schedule_ended:NAME`` -> the start of the latest
        occurrence whose edge this server knows is audited (read from Redis on first sight)."""
        self.appended = 0
        """Entries this server appended."""

    async def check(self, state: FleetState, now: datetime) -> int:
        """Write each edge of ``state`` that has passed and is not in the stream yet; returns
        how many this call appended. Raises what Redis raises (the watcher logs it and tries
        again at its next tick)."""
        appended = 0
        for action, hold, at in due_edges(state, now):
            token = (f"{action}:{hold.name}", format_time(at))
            if token in self._written:
                continue
            if await self._append(action, hold, at, state.version):
                appended += 1
                log.info("fleet %s: %s %s at %s (version %d)", state.fleet,
                         action.replace("_", " "), hold.name, token[1], state.version)
            self._written.add(token)
        self.appended += appended
        return appended

    async def check_schedules(
        self, schedules: Iterable[Schedule], version: int, now: datetime
    ) -> int:
        """Write each edge of the schedules' occurrences that has passed and is not in the
        stream yet; returns how many this call appended."""
        edges = schedule_edges(schedules, now)
        await self._read_latest({f"{action}:{schedule.name}" for action, schedule, _, _ in edges})
        written: dict[str, list[tuple[str, datetime, str]]] = {}
        for action, schedule, occ, at in edges:
            field, start = f"{action}:{schedule.name}", format_time(occ.start)
            if start <= self._latest.get(field, ""):
                continue
            if await self._append_occurrence(action, schedule, occ, at, version):
                written.setdefault(schedule.name, []).append((action, at, start))
            self._latest[field] = start
        for name, done in written.items():
            if len(done) <= _EDGES_LOGGED:
                for action, at, start in done:
                    log.info("fleet %s: %s %s at %s (the occurrence from %s)", self.keys.fleet,
                             action.replace("_", " "), name, format_time(at), start)
            else:
                log.info("fleet %s: schedule %s: %d edges of occurrences from %s to %s audited "
                         "at once (%d starts, %d ends: they passed while no watcher audited "
                         "them)", self.keys.fleet, name, len(done), done[0][2], done[-1][2],
                         sum(a == SCHEDULE_STARTED for a, _, _ in done),
                         sum(a == SCHEDULE_ENDED for a, _, _ in done))
        appended = sum(len(done) for done in written.values())
        self.appended += appended
        return appended

    async def _read_latest(self, fields: set[str]) -> None:
        """Learn, for the fields seen for the first time, the occurrence audited last (one
        HMGET): a server that starts writes no round trip for the edges already audited."""
        new = sorted(fields - self._latest.keys())
        if not new:
            return
        try:
            values = await uncancelled(self._redis.hmget(self.keys.alerted, new))
        except UnicodeDecodeError:  # a hand edit, not UTF-8: as unknown (the script decides)
            values = [None] * len(new)
        for field, value in zip(new, values, strict=True):
            found = value.decode(errors="replace") if isinstance(value, bytes) else value
            self._latest[field] = found if found and _RECORDED.fullmatch(found) else ""

    async def _append_occurrence(
        self, action: str, schedule: Schedule, occ: Occurrence, at: datetime, version: int
    ) -> bool:
        fields: dict[str, str] = {
            A_ACTION: action, A_HOLD: schedule.name, A_REASON: schedule.reason,
            A_BY: schedule.by, A_VERSION: str(version), A_AT: format_time(at),
            "starts_at": format_time(occ.start), "auto_resume_at": format_time(occ.end),
            "cron": schedule.cron, "timezone": schedule.timezone,
        }
        args: list[str] = [f"{action}:{schedule.name}", format_time(occ.start),
                           str(AUDIT_MAXLEN)]
        for key, value in fields.items():
            args += [key, value]
        written = await uncancelled(
            self._occurrence_script(keys=[self.keys.alerted, self.keys.audit], args=args)
        )
        return bool(int(written))

    async def _append(self, action: str, hold: Hold, at: datetime, version: int) -> bool:
        fields: dict[str, str] = {
            A_ACTION: action,
            A_HOLD: hold.name,
            A_REASON: hold.reason,
            A_BY: hold.by,
            A_VERSION: str(version),
            A_AT: format_time(at),
            "starts_at": format_time(hold.starts_at),
            "auto_resume_at": format_time(hold.auto_resume_at),
        }
        args: list[str] = [f"{action}:{hold.name}", format_time(at), str(AUDIT_MAXLEN)]
        for key, value in fields.items():
            args += [key, value]
        written = await uncancelled(
            self._script(keys=[self.keys.alerted, self.keys.audit], args=args)
        )
        return bool(int(written))


__all__ = [
    "EDGE_ONCE_LUA",
    "OCCURRENCE_ONCE_LUA",
    "SCHEDULE_ENDED",
    "SCHEDULE_LOOKBACK",
    "SCHEDULE_STARTED",
    "WINDOW_ENDED",
    "WINDOW_STARTED",
    "WindowAudit",
    "due_edges",
    "schedule_edges",
]
