"""What the API and ``/metrics`` show of a fleet, all read through one snapshot cache.

Every view reads a fleet's state and records through the coordinator's ``Snapshots``
(``coordinator.fleet.snapshots``): however many dashboards, API clients and scrapes ask, the
records are read at most once per ``FLEETGATE_REFRESH_INTERVAL`` (and again at once after a
change or a replica joining or leaving).

* ``status_view``: the body of ``GET /api/fleet`` (the default fleet): the status shape, every
  replica, as ``status --json --all``.
* ``fleet_view``: the body of ``GET /api/fleets/{name}``: the summary shape, or every record a
  page at a time (``coordinator.fleet.views.fleet_body``).
* ``overview``: the body of ``GET /api/fleets``: one ``fleet_row`` per fleet, paused ones first,
  the fleets read a few at once (``coordinator.fleet.overview.read_isolated``): a fleet that
  cannot be read is a row ``{"fleet", "error", "last_activity", "read_at": null}`` of its own
  (first), counted in ``errors``, and the others answer as usual.
* ``scaling_view``: the body of ``GET /api/fleets/{name}/scaling``, for autoscalers (KEDA's
  ``metrics-api`` scaler, ``valueLocation: schedulable_backlog``)::

      {"fleet": "orders", "schedulable_backlog": 0, "backlog": 1200, "pending": 8,
       "paused": true, "holds": [{"name": "db", "reason": "...", "by": "...", ...}],
       "oldest_waiting_s": 310.5, "read_at": "...", "now": "..."}

  ``schedulable_backlog`` is the backlog while the fleet runs and ``0`` while any hold is
  active: an autoscaler that scales on it never adds replicas to a paused fleet. ``paused`` and
  ``holds`` are read at every request (a pause is seen at once, ``Snapshots``' fingerprint); the
  backlog is at most ``FLEETGATE_REFRESH_INTERVAL`` old. ``schedulable_backlog`` is null when
  the fleet runs and Redis cannot say its backlog (``coordinator.fleet.backlog``): KEDA then
  fails the metric and applies the ScaledObject's ``fallback``, never a wrong number.
* ``listed_fleets``: the fleets of the registry (``coordinator.fleet.registry``: the fleets a
  coordinator changed first, then those replicas announced, newest activity first), at most
  ``MAX_LISTED``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from fastapi import Request
from redis.asyncio import Redis

from coordinator.fleet.backlog import figures_of
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import FLEET_READS, FleetError, read_isolated
from coordinator.fleet.registry import read_registry
from coordinator.fleet.snapshots import Snapshots
from coordinator.fleet.summary import FleetSummary
from coordinator.fleet.views import fleet_body
from coordinator.render import fleet_status_dict
from coordinator.render.fleets import error_row, row, sort_rows
from replica.contract import format_time, now_utc

MAX_LISTED: Final = 1000
"""The most fleets ``GET /api/fleets`` and ``/metrics`` show (newest activity first)."""


async def status_view(snapshots: Snapshots, fleet: Fleet, max_pause: float) -> dict[str, Any]:
    """The body of ``GET /api/fleet``: the state, every replica and the summary."""
    return fleet_status_dict(await snapshots.status(fleet), max_pause=max_pause)


async def scaling_view(snapshots: Snapshots, fleet: Fleet) -> dict[str, Any]:
    """The body of ``GET /api/fleets/{name}/scaling`` (see the module's doc)."""
    snap = await snapshots.snap(fleet)
    now = now_utc()
    state = snap.status.state
    holds = state.active_holds(now)
    paused = state.effectively_paused(now)
    figures = figures_of(snap.status.backlog, now)
    backlog = figures["backlog"]
    return {
        "fleet": fleet.name,
        "schedulable_backlog": 0 if paused else backlog,
        "backlog": backlog,
        "pending": figures["pending"],
        "paused": paused,
        "holds": [{"name": h.name, **h.to_dict()} for h in holds],
        "oldest_waiting_s": figures["oldest_waiting_s"],
        "read_at": format_time(snap.read_at),
        "now": format_time(now),
    }


async def fleet_view(
    snapshots: Snapshots, fleet: Fleet, request: Request, max_pause: float
) -> dict[str, Any]:
    """The body of ``GET /api/fleets/{name}`` (``?replicas=all&limit=&cursor=`` pages every
    record; a bad value is a ``ContractError``: 422)."""
    return await fleet_body(snapshots, fleet, request.query_params, max_pause)


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
    fs: FleetSummary, activity_ms: float | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """One fleet in ``GET /api/fleets`` (``render.fleets.row``) and when it was read."""
    counts = fs.counts()
    return {**row(fs.state, counts, now or now_utc(), activity_ms), "read_at": counts["read_at"]}


async def overview(
    snapshots: Snapshots, fleets: Sequence[Fleet], listed: Listed, max_pause: float,
    concurrency: int = FLEET_READS,
) -> dict[str, Any]:
    """The body of ``GET /api/fleets``: a row per fleet, paused ones first (the fleets read
    ``concurrency`` at once)."""
    now = now_utc()

    async def row(fleet: Fleet) -> dict[str, Any]:
        summary = await snapshots.summary(fleet, max_pause, now)
        return fleet_row(summary, listed.activity_ms.get(fleet.name), now)

    rows = []
    errors = 0
    for result in await read_isolated(fleets, row, lambda f: f.name, concurrency):
        if isinstance(result, FleetError):
            errors += 1
            rows.append({**error_row(result, listed.activity_ms.get(result.fleet)),
                         "read_at": None})
        else:
            rows.append(result)
    return {
        "fleets": sort_rows(rows),
        "truncated": listed.truncated,
        "unreadable": listed.unreadable,
        "errors": errors,
        "now": format_time(now),
    }


__all__ = [
    "MAX_LISTED", "Listed", "fleet_row", "fleet_view", "listed_fleets", "overview", "scaling_view",
    "sort_rows", "status_view",
]
