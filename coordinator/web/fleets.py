"""The fleet routes of the API: every fleet on the Redis, and today's routes for the default one.

    GET  /api/fleets                     view   {"fleets": [row, ...], ...}: paused ones first
    GET  /api/fleets/{name}              view   the summary shape (404: never seen);
                                                ?replicas=all&limit=&cursor= pages every record
    GET  /api/fleets/{name}/history      view   as GET /api/fleet/history (404: never seen)
    GET  /api/fleets/{name}/scaling      view   the schedulable backlog, for autoscalers (KEDA's
                                                metrics-api scaler; coordinator.web.fleetview)
    POST /api/fleets/{name}/pause        admin  as POST /api/fleet/pause (any valid name)
    POST /api/fleets/{name}/resume       admin  as POST /api/fleet/resume (404: never seen)
    GET  /api/fleet, /api/fleet/history, POST /api/fleet/pause, /api/fleet/resume
                                                the default fleet (FLEETGATE_FLEET)
    GET/PUT/DELETE /api/fleets/{name}/limits, /api/fleet/limits
                                                the backlog limit (coordinator.web.limits)

Both families run the same handlers and check the token the same way (``coordinator.web.deps``):
a token limited to other fleets gets 403. Their bodies are the same but for the fleet's GET:
``/api/fleet`` keeps today's status shape (every replica), ``/api/fleets/{name}`` answers the
summary and the replicas that need attention (``coordinator.web.fleetview``). An invalid name is a 422. Pausing a fleet no replica has joined yet is
allowed (a fleet can be paused before its first deploy); resuming or reading one never seen is
a 404, so a mistyped name does not look like a fleet. ``GET /api/fleets`` lists the fleets of
the registry the token is given.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Final

from fastapi import FastAPI, Query, Request, Response

from coordinator.render import history_dict
from coordinator.settings import CoordinatorSettings
from coordinator.web.bodies import PauseRequest, ResumeRequest
from coordinator.web.changes import pause_outcome, resume_outcome
from coordinator.web.deps import (
    Access,
    DefaultChange,
    DefaultView,
    NamedChange,
    NamedView,
    Viewer,
    fleets_of,
    require_known,
    snapshots_of,
)
from coordinator.web.fleetview import (
    fleet_view,
    listed_fleets,
    overview,
    scaling_view,
    status_view,
)
from coordinator.web.limits import install as install_limits

log = logging.getLogger(__name__)

MAX_HISTORY: Final = 1000
_PAUSE_ANSWERS: Final[dict[int | str, dict[str, Any]]] = {
    202: {"description": "paused, but not every replica got quiet in time, or no Redis "
                          "replica confirmed the change in time (confirmed: false)"},
    409: {"description": "the fleet has the most holds it may have: nothing changed"},
    504: {"description": "the outcome is unknown: check the state"},
}
_RESUME_ANSWERS: Final[dict[int | str, dict[str, Any]]] = {
    202: {"description": "resumed, but not every replica was running in time, or no Redis "
                          "replica confirmed the change in time (confirmed: false)"},
    404: {"description": "the fleet has no such hold (or was never seen): nothing changed"},
    409: {"description": "several holds and none named: nothing changed"},
    504: {"description": "the outcome is unknown: check the state"},
}
HistoryLimit = Annotated[int, Query(ge=1, le=MAX_HISTORY)]


def install(app: FastAPI, settings: CoordinatorSettings) -> None:
    """Add the fleet routes to ``app`` (and the backlog limit's: ``coordinator.web.limits``)."""
    install_limits(app)

    # -- shared by both families

    async def history(access: Access, limit: int) -> dict[str, Any]:
        return history_dict(access.fleet.name, await access.fleet.history(limit=limit))

    async def pause(access: Access, body: PauseRequest, response: Response) -> dict[str, Any]:
        outcome = await pause_outcome(access.fleet, body, access.operator.name, settings.max_wait)
        response.status_code = outcome.status
        return outcome.body

    async def resume(
        access: Access, body: ResumeRequest | None, response: Response
    ) -> dict[str, Any]:
        outcome = await resume_outcome(
            access.fleet, body or ResumeRequest(), access.operator.name, settings.max_wait
        )
        response.status_code = outcome.status
        return outcome.body

    # -- the default fleet (FLEETGATE_FLEET)

    @app.get("/api/fleet", tags=["fleet"])
    async def get_fleet(access: DefaultView, request: Request) -> dict[str, Any]:
        """The default fleet's state, every replica and a summary (the shape of
        ``status --json``; ``summary.unreadable`` counts the entries of the replicas set that
        cannot be read)."""
        return await status_view(snapshots_of(request), access.fleet, settings.max_pause)

    @app.get("/api/fleet/history", tags=["fleet"])
    async def get_history(access: DefaultView, limit: HistoryLimit = 50) -> dict[str, Any]:
        """The default fleet's audit trail of pauses, resumes and restores, newest first."""
        return await history(access, limit)

    @app.post("/api/fleet/pause", tags=["fleet"], responses=_PAUSE_ANSWERS)
    async def pause_fleet(
        body: PauseRequest, access: DefaultChange, response: Response
    ) -> dict[str, Any]:
        """Pause the default fleet; ``by`` is the operator the token names. ``timeout`` bounds
        the whole request; 504 when the change got no answer (its outcome is unknown)."""
        return await pause(access, body, response)

    @app.post("/api/fleet/resume", tags=["fleet"], responses=_RESUME_ANSWERS)
    async def resume_fleet(
        access: DefaultChange, response: Response, body: ResumeRequest | None = None
    ) -> dict[str, Any]:
        """Resume the default fleet (optionally staggered over ``stagger_seconds``).
        ``timeout`` bounds the whole request; 504 when the change got no answer."""
        return await resume(access, body, response)

    # -- every fleet

    @app.get("/api/fleets", tags=["fleets"])
    async def get_fleets(operator: Viewer, request: Request) -> dict[str, Any]:
        """Every fleet of the registry the token is given, one row each (paused, reason, holds
        when known, replicas live, stale and unacknowledged, pause age, overdue), paused
        fleets first."""
        fleets = fleets_of(request)
        listed = await listed_fleets(fleets.redis)
        shown = [fleets.get(name) for name in listed.names if operator.may_use(name)]
        return await overview(snapshots_of(request), shown, listed, settings.max_pause)

    @app.get("/api/fleets/{name}", tags=["fleets"])
    async def get_named_fleet(
        access: NamedView,
        request: Request,
        replicas: Annotated[str | None, Query(description="attention (default) or all")] = None,
        limit: Annotated[str | None, Query(description="records per page (replicas=all)")] = None,
        cursor: Annotated[str | None, Query(description="next_cursor of the page before")] = None,
    ) -> dict[str, Any]:
        """The fleet ``name`` (404 if it was never seen): its state, the summary and the
        replicas that need attention; ``?replicas=all`` every record, ``limit`` (1 to 1000)
        at a time from ``cursor``."""
        del replicas, limit, cursor  # documented here, checked by the view
        return await fleet_view(snapshots_of(request), access.fleet, request, settings.max_pause)

    @app.get("/api/fleets/{name}/history", tags=["fleets"])
    async def get_named_history(access: NamedView, limit: HistoryLimit = 50) -> dict[str, Any]:
        """As ``GET /api/fleet/history``, for the fleet ``name``."""
        return await history(access, limit)

    @app.get("/api/fleets/{name}/scaling", tags=["fleets"])
    async def get_named_scaling(access: NamedView, request: Request) -> dict[str, Any]:
        """What an autoscaler should scale the fleet ``name`` on (404 if it was never seen):
        ``schedulable_backlog``, its backlog while it runs and 0 while any hold is active,
        with ``paused``, the active ``holds`` and the raw ``backlog`` beside it. KEDA's
        ``metrics-api`` trigger reads it with ``valueLocation: schedulable_backlog`` and a view
        token (``authMode: bearer``)."""
        return await scaling_view(snapshots_of(request), access.fleet)

    @app.post("/api/fleets/{name}/pause", tags=["fleets"], responses=_PAUSE_ANSWERS)
    async def pause_named(
        body: PauseRequest, access: NamedChange, response: Response
    ) -> dict[str, Any]:
        """As ``POST /api/fleet/pause``, for the fleet ``name``: any valid name, so a fleet
        can be paused before its first replica starts."""
        return await pause(access, body, response)

    @app.post("/api/fleets/{name}/resume", tags=["fleets"], responses=_RESUME_ANSWERS)
    async def resume_named(
        access: NamedChange, request: Request, response: Response,
        body: ResumeRequest | None = None,
    ) -> dict[str, Any]:
        """As ``POST /api/fleet/resume``, for the fleet ``name`` (404 if it was never seen)."""
        await require_known(access.fleet, fleets_of(request))
        return await resume(access, body, response)


__all__ = ["MAX_HISTORY", "install"]
