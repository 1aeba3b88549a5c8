"""SyncLoop: a controller's one loop of round trips to Redis, its timing and its backoff.

Every ``poll_interval`` it reads the state hash (the certainty: whatever came over the channel,
the hash is applied); in the same round trip it writes the replica record when it changed or a
heartbeat falls due before the next poll (so a steady-state replica costs Redis about
``1/poll_interval + 3/heartbeat_interval`` commands a second), reads the peer list for a
staggered resume, and publishes the acknowledgements the fast path could not send. This loop
says when and what; the ``RoundTrip`` (``replica.control.roundtrip``) builds the commands and
reads the replies. The first period after start is cut short by a random part, so replicas
started together do not poll in step for good. The loop also wakes for the applier's clock
(``next_due()``: holds that start or end, resumes due) and owns the connection state
(``connected``, and ``ready``/``failed`` for ``start()``).

Losing Redis is fail-static: the applied state stays, ``connected`` turns false (the record's
``control`` field reads ``disconnected``), and the loop retries with jittered backoff, at most
half a poll interval apart (so a new primary is followed within one poll interval); with
``control_loss="hold"`` the ``ControlLoss`` part (``replica.control.loss``) holds the pool
once the state has not been read for ``control_loss_after``, and each read here releases it.
When the state applier asks for it (the hash went missing or back in time), the loop has the
``Restorer`` (``replica.control.restorer``) put the state hash back from the applied state.

An error the loop does not expect (a reply that cannot be read, a bug in the applier, the
record or the registration) is a fault (``replica.control.faults``): the pool is held by
``control-plane`` with what broke, the loop retries with the same backoff as for a lost Redis,
and the hold goes once the failing step works again. A state hash that cannot be read (bytes
that are not UTF-8, a value edited by hand, a key of another type) holds the pool the same way
until a readable one is read: the replica cannot tell whether its fleet is paused.

Every Redis await goes through ``uncancelled`` (``replica.link.redisio``), so a
cancellation is never lost inside a call and ``stop()`` ends promptly.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import datetime

from redis.asyncio import Redis

from replica.contract import Keys
from replica.control.applier import StateApplier
from replica.control.channel import ControlChannel
from replica.control.faults import ControlFaults
from replica.control.loss import ControlLoss
from replica.control.options import ControllerSettings
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.control.registration import REGISTER_TIMEOUT_S, register
from replica.control.restorer import Restorer
from replica.control.roundtrip import RoundTrip
from replica.link.redisio import NET_ERRORS, Backoff, Link, uncancelled

log = logging.getLogger(__name__)


class SyncLoop:
    """Polls, heartbeats, restores and reconnects for one ``FleetController``.

    ``ready`` is set once the state was read while subscribed (``start()`` returns);
    ``failed`` when ``start()`` has its answer without that: a round trip failed first, or the
    state was read but the subscription failed.
    """

    def __init__(
        self,
        settings: ControllerSettings,
        link: Link,
        channel: ControlChannel,
        record: ReplicaRecord,
        outbox: Outbox,
        applier: StateApplier,
        loss: ControlLoss,
        keys: Keys,
        replica_id: str,
        redis: Redis | None = None,
        *,
        faults: ControlFaults,
    ) -> None:
        self._poll_interval = settings.poll_interval
        self._heartbeat_interval = settings.heartbeat_interval
        self._io_timeout = settings.round_trip_timeout
        self._reconnect_cap = settings.reconnect_cap
        self._link = link
        self._channel = channel
        self._record = record
        self._outbox = outbox
        self._applier = applier
        self._fleet = keys.fleet
        self._replica_id = replica_id
        self._redis = redis
        """The client, for the registry of fleets on a cluster (see ``_register``)."""
        self._faults = faults
        self._timers_retry_at: float | None = None

        self.ready = asyncio.Event()
        self.failed = asyncio.Event()
        self._sub_failed = False
        self._connected = False
        self._ever_connected = False
        self._link_ok = False
        self._trip = RoundTrip(settings, link, channel, record, outbox, applier, loss, keys,
                               replica_id, faults=faults, on_polled=self._polled)
        self._restorer = Restorer(link, outbox, applier, record, keys, replica_id,
                                  io_timeout=self._io_timeout)

        # counters
        self.poll_failures = 0

    @property
    def polls(self) -> int:
        """Polls that read the state key."""
        return self._trip.polls

    @property
    def last_poll_at(self) -> datetime | None:
        return self._trip.last_poll_at

    @property
    def write_failures(self) -> int:
        """Record writes or acknowledgements Redis refused (an ACL, a read-only server)."""
        return self._trip.write_failures

    @property
    def restores(self) -> int:
        """State hashes this replica put back after Redis forgot them."""
        return self._restorer.restores

    @property
    def restore_failures(self) -> int:
        return self._restorer.restore_failures

    # ------------------------------------------------------------------ connection state

    @property
    def connected(self) -> bool:
        """Subscribed to the control channel and the last round trip to Redis succeeded."""
        return self._connected

    def set_connected(self, value: bool, quiet: bool = False) -> None:
        if value == self._connected:
            return
        self._connected = value
        self._outbox.record_dirty = True
        self._outbox.wake.set()  # the record says so at once, not at the next poll
        if value:
            if self._ever_connected:
                log.info("fleet %s replica %s: control plane connected again at v%d",
                         self._fleet, self._replica_id, self._applier.applied_version)
            self._ever_connected = True
        elif not quiet:
            log.warning("fleet %s replica %s: control plane disconnected: keeping v%d "
                        "(%s) until Redis is back", self._fleet, self._replica_id,
                        self._applier.applied_version,
                        "paused" if self._applier.fleet_held else "running")

    def on_subscribed(self, again: bool) -> None:
        """The channel's (re)subscription: what was published meanwhile is lost, so read the
        hash again."""
        self._trip.poll_now = True
        self._outbox.wake.set()

    def on_channel_lost(self, exc: BaseException) -> None:
        self.set_connected(False)
        self._sub_failed = True
        if self._applier.synced:  # start() has its answer: state read, not subscribed
            self.failed.set()

    # ------------------------------------------------------------------ the loop

    def _next_wakeup(self, next_poll: float, next_heartbeat: float) -> float:
        now = time.monotonic()
        wake = min(next_poll, next_heartbeat)
        # the applier's next timer, unless its timers failed (then at their retry, not in a
        # loop around a deadline they could not move)
        due = self._timers_retry_at or self._applier.next_due(now)
        if due is not None:
            wake = min(wake, due)
        check = self._channel.next_check()
        if check is not None:
            wake = min(wake, check)
        return max(0.0, wake - now)

    async def run(self) -> None:
        """Until cancelled."""
        applier = self._applier
        outbox = self._outbox
        wake_event = outbox.wake
        # at most half a poll interval between attempts (jittered: half to all of it): once a
        # new primary answers (a failover) every replica follows within one poll interval
        backoff = Backoff(cap=min(self._reconnect_cap, self._poll_interval / 2))
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
            if not wake_event.is_set():
                try:
                    async with asyncio.timeout(delay):
                        await wake_event.wait()
                except TimeoutError:
                    pass
            wake_event.clear()
            timers_ok = self._timers()
            self._channel.check()
            now = time.monotonic()
            if not self._link_ok and now < retry_at:
                continue  # Redis is away: try again at retry_at, not on every event
            poll = self._trip.poll_now or outbox.poll_due or now >= next_poll
            # after a reconnect, rewrite the record: a write without replies on the old
            # connection (a change's record and ack) may have been lost with it
            # A heartbeat due before the next poll goes with this one: one round trip.
            heartbeat = (outbox.record_dirty or now >= next_heartbeat
                         or (poll and next_heartbeat - now < self._poll_interval)
                         or self._link.generation != link_generation)
            peers = applier.pending_stagger is not None
            restore = outbox.restore_due
            if not (poll or heartbeat or peers or restore):
                continue
            sent = now
            try:
                await self._trip.run(poll, heartbeat, peers)
                self._link_ok = True
                if restore and outbox.restore_due:
                    if await self._restorer.run():
                        self._trip.poll_now = True  # read the raised pause now
            except asyncio.CancelledError:
                raise
            except NET_ERRORS as exc:
                if poll:
                    self.poll_failures += 1
                self._link_ok = False
                self.set_connected(False)
                if not self.ready.is_set():
                    self.failed.set()
                log.debug("fleet %s replica %s: round trip failed: %r",
                          self._fleet, self._replica_id, exc)
                retry_at = time.monotonic() + backoff.next()
                next_poll = retry_at
                next_heartbeat = max(next_heartbeat, retry_at)
                continue
            except Exception as exc:
                # not a lost Redis: a fault (a reply that cannot be read, a bug). The pool is
                # held until a round trip works again, tried with the same backoff.
                if poll:
                    self.poll_failures += 1
                self._link_ok = False
                self._trip.poll_now = True
                self.set_connected(False, quiet=True)
                if not self.ready.is_set():
                    self.failed.set()
                self._faults.fail("sync", exc)
                retry_at = time.monotonic() + backoff.next()
                next_poll = retry_at
                next_heartbeat = max(next_heartbeat, retry_at)
                continue
            self._faults.recover("sync")
            if poll and timers_ok and not self._trip.apply_failed:
                self._faults.recover("applier")
            backoff.reset()
            self._channel.wake()  # Redis answers: a subscription waiting out a backoff retries
            if heartbeat:
                link_generation = self._link.generation
            now = time.monotonic()
            if poll:
                # from when the poll was sent, not when it came back: the period stays
                # poll_interval however slow the round trip
                next_poll = sent + self._poll_interval * poll_phase
                poll_phase = 1.0
            if heartbeat:
                next_heartbeat = now + self._heartbeat_interval * beat_phase
                beat_phase = 1.0
                if self._record.registry_due():
                    await self._register()

    def _timers(self) -> bool:
        """The applier's clock: holds that start or end, resumes due, overdue pauses. False
        when it failed (a fault of the applier)."""
        now = time.monotonic()
        if self._timers_retry_at is not None:
            if now < self._timers_retry_at:
                return False
            self._timers_retry_at = None
        try:
            self._applier.resume_due()
            self._applier.check_overdue()
        except Exception as exc:
            self._faults.fail("applier", exc)
            self._timers_retry_at = now + self._poll_interval
            return False
        return True

    def _polled(self, sub_gen: int) -> None:
        """A poll's state was read (``RoundTrip``), sent under the subscription of generation
        ``sub_gen``: ``start()`` may have its answer, and the replica is connected again when
        that subscription still stands."""
        channel = self._channel
        applier = self._applier
        if self._faults.active and not self.ready.is_set():
            self.failed.set()  # start() has its answer: held, and why
        if self._sub_failed and applier.synced:
            self.failed.set()
        if sub_gen >= 0 and channel.subscribed and sub_gen == channel.generation:
            self.set_connected(True)
            if sub_gen > channel.failed_generation:
                self._faults.recover("channel")
            if applier.synced and applier.unreadable is None:
                self.ready.set()

    # ------------------------------------------------------------------ writes of their own

    async def _register(self) -> None:
        try:
            sent = await register(self._link, self._redis, self._fleet,
                                  min(self._io_timeout, REGISTER_TIMEOUT_S))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a fault: tried again at the next heartbeat
            self._faults.fail("registration", exc)
            sent = False
        else:
            self._faults.recover("registration")
        if not sent:
            self._record.registry_unsent()

    async def remove_record(self, timeout: float) -> None:
        """What a clean stop does once the loop has ended: remove the record (within
        ``timeout``: a Redis that does not answer must not hold the stop up) and close the
        link."""
        try:
            async with asyncio.timeout(timeout):
                await uncancelled(self._link.call(self._record.remove_commands()))
        except NET_ERRORS as exc:
            log.info("fleet %s replica %s: could not remove the record on stop: %r",
                     self._fleet, self._replica_id, exc)
        finally:
            await self._link.close()


__all__ = ["SyncLoop"]
