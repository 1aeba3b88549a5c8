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
"""

from __future__ import annotations

import logging
from datetime import datetime
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
from replica.control.redisio import uncancelled

log = logging.getLogger(__name__)

WINDOW_STARTED: Final = "window_started"
WINDOW_ENDED: Final = "window_ended"

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


class WindowAudit:
    """Writes a fleet's window edges into its audit stream, each once."""

    def __init__(self, redis: Redis, fleet: str) -> None:
        self.keys = Keys(fleet)
        self._script = redis.register_script(EDGE_ONCE_LUA)
        self._written: set[tuple[str, str, str]] = set()
        """Edges this server knows are in the stream (no round trip for them again)."""
        self.appended = 0
        """Entries this server appended."""

    async def check(self, state: FleetState, now: datetime) -> int:
        """Write each edge of ``state`` that has passed and is not in the stream yet; returns
        how many this call appended. Raises what Redis raises (the watcher logs it and tries
        again at its next tick)."""
        appended = 0
        for action, hold, at in due_edges(state, now):
            token = (action, hold.name, format_time(at))
            if token in self._written:
                continue
            if await self._append(action, hold, at, state.version):
                appended += 1
                log.info("fleet %s: %s %s at %s (version %d)", state.fleet,
                         action.replace("_", " "), hold.name, token[2], state.version)
            self._written.add(token)
        self.appended += appended
        return appended

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


__all__ = ["EDGE_ONCE_LUA", "WINDOW_ENDED", "WINDOW_STARTED", "WindowAudit", "due_edges"]
