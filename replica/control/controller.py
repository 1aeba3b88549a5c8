"""FleetController: follows a fleet's pause state in Redis and applies it to a PausablePool.

One controller per replica. It holds two things open: a pub/sub subscription to
``fleetgate:{NAME}:control`` (pushes apply at once) and a loop that reads the state hash every
``poll_interval`` (the certainty: whatever came over the channel, the hash is applied). The
same loop writes the replica record (``replica.control.record``): on every change at once, straight
onto the connection when it can, otherwise every ``heartbeat_interval`` in the poll's round
trip, so a steady-state replica costs Redis about ``1/poll_interval + 3/heartbeat_interval``
commands a second. Pushes are handled in the subscription's transport callback
(``replica.control.subscription``), with no task switch per message.

Rules, in the order they matter:

* The fleet's pause is the pool hold of source ``fleet``; other sources stay independent.
* Until the first successful read of the state the pool is held by ``control-plane``
  ("syncing"), so a replica that starts during a pause takes nothing.
* A state older than the one applied is ignored (a late poll never undoes a newer pause). A
  poll result with the applied version but other content (the hash edited by hand) applies.
* Losing Redis is fail-static: the last applied state stays, ``control`` reads
  ``disconnected``, the controller reconnects with jittered backoff, resubscribes and re-reads.
* A state hash that is missing (or older than what was applied) after a version was applied is
  restored from the applied state, create-if-absent, the newest version winning; a pause is
  never replaced by a running state. Without permission to write (the replica ACL), the
  failure is logged once and counted, and the replica stays as it is.
* ``auto_resume_at`` is honoured on the replica's own clock; a staggered resume waits an
  offset derived from the replica id, spread evenly over the window.
* Invalid control messages are ignored, logged once per kind and counted.

Library code: it never configures logging nor installs signal handlers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from replica.contract import (
    ACK_APPLIED,
    ACK_QUIET,
    ACK_RESUMED,
    RESTORE_STATE_LUA,
    STALE_HEARTBEATS,
    FleetState,
    Keys,
    clock,
    format_time,
    now_utc,
    restore_args,
    stagger_offset,
    text,
    validate_fleet,
    validate_replica_id,
)
from replica.control.channel import ControlChannel
from replica.control.record import ReplicaRecord
from replica.control.redisio import (
    NET_ERRORS,
    Backoff,
    Link,
    as_mapping,
    cancel_bounded,
    uncancelled,
)
from replica.errors import ConfigError, InvalidMessage
from replica.pool.holds import CONTROL_PLANE_SOURCE, FLEET_SOURCE
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)

SYNCING_REASON: Final = "syncing"

StateListener = Callable[[FleetState, "float | None"], Any]
"""Called with each applied state and its propagation delay in seconds (None when unknown)."""


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


@functools.lru_cache(maxsize=16)
def _parse_push(data: str | bytes, fleet: str) -> FleetState:
    """A control message parsed once per process, however many controllers receive it (a
    FleetState is immutable, so they can share it). Raises InvalidMessage."""
    return FleetState.from_json(data, fleet)


@functools.lru_cache(maxsize=16)
def _state_json(state: FleetState) -> str:
    return state.to_json()


class FleetController:
    """Follows the fleet ``fleet`` for the pool ``pool``, as replica ``replica_id``.

    ``redis`` is a ``redis.asyncio.Redis`` client (with or without ``decode_responses``); the
    controller takes one connection of its pool for the subscription and one for the rest.
    ``extra_fields()`` may return more str fields for the replica record at each write.
    """

    def __init__(
        self,
        pool: PausablePool,
        redis: Redis,
        fleet: str,
        replica_id: str,
        poll_interval: float = 1.0,
        heartbeat_interval: float = 10.0,
        host: str | None = None,
        extra_fields: Callable[[], Mapping[str, Any]] | None = None,
        *,
        pause_timeout: float = 30.0,
        io_timeout: float | None = None,
        start_timeout: float = 10.0,
        pubsub_ping_interval: float = 30.0,
        reconnect_cap: float = 5.0,
    ) -> None:
        if poll_interval <= 0:
            raise ConfigError("poll_interval must be positive")
        if heartbeat_interval <= 0:
            raise ConfigError("heartbeat_interval must be positive")
        self._pool = pool
        self._redis = redis
        self._fleet = validate_fleet(fleet)
        self._replica_id = validate_replica_id(replica_id)
        self._keys = Keys(fleet)
        self.poll_interval = float(poll_interval)
        self.heartbeat_interval = float(heartbeat_interval)
        self.host = host if host is not None else socket.gethostname()
        self.pause_timeout = pause_timeout
        self.io_timeout = io_timeout if io_timeout is not None else max(2.0, 2 * poll_interval)
        self.start_timeout = start_timeout
        self.reconnect_cap = reconnect_cap
        self._restore_script = redis.register_script(RESTORE_STATE_LUA)
        self._link = Link(redis)
        self._record = ReplicaRecord(
            pool, self, self._keys, self._replica_id, heartbeat_interval=self.heartbeat_interval,
            poll_interval=self.poll_interval, host=self.host, extra_fields=extra_fields,
        )
        self._applying = False
        self._listeners: list[StateListener] = []

        # applied state
        self._applied: FleetState | None = None
        self._applied_wall: datetime | None = None
        self._apply_seq = 0
        self._fleet_held = False
        self._pending_resume_at: datetime | None = None
        self._pending_stagger: FleetState | None = None  # waiting for the peer list
        self._quiet_at: datetime | None = None
        self._pause_applied_mono: float | None = None
        self._overdue_logged = False

        # connection state
        self._channel = ControlChannel(
            redis, self._keys.control, on_message=self._on_message,
            on_subscribed=self._on_subscribed, on_lost=self._on_channel_lost,
            ping_interval=pubsub_ping_interval, reconnect_cap=reconnect_cap,
            label=f"fleet {self._fleet} replica {self._replica_id}",
        )
        self._link_ok = False
        self._connected = False
        self._ever_connected = False
        self._synced = False
        self._ready = asyncio.Event()
        self._failed = asyncio.Event()
        """Set when start() has its answer without being ready: a poll failed, or the state
        was read but the subscription failed."""
        self._sub_failed = False
        self._wake = asyncio.Event()
        self._poll_now = True
        self._record_dirty = True
        self._acks: set[str] = set()
        self._restore_due = False
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._stopped = False

        # counters
        self._invalid: dict[str, int] = {}
        self._restores = 0
        self._restore_failures = 0
        self._restore_logged = False
        self._polls = 0
        self._poll_failures = 0
        self._pushes = 0
        self._applied_count = 0
        self._stale_ignored = 0
        self._heartbeats = 0
        self._write_failures = 0
        self._write_logged = False
        self._last_poll_at: datetime | None = None
        self._propagation: float | None = None

    # ------------------------------------------------------------------ properties

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
        return self._connected

    @property
    def synced(self) -> bool:
        """The state was read at least once (the syncing hold is off)."""
        return self._synced

    @property
    def applied_version(self) -> int:
        return self._applied.version if self._applied is not None else 0

    @property
    def applied_state(self) -> FleetState | None:
        return self._applied

    @property
    def resume_at(self) -> datetime | None:
        """When a pending staggered or automatic resume is due, or None."""
        return self._pending_resume_at

    @property
    def pubsub_ping_interval(self) -> float:
        """An idle subscription is pinged after this long, and replaced when its ping goes
        unanswered as long."""
        return self._channel.ping_interval

    @property
    def fleet_held(self) -> bool:
        """The pool is held by the fleet's pause (source ``fleet``)."""
        return self._fleet_held

    @property
    def subscribed(self) -> bool:
        """Subscribed to the control channel right now (``connected`` also needs Redis to
        have answered the last round trip)."""
        return self._channel.subscribed

    def add_listener(self, listener: StateListener) -> None:
        """Call ``listener(state, propagation_s)`` with every state applied. It runs
        synchronously in the controller and must not block."""
        self._listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def stats(self) -> ControllerStats:
        return ControllerStats(
            fleet=self._fleet,
            replica_id=self._replica_id,
            connected=self._connected,
            applied_version=self.applied_version,
            fleet_held=self._fleet_held,
            invalid_messages=dict(self._invalid),
            restores=self._restores,
            restore_failures=self._restore_failures,
            reconnects=self._channel.reconnects,
            polls=self._polls,
            poll_failures=self._poll_failures,
            pushes=self._pushes,
            applied=self._applied_count,
            stale_ignored=self._stale_ignored,
            heartbeats=self._heartbeats,
            write_failures=self._write_failures,
            last_poll_at=self._last_poll_at,
            propagation=self._propagation,
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
        self._pool.hold(SYNCING_REASON, CONTROL_PLANE_SOURCE)
        self._pool.add_listener(self._on_pool_event)
        self._tasks = [
            asyncio.create_task(self._channel.run(), name=f"fleetgate-listen-{self._replica_id}"),
            asyncio.create_task(self._sync_loop(), name=f"fleetgate-sync-{self._replica_id}"),
        ]
        ready = asyncio.ensure_future(self._ready.wait())
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({ready, failed}, timeout=self.start_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            failed.cancel()
            await asyncio.gather(ready, failed, return_exceptions=True)
        if not self._ready.is_set():
            log.warning(
                "fleet %s replica %s: started without Redis (fail-static, %s): retrying in the "
                "background", self._fleet, self._replica_id,
                "syncing hold on" if not self._synced else "state read, not subscribed",
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
        it has (stopping the controller never resumes a pool). Idempotent."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._pool.remove_listener(self._on_pool_event)
        await self._cancel_tasks()
        cleanup = asyncio.ensure_future(self._remove_record())
        try:
            await asyncio.shield(cleanup)
        except asyncio.CancelledError:
            cleanup.cancel()
            raise
        self._set_connected(False, quiet=True)
        log.info("fleet %s replica %s: controller stopped at v%d",
                 self._fleet, self._replica_id, self.applied_version)

    async def _cancel_tasks(self) -> None:
        """Cancel the controller's tasks and make sure they end (a cancellation can be lost
        inside a Redis call: ``cancel_bounded`` cancels again, bounded)."""
        pending = [t for t in self._tasks if not t.done()]
        await asyncio.gather(*(cancel_bounded(t, 5.0) for t in pending))

    async def _remove_record(self) -> None:
        try:
            async with asyncio.timeout(2.0):
                await uncancelled(self._link.call(self._record.remove_commands()))
        except NET_ERRORS as exc:
            log.info("fleet %s replica %s: could not remove the record on stop: %r",
                     self._fleet, self._replica_id, exc)
        finally:
            await self._link.close()

    # ------------------------------------------------------------------ applying states

    def _consider(self, state: FleetState, source: str, poll_seq: int | None = None) -> None:
        """Apply ``state`` if it is newer than the applied one (see the module's rules)."""
        cur = self._applied
        if cur is not None:
            if state.version == cur.version:
                if source != "poll" or state.same_content(cur):
                    return
                log.info("fleet %s: the state hash changed without a version bump (v%d): "
                         "applying it", self._fleet, state.version)
            elif state.version < cur.version:
                if source != "poll" or poll_seq != self._apply_seq:
                    self._stale_ignored += 1
                    log.debug("fleet %s: ignored v%d from %s (applied v%d)",
                              self._fleet, state.version, source, cur.version)
                    return
                # The hash went back in time although nothing was applied since the poll was
                # sent: Redis lost writes. A pause still wins; otherwise put ours back.
                if state.effectively_paused() and not cur.effectively_paused():
                    log.warning("fleet %s: the state hash went back to v%d (applied v%d) and "
                                "is paused: applying the pause", self._fleet, state.version,
                                cur.version)
                else:
                    self._stale_ignored += 1
                    self._request_restore(f"the state hash went back to v{state.version}")
                    return
        self._apply(state, source)

    def _apply(self, state: FleetState, source: str) -> None:
        self._applying = True
        try:
            self._apply_state(state, source)
        finally:
            self._applying = False
        self._kick()

    def _apply_state(self, state: FleetState, source: str) -> None:
        prev = self._applied
        now, now_text = clock()
        self._applied = state
        self._applied_wall = now
        self._record.set_applied(state.version, _state_json(state), now_text)
        self._apply_seq += 1
        self._applied_count += 1
        changed = state.changed_at or state.since
        propagation: float | None = None
        if changed is not None and (prev is None or prev.version != state.version):
            propagation = max(0.0, (now - changed).total_seconds())
            self._propagation = propagation
        pool = self._pool
        if state.effectively_paused(now):
            self._pending_stagger = None
            self._hold(state, now, now_text)
            if state.auto_resume_at is not None:
                self._schedule_resume(state, state.auto_resume_at, now)
            else:
                self._pending_resume_at = None
        elif self._fleet_held:
            start = state.resume_start() or now
            self._schedule_resume(state, start, now)
        else:
            self._pending_resume_at = None
            self._pending_stagger = None
        if self._synced is False:
            self._synced = True
            pool.release(CONTROL_PLANE_SOURCE)
        self._acks.add(ACK_APPLIED)
        self._record_dirty = True
        if log.isEnabledFor(logging.INFO):
            log.info(
                "fleet %s replica %s: applied v%d from %s: %s%s: %d in flight, %d queued%s",
                self._fleet, self._replica_id, state.version, source,
                "paused" if state.effectively_paused(now) else "running",
                f" ({state.reason}, by {state.by})" if state.paused else "",
                pool.in_flight, pool.queued,
                "" if propagation is None else f", {propagation * 1000:.0f} ms after the change",
            )
        for listener in list(self._listeners):
            try:
                listener(state, propagation)
            except Exception:
                log.exception("fleet %s: a state listener failed", self._fleet)

    def _hold(self, state: FleetState, now: datetime, now_text: str) -> None:
        pool = self._pool
        if not self._fleet_held:
            self._fleet_held = True  # before the pool's events, so they see it
            self._pause_applied_mono = time.monotonic()
            self._overdue_logged = False
            if pool.in_flight == 0:
                self._set_quiet_at(now, now_text)  # the same clock reading
            else:
                self._set_quiet_at(None)
        pool.hold(state.reason or "paused by the fleet", FLEET_SOURCE)

    def _set_quiet_at(self, when: datetime | None, text: str | None = None) -> None:
        self._quiet_at = when
        self._record.set_quiet_at(text if text is not None else format_time(when))

    def _schedule_resume(self, state: FleetState, start: datetime, now: datetime) -> None:
        """Resume at ``start`` plus this replica's stagger offset (now if that is past)."""
        window = state.resume_stagger_s
        if window > 0 and start + timedelta(seconds=window) > now:
            # Spreading evenly needs the peer list: the sync loop reads it and calls
            # _on_peers; until then, wait for the end of the window (never too early).
            self._pending_stagger = state
            self._set_resume_at(start, window, now)
            self._wake.set()
            return
        self._pending_stagger = None
        self._set_resume_at(start, 0.0, now)  # no stagger, or the window is already over

    def _set_resume_at(self, start: datetime, offset: float, now: datetime) -> None:
        due = start + timedelta(seconds=offset)
        # a clock ahead of ours must not stretch the wait past the offset itself
        due = min(due, now + timedelta(seconds=offset)) if start <= now else due
        if due <= now:
            self._pending_resume_at = None
            self._release(now)
        else:
            self._pending_resume_at = due
            self._wake.set()

    def _release(self, now: datetime) -> None:
        if not self._fleet_held:
            return
        self._fleet_held = False
        self._pending_resume_at = None
        self._pause_applied_mono = None
        self._set_quiet_at(None)
        self._pool.release(FLEET_SOURCE)
        self._record_dirty = True

    def _resume_due(self) -> None:
        """Called by the sync loop: release the fleet hold when a pending resume is due."""
        due = self._pending_resume_at
        if due is None:
            return
        now = now_utc()
        if now < due:
            return
        state = self._applied
        self._pending_resume_at = None
        self._pending_stagger = None
        if state is not None and state.paused and not state.auto_resumed(now):
            return  # no longer due (a newer pause)
        log.info("fleet %s replica %s: resuming at v%d (%s): %d queued",
                 self._fleet, self._replica_id, self.applied_version,
                 "auto-resume" if state is not None and state.paused else "staggered",
                 self._pool.queued)
        self._release(now)
        self._acks.add(ACK_RESUMED)

    def _request_restore(self, why: str) -> None:
        if not self._restore_due:
            log.warning("fleet %s replica %s: %s after v%d was applied: restoring it",
                        self._fleet, self._replica_id, why, self.applied_version)
        self._restore_due = True
        self._wake.set()

    # ------------------------------------------------------------------ pool events

    def _on_pool_event(self, event: str) -> None:
        if event == "quiet" and self._fleet_held:
            if self._quiet_at is None or not self._applying:
                self._set_quiet_at(*clock())
            self._acks.add(ACK_QUIET)
        self._record_dirty = True
        if not self._applying:
            self._kick()

    def _kick(self) -> None:
        """Send what changed: the record and the ack straight onto the link when it can take
        them without a round trip (the fast path at a fleet-wide change), else through the
        sync loop."""
        if self._acks and self._started and not self._stopped:
            try:
                sent = self._link.write_raw(self._record.change_wire(self._acks))
            except Exception as exc:  # a transport that broke: the sync loop reconnects
                log.debug("fleet %s: direct write failed: %r", self._fleet, exc)
                sent = False
            if sent:
                self._acks = set()
                self._record_dirty = False
                self._heartbeats += 1
                return
        self._wake.set()

    # ------------------------------------------------------------------ pub/sub

    def _count_invalid(self, exc: InvalidMessage) -> None:
        first = exc.kind not in self._invalid
        self._invalid[exc.kind] = self._invalid.get(exc.kind, 0) + 1
        if first:
            log.warning("fleet %s replica %s: ignored an invalid control message (%s: %s); "
                        "further ones of this kind are only counted",
                        self._fleet, self._replica_id, exc.kind, exc.detail[:120])

    def _on_message(self, data: Any) -> None:
        try:
            state = _parse_push(data, self._fleet)
        except InvalidMessage as exc:
            self._count_invalid(exc)
            return
        self._pushes += 1
        self._consider(state, "push")

    def _on_subscribed(self, again: bool) -> None:
        # (re)subscribed: what was published meanwhile is lost, so read the hash again
        self._poll_now = True
        self._wake.set()

    def _on_channel_lost(self, exc: BaseException) -> None:
        self._set_connected(False)
        self._sub_failed = True
        if self._synced:  # start() has its answer: state read, not subscribed
            self._failed.set()

    # ------------------------------------------------------------------ sync loop

    def _set_connected(self, value: bool, quiet: bool = False) -> None:
        if value == self._connected:
            return
        self._connected = value
        self._record_dirty = True
        if value:
            if self._ever_connected:
                log.info("fleet %s replica %s: control plane connected again at v%d",
                         self._fleet, self._replica_id, self.applied_version)
            self._ever_connected = True
        elif not quiet:
            log.warning("fleet %s replica %s: control plane disconnected: keeping v%d "
                        "(%s) until Redis is back", self._fleet, self._replica_id,
                        self.applied_version, "paused" if self._fleet_held else "running")

    def _next_wakeup(self, next_poll: float, next_heartbeat: float) -> float:
        now = time.monotonic()
        wake = min(next_poll, next_heartbeat)
        if self._pending_resume_at is not None:
            left = (self._pending_resume_at - now_utc()).total_seconds()
            wake = min(wake, now + max(0.0, left))
        if self._pause_applied_mono is not None and not self._overdue_logged:
            wake = min(wake, self._pause_applied_mono + self.pause_timeout)
        check = self._channel.next_check()
        if check is not None:
            wake = min(wake, check)
        return max(0.0, wake - now)

    def _check_overdue(self) -> None:
        t0 = self._pause_applied_mono
        if t0 is None or self._overdue_logged or not self._fleet_held:
            return
        if time.monotonic() - t0 >= self.pause_timeout:
            self._overdue_logged = True  # checked once per pause
            if not self._pool.in_flight:
                return
            log.warning("fleet %s replica %s: still %d in flight %.0f s after the pause "
                        "(not quiet)", self._fleet, self._replica_id, self._pool.in_flight,
                        self.pause_timeout)

    async def _sync_loop(self) -> None:
        backoff = Backoff(cap=min(self.reconnect_cap, self.poll_interval))
        next_poll = time.monotonic()
        next_heartbeat = time.monotonic()
        retry_at = 0.0
        link_generation = 0
        # The first period after start is cut short by a random part, so replicas started
        # together (a rollout, a node coming back) do not poll and heartbeat in step for good.
        # Only ever shorter: a poll still comes at least every poll_interval.
        poll_phase = beat_phase = random.uniform(0.5, 1.0)
        while True:
            # at least a millisecond: a deadline already past must never spin the loop
            delay = max(0.001, self._next_wakeup(next_poll, next_heartbeat))
            if not self._wake.is_set():
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            self._wake.clear()
            self._resume_due()
            self._check_overdue()
            self._channel.check()
            now = time.monotonic()
            if not self._link_ok and now < retry_at:
                continue  # Redis is away: try again at retry_at, not on every event
            poll = self._poll_now or now >= next_poll
            # after a reconnect, rewrite the record: a write without replies on the old
            # connection (a change's record and ack) may have been lost with it
            # A heartbeat due before the next poll goes with this one: one round trip.
            heartbeat = (self._record_dirty or now >= next_heartbeat
                         or (poll and next_heartbeat - now < self.poll_interval)
                         or self._link.generation != link_generation)
            peers = self._pending_stagger is not None
            restore = self._restore_due
            if not (poll or heartbeat or peers or restore):
                continue
            sent = now
            try:
                await self._round_trip(poll, heartbeat, peers)
                if restore and self._restore_due:
                    await self._restore()
            except asyncio.CancelledError:
                raise
            except NET_ERRORS as exc:
                if poll:
                    self._poll_failures += 1
                self._link_ok = False
                self._set_connected(False)
                if not self._ready.is_set():
                    self._failed.set()
                log.debug("fleet %s replica %s: round trip failed: %r",
                          self._fleet, self._replica_id, exc)
                retry_at = time.monotonic() + backoff.next()
                next_poll = retry_at
                next_heartbeat = max(next_heartbeat, retry_at)
                continue
            backoff.reset()
            if heartbeat:
                link_generation = self._link.generation
            now = time.monotonic()
            if poll:
                # from when the poll was sent, not when it came back: the period stays
                # poll_interval however slow the round trip
                next_poll = sent + self.poll_interval * poll_phase
                poll_phase = 1.0
            if heartbeat:
                next_heartbeat = now + self.heartbeat_interval * beat_phase
                beat_phase = 1.0

    async def _round_trip(self, poll: bool, heartbeat: bool, peers: bool) -> None:
        """One write to Redis: read the state hash (poll), read the peer list (stagger), write
        the record (heartbeat) and publish an acknowledgement.

        The record is written before the ack is published, so a reader that subscribes to acks
        and then reads records misses nothing. A record write that goes with an ack is sent
        without waiting for replies (``CLIENT REPLY SKIP``): at a fleet-wide change every
        replica does it at once, and the saved reply per replica is most of the cost."""
        keys = self._keys
        channel = self._channel
        sub_gen = channel.generation if channel.subscribed else -1
        poll_seq = self._apply_seq
        commands: list[tuple[Any, ...]] = []
        quiet: list[tuple[Any, ...]] = []
        if poll:
            self._poll_now = False
            commands.append(("HGETALL", keys.state))
        if peers:
            stale_ms = int((time.time() - STALE_HEARTBEATS * self.heartbeat_interval) * 1000)
            commands.append(("ZRANGEBYSCORE", keys.replicas, stale_ms, "+inf"))
        acks = self._acks
        self._acks = set()
        record_written = False
        if heartbeat or acks:
            self._record_dirty = False
            record_written = True
            writes = self._record.commands(full=not acks)
            if acks:
                quiet += writes
                quiet.append(("PUBLISH", keys.acks, self._record.ack_json(acks, clock()[1])))
            else:
                commands += writes
        try:
            async with asyncio.timeout(self.io_timeout):
                results = await uncancelled(self._link.call(commands, quiet))
        except BaseException:
            # not sent: keep what still has to go out
            self._acks |= acks
            if record_written:
                self._record_dirty = True
            if poll:
                self._poll_now = True
            raise
        i = 0
        poll_error: BaseException | None = None
        if poll:
            raw = results[i]
            i += 1
            if isinstance(raw, BaseException):
                poll_error = raw
                self._poll_now = True
            else:
                self._polls += 1
                self._last_poll_at = now_utc()
                self._on_poll(as_mapping(raw), poll_seq)
                if self._sub_failed and self._synced:
                    self._failed.set()
                if sub_gen >= 0 and channel.subscribed and sub_gen == channel.generation:
                    self._set_connected(True)
                    self._ready.set()
        if peers:
            found = results[i]
            i += 1
            if not isinstance(found, BaseException):
                self._on_peers([text(p) for p in found])
            else:
                self._on_peers(None)  # an offset derived from the id alone
        refused = [r for r in results[i:] if isinstance(r, BaseException)]
        refused += self._link.take_errors()
        if refused:
            # A write the replica may not do (an ACL without the acks channel, a read-only
            # server): report once, count, carry on following the fleet.
            self._write_failures += len(refused)
            if not self._write_logged:
                self._write_logged = True
                log.warning("fleet %s replica %s: cannot write its record or publish its "
                            "acknowledgement (%s); further failures are only counted",
                            self._fleet, self._replica_id, str(refused[0])[:120])
        elif record_written:
            self._heartbeats += 1
        if poll_error is not None:
            raise poll_error
        self._link_ok = True

    def _on_poll(self, raw: Mapping[Any, Any], poll_seq: int) -> None:
        if not raw:
            if self._applied is not None and self._applied.version > 0:
                self._request_restore("the state hash is missing")
                return
            self._consider(FleetState.initial(self._fleet), "poll", poll_seq)
            return
        try:
            state = FleetState.from_hash(self._fleet, raw)
        except InvalidMessage as exc:
            self._count_invalid(exc)
            return
        self._consider(state, "poll", poll_seq)

    def _on_peers(self, peers: list[str] | None) -> None:
        state = self._pending_stagger
        if state is None or state is not self._applied:
            return
        self._pending_stagger = None
        if peers is not None and self._replica_id not in peers:
            peers.append(self._replica_id)
        now = now_utc()
        start = state.resume_start() or now
        offset = stagger_offset(self._replica_id, state.resume_stagger_s, peers)
        if self._fleet_held:
            log.info("fleet %s replica %s: staggered resume, %.1f s into a %.0f s window "
                     "(%s)", self._fleet, self._replica_id, offset, state.resume_stagger_s,
                     f"{len(peers)} replicas" if peers is not None else "offset from the id")
            self._set_resume_at(start, offset, now)
            if not self._fleet_held:
                self._acks.add(ACK_RESUMED)

    async def _restore(self) -> None:
        state = self._applied
        if state is None or state.version == 0:
            self._restore_due = False
            return
        keys = self._keys
        try:
            async with asyncio.timeout(self.io_timeout):
                written = await uncancelled(self._restore_script(
                    keys=[keys.state, keys.audit, keys.control],
                    args=restore_args(state, self._replica_id),
                ))
        except ResponseError as exc:
            # NOPERM under the replica ACL: the coordinator restores (Fleet.restore_if_missing)
            self._restore_failures += 1
            if not self._restore_logged:
                self._restore_logged = True
                log.warning("fleet %s replica %s: cannot restore the state hash (%s): staying "
                            "at v%d; the coordinator restores it", self._fleet,
                            self._replica_id, str(exc)[:120], state.version)
            self._restore_due = False
            return
        self._restore_due = False
        if int(written):
            self._restores += 1
            log.warning("fleet %s replica %s: restored the state hash at v%d (%s) "
                        "(%d restores)", self._fleet, self._replica_id, state.version,
                        "paused" if state.paused else "running", self._restores)


