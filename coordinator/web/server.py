"""Running the coordinator's HTTP side: ``fleetgate serve``.

This is an entry point's job, so it configures logging (plain or JSON lines on stderr) and
owns SIGTERM/SIGINT: both end a graceful shutdown with exit status 0. Stock uvicorn re-raises
the signal after shutting down, so an orchestrator stopping the coordinator would see it die
of SIGTERM (-15), as if it had crashed. The process ends within a second of the signal whatever
it is doing (``replica.process.shutdown``): a request or the lifespan's shutdown waiting on a
Redis that hangs would otherwise hold it until Redis answers. A signal ignored when the process
started (SIGINT in a background job) stays ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any, Final

import uvicorn

from coordinator.settings import CoordinatorSettings, redact
from coordinator.web.api import create_app
from replica.contract.clock import LogFormatter
from replica.errors import ConfigError
from replica.process.shutdown import Shutdown
from replica.process.slowclients import guarded_h11

log = logging.getLogger(__name__)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the record's ``extra`` fields."""

    _STANDARD: Final = frozenset(
        logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
        | {"message", "asctime", "color_message"}
    )

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, str | int | float | bool | None) else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(json_logs: bool, level: int = logging.INFO) -> None:
    """One handler on stderr, plain or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(LogFormatter())  # ISO 8601 UTC with milliseconds, as the replicas
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class Server(uvicorn.Server):
    """uvicorn whose SIGTERM/SIGINT shut down gracefully, are not re-raised afterwards, and end
    the process at the latest ``WATCHDOG_S`` after the first one (exit status 0)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.shutdown_signals = Shutdown(lambda _sig: 0)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Called inside the server's event loop; uvicorn's first signal sets should_exit, a
        # second SIGINT force_exit. Only in the main thread (Shutdown checks).
        signals = self.shutdown_signals
        signals.install(asyncio.get_running_loop(), lambda sig: self.handle_exit(sig, None))
        try:
            yield
        finally:
            signals.uninstall()


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts: an address in use or one that
    cannot be bound is a ``ConfigError`` of one line (uvicorn itself would log it and exit 3,
    which the CLI keeps for a --wait that timed out)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and without it
    # every response after a connection's first waits ~40 ms (Nagle meets a delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve_forever(
    settings: CoordinatorSettings, *, insecure_no_auth: bool = False, json_logs: bool = False
) -> bool:
    """Serve until SIGTERM/SIGINT. Returns False when the server could not start (its
    lifespan failed: the log says why).

    Raises ``ConfigError`` for settings that cannot work (from ``create_app``) and for an
    address it cannot listen on (a port in use).
    """
    configure_logging(json_logs)
    application = create_app(settings, insecure_no_auth=insecure_no_auth)
    sock = listen(settings.host, settings.port)
    try:
        log.info(
            "serving every fleet (default %s) on http://%s:%d (Redis %s)",
            settings.fleet, settings.host, sock.getsockname()[1], redact(settings.redis_url),
        )
        config = uvicorn.Config(
            application, host=settings.host, port=settings.port, log_config=None, lifespan="on",
            # slow and idle clients (replica.process.slowclients): a whole request within
            # FLEETGATE_HTTP_HEADER_TIMEOUT, at most FLEETGATE_HTTP_MAX_CONNECTIONS at once
            http=guarded_h11(settings.http_header_timeout, settings.http_max_connections),
        )
        server = Server(config)
        try:
            server.run(sockets=[sock])
        except SystemExit:  # uvicorn's exit when the lifespan fails to start (logged)
            return False
        return bool(server.started)
    finally:
        sock.close()
