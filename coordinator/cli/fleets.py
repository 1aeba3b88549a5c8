"""``fleetgate fleets``: every fleet on the Redis, one line each, paused ones first.

The fleets come from the registry ``fleetgate:fleets`` (written at each change and by each
replica), never from ``SCAN`` or ``KEYS``; each one is read as ``fleetgate status`` reads it, a
few at a time (``coordinator.fleet.overview``). ``--json`` prints the shape of
``coordinator.render.fleets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Final

import typer

from coordinator.cli.options import Globals, JsonOption, UrlOption
from coordinator.cli.output import console, emit_json

if TYPE_CHECKING:
    from coordinator.fleet.fleet import Fleet
    from coordinator.fleet.overview import Overview

MAX_LISTED: Final = 1000
"""The most --limit may be: ``coordinator.fleet.overview.MAX_LISTED``, written out here because
typer reads it at start-up, when the library (and Redis) is not loaded (a test holds them equal)."""


def fleets(
    ctx: typer.Context,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=MAX_LISTED,
                          help="At most this many fleets, the most recently active.")
    ] = MAX_LISTED,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
) -> None:
    """Every fleet on this Redis: paused or running, holds, replicas, pause age, overdue."""
    g: Globals = ctx.obj
    from coordinator.cli.runner import run_with_fleet
    from coordinator.fleet.overview import FLEET_READS, read_overview
    from coordinator.render.fleets import overview_dict, overview_renderable

    settings = g.read_settings(redis_url=redis_url)

    async def read(fleet: Fleet) -> Overview:
        return await read_overview(fleet.redis, limit=limit, concurrency=FLEET_READS)

    overview = run_with_fleet(settings, read)
    if json_out:
        emit_json(overview_dict(overview, settings.max_pause))
    else:
        console().print(overview_renderable(overview, settings.max_pause))


__all__ = ["fleets"]
