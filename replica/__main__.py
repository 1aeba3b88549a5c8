"""``fleetgate-replica`` (and ``python -m replica``): run one replica until SIGTERM or SIGINT.

Settings come from ``FLEETGATE_*`` environment variables; every setting also has a flag
(``FLEETGATE_WORKERS`` is ``--workers``), which wins over the environment. A configuration
error (bad URL, unknown handler, missing token, port in use...) prints ONE line on stderr and
exits with status 2. The first SIGTERM or SIGINT stops the replica gracefully (exit 0); a
second one cuts the drain short (exit 1; the unfinished items stay pending in the stream).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from replica.errors import ConfigError
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
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def serve(settings: ReplicaSettings, handler: Any, breaker: BreakerSettings) -> int:
    """Run the service until a signal; the exit status."""
    from replica.service.service import ReplicaService

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals: list[str] = []
    main_task = asyncio.current_task()

    def on_signal(sig: signal.Signals) -> None:
        signals.append(sig.name)
        if len(signals) == 1:
            log.info("%s received: stopping (send it again to stop at once)", sig.name)
            stop.set()
        elif main_task is not None:
            log.warning("%s received again: stopping at once", sig.name)
            main_task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    service = ReplicaService(settings, handler, breaker_settings=breaker)
    try:
        try:
            await service.start()
        except ConfigError:
            await service.stop(timeout=0)
            raise
        await stop.wait()
        await service.stop()
    except asyncio.CancelledError:
        if len(signals) < 2:
            raise
        await asyncio.shield(service.stop(timeout=0))
        return 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await _end_stragglers(1 if len(signals) > 1 else 0)
    return 0


async def _end_stragglers(status: int, timeout: float = 5.0) -> None:
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
            logging.shutdown()
            os._exit(status)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=0.2)


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
    try:
        return asyncio.run(serve(settings, handler, breaker))
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 1


if __name__ == "__main__":
    sys.exit(main())
