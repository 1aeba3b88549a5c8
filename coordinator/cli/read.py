"""The commands that read the fleet: ``status`` (the state and every replica, once or
``--watch``) and ``history`` (the audit trail). Both print stored text through
``coordinator.render``, which shows it as text (no markup, no control characters)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from coordinator import render
from coordinator.cli.exits import EXIT_OK
from coordinator.cli.options import FleetOption, Globals, JsonOption, UrlOption
from coordinator.cli.output import console, emit_json
from coordinator.cli.runner import run_with_fleet
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import AuditEvent, ReplicaInfo
from replica.contract import FleetState
from replica.service.shutdown import Interrupted


def status(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh every second until Ctrl-C.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, max=3600, help="Seconds between --watch refreshes.")
    ] = 1.0,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """The fleet's state and every replica: paused or running, reason, by, since, age."""
    g: Globals = ctx.obj
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def read(fleet: Fleet) -> tuple[FleetState, list[ReplicaInfo]]:
        return await fleet.state(), await fleet.replicas()

    if not watch:
        state, replicas = run_with_fleet(settings, read)
        if json_out:
            emit_json(render.status_dict(state, replicas, max_pause=settings.max_pause))
        else:
            console().print(render.status_renderable(state, replicas, max_pause=settings.max_pause))
        return

    async def watch_loop(fleet: Fleet) -> None:
        from rich.live import Live

        if json_out:
            while True:
                state, replicas = await read(fleet)
                emit_json(render.status_dict(state, replicas, max_pause=settings.max_pause), compact=True)
                await asyncio.sleep(interval)
        with Live(console=console(), auto_refresh=False, screen=False) as live:
            while True:
                state, replicas = await read(fleet)
                live.update(render.status_renderable(state, replicas, max_pause=settings.max_pause))
                live.refresh()
                await asyncio.sleep(interval)

    # Ctrl-C (or SIGTERM) is how a watch ends: exit 0
    with contextlib.suppress(KeyboardInterrupt, Interrupted):
        run_with_fleet(settings, watch_loop, interrupted=lambda _sig: EXIT_OK)


def history(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000, help="How many events.")] = 20,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """The audit trail: every pause, resume and restore, newest first."""
    g: Globals = ctx.obj
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def read(fleet: Fleet) -> list[AuditEvent]:
        return await fleet.history(limit=limit)

    events = run_with_fleet(settings, read)
    if json_out:
        emit_json(render.history_dict(settings.fleet, events))
    else:
        console().print(render.history_table(events))


__all__ = ["history", "status"]
