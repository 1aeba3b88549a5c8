"""The Redis keys and channels of one fleet (``Keys``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from replica.contract.names import validate_fleet, validate_replica_id

FLEETS_KEY: Final = "fleetgate:fleets"
"""Sorted set: every fleet name on this Redis, scored by its last activity (ms since the epoch:
a change, a replica's start, its heartbeat now and then). Not a fleet's key (no hash tag): on a
cluster it is one key in a slot of its own, so it never goes in a script with a fleet's keys.
``fleetgate fleets`` and ``GET /api/fleets`` list fleets from it, without SCAN or KEYS."""

FLEETS_CHANGED_KEY: Final = "fleetgate:fleets:changed"
"""Sorted set: every fleet a coordinator changed (paused, resumed, a hold), scored by the time
of its last change (ms since the epoch). Written only by coordinators: the replica ACL lets a
replica ``ZADD`` ``fleetgate:fleets`` (that exact key) and nothing else, so names replicas
announce never crowd a fleet that has a state out of the listings (``fleetgate fleets``,
``GET /api/fleets``, ``/metrics``, the watcher, the notifier). No hash tag, as
``FLEETS_KEY``."""


@dataclass(frozen=True, slots=True)
class Keys:
    """The Redis keys and channels of one fleet."""

    fleet: str

    def __post_init__(self) -> None:
        validate_fleet(self.fleet)

    @property
    def prefix(self) -> str:
        return f"fleetgate:{{{self.fleet}}}"

    @property
    def state(self) -> str:
        return f"{self.prefix}:state"

    @property
    def control(self) -> str:
        return f"{self.prefix}:control"

    @property
    def acks(self) -> str:
        return f"{self.prefix}:acks"

    @property
    def replicas(self) -> str:
        return f"{self.prefix}:replicas"

    def replica(self, replica_id: str) -> str:
        return f"{self.prefix}:replica:{validate_replica_id(replica_id)}"

    @property
    def audit(self) -> str:
        return f"{self.prefix}:audit"

    @property
    def events(self) -> str:
        """Stream: what the coordinator observed and announces, beside the audit trail of
        changes (``overdue``: a forgotten pause; ``wait``: a wait that ended with stragglers)."""
        return f"{self.prefix}:events"

    @property
    def alerted(self) -> str:
        """Hash: alert kind (``overdue``) -> the state version it was last raised for, so two
        coordinators raise each alert once."""
        return f"{self.prefix}:alerted"

    @property
    def schedules(self) -> str:
        """Hash: schedule name -> JSON of a recurring maintenance window
        (``replica.contract.schedules``). Written by coordinators only; replicas read it."""
        return f"{self.prefix}:schedules"

    @property
    def work(self) -> str:
        return f"{self.prefix}:work"

    @property
    def limits(self) -> str:
        """Hash: the fleet's backlog limit (``max_backlog``, ``when_full``, ``by``, ``at``;
        ``replica.contract.limits``), absent without one. Written by coordinators only."""
        return f"{self.prefix}:limits"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"

    @property
    def runs(self) -> str:
        """Hash: work entry id -> runs of the handler started for it (deleted with its XACK)."""
        return f"{self.prefix}:runs"

    @property
    def demo_done(self) -> str:
        return f"{self.prefix}:demo:done"

    @property
    def demo_log(self) -> str:
        return f"{self.prefix}:demo:log"
