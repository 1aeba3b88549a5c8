"""A canary resume of a schedule's occurrence (issue 22 C.8, "a scheduled or selected hold
alike"): the coordinator's side of ``resume --hold NAME --canary N`` when NAME is a recurring
schedule whose occurrence is in force.

A schedule's hold is not in the state hash: every replica makes it from the schedules hash
(``replica.contract.schedules.Schedule.hold``). Its canaries are the schedule's own
``canaries``/``canary_for`` fields (``occurrence_canary`` writes them): the same stable
choice as for a hold of the state (``coordinator.fleet.canary.choose`` of the occurrence's
hold, among the live replicas), the same soak, the same promote (which ends the occurrence
early) and rollback. Only the occurrence that starts at ``canary_for`` has them: the next one
holds every replica again.

``schedule_of`` tells a schedule's name from a hold's (a hold of the state of that name wins,
as on the replicas); ``dry_run`` builds the preview ``coordinator.fleet.dryrun`` prints;
``wait_released`` waits for the canaries' records to say the hold let them go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Final

from coordinator.fleet.canary import CanarySpec, choose, read_canaries
from coordinator.fleet.dryrun import DryRun
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import ReplicaInfo
from coordinator.fleet.schedules import Schedules
from replica.contract import FleetState, format_time
from replica.contract.recurrence import Occurrence
from replica.contract.schedules import Schedule, ScheduleSet, with_active_schedules

POLL_S: Final = 0.25
"""How often ``wait_released`` reads the canaries' records."""
EVENTS: Final = {"canary": "canary_started", "rollback": "canary_rolled_back",
                 "promote": "canary_promoted", "end": "schedule_ended"}


async def occurrence_canary(
    fleet: Fleet, name: str, step: str, by: str, reason: str = "", canaries: Sequence[str] = (),
    *, dry_run: bool = False,
) -> tuple[Schedule, Schedule, Occurrence]:
    """A canary resume of schedule ``name``'s occurrence in force: ``step`` ``canary`` (the
    hold released on ``canaries`` only), ``rollback`` or ``promote`` (the occurrence ends
    early). The schedule before and after, and the occurrence
    (``coordinator.fleet.schedules.Schedules.canary_step``; ``ScheduleConflict`` kinds
    ``unknown``, ``not_active``, ``no_canary``)."""
    return await Schedules(fleet.redis, fleet.name, fleet.keys).canary_step(
        name, step, by, reason, canaries, dry_run=dry_run)


async def schedule_of(fleet: Fleet, hold: str) -> Schedule | None:
    """The schedule named ``hold``, or None: there is none, or a hold of the state has the
    name (it wins, as on every replica)."""
    state = await fleet.state()
    if any(h.name == hold for h in state.effective_holds()):
        return None
    return (await fleet.schedules()).get(hold)


def choose_canaries(fleet: str, schedule: Schedule, occ: Occurrence,
                    replicas: Sequence[ReplicaInfo], spec: CanarySpec) -> tuple[list[str], int]:
    """The canaries of ``occ`` (sorted) and how many live replicas its hold holds: the rule
    of a hold of the state (``choose``), the hold being the occurrence's."""
    return choose(fleet, replace(schedule.hold(occ), canaries=()), replicas, spec)


def dry_run(state: FleetState, schedules: ScheduleSet, before: Schedule, after: Schedule,
            step: str, now: datetime) -> DryRun:
    """What a canary step (or an early end: ``end``) of ``before``'s occurrence would do: the
    fleet's holds with every schedule's occurrence in force, before and after."""
    others = [s for s in schedules.schedules if s.name != before.name]
    was = with_active_schedules(state, [*others, before], now)
    will = with_active_schedules(state, [*others, after], now)
    return DryRun(was.effective_holds(), will, EVENTS[step], schedule=before.name)


async def wait_released(fleet: Fleet, ids: Sequence[str], hold: str,
                        timeout: float) -> list[str]:
    """Wait until the records of ``ids`` say the hold ``hold`` no longer holds them (and
    their heartbeat is live), at most ``timeout`` seconds; the ids that did not get there."""
    source = f"fleet:{hold}"
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        records, _ = await read_canaries(fleet, ids)
        left = sorted(rid for rid, r in records.items()
                      if r is None or r.stale or source in r.holds)
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(POLL_S)


def occurrence_dict(occ: Occurrence) -> dict[str, str]:
    """The occurrence's start and end (ISO 8601 UTC), for ``--json``."""
    return {"start": format_time(occ.start), "end": format_time(occ.end)}


__all__ = [
    "EVENTS",
    "choose_canaries",
    "dry_run",
    "occurrence_canary",
    "occurrence_dict",
    "schedule_of",
    "wait_released",
]
