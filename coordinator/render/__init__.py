"""What the coordinator shows: the stable JSON shapes and the human tables (rich).

The status shape (``fleetgate status --json --all`` and ``GET /api/fleet``; without ``--all``
``status --json`` prints the summary shape, ``coordinator.fleet.summary.FleetSummary``)::

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

One module per noun: ``text`` (printable, cell), ``status`` (the figures, the status shape and
view), ``history`` (the audit trail) and ``change`` (a change and its wait report); every name
is importable from here, loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.render.change import (
        HoldChange,
        action_dict,
        action_line,
        audited_change,
        change_line,
        describe_change,
        hold_change,
        stragglers_line,
        wait_table,
        why_not,
    )
    from coordinator.render.history import history_dict, history_table
    from coordinator.render.holds import holds_dict, holds_text, state_dict
    from coordinator.render.status import (
        DEFAULT_MAX_PAUSE_S,
        REPLICA_STATES,
        ack_lag_s,
        banner,
        fleet_status_dict,
        fleet_status_renderable,
        is_overdue,
        pause_age_s,
        replica_state,
        replica_table,
        status_dict,
        status_renderable,
        summary,
        summary_renderable,
        summary_rows,
        unacknowledged,
        unreadable_line,
    )
    from coordinator.render.text import cell, printable

# Loaded on first use: ``coordinator.render.text`` alone (the CLI's failure line) loads neither
# the library nor Redis, and ``fleetgate --help`` loads none of these.
_LAZY: dict[str, str] = {
    "DEFAULT_MAX_PAUSE_S": "coordinator.render.status",
    "HoldChange": "coordinator.render.change",
    "REPLICA_STATES": "coordinator.render.status",
    "ack_lag_s": "coordinator.render.status",
    "action_dict": "coordinator.render.change",
    "action_line": "coordinator.render.change",
    "audited_change": "coordinator.render.change",
    "banner": "coordinator.render.status",
    "cell": "coordinator.render.text",
    "change_line": "coordinator.render.change",
    "describe_change": "coordinator.render.change",
    "fleet_status_dict": "coordinator.render.status",
    "fleet_status_renderable": "coordinator.render.status",
    "history_dict": "coordinator.render.history",
    "history_table": "coordinator.render.history",
    "hold_change": "coordinator.render.change",
    "holds_dict": "coordinator.render.holds",
    "holds_text": "coordinator.render.holds",
    "is_overdue": "coordinator.render.status",
    "pause_age_s": "coordinator.render.status",
    "printable": "coordinator.render.text",
    "replica_state": "coordinator.render.status",
    "replica_table": "coordinator.render.status",
    "state_dict": "coordinator.render.holds",
    "status_dict": "coordinator.render.status",
    "status_renderable": "coordinator.render.status",
    "stragglers_line": "coordinator.render.change",
    "summary": "coordinator.render.status",
    "summary_renderable": "coordinator.render.status",
    "summary_rows": "coordinator.render.status",
    "unacknowledged": "coordinator.render.status",
    "unreadable_line": "coordinator.render.status",
    "wait_table": "coordinator.render.change",
    "why_not": "coordinator.render.change",
}

__all__ = [
    "DEFAULT_MAX_PAUSE_S",
    "REPLICA_STATES",
    "HoldChange",
    "ack_lag_s",
    "action_dict",
    "action_line",
    "audited_change",
    "banner",
    "cell",
    "change_line",
    "describe_change",
    "fleet_status_dict",
    "fleet_status_renderable",
    "history_dict",
    "history_table",
    "hold_change",
    "holds_dict",
    "holds_text",
    "is_overdue",
    "pause_age_s",
    "printable",
    "replica_state",
    "replica_table",
    "state_dict",
    "status_dict",
    "status_renderable",
    "stragglers_line",
    "summary",
    "summary_renderable",
    "summary_rows",
    "unacknowledged",
    "unreadable_line",
    "wait_table",
    "why_not",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'coordinator.render' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
