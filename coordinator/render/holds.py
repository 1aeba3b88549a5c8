"""A fleet's holds, as status shows them: the ``holds`` object of ``state`` (``holds_dict``,
``state_dict``) and one line per hold under the banner (``holds_text``).

In every JSON shape (``status --json``, ``GET /api/fleet``, a change's answer) ``state.holds``
is the object of the fleet's holds keyed by name, each value the hold's fields
(``replica.contract.holds``) plus its ``status`` at ``summary.now``: ``scheduled`` (before its
``starts_at``), ``active``, or ``ended`` (its ``auto_resume_at`` has passed; the next change
drops it). A state written by an older release (no trusted holds) shows its pause as the one
hold ``default``, and ``{}`` when it runs. ``status`` adds each hold's ``holding``: how many
live replicas it holds now, by their records (``held_counts``).

A hold's line says how many live replicas it holds (``holds 2 of 3 replicas``), its selector
(``select 'zone=eu-west-1a'``) and the replicas a canary resume released it on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from coordinator.durations import format_age
from coordinator.fleet.models import ReplicaInfo
from coordinator.fleet.schedule import holds_dict, state_dict
from coordinator.render.ink import Text
from coordinator.render.text import printable
from replica.contract import FleetState, format_time
from replica.contract.holds import ACTIVE, SCHEDULED, Hold


def names(holds: tuple[Hold, ...]) -> str:
    return ", ".join(h.name for h in holds)


def held_counts(replicas: Sequence[ReplicaInfo]) -> tuple[dict[str, int], int]:
    """How many live replicas each fleet hold holds (from the ``holds`` of their records:
    source ``fleet`` is the hold ``default``, ``fleet:NAME`` the hold NAME), and how many
    replicas are live."""
    counts: dict[str, int] = {}
    live = 0
    for r in replicas:
        if r.stale:
            continue
        live += 1
        for name in r.fleet_holds:
            counts[name] = counts.get(name, 0) + 1
    return counts, live


def add_holding(state_json: dict[str, Any], replicas: Sequence[ReplicaInfo]) -> dict[str, Any]:
    """``state_json`` (``state_dict``) with each hold's ``holding``: the live replicas it holds."""
    counts, _live = held_counts(replicas)
    for name, hold in (state_json.get("holds") or {}).items():
        hold["holding"] = counts.get(name, 0)
    return state_json


def hold_line(hold: Hold, now: datetime, held: Mapping[str, int] | None = None,
              live: int = 0) -> str:
    """``hold db (active): 'pg upgrade' by alice since T (4m12s), expected until T, ends at T``,
    then (with ``held``, as status reads the records) ``holds 2 of 3 replicas``, its selector and
    its canaries."""
    status = hold.status(now)
    parts = [f"hold {hold.name} ({status}): {printable(hold.reason)!r} by {printable(hold.by or '-')}"]
    if status == SCHEDULED and hold.starts_at is not None:
        parts.append(f"scheduled for {format_time(hold.starts_at)} "
                     f"(in {format_age((hold.starts_at - now).total_seconds())})")
    elif hold.since is not None:
        parts.append(f"since {format_time(hold.since)} "
                     f"({format_age(max(0.0, (now - hold.since).total_seconds()))})")
    if hold.expected_until is not None and hold.expected_until != hold.auto_resume_at:
        parts.append(f"expected until {format_time(hold.expected_until)}")
    if hold.auto_resume_at is not None:
        parts.append(f"ends at {format_time(hold.auto_resume_at)}")
    if hold.select is not None:
        parts.append(f"select {printable(hold.select)!r}")
    if held is not None and status == ACTIVE:
        parts.append(f"holds {held.get(hold.name, 0)} of {live} replicas")
    if hold.canaries:
        parts.append(f"released on canaries {printable(', '.join(hold.canaries))}")
    return ", ".join(parts)


def holds_text(state: FleetState, now: datetime,
               replicas: Sequence[ReplicaInfo] | None = None) -> Text:
    """One line per hold (none for a running fleet without holds), each starting with a
    newline, to follow the banner; with ``replicas``, how many each holds."""
    out = Text()
    held, live = held_counts(replicas) if replicas is not None else (None, 0)
    for hold in sorted(state.effective_holds(), key=lambda h: h.name):
        status = hold.status(now)
        style = "yellow" if status == ACTIVE else ("cyan" if status == SCHEDULED else "dim")
        out.append("\n" + hold_line(hold, now, held, live), style=style)
    return out


__all__ = ["add_holding", "held_counts", "hold_line", "holds_dict", "holds_text", "names",
           "state_dict"]
