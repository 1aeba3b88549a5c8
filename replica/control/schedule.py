"""HoldSchedule: the applied state on the replica's own clock.

A fleet's state changes with no new version when its time comes: a hold's ``starts_at`` and
``auto_resume_at`` (and a legacy pause's ``auto_resume_at``) are honoured on the replica's own
clock. ``follow()`` makes the pool's fleet holds what the applied state says now and plans
the next change; the sync loop wakes at ``next_due()`` and ``resume_due()`` re-evaluates the
applied state. When the last hold goes, a staggered resume waits an offset derived from the
replica id, spread evenly over the window once the peer list is read (``on_peers``; until
then, the end of the window: never too early). ``check_overdue()`` logs, once per pause, items
still in flight ``pause_timeout`` after it.

Which state is applied is the ``StateApplier``'s business (``replica.control.applier``, the
version rules, which owns this schedule and calls it); this part only says when the applied
one changes by itself. Everything here runs synchronously: what has to go to Redis is left in
the ``Outbox``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from replica.contract import ACK_QUIET, ACK_RESUMED, FleetState, clock, now_utc, stagger_offset
from replica.control.fleetholds import FleetHolds, condition, hold_names, pause_end
from replica.control.outbox import Outbox
from replica.control.scope import HoldScope
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)


class HoldSchedule:
    """When the applied state of one replica of ``fleet`` starts or ends a hold, or resumes."""

    def __init__(
        self, pool: PausablePool, holds: FleetHolds, outbox: Outbox, fleet: str, replica_id: str,
        scope: HoldScope | None = None,
    ) -> None:
        self.scope = scope or HoldScope({}, fleet, replica_id)
        """Which holds hold this replica (a hold's selector, a canary resume)."""
        self._pool = pool
        self._holds = holds
        self._outbox = outbox
        self._fleet = fleet
        self._replica_id = replica_id
        self.applying = False
        """The fleet's holds are being changed (by an apply or by the clock): the pool's events
        wait for the one kick at the end (``StateApplier.on_pool_event``)."""
        self.resume_at: datetime | None = None
        """When a pending staggered or automatic resume is due, or None."""
        self._resume_from: datetime | None = None
        """The start of that resume's stagger window."""
        self.transition_at: datetime | None = None
        """When the applied state next changes by itself (a hold starts or ends), or None."""
        self.pending_stagger: FleetState | None = None
        """A staggered resume waiting for the peer list (the sync loop reads it)."""

    @property
    def fleet_held(self) -> bool:
        return self._holds.held

    def follow(self, state: FleetState, now: datetime, now_text: str, applied: bool) -> None:
        """Make the fleet's pool holds what ``state`` says at ``now`` (``applied``: it was just
        applied; else the clock moved on), and plan the next wake. Only the holds that hold
        this replica count (``HoldScope``)."""
        state = self.scope.mine(state)
        self.transition_at = state.next_transition(now)
        if state.effectively_paused(now):
            if self._holds.follow(state.active_holds(now), now, now_text) and not applied \
                    and self._pool.in_flight == 0:
                self._outbox.acks.add(ACK_QUIET)  # a window started: quiet, as for a pause
            end = pause_end(state, now)
            if end is None:
                self.resume_at = self._resume_from = self.pending_stagger = None
            elif applied or end != self._resume_from or self.resume_at is None:
                self._schedule_resume(state, end, now)
        elif self.fleet_held:
            if applied or self.resume_at is None:
                self._schedule_resume(state, state.resume_start(now) or now, now)
        else:
            self.resume_at = self._resume_from = self.pending_stagger = None

    def on_peers(self, applied: FleetState | None, peers: list[str] | None) -> None:
        """The live replicas of the fleet (None: the read failed) for a pending stagger of the
        ``applied`` state."""
        state = self.pending_stagger
        if state is None or applied is None or state is not self.scope.mine(applied):
            return
        self.pending_stagger = None
        if peers is not None and self._replica_id not in peers:
            peers.append(self._replica_id)
        now = now_utc()
        start = self._resume_from or now
        offset = stagger_offset(self._replica_id, state.resume_stagger_s, peers)
        if self.fleet_held:
            log.info("fleet %s replica %s: staggered resume, %.1f s into a %.0f s window "
                     "(%s)", self._fleet, self._replica_id, offset, state.resume_stagger_s,
                     f"{len(peers)} replicas" if peers is not None else "offset from the id")
            self._set_resume_at(start, offset, now)
            if not self.fleet_held:
                self._outbox.acks.add(ACK_RESUMED)

    # ------------------------------------------------------------------ resumes

    def _schedule_resume(self, state: FleetState, start: datetime, now: datetime) -> None:
        """Resume at ``start`` plus this replica's stagger offset (now if that is past)."""
        self._resume_from = start
        window = state.resume_stagger_s
        if window > 0 and start + timedelta(seconds=window) > now:
            # Spreading evenly needs the peer list: the sync loop reads it and calls
            # on_peers; until then, wait for the end of the window (never too early).
            self.pending_stagger = state
            self._set_resume_at(start, window, now)
            self._outbox.wake.set()
            return
        self.pending_stagger = None
        self._set_resume_at(start, 0.0, now)  # no stagger, or the window is already over

    def _set_resume_at(self, start: datetime, offset: float, now: datetime) -> None:
        due = start + timedelta(seconds=offset)
        # a clock ahead of ours must not stretch the wait past the offset itself
        due = min(due, now + timedelta(seconds=offset)) if start <= now else due
        if due <= now:
            self.resume_at = None
            self._release(now)
        else:
            self.resume_at = due
            self._outbox.wake.set()

    def _release(self, now: datetime) -> None:
        if not self.fleet_held:
            return
        self.resume_at = self._resume_from = None
        self._holds.release_all()
        self._outbox.record_dirty = True

    def resume_due(self, state: FleetState | None) -> None:
        """At every wake of the sync loop, for the applied ``state``: a hold that starts or
        ends now (no new version) changes the pool's holds, and a pending resume that is due
        releases the fleet's holds."""
        now, now_text = clock()
        if state is None:
            return
        state = self.scope.mine(state)
        holds = self._holds
        was_held, before = self.fleet_held, holds.holds
        if self.transition_at is not None and now >= self.transition_at:
            self.applying = True
            try:
                self.follow(state, now, now_text, applied=False)
            finally:
                self.applying = False
            if holds.holds != before:
                log.info("fleet %s replica %s: a fleet hold started or ended by the clock "
                         "(v%d): %s: %d in flight, %d queued", self._fleet, self._replica_id,
                         state.version, condition(state, now, holds.holds, self.resume_at),
                         self._pool.in_flight, self._pool.queued)
        due = self.resume_at
        if due is not None and now >= due:
            self.resume_at = self.pending_stagger = None
            if not state.effectively_paused(now):
                log.info("fleet %s replica %s: resuming at v%d (%s %s): %d queued",
                         self._fleet, self._replica_id, state.version,
                         hold_names(holds.holds), "released or ended", self._pool.queued)
                self._release(now)
        if was_held and not self.fleet_held:
            self._outbox.acks.add(ACK_RESUMED)
        if holds.holds != before:
            self._outbox.record_dirty = True
            self._outbox.kick()

    # ------------------------------------------------------------------ timers

    def next_due(self, now: float) -> float | None:
        """When (monotonic time, from ``now``) a hold of the applied state starts or ends, a
        pending resume falls due or a pause runs over ``pause_timeout``: the sync loop wakes
        then. None when none is pending."""
        wall = now_utc()
        wakes = [now + max(0.0, (at - wall).total_seconds())
                 for at in (self.resume_at, self.transition_at) if at is not None]
        overdue = self._holds.overdue_at()
        return min([*wakes, overdue] if overdue is not None else wakes, default=None)

    def check_overdue(self) -> None:
        """Log, once per pause, items still in flight ``pause_timeout`` after it."""
        self._holds.check_overdue(self._fleet, self._replica_id)


__all__ = ["HoldSchedule"]
