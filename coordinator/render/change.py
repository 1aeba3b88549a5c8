"""A change and its wait: what ``pause``/``resume`` print and answer (``action_dict``,
``action_line``), and the wait report (``wait_table``, ``why_not``, ``stragglers_line``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from coordinator.durations import format_age
from coordinator.fleet.models import GONE, WHY_UNREACHABLE, ReplicaResult, WaitReport
from coordinator.render.text import cell, printable, short_age
from replica.contract import FleetState, format_time


def action_dict(state: FleetState, report: WaitReport | None) -> dict[str, Any]:
    """``pause --json``/``resume --json`` and the body of ``POST /api/fleet/pause|resume``."""
    return {
        "fleet": state.fleet,
        "state": state.to_dict(),
        "wait": None if report is None else report.to_dict(),
    }


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
    turned quiet), or why it did not get there; then those excused (they left)."""
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


__all__ = ["action_dict", "action_line", "stragglers_line", "wait_table", "why_not"]
