"""The commands that change the fleet: ``pause`` and ``resume``.

``--timeout`` bounds the whole command, however Redis behaves, and is also how long ``--wait``
waits. Cut off by it, a command says what it knows: nothing was sent (exit 1), the change was
sent and did not answer (exit 5: its outcome is unknown, read the state), or the change is
made and the replicas did not all get there (exit 3, the stragglers named). A change made on
the Redis primary that no Redis replica confirmed in time (``FLEETGATE_MIN_REPLICAS_ACK``) is
still reported, then exits 4.

This module is what typer reads to build the command line (``fleetgate --help`` too): it loads
typer and the option checks only; a command loads the library, Redis and rich when it runs,
and ``coordinator.cli.changing`` makes the change, waits and reports.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Final

import typer

from coordinator import render  # lazy: its modules load on first use
from coordinator.cli.exits import usage
from coordinator.cli.options import (
    AllFleetsOption,
    FleetsOption,
    Globals,
    HoldOption,
    JsonOption,
    UrlOption,
    YesOption,
    at_option,
    duration_option,
    hold_option,
    operator,
    reason_option,
)

if TYPE_CHECKING:
    from coordinator.fleet.fleet import Fleet
    from coordinator.fleet.models import WaitReport
    from replica.contract import FleetState

DEFAULT_TIMEOUT: Final = "60s"
GRACE_S: Final = 2.0
"""How far past --timeout a --wait may run: it gets what is left of --timeout, then reads who
did not get there, and why (only a Redis that stops answering makes it take this long)."""

TimeoutOption = Annotated[
    str, typer.Option("--timeout", help="Bound on the whole command; also how long --wait waits.")
]


def pause(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (1 to 500 printable characters).")],
    by: Annotated[str | None, typer.Option("--by", help="Who (default: the OS user).")] = None,
    for_: Annotated[
        str | None, typer.Option("--for", help="Expected window, e.g. 30m; overdue after it.")
    ] = None,
    auto_resume: Annotated[
        bool, typer.Option("--auto-resume", help="Resume by itself when the --for window ends.")
    ] = False,
    wait: Annotated[bool, typer.Option("--wait", help=(
        "Block until every live replica is quiet (with a future --at: until each has the "
        "schedule)."))] = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetsOption = None,
    all_fleets: AllFleetsOption = False,
    yes: YesOption = False,
    hold: HoldOption = None,
    at: Annotated[str | None, typer.Option("--at", help=(
        "Start the hold then: an ISO 8601 time (2026-12-01T02:00Z) or a duration from now "
        "(2h); --for and --auto-resume count from it."))] = None,
    reschedule: Annotated[bool, typer.Option("--reschedule", help=(
        "With --at, move a hold that is active now to the later start: it ends now (the "
        "fleet resumes if no other hold is active). Without it, that is refused (exit 2)."))] = False,
    select: Annotated[str | None, typer.Option("--select", help=(
        "Hold only the replicas whose labels match this Kubernetes label selector "
        "(zone=eu-west-1a, 'version in (1.4.1,1.4.2)', !canary); --wait waits for those."
    ))] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=(
        "Say what the change would do (holds before and after, which replicas it would hold "
        "or release) and write nothing."))] = False,
) -> None:
    """Pause the fleet: every replica finishes the item in hand and takes no more. The pause
    is the fleet hold --hold (default 'default'): the fleet stays paused while any hold is.
    --at of a hold that is active now is refused (exit 2, nothing changed) unless --reschedule:
    then it ends now, and when it was the last active hold the fleet resumes (said so)."""
    g: Globals = ctx.obj
    from coordinator.cli import changing, multi, scoped
    from coordinator.cli.runner import Progress
    from replica.contract import now_utc

    reason = reason_option(reason)
    hold = hold_option(hold)
    starts_at = at_option(at)
    window = duration_option(for_, "--for")
    if auto_resume and window is None:
        raise usage("--auto-resume needs --for (the window after which the fleet resumes)")
    if reschedule and starts_at is None:
        raise usage("--reschedule needs --at (the later start of the hold)")
    limit = duration_option(timeout, "--timeout") or 60.0
    by_name = operator(by)
    settings = g.settings(redis_url=redis_url, fleet=multi.single(fleet, all_fleets))

    span = None if window is None else timedelta(seconds=window)
    progress = Progress(limit, GRACE_S)
    if select is not None:
        select = scoped.select_option(select)
    if dry_run:
        return scoped.dry_run(settings, fleet, all_fleets, json_out, lambda f: f.pause(
            reason, by=by_name, expected_for=span, auto_resume_after=span if auto_resume else None,
            hold=hold, starts_at=starts_at, reschedule=reschedule, select=select, dry_run=True))
    matched: list[tuple[int, int]] = []  # --select: how many live replicas it matches

    async def act(
        fleet: Fleet, progress: Progress = progress
    ) -> tuple[FleetState, WaitReport | None, bool, render.HoldChange]:
        started = now_utc()  # nothing read before a pause: a hung Redis is exit 5, not 1
        if select is not None:  # (but the labels, with --select: a hung Redis is exit 1)
            matched.append(await scoped.matching(fleet, select))
        waits = wait and (select is None or matched[-1][0] > 0)
        state, report = await changing.change_then_wait(fleet, progress, waits, lambda: fleet.pause(
            reason, by=by_name, expected_for=span, auto_resume_after=span if auto_resume else None,
            hold=hold, starts_at=starts_at, reschedule=reschedule, for_wait=waits, select=select,
        ), scope=scoped.select_scope(select))
        return state, report, True, await render.describe_change(
            fleet, "pause", hold, started, state)

    if multi.wanted(fleet, all_fleets):  # one change per fleet, each by act
        return multi.run("pause", settings, fleet, all_fleets, yes, act, limit, GRACE_S, json_out)

    state, report, _, change = changing.run_change(settings, act, progress, json_out)
    unconfirmed = changing.unconfirmed_line(settings, progress)
    suffix = scoped.matched_text(select, *matched[-1]) if select is not None and matched else ""
    selected = None if select is None or not matched else {  # as the API's pause says it
        "selected": {"select": select, "matched": matched[-1][0], "live": matched[-1][1]}}
    changing.report_action(state, report, json_out, unconfirmed=unconfirmed, change=change,
                           suffix=suffix, extra=selected)
    if select is not None and wait and matched and matched[-1][0] == 0:
        raise scoped.no_match_error(state.fleet, select, matched[-1][1])


def resume(
    ctx: typer.Context,
    reason: Annotated[
        str | None, typer.Option("--reason", "-r", help="Why, for the audit trail (optional).")
    ] = None,
    by: Annotated[str | None, typer.Option("--by", help="Who (default: the OS user).")] = None,
    stagger: Annotated[
        str | None, typer.Option("--stagger", help="Spread the replicas' resumes over this window.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Block until every live replica runs.")] = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetsOption = None,
    all_fleets: AllFleetsOption = False,
    yes: YesOption = False,
    hold: Annotated[str | None, typer.Option(
        "--hold", help="The hold to release (a scheduled one: cancelled); default: the only one.",
    )] = None,
    all_holds: Annotated[bool, typer.Option("--all", help="Release every hold.")] = False,
    canary: Annotated[str | None, typer.Option("--canary", help=(
        "Release the hold --hold on N replicas (or P% of the live ones it holds), chosen by a "
        "stable rule and named; the others stay held."))] = None,
    promote: Annotated[bool, typer.Option("--promote", help=(
        "Release a hold a canary resume runs on (the canaries did well)."))] = False,
    soak: Annotated[str | None, typer.Option("--soak", help=(
        "With --canary: watch the canaries this long, then promote by itself, or put the hold "
        "back on them if they failed runs, dead-lettered items, opened their breaker or went "
        "silent (exit 8, saying why)."))] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=(
        "Say what the change would do (holds before and after, which replicas it would hold "
        "or release) and write nothing."))] = False,
) -> None:
    """Resume the fleet: release the hold --hold (a scheduled one is cancelled), the only hold
    there is, or with --all every hold; the fleet runs when no hold is left active. With
    several holds and neither option nothing changes (exit 2). Replicas continue with the
    queue untouched."""
    g: Globals = ctx.obj
    from coordinator.cli import changing, multi, scoped
    from coordinator.cli.runner import Progress
    from replica.contract import MAX_STAGGER_S

    if reason is not None:
        reason = reason_option(reason)
    hold = hold_option(hold)
    if hold is not None and all_holds:
        raise usage("--hold names one hold and --all every hold: give one of them")
    stagger_s = duration_option(stagger, "--stagger", maximum=MAX_STAGGER_S)
    limit = duration_option(timeout, "--timeout") or 60.0
    by_name = operator(by)
    settings = g.settings(redis_url=redis_url, fleet=multi.single(fleet, all_fleets))

    spread = None if stagger_s is None else timedelta(seconds=stagger_s)
    progress = Progress(limit, GRACE_S)
    soak_s = duration_option(soak, "--soak")
    step = scoped.canary_step(hold, all_holds, canary, promote, soak_s,
                              multi.wanted(fleet, all_fleets))
    if dry_run:
        return scoped.dry_run(settings, fleet, all_fleets, json_out, lambda f: scoped.resume_dry(
            f, by_name, spread, reason, hold, all_holds, canary, step))
    if canary is not None and hold is not None:
        return scoped.canary_resume(settings, hold, canary, by_name, reason, wait, soak_s,
                                    progress, json_out)

    async def act(
        fleet: Fleet, progress: Progress = progress
    ) -> tuple[FleetState, WaitReport | None, bool, render.HoldChange]:
        before = await fleet.state()
        state, report = await changing.change_then_wait(fleet, progress, wait, lambda: fleet.resume(
            by=by_name, stagger=spread, reason=reason, hold=hold, all=all_holds, for_wait=wait,
            canary=step,
        ))
        change = render.hold_change("resume", hold, before, state)
        return state, report, change.event != "noop", change

    if multi.wanted(fleet, all_fleets):  # one change per fleet, each by act
        return multi.run("resume", settings, fleet, all_fleets, yes, act, limit, GRACE_S, json_out)

    if hold is not None and not all_holds:  # a schedule's name: end its occurrence early
        from coordinator.cli.schedule import resume_schedule

        if resume_schedule(settings, hold, by_name, reason, json_out, promote=promote):
            return

    state, report, changed, change = changing.run_change(settings, act, progress, json_out)
    unconfirmed = changing.unconfirmed_line(settings, progress)
    changing.report_action(state, report, json_out, changed=changed, unconfirmed=unconfirmed,
                           change=change, line=scoped.promote_line(state, hold) if promote and
                           hold is not None else None)


__all__ = ["pause", "resume"]
