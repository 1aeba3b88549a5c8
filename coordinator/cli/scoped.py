"""``pause --select``, ``resume --canary/--promote/--soak`` and ``--dry-run``: holds for part
of a fleet, a resume that starts small, and a change previewed (``coordinator.cli.change``
checks the options, then hands over here).

* ``--select``: the first line says how many live replicas the selector matches; ``--wait``
  waits for those only, and when it matches none says so and exits 3 (nothing is held, so
  there is nothing to wait for: a typo in a zone must not read as done).
* ``--canary N|P%``: the hold is released on the canaries only (named); ``--wait`` waits for
  them to run; ``--soak 2m`` then watches their records and promotes (exit 0) or puts the hold
  back on them and says why (exit ``EXIT_ROLLED_BACK``).
* ``--promote``: releases a hold a canary resume runs on (audited ``canary_promoted``).
* A hold that is a recurring schedule's name: the same steps on its occurrence in force
  (``coordinator.cli.occurrence``).
* ``--dry-run``: what the change would do (``coordinator.fleet.dryrun``), for each fleet
  named; nothing is written, audited or published.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from coordinator import render
from coordinator.cli import multi, occurrence
from coordinator.cli.exits import EXIT_ROLLED_BACK, EXIT_TIMEOUT, EXIT_USAGE, CliError, usage
from coordinator.cli.output import console, emit_json
from coordinator.cli.runner import Progress, run_with_fleet
from coordinator.durations import format_age
from coordinator.fleet.canary import Verdict, choose, parse_canary, soak
from coordinator.fleet.dryrun import DryRun, dry_run_dict, dry_run_lines
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import WaitReport
from coordinator.fleet.occurrence_canary import schedule_of
from coordinator.fleet.registry import list_fleets
from coordinator.fleet.waitscope import WaitScope, among, selected
from coordinator.fleet.waitscope import matching as counted
from coordinator.settings import CoordinatorSettings
from replica.contract import FleetState, now_utc
from replica.contract.selectors import canonical_selector
from replica.errors import ContractError, HoldConflict


def select_option(value: str) -> str:
    """``--select`` in canonical form; exit 2 with one line when it is not a selector."""
    try:
        return canonical_selector(value)
    except ContractError as exc:
        raise usage(f"--select: {exc}") from None


async def matching(fleet: Fleet, select: str) -> tuple[int, int]:
    """How many live replicas ``select`` matches, of how many live ones (records' labels)."""
    return counted(select, (await fleet.status()).replicas)


def matched_text(select: str, matched: int, live: int) -> str:
    if matched == 0:
        return f"; select {select!r} matches no live replica (of {live})"
    return f"; select {select!r} matches {matched} of {live} live replicas"


def no_match_error(fleet: str, select: str, live: int) -> CliError:
    return CliError(f"--wait: select {select!r} matches no live replica of fleet {fleet} "
                    f"(0 of {live}): nothing is held, nothing to wait for; check the selector "
                    "and the replicas' labels (fleetgate status)", EXIT_TIMEOUT)


def select_scope(select: str | None) -> WaitScope | None:
    """What ``pause --select --wait`` waits for: the live replicas the selector matches."""
    return None if select is None else WaitScope(only=selected(select))


def canary_step(hold: str | None, all_holds: bool, canary: str | None, promote: bool,
                soak_s: float | None, many: bool) -> str:
    """The canary step of a resume's options (``canary``, ``promote`` or ``""``); exit 2 with
    one line for options that do not go together."""
    if canary is None and not promote:
        if soak_s is not None:
            raise usage("--soak watches the canaries of --canary N")
        return ""
    if canary is not None and promote:
        raise usage("--canary starts a canary resume and --promote ends one: give one of them")
    if hold is None or all_holds:
        raise usage("a canary resume names its hold: --hold NAME (not --all)")
    if many:
        raise usage("a canary resume works on one fleet: give one --fleet")
    if canary is not None:
        try:
            parse_canary(canary)
        except ContractError as exc:
            raise usage(str(exc)) from None
    return "canary" if canary is not None else "promote"


async def resume_dry(fleet: Fleet, by: str, stagger: Any, reason: str | None, hold: str | None,
                     all_holds: bool, canary: str | None, step: str) -> FleetState | DryRun:
    """A resume's dry run; with ``--canary`` the canaries it would choose (of a schedule's
    occurrence, when ``hold`` is a schedule: ``coordinator.cli.occurrence``)."""
    if hold is not None and not all_holds:
        schedule = await schedule_of(fleet, hold)
        if schedule is not None:
            return await occurrence.preview(fleet, schedule, by, reason, step,
                                            parse_canary(canary) if canary else None)
    canaries: list[str] = []
    if step == "canary" and hold is not None and canary is not None:
        status = await fleet.status()
        found = {h.name: h for h in status.state.effective_holds()}
        if hold not in found:
            raise HoldConflict("unknown", fleet.name, tuple(sorted(found)), hold)
        canaries, _ = choose(fleet.name, found[hold], status.replicas, parse_canary(canary))
    return await fleet.resume(by=by, stagger=stagger, reason=reason, hold=hold, all=all_holds,
                              canary=step, canaries=canaries, dry_run=True)


# ---------------------------------------------------------------------------- dry run


def dry_run(
    settings: CoordinatorSettings, fleets: Sequence[str] | None, all_fleets: bool,
    json_out: bool, make: Callable[[Fleet], Awaitable[FleetState | DryRun]],
) -> None:
    """Preview the change ``make`` makes (with ``dry_run=True``) on each fleet named."""
    many = multi.wanted(fleets, all_fleets)
    if all_fleets and fleets:
        raise usage("--all-fleets names every fleet: give it or --fleet, not both")

    async def go(first: Fleet) -> list[tuple[str, Any, list[str] | None, str | None]]:
        names = list(dict.fromkeys(fleets or ())) if not all_fleets else \
            sorted(await list_fleets(first.redis))
        if not many:
            names = [first.name]
        out: list[tuple[str, Any, list[str] | None, str | None]] = []
        for name in names:
            fleet = first if name == first.name else multi.fleet_for(first.redis, settings, name)
            try:
                made = await make(fleet)
            except ContractError as exc:
                if not many:
                    raise
                out.append((name, None, None, str(exc)))
                continue
            dry = made if isinstance(made, DryRun) else fleet.dry_run_result
            if dry is None:  # a resume with nothing to release writes nothing, dry or not
                out.append((name, None, [f"fleet {name} has no hold: nothing to resume"], None))
                continue
            replicas = (await fleet.status()).replicas
            now = now_utc()
            out.append((name, dry_run_dict(dry, replicas, now),
                        dry_run_lines(dry, replicas, now), None))
        return out

    results = run_with_fleet(settings, go)
    if json_out:
        if many:
            emit_json([{"fleet": n, "ok": e is None, "error": e, "dry_run": d}
                       for n, d, _lines, e in results])
        else:
            emit_json(results[0][1] or {"fleet": results[0][0], "dry_run": None})
    else:
        out = console()
        for name, _d, lines, error in results:
            if many:
                out.print(f"fleet {name}:", highlight=False, markup=False)
            for line in lines or [f"fleetgate: {error}"]:
                out.print(("  " if many else "") + line, highlight=False, markup=False)
    failed = [(n, e) for n, _d, _l, e in results if e is not None]
    if failed:
        raise CliError(f"{len(failed)} of {len(results)} fleets failed: "
                       + "; ".join(f"{n}: {e}" for n, e in failed), EXIT_USAGE)


# ---------------------------------------------------------------------------- canary resume


def canary_resume(
    settings: CoordinatorSettings, hold: str, spec_text: str, by: str, reason: str | None,
    wait: bool, soak_s: float | None, progress: Progress, json_out: bool,
) -> None:
    """``resume --hold NAME --canary N|P% [--soak DURATION]``."""
    spec = parse_canary(spec_text)

    async def go(fleet: Fleet) -> tuple[dict[str, Any], list[str], CliError | None]:
        status = await fleet.status()
        found = {h.name: h for h in status.state.effective_holds()}
        if hold not in found:
            schedule = (await fleet.schedules()).get(hold)
            if schedule is not None:  # a recurring schedule's occurrence in force
                return await occurrence.canary(fleet, schedule, spec, by, reason, wait, soak_s,
                                               progress)
            raise HoldConflict("unknown", fleet.name, tuple(sorted(found)), hold)
        canaries, candidates = choose(fleet.name, found[hold], status.replicas, spec)
        state = await fleet.resume(by=by, reason=reason, hold=hold, canary="canary",
                                   canaries=canaries, for_wait=wait)
        lines = [f"canary resume of hold {hold}: released on {len(canaries)} of {candidates} "
                 f"replicas ({', '.join(canaries)}), held on the others; fleet {fleet.name} "
                 f"(version {state.version})"]
        body: dict[str, Any] = {"fleet": fleet.name, "hold": hold, "canaries": canaries,
                                "candidates": candidates, "state": state.to_dict()}
        report = await _wait(fleet, state, wait or soak_s is not None, among(set(canaries)),
                             progress)
        if report is not None:
            body["wait"] = report.to_dict()
            lines += _wait_lines(report)
            if not report.ok:
                return body, lines, CliError(render.stragglers_line(report), EXIT_TIMEOUT)
        if soak_s is None:
            lines.append(f"promote with: fleetgate resume --hold {hold} --promote")
            return body, lines, None
        verdict = await soak(fleet, canaries, soak_s)
        body["soak"] = {"ok": verdict.ok, "why": verdict.why or None,
                        "elapsed_s": round(verdict.elapsed_s, 3)}
        return body, lines, await _settle(fleet, hold, by, verdict, soak_s, body, lines)

    body, lines, error = run_with_fleet(settings, go, deadline=None)
    if json_out:
        emit_json(body)
    else:
        out = console()
        for line in lines:
            out.print(line, highlight=False, markup=False)
    if error is not None:
        raise error


async def _settle(fleet: Fleet, hold: str, by: str, verdict: Verdict, soak_s: float,
                  body: dict[str, Any], lines: list[str]) -> CliError | None:
    """Promote after a quiet soak, else put the hold back on the canaries."""
    if verdict.ok:
        state = await fleet.resume(by=by, hold=hold, canary="promote",
                                   reason=f"canaries quiet for {format_age(soak_s)}")
        body["promoted"] = state.to_dict()
        lines.append(f"canaries stayed quiet for {format_age(soak_s)}: promoted, hold {hold} "
                     f"released; fleet {fleet.name} "
                     f"{'still paused' if state.effectively_paused() else 'resumed'} "
                     f"(version {state.version})")
        return None
    why = verdict.why[:400]
    state = await fleet.resume(by=by, hold=hold, canary="rollback", reason=f"soak: {why}")
    body["rolled_back"] = state.to_dict()
    lines.append(f"canary resume of hold {hold} rolled back after "
                 f"{format_age(max(1.0, verdict.elapsed_s))}: {why}; the hold is back on every "
                 f"replica it holds (version {state.version})")
    return CliError(f"canary resume of hold {hold} rolled back: {why}", EXIT_ROLLED_BACK)


async def _wait(fleet: Fleet, state: FleetState, wait: bool, only: Any,
                progress: Progress) -> WaitReport | None:
    if not wait:
        return None
    return await fleet.wait(state.version, timeout=progress.left(), scope=WaitScope(only=only))


def _wait_lines(report: WaitReport) -> list[str]:
    out = console()
    with out.capture() as captured:
        out.print(render.wait_table(report))
    return captured.get().rstrip("\n").splitlines()


def promote_line(state: FleetState, hold: str) -> str:
    """The first line of ``resume --hold NAME --promote``."""
    still = [h.name for h in state.active_holds()]
    fate = f"still paused by {', '.join(still)}" if still else "resumed"
    return (f"canary resume of hold {hold} promoted: hold {hold} released; fleet {state.fleet} "
            f"{fate} (version {state.version})")


__all__ = ["EXIT_ROLLED_BACK", "canary_resume", "canary_step", "dry_run", "matched_text",
           "matching", "no_match_error", "promote_line", "resume_dry", "select_option",
           "select_scope"]
