"""ReplicaService: one replica, composed in one event loop.

The parts, started in this order (``start()`` returns once all of them are up):

1. the HTTP socket is bound first, so a port in use is a configuration error (exit 2) before
   anything else starts;
2. the pool, built by the work source around the user's handler (``StreamSource``), with the
   handler context (Redis client, fleet, replica id) set for its workers;
3. the ``FleetController``: it holds the pool ("control-plane: syncing") until it has read the
   fleet's state, then applies it, and writes this replica's record;
4. the source: reads the work stream while the pool runs and has room;
5. ``follow_breaker`` when the handler exposes a breaker;
6. uvicorn serving the FastAPI app (probes, admin routes, metrics) on the bound socket.

Stopping is two-phase. Phase 1 (work): the pool is held by ``drain`` at once (readiness fails,
the source stops reading), in-flight items finish within FLEETGATE_PAUSE_TIMEOUT, the
unstarted ones stay pending in the stream for the other replicas, then the controller stops and
removes the replica record. Phase 2 (HTTP): uvicorn stops; Redis is closed. The HTTP side stays
up through phase 1, so probes and ``/pool`` show the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
from typing import Any, Final

import redis.asyncio as aioredis
import uvicorn

from replica.control.controller import FleetController
from replica.errors import ConfigError
from replica.link.connect import connect
from replica.link.redisio import cancel_bounded
from replica.pool.pool import DRAIN_SOURCE, PausablePool
from replica.process.slowclients import guarded_h11
from replica.service.breaker import follow_breaker
from replica.service.handlers import HandlerContext, LoadedHandler, _context
from replica.service.http import create_app
from replica.service.metrics import ReplicaMetrics
from replica.service.settings import BreakerSettings, ReplicaSettings
from replica.service.source import StreamSource

log = logging.getLogger(__name__)

CLIENT_TIMEOUT_S: Final = 10.0
"""Socket timeout of the replica's shared client. No command of it blocks: the stream's blocking
reads have a connection of their own (replica.service.readline)."""
HTTP_SHUTDOWN_S: Final = 5.0


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the entry point owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the HTTP socket, or raise ``ConfigError`` with one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class ReplicaService:
    """A replica: pool, controller, work source and HTTP side, started and stopped together."""

    def __init__(
        self,
        settings: ReplicaSettings,
        handler: LoadedHandler,
        *,
        breaker_settings: BreakerSettings | None = None,
    ) -> None:
        self.settings = settings
        self.handler = handler
        self.breaker_settings = breaker_settings or BreakerSettings()
        self.redis: aioredis.Redis = connect(
            settings.redis_url,
            decode_responses=True,
            socket_connect_timeout=5.0,
            socket_timeout=CLIENT_TIMEOUT_S,
            health_check_interval=30,
        )
        self.source = StreamSource(
            self.redis, settings, handler.func, breaker=handler.breaker,
            breaker_check_interval=self.breaker_settings.check_interval,
        )
        self.pool: PausablePool = self.source.pool
        self.controller = FleetController(
            self.pool, self.redis, settings.fleet, settings.replica_id,
            poll_interval=settings.poll_interval,
            heartbeat_interval=settings.heartbeat_interval,
            extra_fields=self._extra_fields,
            pause_timeout=settings.pause_timeout,
            control_loss=settings.control_loss,
            control_loss_after=settings.control_loss_after,
            fault_fatal_after=settings.fault_fatal_after,
            labels=settings.label_map,
        )
        self.metrics = ReplicaMetrics(self.pool, control=self.controller, source=self.source)
        self.controller.add_listener(self.metrics.observe_propagation)
        self.app = create_app(
            self.pool, settings, control=self.controller, source=self.source,
            metrics=self.metrics, alive=self.alive,
        )
        self._socket: socket.socket | None = None
        self._server: _Server | None = None
        self._serving: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False
        self.port: int = settings.port

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> ReplicaService:
        """Start every part; returns once the HTTP side listens. Raises ``ConfigError`` when the
        port cannot be bound (nothing else is started then)."""
        if self._started:
            return self
        s = self.settings
        self._socket = bind_socket(s.host, s.port)
        self.port = int(self._socket.getsockname()[1])
        self._started = True
        # The workers are started in a context holding the handler context (they copy it);
        # the caller's own context is left as it was.
        handler_context = contextvars.copy_context()
        handler_context.run(
            _context.set,
            HandlerContext(redis=self.redis, fleet=s.fleet, replica_id=s.replica_id,
                           keys=s.keys, settings=s, fleet_state=self._fleet_state),
        )
        await asyncio.create_task(
            self.pool.start(), name="replica-pool-start", context=handler_context
        )
        await self.controller.start()
        await self.source.start()
        if self.handler.breaker is not None:
            self._follower = asyncio.create_task(
                follow_breaker(self.pool, self.handler.breaker,
                               self.breaker_settings.check_interval),
                name=f"follow-breaker-{s.replica_id}",
            )
        config = uvicorn.Config(
            self.app, log_config=None, access_log=False, lifespan="off",
            timeout_graceful_shutdown=int(HTTP_SHUTDOWN_S),
            http=guarded_h11(s.http_header_timeout, s.http_max_connections),
        )
        config.load()
        self._server = _Server(config)
        self._server.lifespan = config.lifespan_class(config)
        await self._server.startup(sockets=[self._socket])
        self._serving = asyncio.create_task(self._server.main_loop(), name="replica-http")
        log.info(
            "replica %s of fleet %s listening on http://%s:%d: handler %s, %d workers, "
            "up to %d items held, stream %s",
            s.replica_id, s.fleet, s.host, self.port, self.handler.ref, s.workers, s.capacity,
            s.work_stream,
        )
        return self

    async def __aenter__(self) -> ReplicaService:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self, timeout: float | None = None) -> None:
        """Two-phase stop (see the module docstring). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        drain_s = self.settings.pause_timeout if timeout is None else timeout
        try:
            if self._started:
                # Phase 1: the work. Readiness fails and reading stops at once.
                self.pool.hold("stopping", DRAIN_SOURCE)
                log.info(
                    "replica %s stopping: %d in flight (up to %ss to finish), %d queued",
                    self.settings.replica_id, self.pool.in_flight, drain_s, self.pool.queued,
                )
                await self.source.stop(drain_s)
                await self._cancel(self._follower)
                await self.controller.stop()  # returns once its tasks are done (bounded)
        finally:
            # Phase 2: HTTP, then Redis.
            await self._stop_http()
            with contextlib.suppress(Exception):
                await self.redis.aclose()
        log.info("replica %s stopped", self.settings.replica_id)

    async def _stop_http(self) -> None:
        server = self._server
        if server is not None:
            server.should_exit = True
            if self._serving is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(self._serving), 2.0)
                await self._cancel(self._serving)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.shutdown(), HTTP_SHUTDOWN_S + 1.0)
        elif self._socket is not None:
            self._socket.close()

    @staticmethod
    async def _cancel(task: asyncio.Task[Any] | None) -> None:
        if task is not None and not task.done():
            await cancel_bounded(task)

    # ------------------------------------------------------------------ views

    def alive(self) -> str | None:
        """None while every long-running part runs; else what died (liveness fails)."""
        for name, task in (("work source", self.source.reader_task),
                           ("breaker follower", self._follower)):
            if task is not None and task.done() and not self._stopped and not task.cancelled():
                exc = task.exception()
                return f"the {name} stopped: {exc!r}" if exc else f"the {name} stopped"
        workers = None if self._stopped else self.pool.alive()
        if workers is not None:
            return f"a pool {workers}"
        # a fault of the controller holds the pool while it is retried; past its bound (or
        # with a loop's task gone) only a restart can help
        return None if self._stopped else self.controller.unrecoverable()

    def _fleet_state(self) -> tuple[int, bool]:
        """The handler context's ``fleet_state``: the version applied, the fleet's hold."""
        return self.controller.applied_version, self.controller.fleet_held

    def _extra_fields(self) -> dict[str, str]:
        stats = self.source.stats()
        return {
            "source": "reading" if stats.stopped is None else f"stopped: {stats.stopped}",
            "done": str(stats.done),
            "timed_out": str(stats.timed_out),
            "dead_lettered": str(stats.dead_lettered),
            "malformed": str(stats.malformed),
            "held": str(stats.held),
            "awaiting_retry": str(stats.awaiting_retry),
            "handler": self.handler.ref,
            "http": f"http://{self.settings.host}:{self.port}",
        }


__all__ = ["ReplicaService", "bind_socket"]
