"""The coordinator's HTTP API and dashboard (FastAPI): ``create_app(settings)``.

Routes::

    GET  /                     the dashboard (static, no token needed to load the page)
    GET  /healthz              liveness: {"ok": true, "fleet": ..., "redis": "up"|"down"}
    GET  /api/fleet            view   the status shape (see coordinator.render)
    GET  /api/fleet/history    view   {"fleet": ..., "events": [...]}, newest first
    POST /api/fleet/pause      admin  {"reason", "hold"?, "at"?, "for"?|"for_seconds"?,
                                       "auto_resume"?, "wait"?, "timeout"?}
    POST /api/fleet/resume     admin  {"reason"?, "hold"?|"all"?, "stagger_seconds"?, "wait"?,
                                       "timeout"?}
    GET  /api/fleets           view   every fleet, one row each; and /api/fleets/{name}[/...]
                                      as the four above for any fleet (coordinator.web.fleets)
    GET  /api/fleets/{name}/timeline, /api/timeline
                               view   holds over time, for the dashboard (coordinator.web.timeline)
    GET|POST /api/fleets/{name}/schedules, DELETE .../schedules/{schedule},
    POST .../schedules/{schedule}/end
                               view|admin  recurring windows (coordinator.web.schedules)
    GET  /metrics              Prometheus text (public unless FLEETGATE_METRICS_AUTH)
    GET  /openapi.json         the OpenAPI description; /docs and /redoc (Swagger UI, ReDoc:
                               scripts from a CDN) only with FLEETGATE_API_DOCS=true

``HEAD`` of a GET route answers as its GET without the body.

Writes answer 200 with ``{"fleet", "state", "wait", "change"}``; with ``wait`` the request blocks until
every live replica got there or its time ran out and answers 202 when some did not.
``timeout`` bounds the whole write (the wait in it is capped at ``FLEETGATE_MAX_WAIT``; see
``coordinator.web.changes``). Missing or wrong token: 401; a view token on a write, or a token
used on a fleet it is not given: 403; a fleet never seen, or a resume of a hold the fleet does
not have: 404; a write whose Content-Type is not JSON: 415, before anything reads it (see
``coordinator.web.middleware``); an ambiguous resume (several holds, none named) or a hold
past the limit: 409 (``{"detail", "kind", "holds"}``, nothing changed); a body
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
from pathlib import Path
from typing import Annotated, Any, Final

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from redis.asyncio import Redis
from redis.exceptions import RedisError

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.snapshots import Snapshots
from coordinator.notify.consumer import Notifier
from coordinator.notify.settings import NotifySettings
from coordinator.settings import CoordinatorSettings
from coordinator.web import errors
from coordinator.web.auth import ANONYMOUS, TokenStore
from coordinator.web.bodies import PauseRequest, ResumeRequest
from coordinator.web.deps import FleetCache, Runtime, fleets_of, runtime_of, snapshots_of, viewer
from coordinator.web.fleets import install as install_fleet_routes
from coordinator.web.fleetview import listed_fleets
from coordinator.web.metrics import CONTENT_TYPE, render_fleets
from coordinator.web.middleware import (
    NOT_JSON_DETAIL,
    STATE_CHANGES,
    BodyLimit,
    HeadAsGet,
    JsonWrites,
)
from coordinator.web.schedules import install as install_schedule_routes
from coordinator.web.timeline import install as install_timeline_routes
from coordinator.web.watcher import FleetsWatcher
from replica.errors import ConfigError
from replica.link.connect import connect

log = logging.getLogger(__name__)

STATIC_DIR: Final = Path(__file__).parent / "static"
_CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


# ---------------------------------------------------------------------------- app


def _fleet(request: Request) -> Fleet:
    fleet = runtime_of(request).fleet
    if fleet is None:
        raise HTTPException(status_code=503, detail="the coordinator is starting")
    return fleet


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
            "pause and resume every fleet (default %s), recorded as %r", settings.fleet,
            ANONYMOUS.name,
        )
    runtime = Runtime(settings, tokens, insecure_no_auth)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = connect(
            settings.redis_url, decode_responses=True, socket_connect_timeout=5, socket_timeout=10
        )
        runtime.redis = redis
        runtime.fleets = FleetCache(
            redis, settings.fleet, min_replicas_ack=settings.min_replicas_ack,
            min_replicas_timeout=settings.min_replicas_timeout,
        )
        runtime.fleet = runtime.fleets.default
        snapshots = runtime.snapshots = Snapshots(settings.refresh_interval,
                                                  slow_ack_s=settings.slow_ack)
        try:
            if run_watcher:  # every fleet of the registry and the default one
                notify = bool(settings.webhook_urls)
                if notify:  # notifications (coordinator.notify)
                    runtime.notifier = await Notifier(
                        redis, settings.fleet, NotifySettings.from_coordinator(settings),
                        follow_registry=True,  # every fleet of the registry too
                    ).start()
                runtime.watcher = await FleetsWatcher(
                    runtime.fleet, settings, runtime.fleets.get, notify=notify
                ).start()
            log.info("coordinator for fleet %s up (%d operators)", settings.fleet, len(tokens))
            yield
        finally:
            if runtime.watcher is not None:
                await runtime.watcher.stop()
            if runtime.notifier is not None:
                await runtime.notifier.stop()
            await snapshots.aclose()
            await asyncio.shield(redis.aclose())

    # Swagger UI and ReDoc load their scripts from a CDN into this origin, where the dashboard
    # keeps the token: off unless FLEETGATE_API_DOCS; /openapi.json is always served
    docs = settings.api_docs
    app = FastAPI(
        title="fleetgate coordinator",
        version="0.1.0",
        summary="Pause and resume a fleet of asyncio workers through Redis.",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.state.settings = settings
    app.state.runtime = runtime

    errors.install(app)
    app.add_middleware(HeadAsGet)
    app.add_middleware(BodyLimit, max_body=settings.max_body)  # before any body is parsed
    # outermost: no cross-origin "simple" POST changes anything, and its body is never read
    app.add_middleware(JsonWrites)

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

    install_fleet_routes(app, settings)  # /api/fleet... and /api/fleets...
    install_timeline_routes(app)  # /api/fleets/{name}/timeline and /api/timeline
    install_schedule_routes(app)  # /api/fleets/{name}/schedules[/{schedule}[/end]]
    _document_json_writes(app)

    # -- metrics

    metrics_guard: list[Callable[..., Any]] = [viewer] if settings.metrics_auth else []

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=Response,
        dependencies=[Depends(g) for g in metrics_guard],
        responses={200: {"content": {CONTENT_TYPE: {}}}},
    )
    async def metrics(fleet: TheFleet, request: Request) -> Response:
        """The metrics of every fleet of the registry and the default one, each series
        labelled with its ``fleet``, read from Redis now (Prometheus text format)."""
        cache = fleets_of(request)
        listed = await listed_fleets(cache.redis)
        shown = [fleet, *(cache.get(name) for name in listed.names if name != fleet.name)]
        return Response(
            await render_fleets(
                snapshots_of(request), shown, settings.max_pause, runtime.notifier, fleet.name,
                registry_unreadable=listed.unreadable, watcher=runtime.watcher,
            ),
            media_type=CONTENT_TYPE,
        )

    return app


def _document_json_writes(app: FastAPI) -> None:
    """Every state change's OpenAPI operation lists the 415 ``JsonWrites`` answers."""
    make_schema = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = make_schema()  # cached by FastAPI in app.openapi_schema
            for item in schema.get("paths", {}).values():
                for method, operation in item.items():
                    if method.upper() in STATE_CHANGES:
                        operation.setdefault("responses", {})["415"] = {
                            "description": NOT_JSON_DETAIL,
                        }
        return app.openapi_schema or make_schema()

    app.openapi = openapi  # type: ignore[method-assign]


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
