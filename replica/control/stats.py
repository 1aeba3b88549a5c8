"""What a controller shows: ``ControllerStats`` and ``ControllerView``.

``ControllerStats`` is a snapshot of one controller's counters (the replica service exports
them as metrics; ``FleetController.stats()``). ``ControllerView`` is the read-only face of a
``FleetController`` (``replica.control.controller``, which derives from it): its options in
effect and what its parts know right now (connected, synced, the applied state, a pending
resume, a fault), each read from the part that owns it. The lifecycle (start, stop, the tasks)
is the controller's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from replica.contract import FleetState, Keys
from replica.control.applier import StateApplier
from replica.control.channel import ControlChannel
from replica.control.faults import ControlFaults
from replica.control.loss import ControlLoss
from replica.control.options import ControllerSettings, ControlLossMode
from replica.control.outbox import Outbox
from replica.control.sync import SyncLoop


@dataclass(frozen=True, slots=True)
class ControllerStats:
    """A snapshot of a controller's counters (the replica service exports them as metrics)."""

    fleet: str
    replica_id: str
    connected: bool
    applied_version: int
    fleet_held: bool
    invalid_messages: Mapping[str, int]
    """Ignored control messages, by kind (``not_json``, ``oversized``, ``unknown_fleet``...)."""
    restores: int
    """State hashes this replica put back after Redis forgot them."""
    restore_failures: int
    """Restores that failed (NOPERM under the replica ACL, or an error)."""
    reconnects: int
    """Times the control channel came back after being lost."""
    polls: int
    poll_failures: int
    pushes: int
    """Valid control messages received."""
    applied: int
    """States applied (from pushes, polls or the replica's own clock)."""
    stale_ignored: int
    """States ignored because their version was older than the one applied."""
    heartbeats: int
    write_failures: int
    """Record writes or acknowledgements Redis refused (an ACL, a read-only server)."""
    last_poll_at: datetime | None
    propagation: float | None
    """Seconds from the state's change to this replica applying it (last value)."""
    control_lost: bool = False
    """The pool is held because the state was not read for ``control_loss_after``
    (``control_loss="hold"``)."""
    control_losses: int = 0
    """Times the pool was held for that."""
    control_error: str | None = None
    """What broke while a fault of a loop holds the pool (``replica.control.faults``)."""
    control_faults: int = 0
    """Times a loop went from working to failing on an error it did not expect."""


class ControllerView:
    """The properties and the ``stats()`` of a ``FleetController``, read from its parts."""

    _settings: ControllerSettings
    _fleet: str
    _replica_id: str
    _keys: Keys
    _outbox: Outbox
    _applier: StateApplier
    _faults: ControlFaults
    _channel: ControlChannel
    _loss: ControlLoss
    _sync: SyncLoop

    @property
    def settings(self) -> ControllerSettings:
        """The options in effect (derived ones filled in)."""
        return self._settings

    @property
    def poll_interval(self) -> float:
        return self._settings.poll_interval

    @property
    def heartbeat_interval(self) -> float:
        return self._settings.heartbeat_interval

    @property
    def host(self) -> str:
        return self._settings.host_name

    @property
    def pause_timeout(self) -> float:
        return self._settings.pause_timeout

    @property
    def io_timeout(self) -> float:
        return self._settings.round_trip_timeout

    @property
    def start_timeout(self) -> float:
        return self._settings.start_timeout

    @property
    def reconnect_cap(self) -> float:
        return self._settings.reconnect_cap

    @property
    def control_loss(self) -> ControlLossMode:
        """``keep`` (fail-static) or ``hold`` (hold the pool once the state goes unread)."""
        return self._settings.control_loss

    @property
    def control_loss_after(self) -> float:
        """Seconds without a read of the state before ``hold`` holds the pool."""
        return self._loss.after

    @property
    def control_lost(self) -> bool:
        """The pool is held because the state was not read for ``control_loss_after``."""
        return self._loss.lost

    @property
    def fleet(self) -> str:
        return self._fleet

    @property
    def replica_id(self) -> str:
        return self._replica_id

    @property
    def keys(self) -> Keys:
        return self._keys

    @property
    def connected(self) -> bool:
        """Subscribed to the control channel and the last round trip to Redis succeeded."""
        return self._sync.connected

    @property
    def synced(self) -> bool:
        """The state was read at least once (the syncing hold is off)."""
        return self._applier.synced

    @property
    def applied_version(self) -> int:
        return self._applier.applied_version

    @property
    def applied_state(self) -> FleetState | None:
        return self._applier.applied

    @property
    def resume_at(self) -> datetime | None:
        """When a pending staggered or automatic resume is due, or None."""
        return self._applier.resume_at

    @property
    def pubsub_ping_interval(self) -> float:
        """An idle subscription is pinged after this long, and replaced when its ping goes
        unanswered as long."""
        return self._channel.ping_interval

    @property
    def fleet_held(self) -> bool:
        """The pool is held by the fleet (sources ``fleet`` and ``fleet:NAME``)."""
        return self._applier.fleet_held

    @property
    def subscribed(self) -> bool:
        """Subscribed to the control channel right now (``connected`` also needs Redis to
        have answered the last round trip)."""
        return self._channel.subscribed

    @property
    def control_error(self) -> str | None:
        """What broke while a fault of a loop holds the pool (``replica.control.faults``), or
        None."""
        return self._faults.reason

    def stats(self) -> ControllerStats:
        applier = self._applier
        sync = self._sync
        return ControllerStats(
            fleet=self._fleet,
            replica_id=self._replica_id,
            connected=sync.connected,
            applied_version=applier.applied_version,
            fleet_held=applier.fleet_held,
            invalid_messages=dict(applier.invalid),
            restores=sync.restores,
            restore_failures=sync.restore_failures,
            reconnects=self._channel.reconnects,
            polls=sync.polls,
            poll_failures=sync.poll_failures,
            pushes=applier.pushes,
            applied=applier.applied_count,
            stale_ignored=applier.stale_ignored,
            heartbeats=self._outbox.heartbeats,
            write_failures=sync.write_failures,
            last_poll_at=sync.last_poll_at,
            propagation=applier.propagation,
            control_lost=self._loss.lost,
            control_losses=self._loss.losses,
            control_error=self._faults.reason,
            control_faults=self._faults.episodes,
        )


__all__ = ["ControllerStats", "ControllerView"]
