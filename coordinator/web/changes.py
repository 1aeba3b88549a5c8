"""A write of the API, bounded in time: the change, then (with ``wait``) the wait for the
replicas, both within the request's ``timeout``.

* The change gets until the deadline. When it runs out (Redis hangs), or ``Fleet`` says the
  script was sent and no answer came, the outcome is unknown: ``OutcomeUnknown`` (504), never
  "unreachable", since the change may have been applied.
* The wait gets what is left of the timeout, capped by ``FLEETGATE_MAX_WAIT``, and a moment
  (``WAIT_GRACE_S``) for its last read. A wait that Redis stops answering does not turn an
  applied change into a failure: the answer is 202 with the state, a wait report that is not
  ok, and a ``detail`` saying so.
* A change made on the Redis primary that no Redis replica confirmed in time
  (``NotConfirmed``, ``FLEETGATE_MIN_REPLICAS_ACK``) is made and published all the same: the
  wait (if asked) goes on, and the answer is 202 with the state, ``"confirmed": false`` and a
  ``detail`` saying so.
* ``pause_outcome``/``resume_outcome`` make the hold change a body asks for (both route
  families call them) and add ``change``: what it did to the holds. A refused hold change
  changes nothing: an ambiguous resume (several holds, none named), a pause past the most
  holds a fleet may have and an ``at`` for a hold active now without ``reschedule`` (kind
  ``active``) are 409, a hold the fleet does not have is 404, each
  ``{"detail", "kind", "holds"}`` naming the fleet's holds.
* A pause with ``select`` says how many live replicas the selector matches (``selected``:
  ``{"select", "matched", "live"}``, counted before the change) and its ``wait`` waits for those
  only, as ``pause --select --wait`` does (``coordinator.fleet.waitscope``). A selector that
  matches no live replica holds no one: with ``wait`` the answer is 202 with a ``detail`` saying
  so and a wait report that is not ok and lists no replica (nothing was waited for).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from redis.exceptions import RedisError

from coordinator.fleet.dryrun import dry_run_dict
from coordinator.fleet.durability import NotConfirmed
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import WaitReport
from coordinator.fleet.waitscope import WaitScope, matching, selected
from coordinator.render import action_dict, describe_change
from coordinator.web.bodies import PauseRequest, ResumeRequest
from replica.contract import FleetState, now_utc
from replica.errors import HoldConflict, OutcomeUnknown

log = logging.getLogger(__name__)

WAIT_GRACE_S: Final = 1.0
"""Past the wait's own timeout, how long its last read of the records may take."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The body and the status of a write."""

    body: dict[str, Any]
    status: int = 200


async def bounded_change(
    fleet: Fleet,
    change: Callable[[], Awaitable[FleetState]],
    *,
    wait: bool,
    timeout: float,
    max_wait: float,
    scope: WaitScope | None = None,
) -> Outcome:
    """Run ``change`` and, with ``wait``, wait for its version (for the replicas ``scope``
    admits), all within ``timeout``. Raises ``OutcomeUnknown`` when the change got no answer in
    time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    bound = asyncio.timeout_at(deadline)
    unconfirmed: NotConfirmed | None = None
    try:
        async with bound:
            try:
                state = await change()
            except NotConfirmed as exc:
                state, unconfirmed = exc.state, exc
    except TimeoutError:
        if not bound.expired():
            raise
        raise OutcomeUnknown(f"no answer within the request's timeout ({timeout:g} s)") from None
    outcome = await _wait(fleet, state, wait, deadline, max_wait, scope)
    return outcome if unconfirmed is None else _unconfirmed(outcome, unconfirmed)


def _unconfirmed(outcome: Outcome, exc: NotConfirmed) -> Outcome:
    """The answer to a change no replica confirmed in time: 202, saying so."""
    body = dict(outcome.body)
    counted = exc.counted
    said = f"; {body['detail']}" if "detail" in body else ""
    body["confirmed"] = False
    body["detail"] = (
        f"the change (version {exc.state.version}) was written to the Redis primary but not "
        f"confirmed by a replica within {exc.timeout_s:g} s ({counted}): a failover now could "
        f"lose it; check the state (GET /api/fleet) after one{said}"
    )
    return Outcome(body, 202)


async def _wait(
    fleet: Fleet, state: FleetState, wait: bool, deadline: float, max_wait: float,
    scope: WaitScope | None,
) -> Outcome:
    """With ``wait``, wait for ``state``'s version until ``deadline``, capped by ``max_wait``."""
    if not wait:
        return Outcome(action_dict(state, None))
    loop = asyncio.get_running_loop()
    budget = max(0.0, min(deadline - loop.time(), max_wait))
    started = loop.time()
    try:
        async with asyncio.timeout(budget + WAIT_GRACE_S):
            report = await fleet.wait(state.version, timeout=budget, scope=scope)
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("fleet %s: v%d applied, but Redis stopped answering during the wait: %r",
                    fleet.name, state.version, exc)
        report = WaitReport(
            version=state.version,
            ok=False,
            action="pause" if state.paused else "resume",
            elapsed_s=loop.time() - started,
            replicas=[],
        )
        body = action_dict(state, report)
        body["detail"] = (
            f"the change was applied (version {state.version}), but Redis stopped answering "
            "while waiting for the replicas: check the state (GET /api/fleet)"
        )
        return Outcome(body, 202)
    return Outcome(action_dict(state, report), 200 if report.ok else 202)


async def pause_outcome(
    fleet: Fleet, body: PauseRequest, by: str, max_wait: float
) -> Outcome:
    """``POST .../pause``: add or update the body's hold (``bounded_change``), with what the
    change did (``change``: ``HoldChange.to_dict``); a hold past the most a fleet may have is a
    409 (``hold_conflict``)."""
    window = body.window

    def change(dry_run: bool = False) -> Awaitable[FleetState]:
        return fleet.pause(body.reason, by=by, expected_for=window,
                           auto_resume_after=window if body.auto_resume else None,
                           hold=body.hold, starts_at=body.starts_at, reschedule=body.reschedule,
                           for_wait=body.wait and not dry_run, select=body.select,
                           dry_run=dry_run)
    if body.dry_run:
        return await dry_outcome(fleet, lambda: change(True), body.timeout, max_wait)
    if body.select is None:  # a wait for a hold of part of the fleet (another's selector, a
        # canary resume) waits for the replicas it holds to be quiet, the others to run
        return await _recorded(fleet, "pause", body.hold, body.wait, body.timeout, max_wait,
                               change)
    return await _selected_pause(fleet, body, body.select, max_wait, change)


async def _selected_pause(
    fleet: Fleet, body: PauseRequest, select: str, max_wait: float,
    change: Callable[[], Awaitable[FleetState]],
) -> Outcome:
    """A pause with ``select``: the live replicas it matches are counted first (nothing is
    written yet: a Redis that does not answer is a 503), then the change, and ``wait`` waits
    for those replicas only; with none, it waits for no one and says so (202)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(body.timeout):
        matched, live = matching(select, (await fleet.status()).replicas)
    left = max(0.0, body.timeout - (loop.time() - started))
    waits = body.wait and matched > 0
    outcome = await _recorded(fleet, "pause", body.hold, waits, left, max_wait, change,
                              WaitScope(only=selected(select)))
    out = {**outcome.body, "selected": {"select": select, "matched": matched, "live": live}}
    if not body.wait or matched > 0 or outcome.status >= 400:
        return Outcome(out, outcome.status)
    version = int(out["state"]["version"]) if isinstance(out.get("state"), dict) else 0
    out["wait"] = WaitReport(version=version, ok=False, action="pause", elapsed_s=0.0,
                             replicas=[]).to_dict()
    said = f"; {out['detail']}" if "detail" in out else ""
    out["detail"] = (f"select {select!r} matches no live replica of fleet {fleet.name} "
                     f"(0 of {live}): nothing is held, nothing to wait for; check the selector "
                     f"and the replicas' labels (GET /api/fleet){said}")
    return Outcome(out, 202)


async def resume_outcome(
    fleet: Fleet, body: ResumeRequest, by: str, max_wait: float
) -> Outcome:
    """``POST .../resume``: release the body's hold, the only one, or ``all``
    (``bounded_change``), with what the change did; an ambiguous resume is a 409, a hold the
    fleet does not have a 404 (``hold_conflict``), and nothing changed."""
    stagger = None if body.stagger_seconds is None else timedelta(seconds=body.stagger_seconds)
    if body.dry_run:
        return await dry_outcome(fleet, lambda: fleet.resume(
            by=by, stagger=stagger, reason=body.reason, hold=body.hold, all=body.all_,
            dry_run=True), body.timeout, max_wait)
    return await _recorded(fleet, "resume", body.hold, body.wait, body.timeout, max_wait,
                           lambda: fleet.resume(by=by, stagger=stagger, reason=body.reason,
                                                hold=body.hold, all=body.all_,
                                                for_wait=body.wait))


async def dry_outcome(fleet: Fleet, change: Callable[[], Awaitable[FleetState]],
                      timeout: float, max_wait: float) -> Outcome:
    """A body's ``dry_run``: what the change would do (``coordinator.fleet.dryrun``), written
    nowhere; a change refused is refused as it would be (409, 404, 422)."""
    try:
        outcome = await bounded_change(fleet, change, wait=False, timeout=timeout,
                                       max_wait=max_wait)
    except HoldConflict as exc:
        return hold_conflict(exc)
    dry = fleet.dry_run_result
    if outcome.status != 200 or dry is None:
        return outcome
    return Outcome(dry_run_dict(dry, (await fleet.status()).replicas, now_utc()))


async def _recorded(
    fleet: Fleet, action: str, hold: str | None, wait: bool, timeout: float, max_wait: float,
    call: Callable[[], Awaitable[FleetState]], scope: WaitScope | None = None,
) -> Outcome:
    """Run the change ``call`` through ``bounded_change`` (``scope``: whom its wait waits for), keeping the state it made (also when
    no replica confirmed it: ``NotConfirmed`` carries it) for what the change did."""
    started, states = now_utc(), list[FleetState]()

    async def change() -> FleetState:
        try:
            state = await call()
        except NotConfirmed as exc:
            states.append(exc.state)
            raise
        states.append(state)
        return state

    try:
        outcome = await bounded_change(fleet, change, wait=wait, timeout=timeout,
                                       max_wait=max_wait, scope=scope)
    except HoldConflict as exc:
        return hold_conflict(exc)
    return await _with_change(fleet, outcome, action, hold, started, states)


def hold_conflict(exc: HoldConflict) -> Outcome:
    """A hold change refused, nothing changed: 404 for a hold the fleet does not have, else
    409 (an ambiguous resume, too many holds). ``{"detail", "kind", "holds"}``: ``holds`` names
    the fleet's holds."""
    status = 404 if exc.kind == "unknown" else 409
    detail = (str(exc).replace("with --hold NAME", 'with "hold"').replace("with --all", 'with "all"')
              .replace("pass --reschedule", 'pass "reschedule": true'))
    return Outcome({"detail": detail, "kind": exc.kind, "holds": list(exc.holds)}, status)


async def _with_change(
    fleet: Fleet, outcome: Outcome, action: str, hold: str | None, started: datetime,
    after: list[FleetState],
) -> Outcome:
    """``outcome`` with ``change``: what the change did (``describe_change``; nothing is read
    before the change: a request's time is the change's)."""
    if not after:
        return outcome
    change = await describe_change(fleet, action, hold, started, after[0])
    return Outcome({**outcome.body, "change": change.to_dict()}, outcome.status)


__all__ = [
    "WAIT_GRACE_S", "Outcome", "bounded_change", "hold_conflict", "pause_outcome",
    "resume_outcome",
]
