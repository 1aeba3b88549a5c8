"""A change and its wait: what ``pause``/``resume`` print and answer (``action_dict``,
``action_line``, and for holds ``hold_change``, ``change_line``), and the wait report (``wait_table``, ``why_not``, ``stragglers_line``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from redis.exceptions import RedisError
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from coordinator.durations import format_age
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import GONE, WHY_UNREACHABLE, AuditEvent, ReplicaResult, WaitReport
from coordinator.render.holds import state_dict
from coordinator.render.text import cell, printable, short_age
from replica.contract import FleetState, format_time, now_utc
from replica.contract.holds import ACTIVE, DEFAULT_HOLD, ENDED, SCHEDULED, Hold

AUDIT_READ_S: Final = 1.0
"""How long the read of a change's audit entry (to say what it did) may take."""
AUDIT_LOOKBACK: Final = 5
"""How many of the latest audit entries that read looks through for the change's version."""


@dataclass(frozen=True, slots=True)
class HoldChange:
    """What a pause or a resume did to the fleet's holds, worked out from the state before and
    after it: ``event`` is the audit action (``pause``, ``resume``, ``hold_added``,
    ``hold_updated``, ``hold_released``, ``hold_scheduled``, ``hold_cancelled``, or ``noop``
    for a resume that released nothing), ``holds`` the holds it named or released,
    ``paused_by`` the holds active after it and ``scheduled`` those still to start."""

    event: str
    holds: tuple[str, ...]
    paused_by: tuple[str, ...]
    scheduled: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "holds": list(self.holds),
            "paused": bool(self.paused_by),
            "paused_by": list(self.paused_by),
            "scheduled": list(self.scheduled),
        }


def _current(state: FleetState, now: datetime) -> dict[str, Hold]:
    return {h.name: h for h in state.effective_holds() if h.status(now) != ENDED}


def hold_change(
    action: str, hold: str | None, before: FleetState | None, after: FleetState,
    now: datetime | None = None,
) -> HoldChange:
    """The ``HoldChange`` of a ``pause`` of ``hold`` (None: ``default``) or a ``resume`` (of
    ``hold``; None: the only one, or all), from the states before and after it (``before``
    None: it could not be read, and ``after`` says what it can)."""
    now = now or now_utc()
    now_holds = _current(after, now)
    paused_by = tuple(n for n, h in now_holds.items() if h.status(now) == ACTIVE)
    scheduled = tuple(n for n, h in now_holds.items() if h.status(now) == SCHEDULED)
    if before is None:
        return _from_after(action, hold, after, now_holds, paused_by, scheduled)
    was = _current(before, now)
    was_paused = any(h.status(now) == ACTIVE for h in was.values())
    if action == "pause":
        name = hold or DEFAULT_HOLD
        new = now_holds.get(name)
        if new is not None and new.status(now) == SCHEDULED:
            # moving the last active hold to a later start resumes the fleet
            event = "resume" if was_paused and not paused_by else "hold_scheduled"
        elif not was_paused:
            event = "pause"
        elif name in was and was[name].status(now) == ACTIVE:
            event = "hold_updated"
        else:
            event = "hold_added"
        return HoldChange(event, (name,), paused_by, scheduled)
    released = tuple(n for n in was if n not in now_holds)
    if not released and after.version == before.version:
        event = "noop"
    elif released and all(was[n].status(now) == SCHEDULED for n in released):
        event = "hold_cancelled"
    elif was_paused and not paused_by:
        event = "resume"
    else:
        event = "hold_released"
    return HoldChange(event, released or ((hold,) if hold else ()), paused_by, scheduled)


def _from_after(
    action: str, hold: str | None, after: FleetState, now_holds: dict[str, Hold],
    paused_by: tuple[str, ...], scheduled: tuple[str, ...],
) -> HoldChange:
    """``hold_change`` without the state before: the set-state script keeps ``since`` of the
    fleet and of a hold unless this change started it (then it is ``changed_at``)."""
    entered = after.since is not None and after.since == after.changed_at
    if action == "pause":
        name = hold or DEFAULT_HOLD
        new = now_holds.get(name)
        if new is not None and name in scheduled:
            # the fleet entered running by this change (not its first): a rescheduled hold
            event = "resume" if entered and not paused_by and after.version > 1 else "hold_scheduled"
        elif entered and paused_by:
            event = "pause"
        elif new is not None and new.since == after.changed_at:
            event = "hold_added"
        else:
            event = "hold_updated"
        return HoldChange(event, (name,), paused_by, scheduled)
    event = "resume" if entered and not paused_by else "hold_released"
    return HoldChange(event, (hold,) if hold else (), paused_by, scheduled)


def audited_change(event: AuditEvent, after: FleetState, now: datetime | None = None) -> HoldChange:
    """The ``HoldChange`` its audit entry (``event``, of ``after``'s version) says."""
    now = now or now_utc()
    current = _current(after, now)
    return HoldChange(
        event.action,
        tuple(n for n in event.hold.split(",") if n),
        tuple(n for n, h in current.items() if h.status(now) == ACTIVE),
        tuple(n for n, h in current.items() if h.status(now) == SCHEDULED),
    )


async def describe_change(
    fleet: Fleet, action: str, hold: str | None, started: datetime, after: FleetState
) -> HoldChange:
    """What a change made at ``started`` (the coordinator's clock, before it) did, read after
    it: its audit entry (found by version within the latest ``AUDIT_LOOKBACK``, read within
    ``AUDIT_READ_S``) says the event and the holds; without it, ``hold_change`` works it out
    from the state after. A state written before ``started`` (``changed_at`` is stamped with
    the same clock) is a resume that changed nothing."""
    started = started.replace(microsecond=started.microsecond // 1000 * 1000)  # as stored
    if action == "resume" and (after.changed_at is None or after.changed_at < started):
        return HoldChange("noop", (), (), ())
    try:
        async with asyncio.timeout(AUDIT_READ_S):
            events = await fleet.history(limit=AUDIT_LOOKBACK)
    except (RedisError, OSError, TimeoutError):
        events = []
    mine = next((e for e in events if e.version == after.version), None)
    if mine is not None and mine.action != "restore":
        return audited_change(mine, after)
    return hold_change(action, hold, None, after)


def action_dict(
    state: FleetState, report: WaitReport | None, change: HoldChange | None = None
) -> dict[str, Any]:
    """``pause --json``/``resume --json`` and the body of ``POST /api/fleet/pause|resume``:
    ``state`` (its ``holds`` each with its ``status``), ``wait``, and with ``change`` what the
    change did to the holds (``HoldChange.to_dict``)."""
    body: dict[str, Any] = {
        "fleet": state.fleet,
        "state": state_dict(state, now_utc()),
        "wait": None if report is None else report.to_dict(),
    }
    if change is not None:
        body["change"] = change.to_dict()
    return body


def change_line(state: FleetState, change: HoldChange) -> str:
    """The first line ``pause``/``resume`` print: what happened to the hold, then whether the
    fleet is (still) paused and by which holds: ``released hold db; fleet orders still paused
    by payments (version 7)``."""
    named = ", ".join(change.holds)
    plural = "s" if len(change.holds) > 1 else ""
    if change.event == "noop":
        return f"fleet {state.fleet} has no hold (version {state.version}): nothing to resume"
    rescheduled = change.event == "resume" and bool(change.holds) and all(
        h in change.scheduled for h in change.holds)
    if change.event == "hold_scheduled" or rescheduled:
        hold = next((h for h in state.effective_holds() if h.name == named), None)
        start = format_time(hold.starts_at) if hold is not None and hold.starts_at else "?"
        end = (f" until {format_time(hold.auto_resume_at)}"
               if hold is not None and hold.auto_resume_at else "")
        what = f"{'rescheduled' if rescheduled else 'scheduled'} hold {named} for {start}{end}"
    elif change.event == "hold_cancelled":
        what = f"cancelled scheduled hold{plural} {named}"
    elif change.event in ("resume", "hold_released"):
        what = f"released hold{plural} {named}"
    elif change.event == "hold_updated":
        what = f"updated hold {named}"
    else:
        what = f"added hold {named}"
    if change.event in ("pause", "resume"):
        fleet = action_line(state)
    elif change.paused_by:
        fleet = (f"fleet {state.fleet} still paused by {', '.join(change.paused_by)} "
                 f"(version {state.version})")
    else:
        fleet = f"fleet {state.fleet} still running (version {state.version})"
    others = [n for n in change.scheduled if not (rescheduled and n in change.holds)]
    if others and change.event != "hold_scheduled":
        fleet += f"; scheduled: {', '.join(others)}"
    return f"{what}; {fleet}"


def action_line(state: FleetState) -> str:
    """The first line ``pause``/``resume`` print."""
    if state.paused:
        window = f", expected until {format_time(state.expected_until)}" if state.expected_until else ""
        auto = " (resumes by itself)" if state.auto_resume_at else ""
        return (f"fleet {state.fleet} paused by {printable(state.by)}: {state.reason!r} "
                f"(version {state.version}{window}{auto})")
    stagger = f", staggered over {format_age(state.resume_stagger_s)}" if state.resume_stagger_s else ""
    return f"fleet {state.fleet} resumed by {printable(state.by)} (version {state.version}{stagger})"


def why_not(result: ReplicaResult) -> str:
    """Why a replica did not get there: ``unreachable`` says when it was last heard and what
    it had in flight then (its items may still be running)."""
    why = result.why or "no answer"
    if why != WHY_UNREACHABLE:
        return why
    heard = format_time(result.last_heard) if result.last_heard is not None else "never"
    items = "in flight unknown" if result.in_flight is None else f"{result.in_flight} in flight"
    return f"{why}, last heard {heard}, {items}"


def wait_table(report: WaitReport) -> RenderableType:
    """Each replica's acknowledgement: when it applied the change (and, for a pause, when it
    turned quiet), or why it did not get there; then those excused (they left). With no
    replica at all, one line saying so and what the wait concluded, not an empty table."""
    if not report.replicas and not report.excused:
        now = "paused" if report.action == "pause" else "running"
        return Text(f"no replica has reported: --wait had none to wait for; the fleet is {now} "
                    "in Redis, and a replica that starts applies it from its first read",
                    style="italic")
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    pause = report.action == "pause"
    columns = ["replica", "reached", "applied at"] + (["quiet at"] if pause else []) + ["why not"]
    for name in columns:
        table.add_column(name)
    for r in report.replicas:
        row: list[RenderableType] = [
            cell(r.id),
            Text("yes", style="green") if r.reached else Text("no", style="red"),
            cell(_at_after(r.acked_at, r.applied_after_s)),
        ]
        if pause:
            row.append(cell(_at_after(r.quiet_at, r.quiet_after_s)))
        row.append(cell(why_not(r) if not r.reached else ""))
        table.add_row(*row)
    for e in report.excused:
        row = [cell(e.id), Text("excused", style="yellow"), cell("-")]
        if pause:
            row.append(cell("-"))
        row.append(cell(f"{e.reason} (stopped cleanly)" if e.reason == GONE else e.reason))
        table.add_row(*row)
    return table


def _at_after(at: datetime | None, after_s: float | None) -> str:
    if at is None:
        return "-"
    return format_time(at) + ("" if after_s is None else f" (+{short_age(after_s)})")


def stragglers_line(report: WaitReport) -> str:
    """The one stderr line of a ``--wait`` that is not ok: it timed out (and who was excused),
    or Redis lost its data too recently for the report to vouch for the fleet."""
    stragglers = [r for r in report.replicas if not r.reached]
    named = ", ".join(printable(f"{r.id} ({why_not(r)})") for r in stragglers)
    goal = "quiet" if report.action == "pause" else "running"
    excused = ""
    if report.excused:
        excused = "; excused: " + ", ".join(
            printable(f"{e.id} ({e.reason})") for e in report.excused)
    lost = ""
    if report.redis_lost_at is not None:
        lost = (f"Redis lost its data at {format_time(report.redis_lost_at)} and replicas it "
                "forgot may not have registered again yet: check `fleetgate status` in a few "
                "seconds")
        if not stragglers:
            return lost
        lost = "; " + lost
    return (
        f"timed out after {report.elapsed_s:.1f}s: {len(stragglers)} of {len(report.replicas)} "
        f"replicas not {goal}: {named}{excused}{lost}"
    )


__all__ = [
    "HoldChange", "action_dict", "action_line", "audited_change", "change_line",
    "describe_change", "hold_change", "stragglers_line", "wait_table", "why_not",
]
