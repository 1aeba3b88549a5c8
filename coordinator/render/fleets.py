"""Every fleet on one page: the rows of ``fleetgate fleets`` (the rows of ``GET /api/fleets``,
``coordinator.web.fleetview``, carry the same fields, read from the server's snapshots).

The shape (``fleets --json``)::

    {"fleets": [{"fleet": "orders", "paused": true, "reason": "db failover", "by": "alice",
                 "since": "...", "version": 4, "holds": {...} | absent, "replicas": 4,
                 "live": 3, "stale": 1, "unacknowledged": 0, "unreadable": 0,
                 "pause_age_s": 252.1, "overdue": false, "backlog": 120, "pending": 8,
                 "dead_letters": 0, "oldest_waiting_s": 250.3, "last_activity": "..."}, ...],
     "truncated": false, "unreadable": 0, "errors": 0, "now": "..."}

A fleet that cannot be read (a key of the wrong type, a state hash edited into garbage: see
``coordinator.fleet.overview.read_isolated``) is a row of its own, ``{"fleet": ..., "error":
"what is wrong", "last_activity": ...}`` (the figures absent), listed first; ``errors`` counts
them, and the others are read as usual. ``unreadable`` counts the registry members skipped
(not fleet names, not UTF-8, a score that is not a time).

Paused fleets first (overdue ones before the others), then by name. ``holds`` is the state's
``holds`` object when the state carries holds, each hold with its ``status`` (scheduled,
active or ended) as in ``state.holds`` of ``status --json``; ``reason`` is empty for a running
fleet. The figures are those of the fleet's ``status`` summary
(``coordinator.render.status.summary``); ``backlog``, ``pending``, ``dead_letters`` and
``oldest_waiting_s`` are its work stream's (``coordinator.fleet.backlog``: null when unknown,
"?" in the table).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coordinator.durations import format_age
from coordinator.fleet.backlog import NUMBERS
from coordinator.fleet.models import FleetStatus
from coordinator.fleet.overview import FleetError, Overview
from coordinator.render.holds import holds_dict
from coordinator.render.status import summary
from coordinator.render.text import cell
from replica.contract import FleetState, format_time
from replica.contract.holds import ACTIVE, SCHEDULED


def fleet_row(
    status: FleetStatus, now: datetime, max_pause: float, activity_ms: float | None = None
) -> dict[str, Any]:
    """One fleet (``row``) from its status, its figures counted here."""
    s = summary(status.state, status.replicas, now, max_pause, status.unreadable,
                backlog=status.backlog)
    return row(status.state, s, now, activity_ms)


def row(
    state: FleetState, counts: dict[str, Any], now: datetime, activity_ms: float | None = None
) -> dict[str, Any]:
    """One fleet of ``fleetgate fleets --json`` and ``GET /api/fleets``: paused or not (and why,
    by whom, since when, its holds when the state has them, each with its ``status`` at
    ``now``), its replicas live, stale and unacknowledged, the pause's age, whether overdue.
    ``counts`` are the summary's figures (``summary()`` or ``FleetSummary.counts()``)."""
    paused = bool(counts["effectively_paused"])
    out: dict[str, Any] = {
        "fleet": state.fleet,
        "paused": paused,
        "reason": state.reason if paused else "",
        "by": state.by,
        "since": format_time(state.since) or None,
        "version": state.version,
        **{k: counts[k] for k in ("replicas", "live", "stale", "unacknowledged", "unreadable",
                                  "pause_age_s", "overdue", *NUMBERS)},
        "last_activity": None if activity_ms is None else format_time(
            datetime.fromtimestamp(activity_ms / 1000, tz=UTC)),
    }
    if state.holds is not None:
        out["holds"] = holds_dict(state, now)
    return out


def error_row(error: FleetError, activity_ms: float | None = None) -> dict[str, Any]:
    """The row of a fleet that could not be read: its name, what is wrong, its activity."""
    return {
        "fleet": error.fleet,
        "error": error.error,
        "last_activity": None if activity_ms is None else format_time(
            datetime.fromtimestamp(activity_ms / 1000, tz=UTC)),
    }


def sort_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fleets that cannot be read first, then paused fleets (overdue ones before the others),
    then by name."""
    return sorted(rows, key=lambda r: ("error" not in r, not r.get("paused"),
                                       not r.get("overdue"), r["fleet"]))


def overview_dict(overview: Overview, max_pause: float) -> dict[str, Any]:
    """``fleetgate fleets --json``: a row per fleet, paused ones first."""
    now = overview.now
    rows = [fleet_row(st, now, max_pause, overview.activity_ms.get(st.state.fleet))
            for st in overview.statuses]
    rows += [error_row(e, overview.activity_ms.get(e.fleet)) for e in overview.errors]
    return {
        "fleets": sort_rows(rows),
        "truncated": overview.truncated,
        "unreadable": overview.unreadable,
        "errors": len(overview.errors),
        "now": format_time(now),
    }


def active_hold_names(state: FleetState, now: datetime) -> list[str]:
    """The names of the holds in force at ``now``, then the scheduled ones marked so (none for
    a state without holds: a pause then shows no hold)."""
    names = []
    for hold in state.holds or ():
        status = hold.status(now)
        if status == ACTIVE:
            names.append(hold.name)
        elif status == SCHEDULED:
            names.append(f"{hold.name} (scheduled)")
    return names


def _number(value: int | None) -> str:
    return "?" if value is None else str(value)


def overview_renderable(overview: Overview, max_pause: float) -> RenderableType:
    """``fleetgate fleets``: one line per fleet, paused ones first."""
    data = overview_dict(overview, max_pause)
    by_name = {st.state.fleet: st.state for st in overview.statuses}
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    numbers = ("live", "stale", "unacked", "backlog", "pending", "dead")
    for name in ("fleet", "state", "holds", "live", "stale", "unacked", "backlog", "pending",
                 "dead", "paused for", "overdue", "reason"):
        table.add_column(name, justify="right" if name in numbers else "left")
    for row in data["fleets"]:
        if "error" in row:
            table.add_row(cell(row["fleet"]), cell("UNREADABLE", style="bold red"),
                          *(cell("-") for _ in range(9)), cell(row["error"], style="red"))
            continue
        state = by_name[row["fleet"]]
        age = row["pause_age_s"]
        holds = active_hold_names(state, overview.now)
        table.add_row(
            cell(row["fleet"]),
            cell("PAUSED" if row["paused"] else "running",
                 style=("bold red" if row["overdue"] else "bold yellow") if row["paused"] else "green"),
            cell(", ".join(holds) or "-"),
            cell(row["live"]),
            cell(row["stale"], style="red" if row["stale"] else ""),
            cell(row["unacknowledged"], style="yellow" if row["unacknowledged"] else ""),
            cell(_number(row["backlog"]), style="yellow" if row["paused"] and row["backlog"] else ""),
            cell(_number(row["pending"])),
            cell(_number(row["dead_letters"]), style="red" if row["dead_letters"] else ""),
            cell(format_age(age) if row["paused"] and age is not None else "-"),
            cell("OVERDUE" if row["overdue"] else "-", style="bold red" if row["overdue"] else ""),
            cell(row["reason"] or "-"),
        )
    parts: list[RenderableType] = []
    if not data["fleets"]:
        parts.append(Text("no fleet on this Redis yet (the registry fleetgate:fleets is empty)",
                          style="italic"))
    else:
        total = len(data["fleets"])
        paused = sum(1 for r in data["fleets"] if r.get("paused"))
        bad = data["errors"]
        parts.append(Text(f"{total} fleet{'' if total == 1 else 's'}: {paused} paused, "
                          f"{total - paused - bad} running"
                          + (f", {bad} cannot be read" if bad else "")))
        parts.append(table)
    if overview.truncated:
        parts.append(Text(f"only the {len(data['fleets'])} most recently active fleets are shown",
                          style="yellow"))
    if overview.unreadable:
        parts.append(Text(f"{overview.unreadable} member(s) of fleetgate:fleets are not fleet "
                          "names (or not UTF-8, or scored with no time): skipped",
                          style="yellow"))
    return Group(*parts)


__all__ = [
    "active_hold_names", "error_row", "fleet_row", "overview_dict", "overview_renderable", "row",
    "sort_rows",
]
