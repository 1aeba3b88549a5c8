"""The API's canary resume of a schedule's occurrence (``POST .../schedules/{s}/canary``,
``coordinator.web.schedules``): the same choice, steps and dry run as the CLI's
(``coordinator.cli.occurrence``, ``coordinator.fleet.occurrence_canary``)."""

from __future__ import annotations

from typing import Any

from coordinator.fleet.canary import choose, parse_canary
from coordinator.fleet.dryrun import dry_run_dict
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.occurrence_canary import (
    EVENTS,
    dry_run,
    occurrence_canary,
    occurrence_dict,
)
from coordinator.fleet.schedules import ScheduleConflict, occurrence_in_force
from coordinator.render.schedules import schedule_dict
from replica.contract import now_utc
from replica.errors import ContractError


async def canary_step(fleet: Fleet, name: str, step: str, canary: str | None, by: str,
                      reason: str, dry: bool) -> dict[str, Any]:
    """The answer of a canary step (or its dry run). Raises ``ScheduleConflict`` (404, 409)
    and ``ContractError`` (422)."""
    if (step == "canary") != (canary is not None):
        raise ContractError('"canary" (3 or 10%) goes with the step "canary", and only there')
    found = await fleet.schedules()
    schedule = found.get(name)
    if schedule is None:
        raise ScheduleConflict("unknown", fleet.name, name,
                               f"fleet {fleet.name} has no schedule {name}")
    chosen: list[str] = []
    candidates = None
    if canary is not None:
        occ = occurrence_in_force(fleet.name, schedule, now_utc())
        hold = schedule.hold(occ)
        chosen, candidates = choose(fleet.name, hold, (await fleet.status()).replicas,
                                    parse_canary(canary))
    before, after, occ = await occurrence_canary(fleet, name, step, by, reason, chosen,
                                                 dry_run=dry)
    now = now_utc()
    if dry:
        preview = dry_run(await fleet.state(), found, before, after, step, now)
        return dry_run_dict(preview, (await fleet.status()).replicas, now)
    return {"fleet": fleet.name, "step": step, "event": EVENTS[step],
            "occurrence": occurrence_dict(occ), "canaries": list(after.canaries),
            "candidates": candidates, "schedule": schedule_dict(after, now)}


__all__ = ["canary_step"]
