"""The replica's HTTP side (FastAPI): probes, the operator's switch, Prometheus.

==========================  =====  ==========================================================
``GET /healthz``            open   liveness: 200 while the process works, paused or not
``GET /readyz``             open   readiness: 503 ``{"ready": false, "reason": ...}`` while a
                                   hold is on (fleet, operator, breaker, control-plane syncing,
                                   drain) or the work source stopped reading on its own, 200
                                   otherwise; with FLEETGATE_READY_WHEN_FLEET_PAUSED a hold of
                                   the fleet alone keeps it at 200
``GET /pool``               admin  the pool's state
``POST /pool/pause``        admin  ``{"reason": ...}``: hold ``source="operator"`` on this
                                   replica only; 200 once quiet, 202 ``quiet: false`` past the
                                   timeout (the hold stays)
``POST /pool/resume``       admin  release the operator's hold (other holds stay)
``GET /metrics``            open   Prometheus text
==========================  =====  ==========================================================

Admin routes take ``Authorization: Bearer <FLEETGATE_ADMIN_TOKEN>``, compared in constant time;
a missing or wrong token gets 401 and a log line that never contains the token. Bodies are
validated (422 with a JSON detail). No route can answer 500: the handlers only read the pool
and the controller, and a last-resort middleware turns anything unexpected into a JSON 503.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any, Final

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from replica.contract.reasons import MAX_REASON, check_reason
from replica.pool.holds import OPERATOR_SOURCE, is_fleet_source
from replica.pool.pool import PausablePool
from replica.service.metrics import CONTENT_TYPE, ControlView, ReplicaMetrics, SourceView
from replica.service.settings import ReplicaSettings

log = logging.getLogger(__name__)

MAX_WAIT_S: Final = 3600.0

Alive = Callable[[], "str | None"]
"""Returns None while the process works, else why it does not (liveness fails)."""


# ---------------------------------------------------------------------------- models


class PauseRequest(BaseModel):
    """Pause this replica's pool on behalf of an operator."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=MAX_REASON, description="Why (1 to 500 printable characters).")
    timeout: float | None = Field(
        default=None, ge=0, le=MAX_WAIT_S,
        description="Seconds to wait for in-flight items (default FLEETGATE_PAUSE_TIMEOUT).",
    )

    @field_validator("reason")
    @classmethod
    def _printable(cls, value: str) -> str:
        return check_reason(value)  # the contract's one rule for reasons


class PoolState(BaseModel):
    replica: str
    fleet: str
    paused: bool
    holds: dict[str, str]
    quiet: bool
    in_flight: int
    queued: int
    queue_capacity: int
    workers: int
    processed: int
    failed: int
    timed_out: int
    dead_lettered: int
    paused_since: str | None
    pause_seconds: float
    fleet_version: int | None
    control: str
    draining: bool


class Ready(BaseModel):
    ready: bool
    reason: str | None = None
    holds: dict[str, str] = Field(default_factory=dict)


class Health(BaseModel):
    ok: bool
    reason: str | None = None
    replica: str
    paused: bool


class Problem(BaseModel):
    detail: Any


# ---------------------------------------------------------------------------- app


class _LastResort:
    """Pure ASGI middleware: an exception that escaped a route becomes a JSON 503."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            response = JSONResponse({"detail": "temporarily unavailable"}, status_code=503)
            await response(scope, receive, send)


def create_app(
    pool: PausablePool,
    settings: ReplicaSettings,
    *,
    control: ControlView | None = None,
    source: SourceView | None = None,
    metrics: ReplicaMetrics | None = None,
    alive: Alive | None = None,
) -> FastAPI:
    """The FastAPI app of one replica. ``control`` is the ``FleetController`` (optional: a pool
    fed by ``put()`` alone has none), ``source`` the work source, ``alive`` the liveness check."""
    if metrics is None:
        metrics = ReplicaMetrics(pool, control=control, source=source)
    token = settings.token()
    insecure = settings.insecure_no_auth and token is None
    bearer = HTTPBearer(auto_error=False, description="FLEETGATE_ADMIN_TOKEN")

    app = FastAPI(
        title="fleetgate replica",
        version="0.1.0",
        description="Probes, the operator's pause switch and metrics of one fleetgate replica.",
    )
    app.add_middleware(_LastResort)

    # -- errors: always JSON, never a 500

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    # -- auth

    def require_admin(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
    ) -> None:
        if insecure:
            return
        presented = credentials.credentials if credentials is not None else None
        if presented is not None and token is not None and hmac.compare_digest(
            presented.encode("utf-8", "surrogateescape"), token.encode("utf-8")
        ):
            return
        client = request.client.host if request.client is not None else "?"
        log.warning(
            "refused %s %s from %s: %s bearer token",
            request.method, request.url.path, client,
            "no" if presented is None else "wrong",
        )
        raise StarletteHTTPException(
            status_code=401,
            detail="missing or wrong bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )

    admin = [Depends(require_admin)]
    auth_responses: dict[int | str, dict[str, Any]] = {
        401: {"model": Problem, "description": "Missing or wrong bearer token"},
        422: {"model": Problem, "description": "Invalid body"},
    }

    # -- views

    def pool_state() -> dict[str, Any]:
        stats = pool.stats()
        counts = {"done": stats.processed, "dead_lettered": 0}
        if source is not None:
            s = source.stats()
            counts = {"done": s.done, "dead_lettered": s.dead_lettered}
        control_text = "none"
        version: int | None = None
        if control is not None:
            control_text = "connected" if control.connected else "disconnected"
            version = control.applied_version
        return {
            "replica": settings.replica_id,
            "fleet": settings.fleet,
            "paused": stats.paused,
            "holds": dict(stats.holds),
            "quiet": stats.paused and stats.in_flight == 0,
            "in_flight": stats.in_flight,
            "queued": stats.queued,
            "queue_capacity": stats.maxsize,
            "workers": stats.workers,
            "processed": counts["done"],
            "failed": stats.failed,
            "timed_out": stats.timed_out,
            "dead_lettered": counts["dead_lettered"],
            "paused_since": stats.paused_since.isoformat() if stats.paused_since else None,
            "pause_seconds": round(stats.pause_seconds, 3),
            "fleet_version": version,
            "control": control_text,
            "draining": stats.closed,
        }

    # -- routes

    @app.get("/healthz", response_model=Health, responses={503: {"model": Health}})
    async def healthz() -> Any:
        """Liveness: 200 while the process works, paused or not."""
        problem = alive() if alive is not None else None
        body = {"ok": problem is None, "reason": problem, "replica": settings.replica_id,
                "paused": pool.paused}
        return JSONResponse(body, status_code=200 if problem is None else 503)

    @app.get("/readyz", response_model=Ready, responses={503: {"model": Ready}})
    async def readyz() -> Any:
        """Readiness: 503 while the pool is held (the reason names the holds) or the work source
        stopped reading, 200 otherwise."""
        holds = pool.holds
        blocking = {
            src: why for src, why in holds.items()
            if not (is_fleet_source(src) and settings.ready_when_fleet_paused)
        }
        reasons = [f"{src}: {why}" for src, why in sorted(blocking.items())]
        stopped = source.stats().stopped if source is not None else None
        if stopped is not None:
            reasons.insert(0, f"work source stopped: {stopped}")
        if reasons:
            reason = "; ".join(reasons)
            return JSONResponse(
                {"ready": False, "reason": reason, "holds": holds}, status_code=503
            )
        return {"ready": True, "reason": None, "holds": holds}

    @app.get("/pool", response_model=PoolState, dependencies=admin, responses=auth_responses)
    async def get_pool() -> Any:
        """The pool's state: holds, counts, fleet version applied, control-plane connection."""
        return pool_state()

    @app.post(
        "/pool/pause",
        response_model=PoolState,
        dependencies=admin,
        responses={**auth_responses, 202: {"model": PoolState,
                                           "description": "Paused, not quiet yet"}},
    )
    async def pause_pool(body: PauseRequest) -> Any:
        """Hold this replica's pool (source "operator"); answer once nothing is in flight."""
        pool.hold(body.reason, OPERATOR_SOURCE)
        log.warning("pool paused by operator: %r (%d queued)", body.reason, pool.queued)
        wait = settings.pause_timeout if body.timeout is None else body.timeout
        try:
            await pool.wait_quiet(wait)
        except TimeoutError:
            return JSONResponse(pool_state(), status_code=202)
        return JSONResponse(pool_state(), status_code=200)

    @app.post("/pool/resume", response_model=PoolState, dependencies=admin,
              responses=auth_responses)
    async def resume_pool() -> Any:
        """Release the operator's hold on this replica (other holds stay)."""
        resumed = pool.resume(OPERATOR_SOURCE)
        log.info("operator hold released%s", "" if resumed else " (still held by others)")
        return pool_state()

    @app.get("/metrics", response_class=Response)
    async def prometheus() -> Response:
        """Prometheus text exposition."""
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app


__all__ = ["PauseRequest", "create_app"]
