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

``HEAD`` of a GET route answers as its GET without the body.

Writes answer 200 with ``{"fleet", "state", "wait"}``; with ``wait`` the request blocks until
every live replica got there or its time ran out and answers 202 when some did not.
``timeout`` bounds the whole write (the wait in it is capped at ``FLEETGATE_MAX_WAIT``; see
``coordinator.web.changes``). Missing or wrong token: 401; a view token on a write: 403; a body
over ``FLEETGATE_MAX_BODY``: 413, before anything reads it; bad input: 422 with a JSON detail
that echoes no more than a short excerpt (``coordinator.web.errors``); Redis unreachable: 503;
a change sent with no answer (its outcome unknown): 504. The audit trail records the token's
configured name, never anything from the body.
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
from fastapi.responses import FileResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from redis.asyncio import Redis
from redis.exceptions import RedisError

from coordinator.fleet.fleet import Fleet
from coordinator.notify.alerts import Alerts
from coordinator.notify.consumer import Notifier
from coordinator.notify.settings import NotifySettings
from coordinator.render import fleet_status_dict, history_dict
from coordinator.settings import CoordinatorSettings
from coordinator.web import errors
from coordinator.web.auth import ANONYMOUS, Operator, TokenStore
from coordinator.web.bodies import PauseRequest, ResumeRequest
from coordinator.web.changes import bounded_change
from coordinator.web.metrics import CONTENT_TYPE, OverdueWatcher, render_metrics
from coordinator.web.middleware import BodyLimit, HeadAsGet
from replica.errors import ConfigError

log = logging.getLogger(__name__)

STATIC_DIR: Final = Path(__file__).parent / "static"
MAX_HISTORY: Final = 1000
_CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


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
        self.notifier: Notifier | None = None


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
                alerts = None
                if settings.webhook_urls:  # notifications (coordinator.notify)
                    runtime.notifier = await Notifier(
                        redis, settings.fleet, NotifySettings.from_coordinator(settings)
                    ).start()
                    alerts = Alerts(redis, settings.fleet)
                runtime.watcher = await OverdueWatcher(runtime.fleet, settings, alerts).start()
            log.info("coordinator for fleet %s up (%d operators)", settings.fleet, len(tokens))
            yield
        finally:
            if runtime.watcher is not None:
                await runtime.watcher.stop()
            if runtime.notifier is not None:
                await runtime.notifier.stop()
            await asyncio.shield(redis.aclose())

    app = FastAPI(
        title="fleetgate coordinator",
        version="0.1.0",
        summary="Pause and resume a fleet of asyncio workers through Redis.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.runtime = runtime

    errors.install(app)
    app.add_middleware(HeadAsGet)
    app.add_middleware(BodyLimit, max_body=settings.max_body)  # outermost: before anything

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
        """The fleet's state, every replica and a summary (the shape of ``status --json``;
        ``summary.unreadable`` counts the entries of the replicas set that cannot be read)."""
        return fleet_status_dict(await fleet.status(), max_pause=settings.max_pause)

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
        responses={
            202: {"description": "paused, but not every replica got quiet in time"},
            504: {"description": "the outcome is unknown: check the state"},
        },
    )
    async def pause(body: PauseRequest, operator: Admin, fleet: TheFleet, response: Response) -> dict[str, Any]:
        """Pause the fleet; ``by`` is the operator the token names. ``timeout`` bounds the
        whole request; 504 when the change got no answer (its outcome is unknown)."""
        window = None if body.for_seconds is None else timedelta(seconds=body.for_seconds)
        outcome = await bounded_change(
            fleet,
            lambda: fleet.pause(
                body.reason,
                by=operator.name,
                expected_for=window,
                auto_resume_after=window if body.auto_resume else None,
            ),
            wait=body.wait, timeout=body.timeout, max_wait=settings.max_wait,
        )
        response.status_code = outcome.status
        return outcome.body

    @app.post(
        "/api/fleet/resume",
        tags=["fleet"],
        responses={
            202: {"description": "resumed, but not every replica was running in time"},
            504: {"description": "the outcome is unknown: check the state"},
        },
    )
    async def resume(
        operator: Admin, fleet: TheFleet, response: Response, body: ResumeRequest | None = None
    ) -> dict[str, Any]:
        """Resume the fleet (optionally staggered over ``stagger_seconds``). ``timeout`` bounds
        the whole request; 504 when the change got no answer (its outcome is unknown)."""
        body = body or ResumeRequest()
        stagger = None if body.stagger_seconds is None else timedelta(seconds=body.stagger_seconds)
        reason = body.reason
        outcome = await bounded_change(
            fleet,
            lambda: fleet.resume(by=operator.name, stagger=stagger, reason=reason),
            wait=body.wait, timeout=body.timeout, max_wait=settings.max_wait,
        )
        response.status_code = outcome.status
        return outcome.body

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
        return Response(
            await render_metrics(fleet, settings.max_pause, runtime.notifier),
            media_type=CONTENT_TYPE,
        )

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
