"""RecurringHolds: a replica's copy of its fleet's schedules, merged into the applied state.

The sync loop reads the schedules hash (``Keys.schedules``) with a poll whose state hash says
they changed (``schedules_version``, ``replica.control.roundtrip``), and at once when
the control channel says they changed (``{"fleet", "schedules"}``). ``update()`` keeps what
it read: an entry that cannot be read is skipped, counted (``invalid``) and logged once, the
others still apply. A key that cannot be read at all (another type) is the ``schedules``
fault of the sync loop: the pool is held by ``control-plane`` (the replica cannot tell whether
a window is open).

``merge(state, now)`` is the applied state with each schedule's occurrence in force at
``now`` (or its next one) as a hold (``replica.contract.schedules.with_schedules``): the
applier's ``HoldSchedule`` starts and ends it on the replica's own clock like a one-off window.
The merge is remembered until the first of those occurrences ends (``until``), when the next
one takes its place; the same object comes back meanwhile (the stagger's peers check it by
identity).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from replica.contract.schedules import Schedule, schedules_from_hash, with_schedules
from replica.contract.state import FleetState

log = logging.getLogger(__name__)


class RecurringHolds:
    """The schedules one replica of ``fleet`` follows, and their merge into its state."""

    def __init__(self, fleet: str, replica_id: str) -> None:
        self._fleet = fleet
        self._replica_id = replica_id
        self.schedules: tuple[Schedule, ...] = ()
        self.generation = 0
        """Counts changes of ``schedules``."""
        self.invalid = 0
        """Schedule entries skipped because they could not be read (each read counts)."""
        self._logged: set[tuple[str, str]] = set()
        self._merged: FleetState | None = None
        self._merged_from: tuple[FleetState, int] | None = None
        self.until: datetime | None = None
        """When the remembered merge stops being the one (the first occurrence's end)."""

    def update(self, raw: Mapping[Any, Any]) -> bool:
        """The hash as a poll read it; True when the schedules changed."""
        found = schedules_from_hash(raw)
        for name, why in found.unreadable:
            self.invalid += 1
            if (name, why) not in self._logged:
                self._logged.add((name, why))
                log.warning("fleet %s replica %s: skipped schedule %r, which cannot be read "
                            "(%s); the others apply", self._fleet, self._replica_id, name, why)
        if found.schedules == self.schedules:
            return False
        before = {s.name for s in self.schedules}
        self.schedules = found.schedules
        self.generation += 1
        self._merged = self._merged_from = None
        now_names = {s.name for s in self.schedules}
        log.info("fleet %s replica %s: schedules now %s (added %s, removed %s)",
                 self._fleet, self._replica_id, ", ".join(sorted(now_names)) or "none",
                 ", ".join(sorted(now_names - before)) or "none",
                 ", ".join(sorted(before - now_names)) or "none")
        return True

    def merge(self, state: FleetState, now: datetime) -> FleetState:
        """``state`` with the schedules' occurrences as holds (``state`` itself without
        schedules)."""
        if not self.schedules:
            return state
        key = (state, self.generation)
        cached = self._merged
        if cached is not None and self._merged_from is not None \
                and self._merged_from[0] is state and self._merged_from[1] == self.generation \
                and (self.until is None or now < self.until):
            return cached
        merged, until = with_schedules(state, self.schedules, now)
        self._merged, self._merged_from, self.until = merged, key, until
        return merged

    def fresh(self, state: FleetState | None, now: datetime) -> bool:
        """Whether the remembered merge of ``state`` is still the one at ``now`` (False: the
        next ``merge`` makes a new one, which the caller must follow)."""
        if state is None or not self.schedules:
            return True
        return (self._merged_from is not None and self._merged_from[0] is state
                and self._merged_from[1] == self.generation
                and (self.until is None or now < self.until))


__all__ = ["RecurringHolds"]
