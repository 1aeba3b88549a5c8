"""Alerts into the events stream, once per fleet however many servers see them: ``Alerts``.

A forgotten pause is noticed by the overdue watcher of every ``fleetgate serve`` of the fleet;
one script per alert records, in the ``alerted`` hash, the state version it was raised for and
appends the event only when that version is new, so two servers raise it once. The notifier
then delivers it like any other entry (see ``coordinator.notify.consumer``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Final

from redis.asyncio import Redis

from coordinator.notify.events import OVERDUE
from replica.contract import (
    A_ACTION,
    A_AT,
    A_BY,
    A_REASON,
    A_VERSION,
    AUDIT_MAXLEN,
    FleetState,
    Keys,
    format_time,
)
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

ALERT_ONCE_LUA: Final = """
-- fleetgate: append an alert to the events stream unless it was raised for this token.
-- KEYS[1] fleetgate:{NAME}:alerted   KEYS[2] fleetgate:{NAME}:events
-- ARGV[1] alert kind   ARGV[2] token (the state version)   ARGV[3] stream cap
-- ARGV[4..] the entry's field, value pairs.  Returns 1 when appended, 0 when raised already.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
return 1
"""


class Alerts:
    """Raises a fleet's alerts into its events stream, each once."""

    def __init__(self, redis: Redis, fleet: str) -> None:
        self.keys = Keys(fleet)
        self._script = redis.register_script(ALERT_ONCE_LUA)

    async def overdue(
        self, state: FleetState, now: datetime, age_s: float, max_pause: float
    ) -> bool:
        """Raise "this pause is overdue" for the state's version; True when this call raised
        it (False: it was raised already, by this server or another)."""
        fields: dict[str, str] = {
            A_ACTION: OVERDUE,
            A_REASON: state.reason,
            A_BY: state.by,
            A_VERSION: str(state.version),
            A_AT: format_time(now),
            "since": format_time(state.since),
            "age_s": f"{age_s:.3f}",
            "expected_until": format_time(state.expected_until),
            "max_pause_s": f"{max_pause:g}",
        }
        args: list[str] = [OVERDUE, str(state.version), str(AUDIT_MAXLEN)]
        for key, value in fields.items():
            args += [key, value]
        raised = await uncancelled(self._script(keys=[self.keys.alerted, self.keys.events], args=args))
        return bool(int(raised))


__all__ = ["ALERT_ONCE_LUA", "Alerts"]
