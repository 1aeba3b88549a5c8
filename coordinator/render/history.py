"""The audit trail: its JSON shape (``history_dict``) and its table (``history_table``), each
entry with the hold it changed (``hold``; ``starts_at``/``auto_resume_at`` of a window)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from coordinator.fleet.models import AuditEvent
from coordinator.render.text import cell
from replica.contract import format_time


def history_dict(fleet: str, events: Sequence[AuditEvent]) -> dict[str, Any]:
    """``history --json`` and ``GET /api/fleet/history``: newest first."""
    return {"fleet": fleet, "events": [e.to_dict() for e in events]}


def history_table(events: Sequence[AuditEvent]) -> RenderableType:
    if not events:
        return Text("no pause or resume recorded", style="italic")
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in ("at", "action", "hold", "by", "reason", "version"):
        table.add_column(name)
    for e in events:
        table.add_row(
            cell(format_time(e.at)), cell(e.action), cell(_hold(e)),
            cell(e.by or "-"), cell(e.reason or "-"), cell(e.version),
        )
    return table


def _hold(e: AuditEvent) -> str:
    """The hold, and for a scheduled one (or a window) when it starts and ends."""
    if not e.hold:
        return "-"
    times = []
    if e.starts_at is not None:
        times.append(f"from {format_time(e.starts_at)}")
    if e.auto_resume_at is not None:
        times.append(f"until {format_time(e.auto_resume_at)}")
    return e.hold + (f" ({' '.join(times)})" if times else "")


__all__ = ["history_dict", "history_table"]
