"""The status of a fleet: its figures (``summary``), the status shape (``status_dict``) and
the human view (``banner``, ``replica_table``, ``status_renderable``). See ``coordinator.render``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from coordinator.durations import format_age
from coordinator.fleet.backlog import Backlog
from coordinator.fleet.models import FleetStatus, ReplicaInfo
from coordinator.fleet.summary import (
    DEFAULT_MAX_PAUSE_S,
    DEFAULT_SLOW_ACK_S,
    REPLICA_STATES,
    WHY_CONTROL_ERROR,
    FleetSummary,
    ack_lag_s,
    control_error,
    is_overdue,
    pause_age_s,
    replica_state,
    source_stopped,
    summarize,
    unacknowledged,
)
from coordinator.render.holds import add_holding, holds_text, state_dict
from coordinator.render.ink import Group, RenderableType, Table, Text
from coordinator.render.text import cell, printable, short_age
from replica.contract import FleetState, format_time, now_utc
from replica.contract.selectors import format_labels

STATUS_ROWS: Final = 20
"""The most replica rows ``fleetgate status`` prints without ``--all``."""


def summary(
    state: FleetState,
    replicas: Sequence[ReplicaInfo],
    now: datetime | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    unreadable: int = 0,
    slow_ack_s: float = DEFAULT_SLOW_ACK_S,
    backlog: Backlog | None = None,
) -> dict[str, Any]:
    """The ``summary`` object of the status shape (``FleetSummary.counts()``); the backlog's
    figures are None when ``backlog`` is not given (not read)."""
    status = FleetStatus(state=state, replicas=list(replicas), unreadable=unreadable,
                         backlog=backlog)
    return summarize(status, now, max_pause, slow_ack_s=slow_ack_s).counts()


def status_dict(
    state: FleetState,
    replicas: Sequence[ReplicaInfo],
    now: datetime | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    unreadable: int = 0,
    slow_ack_s: float = DEFAULT_SLOW_ACK_S,
    backlog: Backlog | None = None,
) -> dict[str, Any]:
    """The status shape: ``status --json`` and ``GET /api/fleet``."""
    return {
        "fleet": state.fleet,
        "state": add_holding(state_dict(state, now or now_utc()), replicas),
        "replicas": [r.to_dict() for r in replicas],
        "summary": summary(state, replicas, now, max_pause, unreadable, slow_ack_s, backlog),
    }


def fleet_status_dict(
    status: FleetStatus,
    now: datetime | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    slow_ack_s: float = DEFAULT_SLOW_ACK_S,
) -> dict[str, Any]:
    """``status_dict`` of ``Fleet.status()``."""
    return status_dict(status.state, status.replicas, now, max_pause, status.unreadable,
                       slow_ack_s, status.backlog)


def _time_and_age(dt: datetime | None, now: datetime) -> str:
    if dt is None:
        return "-"
    return f"{format_time(dt)} ({format_age((now - dt).total_seconds())} ago)"


def banner(
    state: FleetState,
    replicas: Sequence[ReplicaInfo],
    now: datetime,
    max_pause: float,
    counts: dict[str, Any] | None = None,
) -> Text:
    """One or two lines: PAUSED/RUNNING, reason, by, since and age, window, counts (``counts``:
    a summary's, when already made; else counted from ``replicas``)."""
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
    s = counts if counts is not None else summary(state, replicas, now, max_pause)
    line.append(
        f"\nversion {state.version}  replicas {s['replicas']}: {s['running']} running, "
        f"{s['paused']} pausing, {s['quiet']} quiet, {s['stale']} stale; "
        f"{s['unacknowledged']} unacknowledged; {s['in_flight']} in flight, {s['queued']} queued"
    )
    if s.get("paused_while_running"):
        line.append(f"; {s['paused_while_running']} paused while the fleet runs", style="yellow")
    work = backlog_text(s)
    if work:
        line.append(f"\n{work}", style="yellow" if paused and s.get("backlog") else "")
    line.append(holds_text(state, now, replicas))
    if s.get("slowest_acks"):
        slowest = s["slowest_acks"][0]
        line.append(f"\nslowest acknowledgement of v{state.version}: {printable(slowest['id'])} "
                    f"{short_age(slowest['ack_s'])}")
    return line


def backlog_text(counts: Mapping[str, Any]) -> str:
    """One line of the work stream's figures (empty when the backlog was not read): entries
    waiting (and how old the oldest is), pending, dead letters; "unknown" where Redis cannot
    say."""
    if all(counts.get(k) is None for k in ("backlog", "pending", "dead_letters")):
        return ""

    def number(key: str) -> str:
        value = counts.get(key)
        return "unknown" if value is None else str(value)

    text = f"backlog {number('backlog')} waiting"
    age = counts.get("oldest_waiting_s")
    if counts.get("backlog") != 0:
        text += f" (oldest {format_age(age)})" if age is not None else " (oldest unknown)"
    text = f"{text}, {number('pending')} pending, {number('dead_letters')} dead letters"
    return text + limit_text(counts)


def limit_text(counts: Mapping[str, Any]) -> str:
    """The backlog limit after the figures: ``; limit 5000 (2988 not yet done), when full:
    reject``, ``; limit unreadable: ... (every enqueue refused)``, or empty (no limit)."""
    limit = counts.get("backlog_limit")
    if not limit:
        return ""
    if limit.get("error"):
        return f"; limit unreadable: {printable(limit['error'])} (every enqueue refused)"
    backlog, pending = counts.get("backlog"), counts.get("pending")
    done = "unknown" if backlog is None or pending is None else str(backlog + pending)
    return (f"; limit {limit['max_backlog']} ({done} not yet done), when full: "
            f"{limit['when_full']}")


def replica_table(
    state: FleetState,
    replicas: Sequence[ReplicaInfo],
    now: datetime,
    whys: Mapping[str, Sequence[str]] | None = None,
) -> Table:
    """One row per replica; with ``whys``, a column saying why each one needs attention."""
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    names = ["replica", "state", "version", "in flight", "queued", "last heartbeat", "ack lag", "host"]
    labelled = any(r.labels for r in replicas)
    if labelled:
        names.append("labels")
    if whys is not None:
        names.append("needs attention")
    for name in names:
        table.add_column(name, justify="right" if name in ("in flight", "queued") else "left")
    for r in replicas:
        st = replica_state(r)
        lag, acked = ack_lag_s(r, state, now)
        version = f"v{r.applied_version}" + ("" if r.applied_version >= state.version else " (behind)")
        row = [
            cell(r.id),
            cell(st, style={"stale": "red", "quiet": "cyan", "paused": "yellow"}.get(st, "green"))
            if not source_stopped(r) else cell(f"{st}, source stopped", style="bold red"),
            cell(version),
            cell(r.in_flight),
            cell(r.queued),
            cell(_time_and_age(r.heartbeat_at, now)),
            cell((short_age(lag) if acked else f"waiting {format_age(lag)}") if lag is not None else "-"),
            cell(r.host or "-"),
        ]
        if labelled:
            row.append(cell(format_labels(r.labels) or "-"))
        if whys is not None:
            row.append(cell(", ".join(_why_text(r, w) for w in whys.get(r.id, ())) or "-",
                            style="yellow"))
        table.add_row(*row)
    return table


def _why_text(replica: ReplicaInfo, why: str) -> str:
    """A reason a replica needs attention, as its row says it (a control error with what
    broke)."""
    if why == WHY_CONTROL_ERROR:
        return f"{why}: {control_error(replica)[:200]}"
    return why


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
    """The banner and every replica's row (``fleetgate status --all``)."""
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


def summary_rows(
    status: FleetStatus, fs: FleetSummary, rows: int = STATUS_ROWS
) -> list[ReplicaInfo]:
    """At most ``rows`` replicas: those that need attention first (most urgent first), then
    the others by id."""
    picked = [a.replica for a in fs.figures.attention[:rows]]
    seen = {r.id for r in picked}
    for r in status.replicas:
        if len(picked) >= rows:
            break
        if r.id not in seen:
            picked.append(r)
    return picked


def summary_renderable(
    status: FleetStatus, fs: FleetSummary, rows: int = STATUS_ROWS
) -> RenderableType:
    """``fleetgate status``: the banner, at most ``rows`` replica rows (problem ones first,
    with why) and a line saying how many more there are."""
    counts = fs.counts()
    parts: list[RenderableType] = [banner(status.state, status.replicas, fs.now, fs.max_pause, counts)]
    shown = summary_rows(status, fs, rows)
    whys = {a.replica.id: a.why for a in fs.figures.attention}
    if shown:
        parts.append(replica_table(status.state, shown, fs.now, whys if whys else None))
    else:
        parts.append(Text("no replica has reported", style="italic"))
    total = len(status.replicas)
    if total > len(shown):
        need = fs.figures.attention_total
        parts.append(Text(
            f"{len(shown)} of {total} replicas shown ({need} need{'s' if need == 1 else ''} "
            "attention); --all for every row", style="italic"))
    if status.unreadable:
        parts.append(Text(unreadable_line(status.unreadable), style="yellow"))
    if status.schedules is not None and (status.schedules.schedules
                                         or status.schedules.unreadable):
        from coordinator.render.schedules import next_line

        parts.append(next_line(status.schedules, fs.now))
    return Group(*parts)


__all__ = [
    "DEFAULT_MAX_PAUSE_S", "REPLICA_STATES", "STATUS_ROWS", "ack_lag_s", "backlog_text", "banner",
    "fleet_status_dict", "fleet_status_renderable", "is_overdue", "pause_age_s", "replica_state",
    "replica_table", "status_dict", "status_renderable", "summary", "summary_renderable",
    "summary_rows", "unacknowledged", "unreadable_line"
]
