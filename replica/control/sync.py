"""SyncLoop: a controller's one loop of round trips to Redis.

Every ``poll_interval`` it reads the state hash (the certainty: whatever came over the channel,
the hash is applied); in the same round trip it writes the replica record when it changed or a
heartbeat falls due before the next poll (so a steady-state replica costs Redis about
``1/poll_interval + 3/heartbeat_interval`` commands a second), reads the peer list for a
staggered resume, and publishes the acknowledgements the fast path could not send. The first
period after start is cut short by a random part, so replicas started together do not poll in
step for good.

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

Every Redis await goes through ``uncancelled`` (``replica.control.redisio``), so a
cancellation is never lost inside a call and ``stop()`` ends promptly.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from replica.contract import (
    STALE_HEARTBEATS,
    Keys,
    clock,
    now_utc,
    text,
)
from replica.control.applier import StateApplier
from replica.control.channel import ControlChannel
from replica.control.faults import ControlFaults
from replica.control.loss import ControlLoss
from replica.control.options import ControllerSettings
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.control.redisio import NET_ERRORS, Backoff, Link, as_mapping, uncancelled
from replica.control.registration import REGISTER_TIMEOUT_S, register
from replica.control.restorer import Restorer
from replica.errors import InvalidMessage

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
        self._loss = loss
        self._keys = keys
        self._fleet = keys.fleet
        self._replica_id = replica_id
        self._redis = redis
        """The client, for the registry of fleets on a cluster (see ``_register``)."""
        self._faults = faults
        self._apply_failed = False
        self._timers_retry_at: float | None = None

        self.ready = asyncio.Event()
        self.failed = asyncio.Event()
        self._sub_failed = False
        self._connected = False
        self._ever_connected = False
        self._link_ok = False
        self._poll_now = True

        # counters
        self.polls = 0
        self.poll_failures = 0
        self.last_poll_at: datetime | None = None
        self._restorer = Restorer(link, outbox, applier, record, keys, replica_id,
                                  io_timeout=self._io_timeout)
        self.write_failures = 0
        self._write_logged = False

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
        self._poll_now = True
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
            poll = self._poll_now or now >= next_poll
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
                await self._round_trip(poll, heartbeat, peers)
                if restore and outbox.restore_due:
                    if await self._restorer.run():
                        self._poll_now = True  # read the raised pause now
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
                self._poll_now = True
                self.set_connected(False, quiet=True)
                if not self.ready.is_set():
                    self.failed.set()
                self._faults.fail("sync", exc)
                retry_at = time.monotonic() + backoff.next()
                next_poll = retry_at
                next_heartbeat = max(next_heartbeat, retry_at)
                continue
            self._faults.recover("sync")
            if poll and timers_ok and not self._apply_failed:
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

    async def _round_trip(self, poll: bool, heartbeat: bool, peers: bool) -> None:
        """One write to Redis: read the state hash (poll), read the peer list (stagger), write
        the record (heartbeat) and publish an acknowledgement.

        The record is written before the ack is published, so a reader that subscribes to acks
        and then reads records misses nothing. A record write that goes with an ack is sent
        without waiting for replies (``CLIENT REPLY SKIP``): at a fleet-wide change every
        replica does it at once, and the saved reply per replica is most of the cost."""
        keys = self._keys
        channel = self._channel
        applier = self._applier
        outbox = self._outbox
        sub_gen = channel.generation if channel.subscribed else -1
        poll_seq = applier.apply_seq
        commands: list[tuple[Any, ...]] = []
        quiet: list[tuple[Any, ...]] = []
        if poll:
            self._poll_now = False
            commands.append(("HGETALL", keys.state))
        if peers:
            stale_ms = int((time.time() - STALE_HEARTBEATS * self._heartbeat_interval) * 1000)
            commands.append(("ZRANGEBYSCORE", keys.replicas, stale_ms, "+inf"))
        acks = outbox.take_acks()
        record_written = False
        if heartbeat or acks:
            outbox.record_dirty = False
            record_written = True
            try:
                writes = self._record.commands(full=not acks)
                if acks:
                    writes.append((self._record.publish, keys.acks,
                                   self._record.ack_json(acks, clock()[1])))
            except Exception as exc:
                # a fault of the record: hold, and still heartbeat, saying what broke
                self._faults.fail("record", exc)
                outbox.record_dirty = False  # written now (the fault asked for it)
                writes = self._record.fault_commands()
                outbox.acks |= acks  # sent once the record can be written again
                acks = set()
            else:
                self._faults.recover("record")
            if acks:
                quiet += writes
            else:
                commands += writes
        try:
            async with asyncio.timeout(self._io_timeout):
                results = await uncancelled(self._link.call(commands, quiet))
        except BaseException:
            # not sent: keep what still has to go out
            outbox.acks |= acks
            if record_written:
                outbox.record_dirty = True
            if poll:
                self._poll_now = True
            raise
        i = 0
        poll_error: BaseException | None = None
        if poll:
            raw = results[i]
            i += 1
            if isinstance(raw, ResponseError) and str(raw).startswith("WRONGTYPE"):
                # the state key is not a hash: no state can be read from it (a fault, not a
                # lost Redis: fail-static would keep running whatever the fleet wants)
                self.polls += 1
                self._state_read(InvalidMessage("bad_state", f"the state key: {raw}"))
            elif isinstance(raw, BaseException):
                poll_error = raw
                self._poll_now = True
            else:
                self.polls += 1
                self.last_poll_at = now_utc()
                self._apply_failed = False
                try:
                    applier.on_poll(as_mapping(raw), poll_seq)
                except Exception as exc:
                    self._apply_failed = True
                    self._faults.fail("applier", exc)
                else:
                    self._state_read(applier.unreadable)
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
        if peers:
            found = results[i]
            i += 1
            if not isinstance(found, BaseException):
                applier.on_peers([text(p) for p in found])
            else:
                applier.on_peers(None)  # an offset derived from the id alone
        refused = [r for r in results[i:] if isinstance(r, BaseException)]
        refused += self._link.take_errors()
        if refused:
            # A write the replica may not do (an ACL without the acks channel, a read-only
            # server): report once, count, carry on following the fleet.
            self.write_failures += len(refused)
            if not self._write_logged:
                self._write_logged = True
                log.warning("fleet %s replica %s: cannot write its record or publish its "
                            "acknowledgement (%s); further failures are only counted",
                            self._fleet, self._replica_id, str(refused[0])[:120])
        elif record_written:
            outbox.heartbeats += 1
        if poll_error is not None:
            raise poll_error
        self._link_ok = True

    def _state_read(self, unreadable: InvalidMessage | None) -> None:
        """A poll read the state hash: ``unreadable`` says why it could not be read (the pool
        is held: the replica cannot tell whether its fleet is paused), None that it could."""
        if unreadable is None:
            self._loss.on_read()  # after the state applied: a pause read keeps its hold
            self._faults.recover("state")
        else:
            self._faults.fail("state", unreadable, traceback=False)

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
