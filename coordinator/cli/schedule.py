"""``fleetgate schedule add|list|remove``: a fleet's recurring maintenance windows.

    fleetgate schedule add NAME --cron "0 2 * * SUN" --duration 2h --timezone Europe/Berlin
                           --reason TEXT [--starting DATE] [--until DATE] [--skip DATE ...]
    fleetgate schedule list [--json]
    fleetgate schedule remove NAME

A schedule is a hold named after it during each occurrence (``replica.contract.schedules``);
the replicas start and end each one on their own clocks. ``--starting``/``--until`` take a
date (``2027-01-01``: midnight in the schedule's zone) or an ISO 8601 time; ``--skip`` a local
date whose occurrences do not happen. A bad cron expression, zone, duration or date, a window
that would overlap its next occurrence, a name a hold has: one line, exit 2. Ending the
occurrence in force early is ``fleetgate resume --hold NAME`` (``end_if_schedule``).

Typer reads the options at start-up: the library, Redis and rich load when a command runs."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coordinator.cli.exits import usage
from coordinator.cli.options import FleetOption, Globals, JsonOption, UrlOption

if TYPE_CHECKING:
    from coordinator.fleet.fleet import Fleet
    from replica.contract.schedules import Schedule, ScheduleSet

app = typer.Typer(
    name="schedule", help="Recurring maintenance windows: add, list, remove.",
    no_args_is_help=True, rich_markup_mode=None, add_completion=False,
)

ByOption = Annotated[str | None, typer.Option("--by", help="Who (default: the OS user).")]


def _when(value: str | None, option: str, tz_name: str) -> datetime | None:
    """A date (midnight in the zone) or an ISO 8601 time, aware UTC; usage error else."""
    if value is None:
        return None
    from replica.contract import parse_time
    from replica.contract.recurrence import zone
    from replica.errors import ContractError

    text = value.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=zone(tz_name)).astimezone(UTC)
        at = parse_time(text)
    except (ValueError, ContractError):
        raise usage(f"{option} must be a date (2027-01-01) or an ISO 8601 time "
                    f"(2027-01-01T02:00Z), not {text[:40]!r}") from None
    if at is None:
        raise usage(f"{option} must not be empty")
    return at


@app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The schedule's name (also its hold's).")],
    cron: Annotated[str, typer.Option("--cron", help="Cron expression: '0 2 * * SUN'.")],
    duration: Annotated[str, typer.Option("--duration", help="How long each occurrence lasts: 2h.")],
    timezone: Annotated[str, typer.Option("--timezone", help="IANA time zone: Europe/Berlin.")],
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (the hold's reason).")],
    starting: Annotated[str | None, typer.Option("--starting", help="First day (or time).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="No occurrence from this day (or time).")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="A local date with no occurrence (repeatable).")] = None,
    by: ByOption = None,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Add (or replace) a recurring maintenance window: a hold NAME during each occurrence."""
    g: Globals = ctx.obj
    from coordinator.cli.options import duration_option, hold_option, operator, reason_option
    from coordinator.cli.output import console, emit_json
    from coordinator.cli.runner import exits, run_with_fleet
    from coordinator.render.schedules import schedule_dict, schedule_head, schedules_text
    from replica.contract import now_utc
    from replica.contract.recurrence import MAX_DURATION_S, validate_cron, zone
    from replica.contract.schedules import ScheduleSet, parse_date

    hold = hold_option(name)
    assert hold is not None
    why = reason_option(reason)
    seconds = duration_option(duration, "--duration", maximum=MAX_DURATION_S)
    assert seconds is not None
    with exits():  # a bad expression, zone or date exits as every command's (2)
        validate_cron(cron)
        zone(timezone)
        skipped = [parse_date(d.strip()) for d in skip or ()]
    first = _when(starting, "--starting", timezone)
    last = _when(until, "--until", timezone)
    who = operator(by)
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def act(f: Fleet) -> Schedule:
        return await f.add_schedule(hold, cron, seconds, timezone, why, who, starting=first,
                                    until=last, skip=skipped)

    schedule = run_with_fleet(settings, act)
    now = now_utc()
    if json_out:
        emit_json(schedule_dict(schedule, now))
        return
    console().print(f"fleet {settings.fleet}: added " + schedule_head(schedule))
    console().print(schedules_text(ScheduleSet((schedule,)), now).plain.split("\n", 1)[1])


@app.command("list")
def list_(
    ctx: typer.Context,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Each schedule with its next 3 occurrences, in its zone and in UTC."""
    g: Globals = ctx.obj
    from coordinator.cli.output import console, emit_json
    from coordinator.cli.runner import run_with_fleet
    from coordinator.render.schedules import schedules_dict, schedules_text
    from replica.contract import now_utc

    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def read(f: Fleet) -> ScheduleSet:
        return await f.schedules()

    found = run_with_fleet(settings, read)
    now = now_utc()
    if json_out:
        emit_json(schedules_dict(settings.fleet, found, now))
    else:
        console().print(schedules_text(found, now))


@app.command("remove")
def remove(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The schedule to remove.")],
    reason: Annotated[str | None, typer.Option("--reason", "-r", help="Why, for the audit trail.")] = None,
    by: ByOption = None,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Remove a schedule; an occurrence in force ends on every replica."""
    g: Globals = ctx.obj
    from coordinator.cli.options import hold_option, operator, reason_option
    from coordinator.cli.output import console
    from coordinator.cli.runner import run_with_fleet

    hold = hold_option(name)
    assert hold is not None
    why = reason_option(reason) if reason is not None else ""
    who = operator(by)
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def act(f: Fleet) -> None:
        await f.remove_schedule(hold, who, why)

    run_with_fleet(settings, act)
    console().print(f"fleet {settings.fleet}: removed schedule {hold}")


async def end_if_schedule(fleet: Fleet, hold: str, by: str, reason: str | None,
                          promote: bool = False) -> str | None:
    """For ``resume --hold NAME``: when NAME is a schedule (and no hold of the state), end
    its occurrence in force early (``promote``: the canary resume running on it, audited
    ``canary_promoted``) and return the line to print; None when it is no schedule (the
    resume goes on as usual)."""

    state = await fleet.state()
    if any(h.name == hold for h in state.effective_holds()):
        return None
    found = await fleet.schedules()
    if found.get(hold) is None:
        return None
    if promote:
        from coordinator.cli.occurrence import promote as promote_occurrence

        return await promote_occurrence(fleet, hold, by, reason)
    ended: Schedule = await fleet.end_occurrence(hold, by, reason or "")
    from replica.contract import format_time

    return (f"fleet {fleet.name}: ended the occurrence of schedule {hold} that began at "
            f"{format_time(ended.ended_early)}; the schedule stays (its next occurrence holds "
            "again)")


def resume_schedule(
    settings: Any, hold: str, by: str, reason: str | None, json_out: bool,
    promote: bool = False,
) -> bool:
    """``resume --hold NAME [--promote]`` of a schedule: its occurrence in force ends early
    (exit 2 when none is, or with ``promote`` when no canary resume runs on it). False when
    NAME is no schedule: the resume goes on as usual."""
    from coordinator.cli.output import console, emit_json
    from coordinator.cli.runner import run_with_fleet

    async def act(f: Fleet) -> str | None:
        return await end_if_schedule(f, hold, by, reason, promote)

    line = run_with_fleet(settings, act)
    if line is None:
        return False
    if json_out:
        emit_json({"fleet": settings.fleet,
                   "event": "canary_promoted" if promote else "schedule_ended", "hold": hold,
                   "text": line})
    else:
        console().print(line)
    return True


__all__ = ["add", "app", "end_if_schedule", "list_", "remove", "resume_schedule"]
