"""``resume --hold NAME --canary N|P% [--soak D]``, ``--promote`` and ``--dry-run`` when NAME
is a recurring schedule (``coordinator.fleet.occurrence_canary``): the occurrence in force is
released on the canaries only, the soak judges them as for a hold of the state, and a promote
ends the occurrence early (its next one holds every replica again). A schedule with no
occurrence in force is refused (exit 2), saying when the next one starts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.cli.exits import EXIT_ROLLED_BACK, EXIT_TIMEOUT, CliError
from coordinator.cli.runner import Progress
from coordinator.durations import format_age
from coordinator.fleet.canary import CanarySpec, Verdict, soak
from coordinator.fleet.dryrun import DryRun
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.occurrence_canary import (
    choose_canaries,
    dry_run,
    occurrence_canary,
    occurrence_dict,
    wait_released,
)
from coordinator.fleet.schedules import ScheduleConflict, occurrence_in_force
from replica.contract import format_time, now_utc
from replica.contract.schedules import Schedule

Result = tuple[dict[str, Any], list[str], CliError | None]


async def canary(fleet: Fleet, schedule: Schedule, spec: CanarySpec, by: str,
                 reason: str | None, wait: bool, soak_s: float | None,
                 progress: Progress) -> Result:
    """A canary resume of ``schedule``'s occurrence in force: body, lines, and the error to
    exit with (None: exit 0)."""
    hold = schedule.name
    occ = occurrence_in_force(fleet.name, schedule, now_utc())  # else exit 2, says when
    replicas = (await fleet.status()).replicas
    chosen, candidates = choose_canaries(fleet.name, schedule, occ, replicas, spec)
    _, after, occ = await occurrence_canary(fleet, hold, "canary", by, reason or "", chosen)
    ids = list(after.canaries)
    lines = [f"canary resume of schedule {hold}'s occurrence (from {format_time(occ.start)} "
             f"to {format_time(occ.end)}): released on {len(ids)} of {candidates} replicas "
             f"({', '.join(ids)}), held on the others; fleet {fleet.name}"]
    body: dict[str, Any] = {"fleet": fleet.name, "hold": hold, "schedule": hold,
                            "occurrence": occurrence_dict(occ), "canaries": ids,
                            "candidates": candidates}
    if wait or soak_s is not None:
        late = await wait_released(fleet, ids, hold, progress.left())
        body["wait"] = {"ok": not late, "stragglers": late}
        if late:
            return body, lines, CliError(
                f"canaries {', '.join(late)} were still held by schedule {hold} (or silent) "
                f"after the wait", EXIT_TIMEOUT)
        lines.append(f"canaries running: {', '.join(ids)}")
    if soak_s is None:
        lines.append(f"promote with: fleetgate resume --hold {hold} --promote")
        return body, lines, None
    verdict = await soak(fleet, ids, soak_s)
    body["soak"] = {"ok": verdict.ok, "why": verdict.why or None,
                    "elapsed_s": round(verdict.elapsed_s, 3)}
    return body, lines, await settle(fleet, hold, by, verdict, soak_s, body, lines)


async def settle(fleet: Fleet, hold: str, by: str, verdict: Verdict, soak_s: float,
                  body: dict[str, Any], lines: list[str]) -> CliError | None:
    """Promote after a quiet soak (the occurrence ends early), else put the hold back on the
    canaries; an occurrence that ended during the soak needs neither."""
    why = verdict.why[:400]
    step, said = (("promote", f"canaries quiet for {format_age(soak_s)}") if verdict.ok
                  else ("rollback", f"soak: {why}"))
    try:
        await occurrence_canary(fleet, hold, step, by, said)
    except ScheduleConflict as exc:
        if exc.kind != "not_active":
            raise
        body["occurrence_over"] = True
        lines.append(f"schedule {hold}'s occurrence ended during the soak: nothing to "
                     f"{step}; its next occurrence holds every replica")
        return None if verdict.ok else CliError(
            f"canary resume of schedule {hold} saw trouble: {why} (its occurrence is over)",
            EXIT_ROLLED_BACK)
    if verdict.ok:
        body["promoted"] = True
        lines.append(f"canaries stayed quiet for {format_age(soak_s)}: promoted, schedule "
                     f"{hold}'s occurrence ended early (the schedule stays)")
        return None
    body["rolled_back"] = True
    lines.append(f"canary resume of schedule {hold} rolled back after "
                 f"{format_age(max(1.0, verdict.elapsed_s))}: {why}; the occurrence holds "
                 "every replica again")
    return CliError(f"canary resume of schedule {hold} rolled back: {why}", EXIT_ROLLED_BACK)


async def promote(fleet: Fleet, hold: str, by: str, reason: str | None) -> str:
    """``resume --hold NAME --promote`` of a schedule: the line to print."""
    _, _, occ = await occurrence_canary(fleet, hold, "promote", by, reason or "")
    return (f"canary resume of schedule {hold} promoted: its occurrence that began at "
            f"{format_time(occ.start)} ended early on every replica; the schedule stays (its "
            "next occurrence holds again)")


async def preview(fleet: Fleet, schedule: Schedule, by: str, reason: str | None, step: str,
                  spec: CanarySpec | None) -> DryRun:
    """What a canary step (or, ``step`` "", an early end) of ``schedule``'s occurrence would
    do; nothing is written."""
    now = now_utc()
    schedules = await fleet.schedules()
    occ = occurrence_in_force(fleet.name, schedule, now)
    if not step:
        before = schedule
        after = replace(schedule, ended_early=occ.start, canaries=(), canary_for=None)
    else:
        chosen: list[str] = []
        if step == "canary" and spec is not None:
            chosen, _ = choose_canaries(fleet.name, schedule, occ,
                                        (await fleet.status()).replicas, spec)
        before, after, occ = await occurrence_canary(fleet, schedule.name, step, by,
                                                           reason or "", chosen, dry_run=True)
    return dry_run(await fleet.state(), schedules, before, after, step or "end", now)


__all__ = ["canary", "preview", "promote", "settle"]
