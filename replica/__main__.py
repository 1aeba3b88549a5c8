"""``fleetgate-replica`` (and ``python -m replica``): run one replica until SIGTERM or SIGINT.

Settings come from ``FLEETGATE_*`` environment variables; every setting also has a flag
(``FLEETGATE_WORKERS`` is ``--workers``), which wins over the environment. A configuration
error (bad URL, unknown handler, missing token, port in use...) prints ONE line on stderr and
exits with status 2. The first SIGTERM or SIGINT stops the replica gracefully (exit 0): the
items in flight finish (within FLEETGATE_PAUSE_TIMEOUT), and the process ends within about a
second after that, even when Redis hangs (what is left of the stop, the record and the
hand-back, is then cut short: the record expires, the items stay pending in the stream). A
second signal cuts the drain short (exit 1; the unfinished items stay pending in the stream).
A signal ignored when the process started (SIGINT in a background job) stays ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Sequence
from typing import Any, Final, NoReturn

from replica.contract.clock import LogFormatter
from replica.contract.urls import parse_redis_url
from replica.errors import ConfigError, RedisMisconfigured
from replica.link.diagnose import preflight
from replica.link.redisio import cancel_bounded
from replica.process.shutdown import Shutdown, exit_now
from replica.service.handlers import load_handler
from replica.service.settings import (
    BreakerSettings,
    ReplicaSettings,
    field_docs,
    load_breaker_settings,
    load_settings,
    settings_table,
)

PROG = "fleetgate-replica"
EXIT_CONFIG = 2
STOP_BUDGET_S: Final = 0.5
"""What the stop may take after the drain before it is cut short (the process then ends)."""
STRAGGLERS_S: Final = 0.1
DRAIN_POLL_S: Final = 0.02
log = logging.getLogger("replica")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: {message}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run one fleetgate replica: a pausable worker pool fed by the fleet's work "
        "stream, following the fleet's pause switch, with probes, admin routes and metrics.",
        epilog="Every flag can be given as the environment variable shown in brackets.",
    )
    docs = field_docs(ReplicaSettings)
    for name, info in ReplicaSettings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        env = "FLEETGATE_" + name.upper()
        doc = (info.description or docs.get(name, "")).replace("%", "%%")
        if info.annotation is bool:
            parser.add_argument(flag, action="store_true", default=None,
                                help=f"[{env}] {doc}".strip())
        else:
            parser.add_argument(flag, default=None, metavar=name.upper(),
                                help=f"[{env}] {doc}".strip())
    parser.add_argument("--config-docs", action="store_true",
                        help="print every setting as a Markdown table and exit")
    return parser


def config_docs() -> str:
    return "\n\n".join((settings_table(ReplicaSettings), settings_table(BreakerSettings)))


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter())  # ISO 8601 UTC with milliseconds, as fleetgate serve
    logging.basicConfig(level=getattr(logging, level, logging.INFO), handlers=[handler])


async def serve(
    settings: ReplicaSettings, handler: Any, breaker: BreakerSettings, shutdown: Shutdown
) -> int:
    """Run the service until a signal; the exit status."""
    from replica.service.service import ReplicaService

    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        if len(shutdown.received) == 1:
            log.info("%s received: stopping (send it again to stop at once)", sig.name)
            stop.set()
        else:
            log.warning("%s received again: stopping at once", sig.name)
            exit_now(1)

    # Not armed by the signal: the items in flight finish first (bounded by
    # FLEETGATE_PAUSE_TIMEOUT); ``_stop`` arms the watchdog once they have.
    shutdown.install(asyncio.get_running_loop(), on_signal, arm=False)
    service = ReplicaService(settings, handler, breaker_settings=breaker)
    try:
        # A signal during the start (a Redis that hangs there) stops the replica too.
        starter = asyncio.create_task(service.start(), name="replica-start")
        await _first(starter, stop.wait())
        if not starter.done():
            await cancel_bounded(starter, timeout=STOP_BUDGET_S)
        elif starter.cancelled() or starter.exception() is not None:
            await service.stop(timeout=0)
            starter.result()  # raises: a ConfigError is one line and exit 2
        await stop.wait()
        await _stop(service, shutdown)
        return 0
    finally:
        shutdown.uninstall()
        await _end_stragglers(0, timeout=STRAGGLERS_S if shutdown.received else 5.0)


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait until one of ``aws`` is done; the others (not tasks of the caller's) are cancelled."""
    futures = [asyncio.ensure_future(aw) for aw in aws]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        owned = [f for f, aw in zip(futures, aws, strict=True) if f is not aw]
        for f in owned:
            f.cancel()
        await asyncio.gather(*owned, return_exceptions=True)


async def _stop(service: Any, shutdown: Shutdown) -> None:
    """The graceful stop, bounded: the items in flight finish (within the pause timeout), then
    the rest of the stop (acknowledgements, hand-back, the record, HTTP) gets
    ``STOP_BUDGET_S``; past it the process ends at once (a hung Redis must not hold it: the
    record expires, unfinished entries stay pending in the stream)."""
    loop = asyncio.get_running_loop()
    stopper = asyncio.create_task(service.stop(), name="replica-stop")
    await asyncio.sleep(0)  # the stop's first step holds the pool: nothing starts after it
    drain_end = loop.time() + service.settings.pause_timeout
    while service.pool.in_flight and not stopper.done() and loop.time() < drain_end:
        await asyncio.wait([stopper], timeout=DRAIN_POLL_S)
    shutdown.arm()  # whatever happens from here, the process ends within WATCHDOG_S
    done, _ = await asyncio.wait([stopper], timeout=STOP_BUDGET_S)
    if not done:
        log.warning("the stop took over %ss after the drain: cutting it short", STOP_BUDGET_S)
        exit_now(0)
    if not stopper.cancelled() and stopper.exception() is not None:
        log.warning("the stop failed: %r", stopper.exception())


async def _end_stragglers(status: int, timeout: float) -> None:
    """Cancel what is still running (bounded), so that asyncio.run can return; a task that
    keeps swallowing its cancellation is reported and the process ends regardless."""
    current = asyncio.current_task()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        tasks = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        if not tasks:
            return
        if loop.time() >= deadline:
            names = ", ".join(sorted(t.get_name() for t in tasks))
            log.warning("tasks still running at exit: %s; exiting anyway", names)
            exit_now(status)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=min(0.05, max(deadline - loop.time(), 0.0)))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.config_docs:
        print(config_docs())
        return 0
    overrides = {k: v for k, v in vars(args).items() if k != "config_docs" and v is not None}
    try:
        settings = load_settings(overrides)
        breaker = load_breaker_settings()
        handler = load_handler(settings.handler)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level)
    if settings.insecure_no_auth and settings.token() is None:
        log.warning("admin routes are served WITHOUT a token (--insecure-no-auth)")
    target = parse_redis_url(settings.redis_url)
    try:  # a Redis that can never work as it is (a password it requires...): one line
        asyncio.run(preflight(target, scripts=False))
    except RedisMisconfigured as exc:
        print(f"{PROG}: cannot use Redis at {target.shown} (FLEETGATE_REDIS_URL): {exc}", file=sys.stderr)
        return EXIT_CONFIG
    shutdown = Shutdown(lambda _sig: 0)
    try:
        status = asyncio.run(serve(settings, handler, breaker, shutdown))
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 1
    if shutdown.received:
        # Stopped by a signal: everything is stopped and logged. The interpreter's own teardown
        # (0.1 to 0.3 s on a loaded machine) would only delay the exit.
        exit_now(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
