"""``pause``/``resume`` of several fleets in one command: ``--fleet a --fleet b ...`` or
``--all-fleets`` (every fleet of the registry ``fleetgate:fleets``).

Each fleet gets its own change, made by the single-fleet path (``coordinator.cli.change``'s
``act``: the same checks, the same script, audited in that fleet) with its own ``Progress``, so
``--timeout`` bounds each fleet's change and wait as it bounds one fleet's. The changes run at
once (at most ``AT_ONCE`` together) on one client; one fleet failing (a name the contract
refuses, a wait that ran out of time) does not stop the others. A table says what each did
and, with ``--wait``, which are quiet (or running again); ``--json`` prints a list, one
``pause --json`` object per fleet with ``ok``, ``exit`` and ``error``.

The exit status is 0 only when every fleet's change succeeded; else the worst of the fleets'
statuses, worst first (``WORST_FIRST``): 5 (outcome unknown), 1 (not sent: Redis unreachable),
2 (refused: bad input), 4 (made, not confirmed by a Redis replica), 3 (made, a wait ran out).
Its one line on stderr names each fleet that failed.

``--all-fleets`` asks on a terminal (y/N) unless given ``--yes``, and without a terminal
refuses (exit 2) before anything is read or sent.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import typer
from redis.asyncio import Redis
from redis.exceptions import RedisError
from rich.table import Table

from coordinator import render
from coordinator.cli.exits import (
    EXIT_NOT_CONFIRMED,
    EXIT_OK,
    EXIT_OUTCOME_UNKNOWN,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    usage,
)
from coordinator.cli.options import AllFleetsOption, FleetsOption, YesOption
from coordinator.cli.output import console, emit_json, plain
from coordinator.cli.runner import DeadlineExceeded, Progress, _until, run_with_fleet
from coordinator.durations import format_age
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import WaitReport
from coordinator.fleet.registry import list_fleets
from coordinator.render.text import cell
from coordinator.settings import CoordinatorSettings
from replica.contract import FleetState
from replica.errors import ContractError, OutcomeUnknown

WORST_FIRST: Final = (EXIT_OUTCOME_UNKNOWN, EXIT_UNREACHABLE, EXIT_USAGE, EXIT_NOT_CONFIRMED,
                      EXIT_TIMEOUT)
"""The exit statuses of a fleet's change, the worst first: the command exits with the first of
these that one of its fleets got (the less a status says was done, the worse it is)."""
AT_ONCE: Final = 16
"""How many fleets' changes (and waits) run at once."""

Act = Callable[[Fleet, Progress], Awaitable[tuple[Any, ...]]]
"""The single-fleet change path: ``act(fleet, progress)`` returns ``(state, report)``, then
optionally ``changed`` (False: a resume that released nothing) and what it did to the holds
(``render.HoldChange``)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the change of one fleet did: ``status`` is the exit status it alone would have."""

    fleet: str
    status: int
    state: FleetState | None = None
    report: WaitReport | None = None
    changed: bool = True
    error: str | None = None
    change: Any = None
    """What the change did to the fleet's holds (``render.HoldChange``), when ``act`` says."""

    def to_dict(self) -> dict[str, Any]:
        """``pause --json`` of this fleet (``state``, ``wait``), with ``ok``, ``exit`` and
        ``error``."""
        body: dict[str, Any] = {"fleet": self.fleet, "state": None, "wait": None}
        if self.state is not None:
            body = render.action_dict(self.state, self.report)
            if self.change is not None:
                body["change"] = self.change.to_dict()
        body.update(ok=self.status == EXIT_OK, exit=self.status, error=self.error)
        return body


def wanted(fleets: Sequence[str] | None, all_fleets: bool) -> bool:
    """Whether the command names several fleets (else it is today's single-fleet command)."""
    return all_fleets or len(_unique(fleets or ())) > 1


def single(fleets: Sequence[str] | None, all_fleets: bool = False) -> str | None:
    """The one ``--fleet`` of a single-fleet command (None: the global one, or the default;
    None too for several fleets, whose names ``run`` checks one by one)."""
    return fleets[-1] if fleets and not wanted(fleets, all_fleets) else None


def run(
    action: str,
    settings: CoordinatorSettings,
    fleets: Sequence[str] | None,
    all_fleets: bool,
    yes: bool,
    act: Act,
    limit: float,
    grace: float,
    json_out: bool,
) -> None:
    """Make ``action`` (``pause`` or ``resume``) with ``act`` on each fleet named, print what
    each did; raise ``CliError`` with the worst status when any failed."""
    if all_fleets and fleets:
        raise usage("--all-fleets names every fleet: give it or --fleet, not both")
    if all_fleets and not yes and not sys.stdin.isatty():
        raise usage(f"--all-fleets would {action} every fleet on this Redis: add --yes "
                    "(there is no terminal to ask on)")
    names = _unique(fleets or ())
    if all_fleets:
        names = run_with_fleet(settings, _registry)
        if not names:
            _print(action, [], json_out)
            return
        if not yes:
            _confirm(action, names)
    outcomes = run_with_fleet(
        settings, lambda first: _change_all(first.redis, settings, names, act, limit, grace)
    )
    _print(action, outcomes, json_out)
    failed = [o for o in outcomes if o.status != EXIT_OK]
    if failed:
        rank = {status: i for i, status in enumerate(WORST_FIRST)}
        worst = min((o.status for o in failed), key=lambda status: rank.get(status, -1))
        raise CliError(
            f"{len(failed)} of {len(outcomes)} fleets failed: "
            + "; ".join(f"{o.fleet}: {o.error}" for o in failed),
            worst,
        )


async def _registry(first: Fleet) -> list[str]:
    return sorted(await list_fleets(first.redis))


def _confirm(action: str, names: Sequence[str]) -> None:
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    if not typer.confirm(f"{action} {len(names)} fleets ({shown})?", default=False):
        raise usage(f"not confirmed: no fleet was {'paused' if action == 'pause' else 'resumed'}")


def fleet_for(redis: Redis, settings: CoordinatorSettings, name: str) -> Fleet:
    """The ``Fleet`` of ``name`` on ``redis``, with the options ``run_with_fleet`` gives its
    own. Raises ``ContractError`` for a name the contract refuses."""
    return Fleet(redis, name, min_replicas_ack=settings.min_replicas_ack,
                 min_replicas_timeout=settings.min_replicas_timeout)


async def _change_all(
    redis: Redis,
    settings: CoordinatorSettings,
    names: Sequence[str],
    act: Act,
    limit: float,
    grace: float,
) -> list[Outcome]:
    gate = asyncio.Semaphore(AT_ONCE)
    progresses = [Progress(limit, grace) for _ in names]  # one clock for all: --timeout

    async def one(name: str, progress: Progress) -> Outcome:
        async with gate:
            return await _change_one(redis, settings, name, act, progress)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(n, p), name=f"fleetgate-change-{n[:63]}")
                 for n, p in zip(names, progresses, strict=True)]
    return [t.result() for t in tasks]


async def _change_one(
    redis: Redis, settings: CoordinatorSettings, name: str, act: Act, progress: Progress
) -> Outcome:
    """One fleet's change by the single-fleet path; every failure becomes its ``Outcome``."""
    try:
        fleet = fleet_for(redis, settings, name)
        result = await _until(act(fleet, progress), progress.deadline)
    except DeadlineExceeded:
        limit = progress.limit
        waited = f"no answer came within --timeout {format_age(limit)}"
        if progress.step == "read":
            return Outcome(name, EXIT_UNREACHABLE, error=f"not changed: {waited}")
        if progress.step == "change" or progress.state is None:
            return Outcome(name, EXIT_OUTCOME_UNKNOWN,
                           error=f"the outcome is unknown ({waited}): check its state")
        return Outcome(name, EXIT_TIMEOUT, progress.state,
                       error=f"timed out after {format_age(limit)}: the change is made "
                             f"(version {progress.state.version}) but Redis did not answer "
                             "while waiting for the replicas")
    except OutcomeUnknown:
        return Outcome(name, EXIT_OUTCOME_UNKNOWN,
                       error="the outcome is unknown (sent, no answer): check its state")
    except ContractError as exc:
        return Outcome(name, EXIT_USAGE, error=plain(str(exc)))
    except (RedisError, OSError, TimeoutError) as exc:
        return Outcome(name, EXIT_UNREACHABLE,
                       error=f"not changed: cannot reach Redis: {plain(str(exc)) or type(exc).__name__}")
    state: FleetState = result[0]
    report: WaitReport | None = result[1]
    changed = bool(result[2]) if len(result) > 2 else True
    change = result[3] if len(result) > 3 else None
    if progress.unconfirmed is not None:
        return Outcome(name, EXIT_NOT_CONFIRMED, state, report, changed,
                       f"the change (version {state.version}) was not confirmed by a Redis "
                       "replica in time: a failover now could lose it", change)
    if report is not None and not report.ok:
        return Outcome(name, EXIT_TIMEOUT, state, report, changed,
                       render.stragglers_line(report), change)
    return Outcome(name, EXIT_OK, state, report, changed, None, change)


_DID: Final = {
    "pause": "paused", "resume": "resumed", "hold_added": "added hold {holds}",
    "hold_updated": "updated hold {holds}", "hold_released": "released hold {holds}",
    "hold_scheduled": "scheduled hold {holds}", "hold_cancelled": "cancelled hold {holds}",
}
"""The ``did`` cell of each ``HoldChange.event``."""


def _did(action: str, o: Outcome) -> str:
    if o.state is None:
        return "failed"
    if not o.changed:
        return "not paused: nothing to resume"
    event = getattr(o.change, "event", action)
    did = _DID.get(event, event).format(holds=", ".join(getattr(o.change, "holds", ())))
    if event not in ("pause", "resume"):
        did += "; paused" if o.state.paused else "; running"
    return did


def _there(action: str, report: WaitReport | None) -> str:
    if report is None:
        return "-"
    there = sum(1 for r in report.replicas if r.reached)
    word = "yes" if report.ok else "no"
    return f"{word} ({there} of {len(report.replicas)})"


def _print(action: str, outcomes: Sequence[Outcome], json_out: bool) -> None:
    if json_out:
        emit_json([o.to_dict() for o in outcomes])
        return
    out = console()
    if not outcomes:
        out.print(f"no fleet on this Redis (the registry is empty): nothing to {action}",
                  highlight=False, markup=False)
        return
    waited = any(o.report is not None for o in outcomes)
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    columns = ["fleet", "did", "version"] + (
        ["quiet" if action == "pause" else "running"] if waited else []) + ["why not"]
    for column in columns:
        table.add_column(column)
    for o in outcomes:
        row = [
            cell(o.fleet),
            cell(_did(action, o), style="" if o.status == EXIT_OK else "bold red"),
            cell(f"v{o.state.version}" if o.state is not None else "-"),
        ]
        if waited:
            row.append(cell(_there(action, o.report)))
        row.append(cell(o.error or "-", style="yellow" if o.error else ""))
        table.add_row(*row)
    out.print(table)


def _unique(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(names))


__all__ = [
    "AT_ONCE", "WORST_FIRST", "AllFleetsOption", "FleetsOption", "Outcome", "YesOption", "run",
    "single", "wanted",
]
