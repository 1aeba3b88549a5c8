"""What the coordinator shows: the stable JSON shapes and the human tables (rich).

The status shape (``fleetgate status --json`` and ``GET /api/fleet``)::

    {"fleet": "orders",
     "state": FleetState.to_dict(),
     "replicas": [ReplicaInfo.to_dict(), ...],
     "summary": {"replicas": 3, "running": 0, "paused": 0, "quiet": 3, "stale": 0,
                 "live": 3, "unacknowledged": 0, "in_flight": 0, "queued": 12,
                 "unreadable": 0, "effectively_paused": true, "pause_age_s": 252.1,
                 "overdue": false, "now": "2026-11-30T08:04:12.100Z"}}

A replica's state is exactly one of ``running``, ``paused`` (held, items still in flight),
``quiet`` (held, nothing in flight) and ``stale`` (no heartbeat for a while: its figures are
old). ``unacknowledged`` counts live replicas behind the fleet's current version. A pause is
``overdue`` past its ``expected_until``, or past ``max_pause`` when it was given no window.
``unreadable`` counts the entries of the ``replicas`` set (and their records) that could not be
read and were skipped (``FleetStatus.unreadable``: a member that is not a replica id, a record
that is not a hash).
Ages read ``4m12s``; times are UTC ISO 8601.

Every text read from Redis (reasons, ``by``, replica ids, hosts, audit fields) reaches the
terminal as text, never as rich markup, and with every character that is not printable shown
as its escape (``printable``): a reason ``[link=...]`` stays those characters, a host holding
ESC sequences cannot drive the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coordinator.durations import format_age
from coordinator.fleet.models import (
    GONE,
    WHY_UNREACHABLE,
    AuditEvent,
    FleetStatus,
    ReplicaInfo,
    ReplicaResult,
    WaitReport,
)
from replica.contract import FleetState, format_time, now_utc

REPLICA_STATES: Final = ("running", "paused", "quiet", "stale")
DEFAULT_MAX_PAUSE_S: Final = 1800.0


# ---------------------------------------------------------------------------- text


def printable(value: object) -> str:
    """``value`` as one printable line: each character that is not printable (controls,
    ESC, format characters such as bidirectional overrides, line separators) as its escape,
    ``\\x1b``, ``\\u202e``. Markup is not touched: see ``cell``."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def cell(value: object, style: str = "") -> Text:
    """Stored text for a table: a ``Text`` (rich reads no markup and no emoji codes in it)."""
    return Text(printable(value), style=style)


# ---------------------------------------------------------------------------- figures


def replica_state(replica: ReplicaInfo) -> str:
    """``stale``, ``quiet``, ``paused`` or ``running``: one per replica, in that precedence."""
    if replica.stale:
        return "stale"
    if replica.quiet:
        return "quiet"
    if replica.paused:
        return "paused"
    return "running"


def pause_age_s(state: FleetState, now: datetime | None = None) -> float | None:
    """How long the fleet has been paused (None while it runs)."""
    now = now or now_utc()
    if not state.effectively_paused(now) or state.since is None:
        return None
    return max(0.0, (now - state.since).total_seconds())


def is_overdue(
    state: FleetState, now: datetime | None = None, max_pause: float = DEFAULT_MAX_PAUSE_S
) -> bool:
    """A pause past its ``expected_until``, or past ``max_pause`` seconds without a window."""
    now = now or now_utc()
    age = pause_age_s(state, now)
    if age is None:
        return False
    if state.expected_until is not None:
        return now > state.expected_until
    return age > max_pause


def unacknowledged(state: FleetState, replicas: Iterable[ReplicaInfo]) -> list[ReplicaInfo]:
    """Live replicas that have not applied the fleet's current version."""
    return [r for r in replicas if not r.stale and r.applied_version < state.version]


def ack_lag_s(
    replica: ReplicaInfo, state: FleetState, now: datetime | None = None
) -> tuple[float | None, bool]:
    """``(seconds, acknowledged)``: how long the replica took to apply the current version, or
    how long it has been behind it (None when the times are unknown)."""
    changed = state.changed_at
    if replica.applied_version >= state.version:
        if changed is None or replica.applied_at is None:
            return None, True
        return max(0.0, (replica.applied_at - changed).total_seconds()), True
    if changed is None:
        return None, False
    return max(0.0, ((now or now_utc()) - changed).total_seconds()), False


def summary(
    state: FleetState,
    replicas: Sequence[ReplicaInfo],
    now: datetime | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    unreadable: int = 0,
) -> dict[str, Any]:
    """The ``summary`` object of the status shape."""
    now = now or now_utc()
    counts = dict.fromkeys(REPLICA_STATES, 0)
    for r in replicas:
        counts[replica_state(r)] += 1
    live = [r for r in replicas if not r.stale]
    return {
        "replicas": len(replicas),
        **counts,
        "live": len(live),
        "unacknowledged": len(unacknowledged(state, replicas)),
        "in_flight": sum(r.in_flight for r in live),
        "queued": sum(r.queued for r in live),
        "unreadable": unreadable,
        "effectively_paused": state.effectively_paused(now),
        "pause_age_s": _round(pause_age_s(state, now)),
        "overdue": is_overdue(state, now, max_pause),
        "now": format_time(now),
    }


def status_dict(
    state: FleetState,
    replicas: Sequence[ReplicaInfo],
    now: datetime | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    unreadable: int = 0,
) -> dict[str, Any]:
    """The status shape: ``status --json`` and ``GET /api/fleet``."""
    return {
        "fleet": state.fleet,
        "state": state.to_dict(),
        "replicas": [r.to_dict() for r in replicas],
        "summary": summary(state, replicas, now, max_pause, unreadable),
    }


def fleet_status_dict(
    status: FleetStatus, now: datetime | None = None, max_pause: float = DEFAULT_MAX_PAUSE_S
) -> dict[str, Any]:
    """``status_dict`` of ``Fleet.status()``."""
    return status_dict(status.state, status.replicas, now, max_pause, status.unreadable)


def history_dict(fleet: str, events: Sequence[AuditEvent]) -> dict[str, Any]:
    """``history --json`` and ``GET /api/fleet/history``: newest first."""
    return {"fleet": fleet, "events": [e.to_dict() for e in events]}


def action_dict(state: FleetState, report: WaitReport | None) -> dict[str, Any]:
    """``pause --json``/``resume --json`` and the body of ``POST /api/fleet/pause|resume``."""
    return {
        "fleet": state.fleet,
        "state": state.to_dict(),
        "wait": None if report is None else report.to_dict(),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# ---------------------------------------------------------------------------- human


def _time_and_age(dt: datetime | None, now: datetime) -> str:
    if dt is None:
        return "-"
    return f"{format_time(dt)} ({format_age((now - dt).total_seconds())} ago)"


def banner(state: FleetState, replicas: Sequence[ReplicaInfo], now: datetime, max_pause: float) -> Text:
    """One or two lines: PAUSED/RUNNING, reason, by, since and age, window, counts."""
    line = Text()
    paused = state.effectively_paused(now)
    overdue = is_overdue(state, now, max_pause)
    if paused:
        line.append(" PAUSED ", style="bold white on red" if overdue else "bold black on yellow")
        line.append(f"  fleet {state.fleet}  reason {state.reason!r}  by {printable(state.by or '-')}")
        line.append(f"  since {format_time(state.since) or '-'}")
        age = format_age(pause_age_s(state, now))
        line.append(f" ({age})", style="bold red" if overdue else "")
        if state.expected_until is not None:
            line.append(f"  expected until {format_time(state.expected_until)}")
        if state.auto_resume_at is not None:
            line.append("  auto-resume")
        if overdue:
            line.append("  OVERDUE", style="bold red")
    else:
        line.append(" RUNNING ", style="bold white on green")
        line.append(f"  fleet {state.fleet}")
        if state.since is not None:
            line.append(f"  since {format_time(state.since)}")
            line.append(f" ({format_age((now - state.since).total_seconds())})")
        if state.by:
            line.append(f"  last change by {printable(state.by)}")
    s = summary(state, replicas, now, max_pause)
    line.append(
        f"\nversion {state.version}  replicas {s['replicas']}: {s['running']} running, "
        f"{s['paused']} pausing, {s['quiet']} quiet, {s['stale']} stale; "
        f"{s['unacknowledged']} unacknowledged; {s['in_flight']} in flight, {s['queued']} queued"
    )
    return line


def _source_stopped(replica: ReplicaInfo) -> bool:
    """The replica service reports (record field ``source``) that its work source stopped."""
    return replica.extra.get("source", "").startswith("stopped")


def replica_table(
    state: FleetState, replicas: Sequence[ReplicaInfo], now: datetime
) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in ("replica", "state", "version", "in flight", "queued", "last heartbeat", "ack lag", "host"):
        table.add_column(name, justify="right" if name in ("in flight", "queued") else "left")
    for r in replicas:
        st = replica_state(r)
        lag, acked = ack_lag_s(r, state, now)
        version = f"v{r.applied_version}" + ("" if r.applied_version >= state.version else " (behind)")
        table.add_row(
            cell(r.id),
            cell(st, style={"stale": "red", "quiet": "cyan", "paused": "yellow"}.get(st, "green"))
            if not _source_stopped(r) else cell(f"{st}, source stopped", style="bold red"),
            cell(version),
            cell(r.in_flight),
            cell(r.queued),
            cell(_time_and_age(r.heartbeat_at, now)),
            cell((_lag(lag) if acked else f"waiting {format_age(lag)}") if lag is not None else "-"),
            cell(r.host or "-"),
        )
    return table


def unreadable_line(unreadable: int) -> str:
    """What ``status`` says of the entries it skipped."""
    entries = "entry" if unreadable == 1 else "entries"
    return (f"{unreadable} {entries} of the replicas set cannot be read (not a replica id, or a "
            "record that is not a hash): skipped")


def status_renderable(
    state: FleetState,
    replicas: Sequence[ReplicaInfo],
    now: datetime | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    unreadable: int = 0,
) -> RenderableType:
    now = now or now_utc()
    parts: list[RenderableType] = [banner(state, replicas, now, max_pause)]
    if replicas:
        parts.append(replica_table(state, replicas, now))
    else:
        parts.append(Text("no replica has reported", style="italic"))
    if unreadable:
        parts.append(Text(unreadable_line(unreadable), style="yellow"))
    return Group(*parts)


def fleet_status_renderable(
    status: FleetStatus, now: datetime | None = None, max_pause: float = DEFAULT_MAX_PAUSE_S
) -> RenderableType:
    """``status_renderable`` of ``Fleet.status()``."""
    return status_renderable(status.state, status.replicas, now, max_pause, status.unreadable)


def history_table(events: Sequence[AuditEvent]) -> RenderableType:
    if not events:
        return Text("no pause or resume recorded", style="italic")
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in ("at", "action", "by", "reason", "version"):
        table.add_column(name)
    for e in events:
        table.add_row(
            cell(format_time(e.at)), cell(e.action), cell(e.by or "-"), cell(e.reason or "-"),
            cell(e.version),
        )
    return table


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
    return format_time(at) + ("" if after_s is None else f" (+{_lag(after_s)})")


def _lag(seconds: float) -> str:
    """Sub-second precision where it matters: ``120ms``, ``1.4s``, ``4m12s``."""
    if seconds < 1:
        return f"{max(0.0, seconds) * 1000:.0f}ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    return format_age(seconds)


def stragglers_line(report: WaitReport) -> str:
    """The one stderr line of a ``--wait`` that timed out (and who was excused)."""
    stragglers = [r for r in report.replicas if not r.reached]
    named = ", ".join(printable(f"{r.id} ({why_not(r)})") for r in stragglers)
    goal = "quiet" if report.action == "pause" else "running"
    excused = ""
    if report.excused:
        excused = "; excused: " + ", ".join(
            printable(f"{e.id} ({e.reason})") for e in report.excused)
    return (
        f"timed out after {report.elapsed_s:.1f}s: {len(stragglers)} of {len(report.replicas)} "
        f"replicas not {goal}: {named}{excused}"
    )


__all__ = [
    "REPLICA_STATES",
    "ack_lag_s",
    "action_dict",
    "action_line",
    "banner",
    "cell",
    "fleet_status_dict",
    "fleet_status_renderable",
    "history_dict",
    "history_table",
    "is_overdue",
    "pause_age_s",
    "printable",
    "replica_state",
    "replica_table",
    "status_dict",
    "status_renderable",
    "stragglers_line",
    "summary",
    "unacknowledged",
    "unreadable_line",
    "wait_table",
    "why_not",
]
