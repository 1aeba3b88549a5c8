"""Faults: a replica that cannot follow its fleet holds its pool.

The controller's loops (the sync loop, the control channel, the state applier, the record,
the registration) expect a lost or refused Redis (``NET_ERRORS``) and handle it there. Anything
else (a reply that cannot be decoded, a state hash edited by hand that cannot be read, a bug)
is a fault, and a fault never ends following silently: ``ControlFaults.fail(loop, exc)`` holds
the pool with the ``control-plane`` source (reason "control loop sync failed:
UnicodeDecodeError: ..."), logs it once with its traceback (a retry failing alike is only
counted), and asks for the record to be written (its ``control_error`` field says it); the loop
keeps trying, with backoff, and ``recover(loop)`` releases the hold once it succeeds. A fault
that lasts past ``fatal_after`` seconds makes ``unrecoverable()`` answer, which the replica
service turns into a failed liveness probe (the orchestrator restarts the process).

``ControlHold`` is the one ``control-plane`` hold of a pool, shared by the three things that
put it on: the start's "syncing" (until the first state is applied), ``ControlLoss``'s
"control plane lost since ..." and a fault. Each sets its own part; the hold's reason is the
most telling of those on (a fault first), and it goes only once none is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from replica.link.redisio import Backoff
from replica.pool.holds import CONTROL_PLANE_SOURCE
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)

SYNCING_REASON: Final = "syncing"

FAULT_TEXT_LEN: Final = 300
"""The most characters of an error the hold's reason and the record carry."""


class ControlHold:
    """The ``control-plane`` hold of one pool, from its three causes."""

    def __init__(self, pool: PausablePool) -> None:
        self._pool = pool
        self.syncing = False
        """No state applied yet since the start."""
        self.lost: str | None = None
        """The reason of ``ControlLoss``'s hold, while it holds."""
        self.fault: str | None = None
        """What broke, while a fault holds."""

    @property
    def reason(self) -> str | None:
        """The hold's reason, or None when nothing holds."""
        return self.fault or self.lost or (SYNCING_REASON if self.syncing else None)

    def refresh(self) -> None:
        """Put the pool's hold in line with its causes."""
        reason = self.reason
        if reason is None:
            self._pool.release(CONTROL_PLANE_SOURCE)
        else:
            self._pool.hold(reason, CONTROL_PLANE_SOURCE)


def describe(exc: BaseException) -> str:
    """``Type: message`` on one line, at most ``FAULT_TEXT_LEN`` characters."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text[:FAULT_TEXT_LEN]


@dataclass(slots=True)
class _Fault:
    error: str
    since: float
    failures: int = 1
    logged: set[str] = field(default_factory=set)


class ControlFaults:
    """The faults of one controller's loops, and the hold they put on."""

    def __init__(
        self,
        hold: ControlHold,
        fleet: str,
        replica_id: str,
        *,
        fatal_after: float,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._hold = hold
        self._fleet = fleet
        self._replica_id = replica_id
        self.fatal_after = fatal_after
        self._on_change = on_change
        self._faults: dict[str, _Fault] = {}
        self.failures = 0
        """Faults met, every retry counted."""
        self.episodes = 0
        """Times a loop went from working to failing."""

    @property
    def active(self) -> bool:
        return bool(self._faults)

    def failing(self, loop: str) -> bool:
        return loop in self._faults

    @property
    def reason(self) -> str | None:
        """What broke (the loops failing now, the oldest first), or None."""
        if not self._faults:
            return None
        ordered = sorted(self._faults.items(), key=lambda kv: kv[1].since)
        return "; ".join(f"control loop {loop} failed: {f.error}" for loop, f in ordered)

    def fail(self, loop: str, exc: BaseException, *, traceback: bool = True) -> None:
        """``loop`` met ``exc``, which it did not expect: hold the pool (logged once per kind
        of error while the fault lasts; ``traceback``: with the traceback)."""
        self.failures += 1
        error = describe(exc)
        fault = self._faults.get(loop)
        if fault is None:
            fault = self._faults[loop] = _Fault(error, time.monotonic())
            self.episodes += 1
        else:
            fault.failures += 1
            fault.error = error
        kind = type(exc).__name__
        if kind not in fault.logged:
            fault.logged.add(kind)
            log.error("fleet %s replica %s: control loop %s failed: %s: holding the pool "
                      "(control-plane) until it recovers; it is retried, further failures "
                      "are only counted", self._fleet, self._replica_id, loop, error,
                      exc_info=exc if traceback else None)
        self._changed()

    def recover(self, loop: str) -> None:
        """``loop`` works again: its fault ends (the hold goes once no loop fails)."""
        fault = self._faults.pop(loop, None)
        if fault is None:
            return
        log.warning("fleet %s replica %s: control loop %s recovered after %.1f s and %d "
                    "failures%s", self._fleet, self._replica_id, loop,
                    time.monotonic() - fault.since, fault.failures,
                    ": releasing the control-plane hold" if not self._faults
                    else f" ({len(self._faults)} still failing)")
        self._changed()

    def unrecoverable(self) -> str | None:
        """What has failed for longer than ``fatal_after`` (liveness fails), or None."""
        now = time.monotonic()
        for loop, fault in self._faults.items():
            if now - fault.since > self.fatal_after:
                return (f"control loop {loop} has failed for {now - fault.since:.0f} s "
                        f"({fault.failures} tries): {fault.error}")
        return None

    async def supervise(self, loop: str, run: Callable[[], Awaitable[None]], cap: float) -> None:
        """Run ``run()`` (a loop) until cancelled: what ends it (a fault it did not catch)
        holds the pool, and it starts again after a backoff (up to ``cap`` seconds); its own
        work ends the fault."""
        backoff = Backoff(base=0.1, cap=cap)
        while True:
            try:
                await run()
                raise RuntimeError(f"the {loop} loop returned")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.fail(loop, exc)
            await asyncio.sleep(backoff.next())

    def _changed(self) -> None:
        reason = self.reason
        if reason == self._hold.fault:
            return  # the same failure again: nothing new to hold or write
        self._hold.fault = reason
        self._hold.refresh()
        if self._on_change is not None:
            self._on_change()


__all__ = ["FAULT_TEXT_LEN", "SYNCING_REASON", "ControlFaults", "ControlHold", "describe"]
