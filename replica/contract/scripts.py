"""The Lua scripts that change a fleet's state atomically, and their arguments."""

from __future__ import annotations

from datetime import datetime
from importlib import resources
from typing import Final

from replica.contract.clock import format_time, now_utc
from replica.contract.names import AUDIT_MAXLEN
from replica.contract.state import FleetState


def _script(name: str) -> str:
    return resources.files("replica.contract").joinpath(name).read_text(encoding="utf-8")


SET_STATE_LUA: Final = _script("set_state.lua")
"""Pause or resume atomically: bump the version, write the hash, audit, publish."""
RESTORE_STATE_LUA: Final = _script("restore_state.lua")
"""Create the state hash from a replica's applied state if absent (the newest version wins;
a pause is never replaced by a running state, and an older pause met by a newer running state is
kept with its version raised above it: returns 1 written, 0 refused, ``RESTORE_RAISED``)."""
ENQUEUE_LUA: Final = _script("enqueue.lua")
"""Add a batch of work items within the fleet's backlog limit, whole or not at all (KEYS: work,
limits; ARGV: group, field, items...; replies ``ok``, ``full`` or ``unreadable``)."""
SET_LIMITS_LUA: Final = _script("set_limits.lua")
"""Set or clear the fleet's backlog limit and audit it (KEYS: limits, audit, state)."""
SCHEDULE_WRITE_LUA: Final = _script("schedule_write.lua")
"""Add, replace, remove or end early a schedule atomically: write, audit, tell the replicas."""
RESTORE_RAISED: Final = 2
"""RESTORE_STATE_LUA's answer when it kept an older pause and raised its version."""


def restore_args(
    state: FleetState, who: str, now: datetime | None = None, *, sharded: bool = False
) -> list[str]:
    """ARGV for RESTORE_STATE_LUA (KEYS: state, audit, control); the last, "1" with
    ``sharded``: publish with SPUBLISH (a cluster)."""
    args = [
        str(state.version),
        "1" if state.paused else "0",
        format_time(now or now_utc()),
        who,
        str(AUDIT_MAXLEN),
        state.to_json(),
    ]
    for k, v in state.to_hash().items():
        args += [k, v]
    args.append("1" if sharded else "0")
    return args
