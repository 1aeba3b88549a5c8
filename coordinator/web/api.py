"""The coordinator's HTTP API and dashboard (FastAPI): ``create_app(settings)``.

Routes::

    GET  /                     the dashboard (static, no token needed to load the page)
    GET  /healthz              liveness: {"ok": true, "fleet": ..., "redis": "up"|"down"}
    GET  /api/fleet            view   the status shape (see coordinator.render)
    GET  /api/fleet/history    view   {"fleet": ..., "events": [...]}, newest first
    POST /api/fleet/pause      admin  {"reason", "for_seconds"?, "auto_resume"?, "wait"?, "timeout"?}
    POST /api/fleet/resume     admin  {"reason"?, "stagger_seconds"?, "wait"?, "timeout"?}
    GET  /metrics              Prometheus text (public unless FLEETGATE_METRICS_AUTH)
    GET  /docs, /openapi.json

Writes answer 200 with ``{"fleet", "state", "wait"}``; with ``wait`` the request blocks until
every live replica got there or ``timeout`` (capped at ``FLEETGATE_MAX_WAIT``) and answers 202
when some did not. Missing or wrong token: 401; a view token on a write: 403; bad input: 422
with a JSON detail; Redis unreachable: 503. The audit trail records the token's configured
name, never anything from the body.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Final

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from redis.asyncio import Redis
from redis.exceptions import RedisError

from coordinator.durations import MAX_DURATION_S, MIN_DURATION_S
from coordinator.fleet.fleet import Fleet
from coordinator.render import action_dict, history_dict, status_dict
from coordinator.settings import MAX_REASON, CoordinatorSettings, check_reason
from coordinator.web.auth import ANONYMOUS, Operator, TokenStore
from coordinator.web.metrics import CONTENT_TYPE, OverdueWatcher, render_metrics
from replica.contract import MAX_STAGGER_S
from replica.errors import ConfigError, ContractError

log = logging.getLogger(__name__)

STATIC_DIR: Final = Path(__file__).parent / "static"
MAX_HISTORY: Final = 1000
_CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


# ---------------------------------------------------------------------------- bodies


class PauseRequest(BaseModel):
    """Pause the fleet. ``by`` is not accepted: it is the token's operator name."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=MAX_REASON, description="Why (1 to 500 printable characters).")
    for_seconds: float | None = Field(
        default=None, ge=MIN_DURATION_S, le=MAX_DURATION_S,
        description="The expected window; the pause is overdue after it.",
    )
    auto_resume: bool = Field(default=False, description="Resume by itself when the window ends.")
    wait: bool = Field(default=False, description="Block until every live replica is quiet.")
    timeout: float = Field(default=60.0, ge=MIN_DURATION_S, le=MAX_DURATION_S)

    @field_validator("reason", mode="before")
    @classmethod
    def _trim(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @field_validator("reason")
    @classmethod
    def _printable(cls, value: str) -> str:
        return check_reason(value)

    @model_validator(mode="after")
    def _auto_resume_needs_window(self) -> PauseRequest:
        if self.auto_resume and self.for_seconds is None:
            raise ValueError("auto_resume needs for_seconds")
        return self


class ResumeRequest(BaseModel):
    """Resume the fleet. ``by`` is not accepted: it is the token's operator name."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(
        default=None, max_length=MAX_REASON,
        description="Why, for the audit trail (optional; 1 to 500 printable characters).",
    )
    stagger_seconds: float | None = Field(
        default=None, ge=MIN_DURATION_S, le=MAX_STAGGER_S,
        description="Spread the replicas' resumes evenly over this window.",
    )
    wait: bool = Field(default=False, description="Block until every live replica is running.")
    timeout: float = Field(default=60.0, ge=MIN_DURATION_S, le=MAX_DURATION_S)

    @field_validator("reason")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        return None if value is None else check_reason(value)


# ---------------------------------------------------------------------------- app


class _Runtime:
    """What the app needs at request time: settings, tokens, and what the lifespan opens."""

    def __init__(self, settings: CoordinatorSettings, tokens: TokenStore, insecure: bool) -> None:
        self.settings = settings
        self.tokens = tokens
        self.insecure = insecure
        self.redis: Redis | None = None
        self.fleet: Fleet | None = None
        self.watcher: OverdueWatcher | None = None


_bearer = HTTPBearer(auto_error=False, description="FLEETGATE_ADMIN_TOKEN or FLEETGATE_VIEW_TOKEN")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _runtime(request: Request) -> _Runtime:
    runtime: _Runtime = request.app.state.runtime
    return runtime


def _authenticate(runtime: _Runtime, credentials: HTTPAuthorizationCredentials | None) -> Operator:
    if runtime.insecure:
        return ANONYMOUS
    operator = runtime.tokens.authenticate(None if credentials is None else credentials.credentials)
    if operator is None:
        raise HTTPException(
            status_code=401,
            detail="a valid Bearer token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return operator


def _viewer(request: Request, credentials: Credentials) -> Operator:
    """Any configured operator (admin or view)."""
    return _authenticate(_runtime(request), credentials)


def _admin(request: Request, credentials: Credentials) -> Operator:
    """An operator with the admin role (403 for a view token)."""
    operator = _authenticate(_runtime(request), credentials)
    if not operator.can_write:
        raise HTTPException(status_code=403, detail=f"{operator.name} has a read-only token")
    return operator


def _fleet(request: Request) -> Fleet:
    fleet = _runtime(request).fleet
    if fleet is None:
        raise HTTPException(status_code=503, detail="the coordinator is starting")
    return fleet


Viewer = Annotated[Operator, Depends(_viewer)]
Admin = Annotated[Operator, Depends(_admin)]
TheFleet = Annotated[Fleet, Depends(_fleet)]


def create_app(
    settings: CoordinatorSettings | None = None,
    *,
    insecure_no_auth: bool = False,
    run_watcher: bool = True,
) -> FastAPI:
    """The API. Raises ``ConfigError`` when there is no admin token and ``insecure_no_auth``
    is not given, or when the tokens file cannot be read."""
    settings = settings or CoordinatorSettings()
    tokens = TokenStore.from_settings(settings)
    if not insecure_no_auth and not tokens.has_admin:
        raise ConfigError(
            "refusing to start without an admin token: set FLEETGATE_ADMIN_TOKEN "
            "(or FLEETGATE_TOKENS_FILE), or pass --insecure-no-auth"
        )
    if insecure_no_auth:
        log.warning(
            "AUTHENTICATION IS OFF (--insecure-no-auth): anyone who can reach this port can "
            "pause and resume fleet %s, recorded as %r", settings.fleet, ANONYMOUS.name,
        )
    runtime = _Runtime(settings, tokens, insecure_no_auth)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = Redis.from_url(
            settings.redis_url, decode_responses=True, socket_connect_timeout=5, socket_timeout=10
        )
        runtime.redis = redis
        runtime.fleet = Fleet(redis, settings.fleet)
        try:
            if run_watcher:
                runtime.watcher = await OverdueWatcher(runtime.fleet, settings).start()
            log.info("coordinator for fleet %s up (%d operators)", settings.fleet, len(tokens))
            yield
        finally:
            if runtime.watcher is not None:
                await runtime.watcher.stop()
            await asyncio.shield(redis.aclose())

    app = FastAPI(
        title="fleetgate coordinator",
        version="0.1.0",
        summary="Pause and resume a fleet of asyncio workers through Redis.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.runtime = runtime

    @app.exception_handler(RedisError)
    async def _redis_down(request: Request, exc: RedisError) -> JSONResponse:
        log.warning("%s %s: Redis unreachable: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": f"Redis unreachable: {exc}"}, status_code=503)

    @app.exception_handler(TimeoutError)
    async def _redis_slow(request: Request, exc: TimeoutError) -> JSONResponse:
        log.warning("%s %s: Redis did not answer in time", request.method, request.url.path)
        return JSONResponse({"detail": "Redis did not answer in time"}, status_code=503)

    @app.exception_handler(ContractError)
    async def _contract(request: Request, exc: ContractError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    # -- pages

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(
            STATIC_DIR / "index.html",
            headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-cache"},
        )

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/healthz", tags=["health"])
    async def healthz(fleet: TheFleet) -> dict[str, Any]:
        """Liveness: the process answers. ``redis`` says whether Redis answers a PING."""
        up = await _redis_up(runtime.redis)
        return {"ok": True, "fleet": fleet.name, "redis": "up" if up else "down"}

    # -- reads

    @app.get("/api/fleet", tags=["fleet"])
    async def get_fleet(operator: Viewer, fleet: TheFleet) -> dict[str, Any]:
        """The fleet's state, every replica and a summary (the shape of ``status --json``)."""
        state = await fleet.state()
        replicas = await fleet.replicas()
        return status_dict(state, replicas, max_pause=settings.max_pause)

    @app.get("/api/fleet/history", tags=["fleet"])
    async def get_history(
        operator: Viewer,
        fleet: TheFleet,
        limit: Annotated[int, Query(ge=1, le=MAX_HISTORY)] = 50,
    ) -> dict[str, Any]:
        """The audit trail of pauses, resumes and restores, newest first."""
        return history_dict(fleet.name, await fleet.history(limit=limit))

    # -- writes

    @app.post(
        "/api/fleet/pause",
        tags=["fleet"],
        responses={202: {"description": "paused, but not every replica got quiet in time"}},
    )
    async def pause(body: PauseRequest, operator: Admin, fleet: TheFleet, response: Response) -> dict[str, Any]:
        """Pause the fleet; ``by`` is the operator the token names."""
        window = None if body.for_seconds is None else timedelta(seconds=body.for_seconds)
        state = await fleet.pause(
            body.reason,
            by=operator.name,
            expected_for=window,
            auto_resume_after=window if body.auto_resume else None,
        )
        report = None
        if body.wait:
            report = await fleet.wait(state.version, timeout=min(body.timeout, settings.max_wait))
            if not report.ok:
                response.status_code = 202
        return action_dict(state, report)

    @app.post(
        "/api/fleet/resume",
        tags=["fleet"],
        responses={202: {"description": "resumed, but not every replica was running in time"}},
    )
    async def resume(
        operator: Admin, fleet: TheFleet, response: Response, body: ResumeRequest | None = None
    ) -> dict[str, Any]:
        """Resume the fleet (optionally staggered over ``stagger_seconds``)."""
        body = body or ResumeRequest()
        stagger = None if body.stagger_seconds is None else timedelta(seconds=body.stagger_seconds)
        state = await fleet.resume(by=operator.name, stagger=stagger, reason=body.reason or "")
        report = None
        if body.wait:
            report = await fleet.wait(state.version, timeout=min(body.timeout, settings.max_wait))
            if not report.ok:
                response.status_code = 202
        return action_dict(state, report)

    # -- metrics

    metrics_guard: list[Callable[..., Any]] = [_viewer] if settings.metrics_auth else []

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=Response,
        dependencies=[Depends(g) for g in metrics_guard],
        responses={200: {"content": {CONTENT_TYPE: {}}}},
    )
    async def metrics(fleet: TheFleet) -> Response:
        """The fleet's metrics, read from Redis now (Prometheus text format)."""
        return Response(await render_metrics(fleet, settings.max_pause), media_type=CONTENT_TYPE)

    return app


async def _redis_up(redis: Redis | None) -> bool:
    if redis is None:
        return False
    ping: Callable[[], Awaitable[Any]] = redis.ping
    try:
        async with asyncio.timeout(2.0):
            await ping()
        return True
    except asyncio.CancelledError:
        raise
    except (RedisError, OSError, TimeoutError):
        return False


__all__ = ["PauseRequest", "ResumeRequest", "create_app"]
