"""The commands that read the fleet: ``status`` (``Fleet.status()``: the state, every replica
and the count of entries that cannot be read; once or ``--watch``) and ``history`` (the audit
trail). Both print stored text through ``coordinator.render``, which shows it as text (no
markup, no control characters).

``status`` prints the summary and at most ``STATUS_ROWS`` (20) replica rows, those that need
attention first; ``--json`` the summary shape (``FleetSummary.to_dict()``, as
``GET /api/fleets/{name}``). ``--all`` prints every row, and with ``--json`` the status shape
(every replica, as ``GET /api/fleet``).

A fleet never seen on this Redis (``Fleet.known``: no state, no replicas, no audit trail, not
in the registry) is no running fleet but a mistyped name: ``status`` (once) and ``history``
exit 6 (``EXIT_UNKNOWN_FLEET``), as the API answers 404. ``status --watch`` waits for it.

Typer reads the commands' options at start-up (``fleetgate --help`` too): the library, Redis
and rich load when a command runs."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coordinator import render  # lazy: its modules load on first use
from coordinator.cli.exits import EXIT_OK, EXIT_UNKNOWN_FLEET, CliError
from coordinator.cli.options import FleetOption, Globals, JsonOption, UrlOption
from coordinator.cli.output import console, emit_json, show

if TYPE_CHECKING:
    from coordinator.fleet.fleet import Fleet
    from coordinator.fleet.models import AuditEvent, FleetStatus
    from coordinator.render.ink import RenderableType


def status(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh every second until Ctrl-C.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, max=3600, help="Seconds between --watch refreshes.")
    ] = 1.0,
    json_out: JsonOption = False,
    every: Annotated[bool, typer.Option(
        "--all", help="Every replica's row (with --json: every record, the shape of GET /api/fleet).",
    )] = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """The fleet's state, its summary and the replicas that need attention (--all: every one)."""
    g: Globals = ctx.obj
    from coordinator.cli.runner import run_with_fleet
    from coordinator.fleet.overview import status_with_backlog
    from coordinator.fleet.summary import summarize
    from replica.process.shutdown import Interrupted

    settings = g.read_settings(redis_url=redis_url, fleet=fleet)
    max_pause = settings.max_pause
    slow_ack = settings.slow_ack

    async def read(fleet: Fleet) -> FleetStatus:
        return await status_with_backlog(fleet)

    async def read_known(fleet: Fleet) -> FleetStatus:
        st = await status_with_backlog(fleet)
        if st.state.version == 0 and not st.replicas and not st.unreadable:
            await must_be_known(fleet)
        return st

    def as_json(st: FleetStatus) -> dict[str, Any]:
        if every:
            return render.fleet_status_dict(st, max_pause=max_pause, slow_ack_s=slow_ack)
        shape = summarize(st, max_pause=max_pause, slow_ack_s=slow_ack).to_dict()
        if st.schedules is not None:  # each with its occurrence in force or its next ones
            from coordinator.render.schedules import schedules_dict
            from replica.contract import now_utc

            shape["schedules"] = schedules_dict(st.state.fleet, st.schedules,
                                                now_utc())["schedules"]
        return shape

    def as_text(st: FleetStatus) -> RenderableType:
        if every:
            return render.fleet_status_renderable(st, max_pause=max_pause)
        return render.summary_renderable(st, summarize(st, max_pause=max_pause,
                                                       slow_ack_s=slow_ack))

    if not watch:
        from coordinator.fleet.tracing import command_span

        with command_span("status", settings.fleet):
            st = run_with_fleet(settings, read_known)
        if json_out:
            emit_json(as_json(st))
        else:
            show(as_text(st))
        return

    async def watch_loop(fleet: Fleet) -> None:
        import asyncio

        from rich.live import Live

        if json_out:
            while True:
                emit_json(as_json(await read(fleet)), compact=True)
                await asyncio.sleep(interval)
        with Live(console=console(), auto_refresh=False, screen=False) as live:
            while True:
                st = await read(fleet)
                live.update(as_text(st))
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
    from coordinator.cli.runner import run_with_fleet

    settings = g.read_settings(redis_url=redis_url, fleet=fleet)

    async def read(fleet: Fleet) -> list[AuditEvent]:
        events = await fleet.history(limit=limit)
        if not events:
            await must_be_known(fleet)
        return events

    from coordinator.fleet.tracing import command_span

    with command_span("history", settings.fleet):
        events = run_with_fleet(settings, read)
    if json_out:
        emit_json(render.history_dict(settings.fleet, events))
    else:
        console().print(render.history_table(events))


async def must_be_known(fleet: Fleet) -> None:
    """Exit 6 for a fleet never seen on this Redis (``Fleet.known``): a mistyped name is not
    shown as a running fleet."""
    if not await fleet.known():
        raise CliError(f"no fleet {fleet.name} on this Redis (no state, no replicas, not in the "
                       "registry of fleets): check --fleet or FLEETGATE_FLEET", EXIT_UNKNOWN_FLEET)


__all__ = ["history", "must_be_known", "status"]
