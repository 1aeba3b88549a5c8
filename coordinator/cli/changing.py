"""Carrying out ``pause`` or ``resume`` once its options are checked (``coordinator.cli.change``):
make the change, wait for the replicas when asked, and report; within the command's deadline
(``--timeout``), past which it says what is known (exit 1, 5 or 3), and exit 4 for a change no
Redis replica confirmed in time.

Loaded only when a change command runs: it imports the library (and so Redis) and rich.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

from coordinator import render
from coordinator.cli.exits import EXIT_NOT_CONFIRMED, EXIT_TIMEOUT, CliError
from coordinator.cli.output import console, emit_json
from coordinator.cli.runner import (
    DeadlineExceeded,
    Progress,
    outcome_unknown,
    run_with_fleet,
    unreachable,
)
from coordinator.durations import format_age
from coordinator.fleet.durability import NotConfirmed
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import WaitReport
from coordinator.fleet.tracing import command_span
from coordinator.fleet.waitscope import WaitScope
from coordinator.settings import CoordinatorSettings
from replica.contract import FleetState
from replica.contract.urls import redact_url

T = TypeVar("T")


async def change_then_wait(
    fleet: Fleet, progress: Progress, wait: bool, change: Callable[[], Awaitable[FleetState]],
    scope: WaitScope | None = None,
) -> tuple[FleetState, WaitReport | None]:
    """Make the change, then (``wait``) wait for the replicas with what is left of the
    command's time; ``progress`` says which step a deadline cut off."""
    progress.step = "change"
    try:
        state = await change()
    except NotConfirmed as exc:  # made and published: say so once the rest is reported
        state, progress.unconfirmed = exc.state, exc
    progress.step, progress.state = "wait", state
    report = await fleet.wait(state.version, timeout=progress.left(), scope=scope) \
        if wait else None
    return state, report


def run_change(
    settings: CoordinatorSettings,
    act: Callable[[Fleet], Awaitable[T]],
    progress: Progress,
    json_out: bool,
) -> T:
    """``act`` within ``progress.deadline()``: past it, say what ``progress`` knows. Traced as
    the span of the command (``fleetgate pause``, ``fleetgate resume``) when OpenTelemetry is
    installed."""
    with command_span(command_name("change"), settings.fleet):
        try:
            return run_with_fleet(settings, act, deadline=progress.deadline)
        except DeadlineExceeded:
            pass
        _past_deadline(settings, progress, json_out)


def _past_deadline(settings: CoordinatorSettings, progress: Progress, json_out: bool) -> NoReturn:
    """Say what ``progress`` knows of a change cut off by its deadline (exit 1, 5 or 3)."""
    limit = progress.limit
    waited = f"no answer came within --timeout {format_age(limit)}"
    if progress.step == "read":
        raise unreachable(settings, waited) from None
    if progress.step == "change" or progress.state is None:
        raise outcome_unknown(settings, waited) from None
    state = progress.state
    if json_out:
        emit_json(render.action_dict(state, None))
    else:
        console().print(render.action_line(state), highlight=False, markup=False)
    raise CliError(
        f"timed out after {format_age(limit)}: the change is made (version {state.version}) "
        "but Redis did not answer while waiting for the replicas",
        EXIT_TIMEOUT,
    ) from None


def command_name(default: str) -> str:
    """The name of the CLI command running (click's context), else ``default``."""
    try:  # typer >= 0.20 vendors click; older ones run on click itself
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older typer
        from click import get_current_context  # type: ignore[no-redef]

    ctx = get_current_context(silent=True)
    return ctx.info_name if ctx is not None and ctx.info_name else default


def unconfirmed_line(settings: CoordinatorSettings, progress: Progress) -> str | None:
    """The line of a change no replica confirmed in time (exit 4), or None."""
    exc = progress.unconfirmed
    if exc is None:
        return None
    counted = exc.counted
    return (f"the change (version {exc.state.version}) was written to the Redis primary at "
            f"{redact_url(settings.redis_url)} but not confirmed by a replica within "
            f"{exc.timeout_s:g}s ({counted}): a failover now could lose it; check "
            "'fleetgate status' after one")


def report_action(
    state: FleetState,
    report: WaitReport | None,
    json_out: bool,
    changed: bool = True,
    unconfirmed: str | None = None,
    change: render.HoldChange | None = None,
    suffix: str = "",
    line: str | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Print the change (and the wait's report); exit 4 when no replica confirmed it
    (``unconfirmed``, the line; before exit 3, which it names too), 3 when the wait ran out
    of time. ``extra``: more keys of the JSON (``suffix`` says them in the text)."""
    if json_out:
        emit_json({**render.action_dict(state, report, change), **(extra or {})})
    else:
        out = console()
        first = render.action_line(state) if changed else (
            f"fleet {state.fleet} is not paused (version {state.version}): nothing to resume"
        )
        if change is not None and change.event != "noop":
            first = render.change_line(state, change)
        out.print((line or first) + suffix, highlight=False, markup=False)
        if report is not None:
            out.print(render.wait_table(report))
    if unconfirmed is not None:
        if report is not None and not report.ok:
            unconfirmed += f"; and {render.stragglers_line(report)}"
        raise CliError(unconfirmed, EXIT_NOT_CONFIRMED)
    if report is not None and not report.ok:
        raise CliError(render.stragglers_line(report), EXIT_TIMEOUT)


__all__ = ["change_then_wait", "command_name", "report_action", "run_change", "unconfirmed_line"]
