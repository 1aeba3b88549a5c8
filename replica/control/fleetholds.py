"""FleetHolds: the pool holds that follow a fleet's holds, one per fleet hold in force.

A fleet is paused while any of its holds is active (``replica.contract.holds``). On a replica
the pool is held by one pool hold per active fleet hold, so ``/pool``, the record and the
metrics say which fleet hold holds it:

* the hold named ``default`` (and the pause of a state written without holds: an older
  release, a hand edit) is the pool source ``fleet``, as it always was;
* any other hold NAME is the pool source ``fleet:NAME`` (``replica.pool.holds.fleet_source``);
* each pool hold's reason is its fleet hold's reason.

When the set changes while the fleet stays paused, the new pool holds go on before the old
ones come off: the pool never runs in between. A scheduled hold starts at its ``starts_at``
and a hold ends at its ``auto_resume_at`` on the replica's own clock: ``pause_end`` and
``FleetState.next_transition`` say when the state applied changes by itself, with no new
version, so the applier can wake then.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Final

from replica.contract import MAX_HOLDS, FleetState, Holds, format_time
from replica.control.record import ReplicaRecord
from replica.pool.holds import fleet_source
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)

DEFAULT_REASON: Final = "paused by the fleet"
"""The reason of a pool hold whose fleet hold gives none."""


def pause_end(state: FleetState, now: datetime) -> datetime | None:
    """When ``state``, paused at ``now``, stops being paused by itself (its active holds
    ended, with no scheduled one in force then), or None when it never does."""
    t = now
    for _ in range(2 * MAX_HOLDS + 2):  # each hold starts and ends at most once
        later = state.next_transition(t)
        if later is None or not state.effectively_paused(later):
            return later
        t = later
    return None


def hold_names(holds: Holds) -> str:
    """``fleet holds db, payments`` or ``fleet hold default``, for log lines."""
    if not holds:
        return "no fleet hold"
    return ("fleet hold " if len(holds) == 1 else "fleet holds ") + ", ".join(
        h.name for h in holds
    )


def condition(state: FleetState, now: datetime, held: Holds, resume_at: datetime | None) -> str:
    """What a replica under ``state`` does at ``now``, held by the fleet holds ``held``, for
    log lines: ``held by fleet holds db, payments``, ``resuming at ...``, ``running``."""
    if held and state.effectively_paused(now):
        text = f"held by {hold_names(held)}"
        if len(held) == 1:
            text += f" ({held[0].reason}, by {held[0].by})"
    elif held:
        text = f"resuming at {format_time(resume_at)}"
    else:
        text = "running"
    scheduled = sum(1 for h in state.effective_holds() if h.starts_at and h.starts_at > now)
    return text + (f", {scheduled} scheduled" if scheduled else "")


class FleetHolds:
    """The pool holds of one replica that stand for the fleet's active holds, and when the
    pool turned quiet under them (the record's ``quiet_at``)."""

    def __init__(self, pool: PausablePool, record: ReplicaRecord, pause_timeout: float) -> None:
        self._pool = pool
        self._record = record
        self._pause_timeout = pause_timeout
        self.sources: dict[str, str] = {}
        """The pool holds on now for the fleet: source -> reason."""
        self.holds: Holds = ()
        """The fleet holds they stand for."""
        self.quiet_at: datetime | None = None
        self._held_mono: float | None = None
        self._overdue_checked = False

    @property
    def held(self) -> bool:
        """The pool is held by the fleet (``fleet`` or ``fleet:NAME``)."""
        return bool(self.sources)

    def follow(self, holds: Holds, now: datetime, now_text: str) -> bool:
        """Hold the pool by exactly the fleet holds ``holds`` (not empty): new ones first,
        then the ones gone come off. True when the fleet did not hold the pool before."""
        started = not self.sources
        if started:
            self._held_mono = time.monotonic()
            self._overdue_checked = False
            if self._pool.in_flight == 0:
                self.set_quiet_at(now, now_text)  # the same clock reading
            else:
                self.set_quiet_at(None)
        want = {fleet_source(h.name): h.reason or DEFAULT_REASON for h in holds}
        old = self.sources
        self.sources = want  # before the pool's events, so the listeners see it
        self.holds = holds
        pool = self._pool
        for source, reason in want.items():
            pool.hold(reason, source)
        for source in old:
            if source not in want:
                pool.release(source)
        return started

    def release_all(self) -> None:
        """The fleet holds the pool no more."""
        old = self.sources
        self.sources = {}
        self.holds = ()
        self._held_mono = None
        self.set_quiet_at(None)
        for source in old:
            self._pool.release(source)

    def set_quiet_at(self, when: datetime | None, text: str | None = None) -> None:
        self.quiet_at = when
        self._record.set_quiet_at(text if text is not None else format_time(when))

    # ------------------------------------------------------------------ pause_timeout

    def overdue_at(self) -> float | None:
        """When (monotonic) the pause runs over ``pause_timeout``, if not checked yet."""
        if self._held_mono is None or self._overdue_checked:
            return None
        return self._held_mono + self._pause_timeout

    def check_overdue(self, fleet: str, replica_id: str) -> None:
        """Log, once per pause, items still in flight ``pause_timeout`` after it began."""
        due = self.overdue_at()
        if due is None or time.monotonic() < due:
            return
        self._overdue_checked = True
        if self._pool.in_flight:
            log.warning("fleet %s replica %s: still %d in flight %.0f s after the pause "
                        "(not quiet)", fleet, replica_id, self._pool.in_flight,
                        self._pause_timeout)


__all__ = ["DEFAULT_REASON", "FleetHolds", "condition", "hold_names", "pause_end"]
