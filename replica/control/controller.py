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
  ``control_loss_after``, until it is read again;
* ``ControlFaults`` (``replica.control.faults``): an error a loop does not expect holds the
  pool by ``control-plane`` until the loop works again.

This module is the controller's construction and lifecycle (``start()``, ``stop()``, its
tasks); what it shows (its properties, ``stats()`` and ``ControllerStats``) is
``ControllerView`` in ``replica.control.stats``, which it derives from.

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
from types import TracebackType
from typing import Any, Final

from redis.asyncio import Redis

from replica.contract import Keys, validate_fleet, validate_replica_id
from replica.control.applier import StateApplier, StateListener
from replica.control.channel import ControlChannel
from replica.control.faults import SYNCING_REASON, ControlFaults
from replica.control.loss import ControlLoss
from replica.control.options import DEFAULTS, ControllerSettings, ControlLossMode
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.control.stats import ControllerStats, ControllerView
from replica.control.sync import SyncLoop
from replica.errors import ConfigError
from replica.link.connect import sharded
from replica.link.redisio import Link, cancel_bounded
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)

STOP_CLEANUP_S: Final = 0.5
"""How long ``stop()`` tries to remove the record once the tasks have ended: a Redis that does
not answer must not hold a stop up (the record expires on its own a few heartbeats later)."""


class FleetController(ControllerView):
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
        labels: Mapping[str, str] | None = None,
        settings: ControllerSettings | None = None,
    ) -> None:
        options = ControllerSettings(
            labels=tuple(sorted((labels or {}).items())),
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
            sharded=sharded(redis), labels=dict(s.labels),
        )
        self._outbox = Outbox(self._link, self._record, self._fleet)
        self._applier = StateApplier(pool, self._record, self._outbox, self._fleet,
                                     self._replica_id, pause_timeout=s.pause_timeout,
                                     labels=dict(s.labels))
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

    @property
    def select_unreadable(self) -> int:
        """States applied with a hold whose ``select`` could not be read (held: fail closed)."""
        return self._applier.scope.unreadable

    @property
    def labels(self) -> dict[str, str]:
        """This replica's labels (what a hold's ``select`` is matched against)."""
        return dict(self._applier.scope.labels)

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
