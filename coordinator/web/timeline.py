"""The timeline routes of the API: each fleet's holds over time, for the dashboard's SVG.

    GET /api/fleets/{name}/timeline?hours=24&days=7   view   one fleet (404: never seen)
    GET /api/timeline?hours=24&days=7                 view   every fleet the token is given

``hours`` (1 to ``MAX_HOURS``) back from now are rebuilt from the fleet's audit trail, ``days``
(0 to ``MAX_DAYS``) ahead show its planned windows (``coordinator.fleet.timeline``). A value
out of range or not a whole number is a 422. One fleet's body::

    {"fleet", "now", "start", "end", "audit_from", "skipped", "truncated",
     "spans": [{"hold", "kind": "hold"|"window"|"schedule", "start", "end", "open", "until",
                "by", "reason", "duration_s", "ended", "ended_by", "select"?, "canaries"?}]}

``GET /api/timeline`` answers ``{"now", "fleets": [...], "truncated", "errors"}`` for at most
``MAX_FLEETS`` fleets of the registry (newest activity first, then shown by name), each read
with at most ``OVERVIEW_ENTRIES`` audit entries: a fleet that cannot be read is
``{"fleet", "error"}`` (first), and the others answer as usual. The one-fleet route answers a
fleet whose state cannot be read the same way, with 200.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final

from fastapi import FastAPI, Query, Request

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import FleetError, read_isolated
from coordinator.fleet.timeline import MAX_DAYS, MAX_ENTRIES, MAX_HOURS, read_timeline
from coordinator.web.deps import NamedView, Viewer, fleets_of
from coordinator.web.fleetview import listed_fleets
from replica.contract import format_time, now_utc

MAX_FLEETS: Final = 50
"""The most fleets ``GET /api/timeline`` draws."""
OVERVIEW_ENTRIES: Final = 200
"""The most audit entries ``GET /api/timeline`` reads of each fleet."""

Hours = Annotated[int, Query(ge=1, le=MAX_HOURS, description="hours back from now")]
Days = Annotated[int, Query(ge=0, le=MAX_DAYS, description="days ahead of now")]


def _error(error: FleetError) -> dict[str, Any]:
    return {"fleet": error.fleet, "error": error.error}


def install(app: FastAPI) -> None:
    """Add the timeline routes to ``app``."""

    async def one(fleet: Fleet, hours: int, days: int, cap: int,
                  now: datetime | None = None) -> dict[str, Any]:
        timeline = await read_timeline(fleet.redis, fleet.name, now or now_utc(), hours, days,
                                       cap)
        return timeline.to_dict()

    @app.get("/api/fleets/{name}/timeline", tags=["fleets"])
    async def get_named_timeline(access: NamedView, hours: Hours = 24, days: Days = 7,
                                 ) -> dict[str, Any]:
        """The holds of the fleet ``name`` (404 if it was never seen) from ``hours`` ago,
        rebuilt from its audit trail, to ``days`` ahead (its planned windows): each a span
        with ``start``, ``end``, ``hold``, ``by``, ``reason`` and ``kind``."""
        fleet = access.fleet
        [result] = await read_isolated(
            [fleet], lambda f: one(f, hours, days, MAX_ENTRIES), lambda f: f.name)
        return _error(result) if isinstance(result, FleetError) else result

    @app.get("/api/timeline", tags=["fleets"])
    async def get_timeline(operator: Viewer, request: Request, hours: Hours = 24,
                           days: Days = 7) -> dict[str, Any]:
        """The timeline of every fleet of the registry the token is given (at most 50, the
        most recently active), a fleet that cannot be read as ``{"fleet", "error"}``."""
        fleets = fleets_of(request)
        listed = await listed_fleets(fleets.redis)
        names = [n for n in listed.names if operator.may_use(n)]
        shown = [fleets.get(n) for n in names[:MAX_FLEETS]]
        now = now_utc()
        results = await read_isolated(
            shown, lambda f: one(f, hours, days, OVERVIEW_ENTRIES, now), lambda f: f.name)
        rows = [_error(r) if isinstance(r, FleetError) else r for r in results]
        rows.sort(key=lambda r: ("error" not in r, r["fleet"]))
        return {
            "now": format_time(now),
            "fleets": rows,
            "truncated": len(names) > MAX_FLEETS or listed.truncated,
            "errors": sum(1 for r in rows if "error" in r),
        }


__all__ = ["MAX_FLEETS", "OVERVIEW_ENTRIES", "install"]
