"""The audit trail: its JSON shape (``history_dict``) and its table (``history_table``)."""

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
    for name in ("at", "action", "by", "reason", "version"):
        table.add_column(name)
    for e in events:
        table.add_row(
            cell(format_time(e.at)), cell(e.action), cell(e.by or "-"), cell(e.reason or "-"),
            cell(e.version),
        )
    return table


__all__ = ["history_dict", "history_table"]
