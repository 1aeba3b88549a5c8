"""ControlLoss: what a replica does when it has not read the fleet's state for a while.

Losing Redis is fail-static by default (``control_loss="keep"``): the replica keeps the state
it applied, which is right when Redis is down for the whole fleet. A replica cut off alone,
though, would keep running while the rest of the fleet is paused. With
``control_loss="hold"``, a replica that has not read the state hash for
``control_loss_after`` seconds holds its pool with the ``control-plane`` source (reason
"control plane lost since <the last read>", distinct from the "syncing" hold of a start),
until the sync loop reads the state again: then the state read applies first (a pause read
keeps the fleet hold) and this hold is released.

The deadline is a timer of the event loop, not a step of the sync loop, so the hold comes on
time even while a round trip hangs on a black-holed link (up to ``io_timeout``). The timer is
re-armed lazily, once per ``control_loss_after`` at most, not at every poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime

from replica.contract import format_time, now_utc
from replica.control.applier import StateApplier
from replica.control.options import ControllerSettings
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)


class ControlLoss:
    """The ``control_loss`` policy of one controller: the hold, its timer and its counters."""

    def __init__(
        self,
        settings: ControllerSettings,
        pool: PausablePool,
        applier: StateApplier,
        fleet: str,
        replica_id: str,
    ) -> None:
        self.mode = settings.control_loss
        self.after = settings.loss_after
        self._pool = pool
        self._applier = applier
        self._fleet = fleet
        self._replica_id = replica_id
        self._last_read: float | None = None
        """When the state was last read (monotonic)."""
        self.last_read_at: datetime | None = None
        """When the state was last read (UTC)."""
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._lost_mono = 0.0
        self.lost = False
        """The pool is held because the state was not read for ``after`` seconds."""
        self.losses = 0
        """Times the pool was held for it."""

    @property
    def holding(self) -> bool:
        """This policy holds pools (``hold``), rather than keeping the applied state."""
        return self.mode == "hold"

    def on_read(self) -> None:
        """The sync loop read the state hash (after the applier had it): release the hold, and
        arm the deadline of the next loss."""
        now = time.monotonic()
        self._last_read = now
        self.last_read_at = now_utc()
        if self.lost:
            self.lost = False
            held_for = now - self._lost_mono
            pool = self._pool
            control = self._applier.control
            control.lost = None
            control.refresh()
            log.info("fleet %s replica %s: read the fleet state again: released the "
                     "control-plane hold after %.1f s at v%d (%s): %d in flight, %d queued, "
                     "%d losses", self._fleet, self._replica_id, held_for,
                     self._applier.applied_version,
                     "paused" if self._applier.fleet_held else "running",
                     pool.in_flight, pool.queued, self.losses)
        if self.holding and self._timer is None and not self._closed:
            self._arm(now + self.after)

    def close(self) -> None:
        """The controller stops: no hold from now on (one that is on stays on: stopping a
        controller never resumes a pool)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------------ the deadline

    def _arm(self, due: float) -> None:
        loop = asyncio.get_running_loop()
        # the loop's clock is time.monotonic(); convert in case a loop uses another
        self._timer = loop.call_at(loop.time() + max(0.0, due - time.monotonic()), self._check)

    def _check(self) -> None:
        self._timer = None
        last = self._last_read
        if self._closed or last is None or self.lost:
            return
        now = time.monotonic()
        due = last + self.after
        if now < due:  # read again since the timer was armed
            self._arm(due)
            return
        if not self._applier.synced:
            return  # still the start's "syncing" hold: that one is released by an apply
        self.lost = True
        self._lost_mono = now
        self.losses += 1
        pool = self._pool
        control = self._applier.control
        control.lost = f"control plane lost since {format_time(self.last_read_at)}"
        control.refresh()
        log.info("fleet %s replica %s: the fleet state was not read for %.1f s "
                 "(control_loss=hold): holding the pool at v%d (%s): %d in flight, %d queued, "
                 "%d losses", self._fleet, self._replica_id, now - last,
                 self._applier.applied_version,
                 "paused" if self._applier.fleet_held else "running",
                 pool.in_flight, pool.queued, self.losses)


__all__ = ["ControlLoss"]
