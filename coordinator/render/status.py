"""The status of a fleet: its figures (``summary``), the status shape (``status_dict``) and
the human view (``banner``, ``replica_table``, ``status_renderable``). See ``coordinator.render``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coordinator.durations import format_age
from coordinator.fleet.models import FleetStatus, ReplicaInfo
from coordinator.render.text import cell, printable, short_age
from replica.contract import FleetState, format_time, now_utc

REPLICA_STATES: Final = ("running", "paused", "quiet", "stale")
DEFAULT_MAX_PAUSE_S: Final = 1800.0

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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


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
            cell((short_age(lag) if acked else f"waiting {format_age(lag)}") if lag is not None else "-"),
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


__all__ = [
    "DEFAULT_MAX_PAUSE_S", "REPLICA_STATES", "ack_lag_s", "banner", "fleet_status_dict",
    "fleet_status_renderable", "is_overdue", "pause_age_s", "replica_state", "replica_table",
    "status_dict", "status_renderable", "summary", "unacknowledged", "unreadable_line"
]
