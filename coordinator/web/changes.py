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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from redis.exceptions import RedisError

from coordinator.fleet.durability import NotConfirmed
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import WaitReport
from coordinator.render import action_dict
from replica.contract import FleetState
from replica.errors import OutcomeUnknown

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
) -> Outcome:
    """Run ``change`` and, with ``wait``, wait for its version, all within ``timeout``.
    Raises ``OutcomeUnknown`` when the change got no answer in time."""
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
    outcome = await _wait(fleet, state, wait, deadline, max_wait)
    return outcome if unconfirmed is None else _unconfirmed(outcome, unconfirmed)


def _unconfirmed(outcome: Outcome, exc: NotConfirmed) -> Outcome:
    """The answer to a change no replica confirmed in time: 202, saying so."""
    body = dict(outcome.body)
    counted = (f"{exc.acked} of {exc.wanted} replicas" if exc.acked is not None
               else f"no answer: {exc.why}")
    said = f"; {body['detail']}" if "detail" in body else ""
    body["confirmed"] = False
    body["detail"] = (
        f"the change (version {exc.state.version}) was written to the Redis primary but not "
        f"confirmed by a replica within {exc.timeout_s:g} s ({counted}): a failover now could "
        f"lose it; check the state (GET /api/fleet) after one{said}"
    )
    return Outcome(body, 202)


async def _wait(
    fleet: Fleet, state: FleetState, wait: bool, deadline: float, max_wait: float
) -> Outcome:
    """With ``wait``, wait for ``state``'s version until ``deadline``, capped by ``max_wait``."""
    if not wait:
        return Outcome(action_dict(state, None))
    loop = asyncio.get_running_loop()
    budget = max(0.0, min(deadline - loop.time(), max_wait))
    started = loop.time()
    try:
        async with asyncio.timeout(budget + WAIT_GRACE_S):
            report = await fleet.wait(state.version, timeout=budget)
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


__all__ = ["WAIT_GRACE_S", "Outcome", "bounded_change"]
