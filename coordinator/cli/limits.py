"""``fleetgate limits``: the fleet's backlog limit, which every producer obeys.

    fleetgate limits set --max-backlog N [--when-full reject|wait] [--by NAME]
    fleetgate limits show
    fleetgate limits clear [--by NAME]

The limit bounds the work not yet done in the fleet's work stream (entries not delivered to the
replicas plus those delivered and not acknowledged): ``Fleet.enqueue`` and ``fleetgate enqueue``
add a batch whole or not at all in one script that checks it (``coordinator.fleet.producer``).
Setting and clearing it is audited in the fleet's audit trail (``fleetgate history``). Every
command takes ``--json`` (``LimitChange.to_dict``; ``show``: ``{"fleet", "limit", "backlog"}``)
and the global options; exit statuses as the other commands' (2 for a bad value, 1 Redis
unreachable, 5 an outcome unknown, 6 ``show`` of a fleet never seen).

The options are read by typer at start-up: the library loads when a command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from coordinator.cli.exits import usage
from coordinator.cli.options import FleetOption, Globals, JsonOption, UrlOption, operator
from coordinator.cli.output import emit_json

if TYPE_CHECKING:
    from coordinator.fleet.backlog import Backlog
    from coordinator.fleet.fleet import Fleet
    from coordinator.fleet.limits import LimitChange, LimitReading

MAX_BACKLOG: Final = 1_000_000_000_000
"""``replica.contract.limits.MAX_BACKLOG``, written out: typer reads it at start-up (a test
holds them equal)."""

app = typer.Typer(
    name="limits",
    help="The fleet's backlog limit: every producer's enqueue obeys it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

ByOption = Annotated[str | None, typer.Option("--by", help="Who (default: your OS user).")]


@app.command("set")
def set_limit(
    ctx: typer.Context,
    max_backlog: Annotated[int, typer.Option(
        "--max-backlog", min=1, max=MAX_BACKLOG,
        help="The most entries not yet done (waiting or pending) the work stream may hold.",
    )],
    when_full: Annotated[str, typer.Option(
        "--when-full", help="reject (refuse a batch that does not fit) or wait (wait for room).",
    )] = "reject",
    by: ByOption = None,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Limit the fleet's backlog: producers are refused (or wait) past it."""
    if when_full not in ("reject", "wait"):
        raise usage(f"--when-full must be reject or wait, not {when_full[:20]!r}")
    who = operator(by)
    settings = _settings(ctx, redis_url, fleet)
    from coordinator.cli.runner import run_with_fleet

    async def change(f: Fleet) -> LimitChange:
        return await f.set_limit(max_backlog, when_full, by=who)

    done = run_with_fleet(settings, change)
    if json_out:
        emit_json(done.to_dict())
    else:
        print(f"backlog limit of fleet {done.fleet} set by {who}: max_backlog {max_backlog}, "
              f"when full: {when_full} (before: {_was(done.before)})")


@app.command("show")
def show_limit(
    ctx: typer.Context,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """The fleet's backlog limit, and the backlog it bounds."""
    settings = _settings(ctx, redis_url, fleet)
    from coordinator.cli.read import must_be_known
    from coordinator.cli.runner import run_with_fleet
    from coordinator.fleet.backlog import read_backlog

    async def read(f: Fleet) -> Backlog:
        backlog = await read_backlog(f.redis, f.keys)
        if backlog.limit.to_dict() is None and not backlog.stream:
            await must_be_known(f)
        return backlog

    backlog = run_with_fleet(settings, read)
    if json_out:
        emit_json({"fleet": settings.fleet, "limit": backlog.limit.to_dict(),
                   "backlog": {**backlog.figures(), "not_done": backlog.not_done}})
        return
    print(_shown(settings.fleet, backlog))


@app.command("clear")
def clear_limit(
    ctx: typer.Context,
    by: ByOption = None,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Remove the fleet's backlog limit: enqueueing is never refused again."""
    who = operator(by)
    settings = _settings(ctx, redis_url, fleet)
    from coordinator.cli.runner import run_with_fleet

    async def change(f: Fleet) -> LimitChange:
        return await f.clear_limit(by=who)

    done = run_with_fleet(settings, change)
    if json_out:
        emit_json(done.to_dict())
    elif not done.changed:
        print(f"fleet {done.fleet} has no backlog limit: nothing changed")
    else:
        print(f"backlog limit of fleet {done.fleet} cleared by {who} (before: {_was(done.before)})")


def _settings(ctx: typer.Context, redis_url: str | None, fleet: str | None) -> Any:
    # the subcommand's context: the global options are its parent's
    parent = ctx.find_object(Globals)
    g = parent if parent is not None else Globals(None, None)
    return g.settings(redis_url=redis_url, fleet=fleet)


def _was(reading: LimitReading) -> str:
    from coordinator.render.text import printable

    return printable(reading.text().removeprefix("limit ")) or "no limit"


def _shown(fleet: str, backlog: Backlog) -> str:
    from coordinator.render.text import printable

    reading = backlog.limit
    done = backlog.not_done
    figures = (f"{'unknown' if done is None else done} not yet done "
               f"({_n(backlog.backlog)} waiting, {_n(backlog.pending)} pending)")
    if reading.error:
        return (f"fleet {fleet}: the backlog limit cannot be read: {printable(reading.error)}; "
                f"every enqueue is refused until it is set again or cleared; {figures}")
    limit = reading.limit
    if limit is None:
        return f"fleet {fleet}: no backlog limit (enqueueing is never refused); {figures}"
    set_by = f", set by {printable(limit.by)}" if limit.by else ""
    from replica.contract import format_time

    at = f" at {format_time(limit.at)}" if limit.at is not None else ""
    return (f"fleet {fleet}: backlog limit {limit.max_backlog}, when full: {limit.when_full}"
            f"{set_by}{at}; {figures}")


def _n(value: int | None) -> str:
    return "unknown" if value is None else str(value)


__all__ = ["MAX_BACKLOG", "app", "clear_limit", "set_limit", "show_limit"]
