"""HoldScope: which of the fleet's holds hold this replica (its labels, its id).

A hold with a ``select`` holds only the replicas whose labels match it, and a canary resume
releases a hold on the replicas it names (``replica.contract.holds.hold_applies``). The
replica follows, from its first read, the holds that hold it: ``mine(state)`` is the applied
state with the others left out, which the hold schedule follows. Labels are fixed for the
life of the process (``FLEETGATE_LABELS``), so a replica whose labels change at a restart
follows the holds matching its new labels from its first read.

A ``select`` that cannot be read (a hand edit of the state) holds this replica (fail closed):
logged once per hold and text, and counted in ``unreadable`` (metric
``fleetgate_hold_select_unreadable_total``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from replica.contract import FleetState
from replica.contract.holds import select_error

log = logging.getLogger(__name__)


class HoldScope:
    """The labels and id of one replica, and the applied state as it holds it."""

    def __init__(self, labels: Mapping[str, str], fleet: str, replica_id: str) -> None:
        self.labels = dict(labels)
        self._fleet = fleet
        self._replica_id = replica_id
        self.unreadable = 0
        """Applied states with a hold whose ``select`` could not be read (held here)."""
        self._logged: set[tuple[str, str]] = set()
        self._last: tuple[FleetState, FleetState] | None = None

    def mine(self, state: FleetState) -> FleetState:
        """``state`` with only the holds that hold this replica (the same object for the same
        state, so a pending stagger is recognised)."""
        last = self._last
        if last is not None and last[0] is state:
            return last[1]
        for hold in state.holds or ():
            why = select_error(hold)
            if why is not None:
                self.unreadable += 1
                if (hold.name, hold.select or "") not in self._logged:
                    self._logged.add((hold.name, hold.select or ""))
                    log.warning("fleet %s replica %s: hold %s has a select that cannot be "
                                "read (%s): it holds this replica (fail closed)",
                                self._fleet, self._replica_id, hold.name, why[:200])
        scoped = state.for_replica(self.labels, self._replica_id)
        self._last = (state, scoped)
        return scoped


__all__ = ["HoldScope"]
