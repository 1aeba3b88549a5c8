"""FleetController: follows a fleet's pause state in Redis and applies it to a PausablePool.

One controller per replica, the façade over the parts that do the work:

* ``ControlChannel`` (``replica.control.channel``): the subscription to
  ``fleetgate:{NAME}:control``; pushes are handled in its transport callback, with no task
  switch per message, and apply at once;
* ``StateApplier`` (``replica.control.applier``): the applied state and the version rules
  (newer, older and equal versions, automatic and staggered resumes, holds that start and
  end by the clock), the pool's ``fleet`` and ``fleet:NAME`` holds;
* ``SyncLoop`` (``replica.control.sync``): the loop of round trips that polls the state hash
  (the certainty: whatever came over the channel, the hash is applied), heartbeats in the same
  round trip, restores a lost state hash and is fail-static when Redis goes away;
* ``ReplicaRecord`` (``replica.control.record``) and the ``Outbox``
  (``replica.control.outbox``): what the replica writes about itself, at once on a change;
* ``ControlLoss`` (``replica.control.loss``): with ``control_loss="hold"``, the pool is held
  by ``control-plane`` ("control plane lost since ...") once the state has not been read for
  ``control_loss_after``, until it is read again.

Until the first successful read of the state the pool is held by ``control-plane``
("syncing"), so a replica that starts during a pause takes nothing. ``start()`` returns once
subscribed and synced (or with the syncing hold on, when Redis does not answer); ``stop()`` is
idempotent and returns promptly wherever the controller is, even in the middle of a Redis call.

Library code: it never configures logging nor installs signal handlers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Final

from redis.asyncio import Redis

from replica.contract import FleetState, Keys, validate_fleet, validate_replica_id
from replica.control.applier import StateApplier, StateListener
from replica.control.channel import ControlChannel
from replica.control.connect import sharded
from replica.control.faults import SYNCING_REASON, ControlFaults
from replica.control.loss import ControlLoss
from replica.control.options import DEFAULTS, ControllerSettings, ControlLossMode
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.control.redisio import Link, cancel_bounded
from replica.control.sync import SyncLoop
from replica.errors import ConfigError
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)

STOP_CLEANUP_S: Final = 0.5
"""How long ``stop()`` tries to remove the record once the tasks have ended: a Redis that does
not answer must not hold a stop up (the record expires on its own a few heartbeats later)."""


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


class FleetController:
    """Follows the fleet ``fleet`` for the pool ``pool``, as replica ``replica_id``.

    ``redis`` is a ``redis.asyncio.Redis`` client (with or without ``decode_responses``); the
    controller takes one connection of its pool for the subscription and one for the rest.
    ``extra_fields()`` may return more str fields for the replica record at each write. The
    options come as keyword arguments or all at once as ``settings`` (a
    ``ControllerSettings``), not both.
    """

    def __init__(
        self,
        pool: PausablePool,
        redis: Redis,
        fleet: str,
        replica_id: str,
        poll_interval: float = DEFAULTS.poll_interval,
        heartbeat_interval: float = DEFAULTS.heartbeat_interval,
        host: str | None = None,
        extra_fields: Callable[[], Mapping[str, Any]] | None = None,
        *,
        pause_timeout: float = DEFAULTS.pause_timeout,
        io_timeout: float | None = None,
        start_timeout: float = DEFAULTS.start_timeout,
        pubsub_ping_interval: float = DEFAULTS.pubsub_ping_interval,
        reconnect_cap: float = DEFAULTS.reconnect_cap,
        control_loss: ControlLossMode = DEFAULTS.control_loss,
        control_loss_after: float | None = DEFAULTS.control_loss_after,
        fault_fatal_after: float = DEFAULTS.fault_fatal_after,
        settings: ControllerSettings | None = None,
    ) -> None:
        options = ControllerSettings(
            poll_interval=poll_interval, heartbeat_interval=heartbeat_interval, host=host,
            pause_timeout=pause_timeout, io_timeout=io_timeout, start_timeout=start_timeout,
            pubsub_ping_interval=pubsub_ping_interval, reconnect_cap=reconnect_cap,
            control_loss=control_loss, control_loss_after=control_loss_after,
            fault_fatal_after=fault_fatal_after,
        )
        if settings is not None:
            if options != DEFAULTS:
                raise ConfigError("give the controller's options either as settings or as "
                                  "keyword arguments, not both")
            options = settings
        self._settings = s = options.resolved()
        self._pool = pool
        self._fleet = validate_fleet(fleet)
        self._replica_id = validate_replica_id(replica_id)
        self._keys = keys = Keys(fleet)
        self._link = Link(redis, keys.state)
        self._record = ReplicaRecord(
            pool, self, keys, self._replica_id, heartbeat_interval=s.heartbeat_interval,
            poll_interval=s.poll_interval, host=s.host_name, extra_fields=extra_fields,
            sharded=sharded(redis),
        )
        self._outbox = Outbox(self._link, self._record, self._fleet)
        self._applier = StateApplier(pool, self._record, self._outbox, self._fleet,
                                     self._replica_id, pause_timeout=s.pause_timeout)
        self._faults = ControlFaults(self._applier.control, self._fleet, self._replica_id,
                                     fatal_after=s.fault_fatal_after,
                                     on_change=self._on_fault_change)
        self._channel = ControlChannel(
            redis, keys.control, on_message=self._applier.on_push,
            on_subscribed=self._on_subscribed, on_lost=self._on_channel_lost,
            on_fault=self._on_channel_fault,
            ping_interval=s.pubsub_ping_interval, reconnect_cap=s.reconnect_cap,
            label=f"fleet {self._fleet} replica {self._replica_id}",
        )
        self._loss = ControlLoss(s, pool, self._applier, self._fleet, self._replica_id)
        self._sync = SyncLoop(s, self._link, self._channel, self._record, self._outbox,
                              self._applier, self._loss, keys, self._replica_id, redis=redis,
                              faults=self._faults)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------------ properties

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

    def unrecoverable(self) -> str | None:
        """Why this controller cannot recover (liveness fails), or None: a loop has failed for
        longer than ``fault_fatal_after``, or a loop's task ended."""
        if self._started and not self._stopped:
            for task in self._tasks:
                if task.done():
                    return f"the controller's task {task.get_name()} ended"
        return self._faults.unrecoverable()

    def add_listener(self, listener: StateListener) -> None:
        """Call ``listener(state, propagation_s)`` with every state applied. It runs
        synchronously in the controller and must not block."""
        self._applier.listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        listeners = self._applier.listeners
        if listener in listeners:
            listeners.remove(listener)

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

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FleetController:
        """Hold the pool ("syncing"), subscribe, read the state and apply it. Returns once
        subscribed and the state was read, or, when Redis does not answer, at the first failure
        (or after ``start_timeout``) with the syncing hold still on: the controller keeps
        trying in the background. Idempotent."""
        if self._started:
            return self
        self._started = True
        self._outbox.open = True
        control = self._applier.control
        control.syncing = True
        control.refresh()
        self._pool.add_listener(self._applier.on_pool_event)
        cap = self._settings.reconnect_cap
        self._tasks = [
            asyncio.create_task(self._faults.supervise("channel", self._channel.run, cap),
                                name=f"fleetgate-listen-{self._replica_id}"),
            asyncio.create_task(self._faults.supervise("sync", self._sync.run, cap),
                                name=f"fleetgate-sync-{self._replica_id}"),
        ]
        ready = asyncio.ensure_future(self._sync.ready.wait())
        failed = asyncio.ensure_future(self._sync.failed.wait())
        try:
            await asyncio.wait({ready, failed}, timeout=self._settings.start_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            failed.cancel()
            await asyncio.gather(ready, failed, return_exceptions=True)
        if not self._sync.ready.is_set():
            log.warning(
                "fleet %s replica %s: started without Redis (fail-static, %s): retrying in the "
                "background", self._fleet, self._replica_id,
                "syncing hold on" if not self._applier.synced else "state read, not subscribed",
            )
        return self

    async def __aenter__(self) -> FleetController:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop following the fleet and remove this replica's record. The pool keeps the holds
        it has (stopping the controller never resumes a pool). Idempotent; returns promptly
        even when Redis does not answer (the record removal is bounded)."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._outbox.open = False
        self._loss.close()
        self._pool.remove_listener(self._applier.on_pool_event)
        await self._cancel_tasks()
        cleanup = asyncio.ensure_future(self._sync.remove_record(STOP_CLEANUP_S))
        try:
            await asyncio.shield(cleanup)
        except asyncio.CancelledError:
            cleanup.cancel()
            raise
        self._sync.set_connected(False, quiet=True)
        log.info("fleet %s replica %s: controller stopped at v%d",
                 self._fleet, self._replica_id, self.applied_version)

    async def _cancel_tasks(self) -> None:
        """Cancel the controller's tasks and make sure they end (a cancellation can be lost
        inside a Redis call: ``cancel_bounded`` cancels again, bounded)."""
        pending = [t for t in self._tasks if not t.done()]
        await asyncio.gather(*(cancel_bounded(t, 5.0) for t in pending))

    def _on_fault_change(self) -> None:
        self._record.control_error = self._faults.reason or ""
        self._outbox.record_dirty = True
        self._outbox.wake.set()  # the record says so at once

    # ------------------------------------------------------------------ channel events

    def _on_channel_fault(self, exc: BaseException) -> None:
        self._faults.fail("channel", exc)

    def _on_subscribed(self, again: bool) -> None:
        self._sync.on_subscribed(again)

    def _on_channel_lost(self, exc: BaseException) -> None:
        self._sync.on_channel_lost(exc)


__all__ = ["SYNCING_REASON", "ControllerSettings", "ControllerStats", "FleetController",
           "StateListener"]
