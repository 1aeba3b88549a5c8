"""StateApplier: applies the fleet's states to a pool, by the version rules.

A state comes from a push on the control channel, from a poll of the state hash, or from the
replica's own clock (an automatic or staggered resume falling due). The rules, in the order
they matter:

* The fleet's holds are pool holds of sources ``fleet`` (the hold ``default``, or a state
  without holds) and ``fleet:NAME`` (``replica.control.fleetholds``); other sources stay
  independent.
* Until the first state is applied the pool is held by ``control-plane`` ("syncing"; the
  controller puts that hold on at start, the first apply takes it off).
* A state older than the one applied is ignored (a late poll never undoes a newer pause). A
  poll result with the applied version but other content (the hash edited by hand) applies.
* A state hash that is missing, or older than what was applied although nothing was applied
  since the poll was sent (Redis lost writes), is restored from the applied state (by the sync
  loop). A pause is never replaced by a running state and a version never goes back: an older
  pause found while running is not applied, the restore keeps it with its version raised above
  the applied one, and the next poll applies that. A replica that may not run the restore (the
  replica ACL) applies the older pause itself (safety first).
* A hold's ``starts_at`` and ``auto_resume_at`` (and a legacy pause's ``auto_resume_at``) are
  honoured on the replica's own clock, with no new version, and when the last hold goes a
  staggered resume waits an offset derived from the replica id: the applier's
  ``HoldSchedule`` (``replica.control.schedule``) does that, for the state applied here
  (``next_due()``, ``resume_due()`` and ``on_peers()`` pass the applied state to it).
* Invalid control messages are ignored, logged once per kind and counted.

Everything here runs synchronously (a push straight from the transport): what has to go to
Redis is left in the ``Outbox``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from replica.contract import (
    ACK_APPLIED,
    ACK_QUIET,
    FleetState,
    clock,
    now_utc,
)
from replica.contract.schedules import schedules_notice
from replica.control.faults import ControlHold
from replica.control.fleetholds import FleetHolds, condition
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.control.recurring import RecurringHolds
from replica.control.schedule import HoldSchedule
from replica.control.scope import HoldScope
from replica.errors import InvalidMessage
from replica.pool.pool import PausablePool
from replica.process.tracing import FLEET, HOLDS, REPLICA, REPLICA_TRACER, VERSION, span

log = logging.getLogger(__name__)

StateListener = Callable[[FleetState, "float | None"], Any]
"""Called with each applied state and its propagation delay in seconds (None when unknown)."""


@functools.lru_cache(maxsize=16)
def _parse_push(data: str | bytes, fleet: str) -> FleetState:
    """A control message parsed once per process, however many controllers receive it (a
    FleetState is immutable, so they can share it). Raises InvalidMessage."""
    return FleetState.from_json(data, fleet)


def _check_utf8(raw: Mapping[Any, Any]) -> None:
    """Raise ``InvalidMessage`` (kind ``not_utf8``) when a field or value of a state hash
    read as bytes is not UTF-8: it is not the fleet's state (decoding it with replacement
    characters would apply a guess)."""
    for k, v in raw.items():
        for part in (k, v):
            if isinstance(part, bytes):
                try:
                    part.decode()
                except UnicodeDecodeError as exc:
                    name = k.decode(errors="replace") if isinstance(k, bytes) else str(k)
                    raise InvalidMessage(
                        "not_utf8", f"field {name[:40]!r} of the state hash is not UTF-8 "
                        f"(byte {exc.start})") from None


@functools.lru_cache(maxsize=16)
def _state_json(state: FleetState) -> str:
    return state.to_json()


class StateApplier:
    """The applied state of one replica of ``fleet``, and the pool holds that follow it."""

    def __init__(
        self,
        pool: PausablePool,
        record: ReplicaRecord,
        outbox: Outbox,
        fleet: str,
        replica_id: str,
        *,
        pause_timeout: float,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self._pool = pool
        self._record = record
        self._outbox = outbox
        self._fleet = fleet
        self._replica_id = replica_id
        self.holds = FleetHolds(pool, record, pause_timeout)
        """The pool holds that stand for the fleet's active holds."""
        self.control = ControlHold(pool)
        """The pool's ``control-plane`` hold (syncing, control loss, a fault)."""
        self.scope = HoldScope(labels or {}, fleet, replica_id)
        """Which of the fleet's holds hold this replica (its labels, a canary resume)."""
        self.schedule = HoldSchedule(pool, self.holds, outbox, fleet, replica_id, self.scope)
        """When the applied state starts or ends a hold, or resumes, by the clock."""
        self.recurring = RecurringHolds(fleet, replica_id)
        """The fleet's schedules: each occurrence is a hold merged into the applied state."""
        self.listeners: list[StateListener] = []

        self.applied: FleetState | None = None
        self.apply_seq = 0
        """Counts applies: a poll result older than the applied state although this did not
        move since the poll was sent means Redis lost writes."""
        self.synced = False
        """A state was applied at least once (the syncing hold is off)."""
        self.restore_refused = False
        """The restore script was refused (the replica ACL): an older pause then applies."""
        self.unreadable: InvalidMessage | None = None
        """Why the last poll's state hash could not be read (None: it could): the sync loop
        holds the pool until one can (the replica cannot tell whether its fleet is paused)."""
        self._older_pause: tuple[FleetState, int] | None = None
        self._fallback_logged = False

        # counters
        self.invalid: dict[str, int] = {}
        self.pushes = 0
        self.applied_count = 0
        self.stale_ignored = 0
        self.propagation: float | None = None

    @property
    def applied_version(self) -> int:
        return self.applied.version if self.applied is not None else 0

    @property
    def fleet_held(self) -> bool:
        """The pool is held by the fleet (sources ``fleet`` and ``fleet:NAME``)."""
        return self.holds.held

    @property
    def resume_at(self) -> datetime | None:
        """When a pending staggered or automatic resume is due, or None."""
        return self.schedule.resume_at

    @property
    def transition_at(self) -> datetime | None:
        """When the applied state next changes by itself (a hold starts or ends), or None."""
        return self.schedule.transition_at

    @property
    def pending_stagger(self) -> FleetState | None:
        """A staggered resume waiting for the peer list (the sync loop reads it)."""
        return self.schedule.pending_stagger

    # ------------------------------------------------------------------ inputs

    def on_push(self, data: Any) -> None:
        """A message of the control channel (straight from the transport)."""
        try:
            state = _parse_push(data, self._fleet)
        except InvalidMessage as exc:
            if exc.kind == "missing_field" and schedules_notice(data, self._fleet):
                self._outbox.poll_due = True  # the schedules changed: read them now
                self._outbox.wake.set()
                return
            self._count_invalid(exc)
            return
        self.pushes += 1
        self.consider(state, "push")

    def on_poll(self, raw: Mapping[Any, Any], poll_seq: int) -> None:
        """The state hash as read by a poll sent when ``apply_seq`` was ``poll_seq``. A hash
        that cannot be read (bytes that are not UTF-8, a value edited by hand that means
        nothing) is counted and left in ``unreadable``."""
        self.unreadable = None
        if not raw:
            if self.applied is not None and self.applied.version > 0:
                self.request_restore("the state hash is missing")
                return
            self.consider(FleetState.initial(self._fleet), "poll", poll_seq)
            return
        try:
            _check_utf8(raw)
            state = FleetState.from_hash(self._fleet, raw)
        except InvalidMessage as exc:
            self._count_invalid(exc)
            self.unreadable = exc
            return
        self.consider(state, "poll", poll_seq)

    def on_pool_event(self, event: str) -> None:
        """A pool listener: the record changes with the pool; quiet under a pause is acked."""
        if event == "quiet" and self.fleet_held:
            if self.holds.quiet_at is None or not self.schedule.applying:
                self.holds.set_quiet_at(*clock())
            self._outbox.acks.add(ACK_QUIET)
        outbox = self._outbox
        outbox.record_dirty = True
        if not self.schedule.applying:
            outbox.kick()

    def _count_invalid(self, exc: InvalidMessage) -> None:
        first = exc.kind not in self.invalid
        self.invalid[exc.kind] = self.invalid.get(exc.kind, 0) + 1
        if first:
            log.warning("fleet %s replica %s: ignored an invalid control message (%s: %s); "
                        "further ones of this kind are only counted",
                        self._fleet, self._replica_id, exc.kind, exc.detail[:120])

    # ------------------------------------------------------------------ the version rules

    def consider(self, state: FleetState, source: str, poll_seq: int | None = None) -> None:
        """Apply ``state`` if it is newer than the applied one (see the module's rules)."""
        cur = self.applied
        if cur is not None:
            if state.version == cur.version:
                if source != "poll" or state.same_content(cur):
                    return
                log.info("fleet %s: the state hash changed without a version bump (v%d): "
                         "applying it", self._fleet, state.version)
            elif state.version < cur.version:
                if source != "poll" or poll_seq != self.apply_seq:
                    self.stale_ignored += 1
                    log.debug("fleet %s: ignored v%d from %s (applied v%d)",
                              self._fleet, state.version, source, cur.version)
                    return
                # The hash went back in time although nothing was applied since the poll was
                # sent: Redis lost writes. Put ours back; an older pause is kept by the restore
                # with its version raised above ours (the next poll applies it), or, when this
                # replica may not restore, applied as it is (a pause still wins).
                older_pause = state.effectively_paused() and not cur.effectively_paused()
                if not older_pause or not self.restore_refused:
                    self.stale_ignored += 1
                    self._older_pause = (state, self.apply_seq) if older_pause else None
                    self.request_restore(f"the state hash went back to v{state.version}")
                    return
                self._apply_older_pause(state, cur)
                return
        self._apply(state, source)

    def on_restore_refused(self) -> None:
        """The sync loop's restore was refused (the replica ACL): from now on an older pause
        applies as it is, and one held back since the poll that found it applies now."""
        self.restore_refused = True
        held = self._older_pause
        self._older_pause = None
        cur = self.applied
        if held is not None and held[1] == self.apply_seq and cur is not None:
            self._apply_older_pause(held[0], cur)

    def _apply_older_pause(self, state: FleetState, cur: FleetState) -> None:
        if not self._fallback_logged:
            self._fallback_logged = True
            log.warning("fleet %s replica %s: the state hash went back to v%d (applied v%d) "
                        "and is paused, and this replica may not restore it: applying the "
                        "older pause (further ones are not logged)", self._fleet,
                        self._replica_id, state.version, cur.version)
        self._apply(state, "poll")

    def request_restore(self, why: str) -> None:
        if not self._outbox.restore_due:
            log.warning("fleet %s replica %s: %s after v%d was applied: restoring it",
                        self._fleet, self._replica_id, why, self.applied_version)
        self._outbox.restore_due = True
        self._outbox.wake.set()

    def _apply(self, state: FleetState, source: str) -> None:
        # A span per state applied (OpenTelemetry, when installed): joined to the change that
        # made the state by fleetgate.fleet and fleetgate.version.
        with span(REPLICA_TRACER, "fleetgate.apply", {
            FLEET: self._fleet, VERSION: state.version, REPLICA: self._replica_id,
            "fleetgate.source": source,
        }) as traced:
            self.schedule.applying = True
            try:
                propagation = self._apply_state(state, source)
            finally:
                self.schedule.applying = False
            if traced.recording:
                traced.update({
                    "fleetgate.paused": self.fleet_held,
                    HOLDS: [h.name for h in state.active_holds()],
                    "fleetgate.propagation_s": propagation,
                })
        self._outbox.kick()

    def _apply_state(self, state: FleetState, source: str) -> float | None:
        """Apply ``state``; returns its propagation delay in seconds (None: unknown, or the
        applied version again)."""
        prev = self.applied
        self._older_pause = None
        now, now_text = clock()
        self.applied = state
        self._record.set_applied(state.version, _state_json(state), now_text)
        self.apply_seq += 1
        self.applied_count += 1
        changed = state.changed_at or state.since
        propagation: float | None = None
        if changed is not None and (prev is None or prev.version != state.version):
            propagation = max(0.0, (now - changed).total_seconds())
            self.propagation = propagation
        pool = self._pool
        self.schedule.follow(self.recurring.merge(state, now), now, now_text, applied=True)
        if self.synced is False:
            self.synced = True
            self.control.syncing = False
            self.control.refresh()
        outbox = self._outbox
        outbox.acks.add(ACK_APPLIED)
        outbox.record_dirty = True
        if log.isEnabledFor(logging.INFO):
            log.info(
                "fleet %s replica %s: applied v%d from %s: %s: %d in flight, %d queued%s",
                self._fleet, self._replica_id, state.version, source,
                condition(state, now, self.holds.holds, self.resume_at), pool.in_flight,
                pool.queued,
                "" if propagation is None else f", {propagation * 1000:.0f} ms after the change",
            )
        for listener in list(self.listeners):
            try:
                listener(state, propagation)
            except Exception:
                log.exception("fleet %s: a state listener failed", self._fleet)
        return propagation

    # ------------------------------------------------------------------ the clock

    def on_peers(self, peers: list[str] | None) -> None:
        """The live replicas of the fleet (None: the read failed) for a pending stagger."""
        applied = self.applied
        self.schedule.on_peers(
            None if applied is None else self.recurring.merge(applied, now_utc()), peers)

    def resume_due(self) -> None:
        """Called by the sync loop at every wake: a hold of the applied state that starts or
        ends now changes the pool's holds, and a pending resume that is due releases them."""
        state = self.applied
        if state is not None and self.recurring.schedules:
            now = now_utc()
            if not self.recurring.fresh(state, now):
                self.schedule.transition_at = now  # an occurrence ended: follow the next one
            state = self.recurring.merge(state, now)
        self.schedule.resume_due(state)

    def on_schedules(self, raw: Mapping[Any, Any]) -> None:
        """The schedules hash as a poll read it (before the state): when they changed, the
        applied state is followed again with them."""
        if not self.recurring.update(raw) or self.applied is None:
            return
        now, now_text = clock()
        state = self.recurring.merge(self.applied, now)
        self.schedule.applying = True
        try:
            self.schedule.follow(state, now, now_text, applied=True)
        finally:
            self.schedule.applying = False
        log.info("fleet %s replica %s: schedules changed (v%d): %s: %d in flight, %d queued",
                 self._fleet, self._replica_id, state.version,
                 condition(state, now, self.holds.holds, self.resume_at), self._pool.in_flight,
                 self._pool.queued)
        self._outbox.record_dirty = True
        self._outbox.kick()

    def next_due(self, now: float) -> float | None:
        """When (monotonic time, from ``now``) the sync loop wakes for the clock, or None."""
        due = self.schedule.next_due(now)
        until = self.recurring.until if self.recurring.schedules else None
        if until is not None:
            at = now + max(0.0, (until - now_utc()).total_seconds())
            due = at if due is None else min(due, at)
        return due

    def check_overdue(self) -> None:
        """Log, once per pause, items still in flight ``pause_timeout`` after it."""
        self.schedule.check_overdue()


__all__ = ["StateApplier", "StateListener"]
