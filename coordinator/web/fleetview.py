"""What the API and ``/metrics`` show of a fleet, and the one place they read it.

* ``read_status(fleet)``: the fleet's state and replica records. Every view reads through it
  (``GET /api/fleet``, ``/api/fleets``, ``/api/fleets/{name}``, ``/metrics``), so a snapshot
  cache shared by all of them goes here.
* ``fleet_view(fleet, request, max_pause)``: the body of ``GET /api/fleet`` and
  ``GET /api/fleets/{name}`` (today the status shape of ``status --json``).
* ``fleet_row(status, ...)``: one fleet's line of ``GET /api/fleets``; ``overview`` the list,
  paused fleets first.
* ``listed_fleets(redis)``: the fleets of the registry (``fleetgate:fleets``), newest activity
  first, at most ``MAX_LISTED``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from fastapi import Request
from redis.asyncio import Redis

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import FleetStatus
from coordinator.fleet.registry import read_registry
from coordinator.render import fleet_status_dict, summary
from replica.contract import format_time, now_utc

MAX_LISTED: Final = 1000
"""The most fleets ``GET /api/fleets`` and ``/metrics`` show (newest activity first): each one
shown is one read of its state and records."""


async def read_status(fleet: Fleet) -> FleetStatus:
    """The fleet's state and every replica record: the one read behind every view."""
    return await fleet.status()


async def fleet_view(fleet: Fleet, request: Request, max_pause: float) -> dict[str, Any]:
    """The body of ``GET /api/fleet`` (the default fleet) and ``GET /api/fleets/{name}``."""
    del request  # the query (paging, which replicas) is for the view to read
    return fleet_status_dict(await read_status(fleet), max_pause=max_pause)


@dataclass(frozen=True, slots=True)
class Listed:
    """The registry's fleet names (newest activity first) and their last activity."""

    names: list[str]
    activity_ms: dict[str, float]
    truncated: bool
    unreadable: int


async def listed_fleets(redis: Redis) -> Listed:
    """The fleets of the registry, at most ``MAX_LISTED``. Raises redis-py's errors."""
    registry = await read_registry(redis, MAX_LISTED + 1)
    names = registry.names[:MAX_LISTED]
    return Listed(names, registry.fleets, len(registry.names) > MAX_LISTED, registry.unreadable)


def fleet_row(
    status: FleetStatus, now: datetime, max_pause: float, activity_ms: float | None = None
) -> dict[str, Any]:
    """One fleet in ``GET /api/fleets``: paused or not (and why, by whom, since when, its holds
    when the state has them), its replicas live, stale and unacknowledged, the pause's age and
    whether it is overdue."""
    state = status.state
    s = summary(state, status.replicas, now, max_pause, status.unreadable)
    state_dict = state.to_dict()
    row: dict[str, Any] = {
        "fleet": state.fleet,
        "paused": s["effectively_paused"],
        "reason": state.reason if s["effectively_paused"] else "",
        "by": state.by,
        "since": format_time(state.since) or None,
        "version": state.version,
        "live": s["live"],
        "stale": s["stale"],
        "unacknowledged": s["unacknowledged"],
        "unreadable": s["unreadable"],
        "pause_age_s": s["pause_age_s"],
        "overdue": s["overdue"],
        "last_activity": None if activity_ms is None else _ms_time(activity_ms),
    }
    if "holds" in state_dict:
        row["holds"] = state_dict["holds"]
    return row


def sort_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paused fleets first (overdue ones before), then by name."""
    return sorted(rows, key=lambda r: (not r["paused"], not r["overdue"], r["fleet"]))


async def overview(
    fleets: Sequence[Fleet], listed: Listed, max_pause: float
) -> dict[str, Any]:
    """The body of ``GET /api/fleets``: a row per fleet, paused ones first."""
    now = now_utc()
    rows = [
        fleet_row(await read_status(fleet), now, max_pause, listed.activity_ms.get(fleet.name))
        for fleet in fleets
    ]
    return {
        "fleets": sort_rows(rows),
        "truncated": listed.truncated,
        "unreadable": listed.unreadable,
        "now": format_time(now),
    }


def _ms_time(ms: float) -> str:
    return format_time(datetime.fromtimestamp(ms / 1000, tz=now_utc().tzinfo))


__all__ = [
    "MAX_LISTED", "Listed", "fleet_row", "fleet_view", "listed_fleets", "overview",
    "read_status", "sort_rows",
]
