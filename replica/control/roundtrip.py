"""RoundTrip: what one round trip of the sync loop sends to Redis, and what it reads back.

One pipelined write carries whatever is due (``SyncLoop``, ``replica.control.sync``, says
what): the state hash read (a poll), the peer list read (for a staggered resume), the replica
record written (a heartbeat, or a change) and the acknowledgements published. The record is
written before the ack is published, so a reader that subscribes to acks and then reads
records misses nothing; a record write that goes with an ack is sent without waiting for
replies (``CLIENT REPLY SKIP``): at a fleet-wide change every replica does it at once, and the
saved reply per replica is most of the cost.

The replies go to the state applier (the state, the peers). What could not be sent is kept in
the ``Outbox`` for the next round trip. A write Redis refuses (an ACL without the acks channel,
a read-only server) is logged once and counted in ``write_failures``: the replica still
follows its fleet. A state key that is not a hash, or a hash that cannot be read, holds the
pool (the ``state`` fault of ``replica.control.faults``) until a readable one is read; a
record that cannot be built holds it too (the ``record`` fault), and the heartbeat still goes,
saying what broke.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from replica.contract import (
    S_SCHEDULES_VERSION,
    SCHEDULES_RECHECK_POLLS,
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
from replica.errors import InvalidMessage
from replica.link.redisio import Link, as_mapping, uncancelled

log = logging.getLogger(__name__)

_SCHEDULES_VERSION = S_SCHEDULES_VERSION.encode()
_UNREAD = object()
"""No ``schedules_version`` was read with the schedules yet."""

PolledHook = Callable[[int], None]
"""Called once a poll's state was read and handed to the applier, with the generation of the
subscription the poll was sent under (-1: not subscribed then)."""


class RoundTrip:
    """Builds and reads the round trips of one sync loop, and counts them."""

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
        *,
        faults: ControlFaults,
        on_polled: PolledHook,
    ) -> None:
        self._heartbeat_interval = settings.heartbeat_interval
        self._io_timeout = settings.round_trip_timeout
        self._link = link
        self._channel = channel
        self._record = record
        self._outbox = outbox
        self._applier = applier
        self._loss = loss
        self._keys = keys
        self._fleet = keys.fleet
        self._replica_id = replica_id
        self._faults = faults
        self._on_polled = on_polled
        self.poll_now = True
        """Read the state hash at the next round trip, whenever the next poll falls due (a
        (re)subscription, a poll that failed, a pause the restore raised)."""
        self.apply_failed = False
        """The applier failed on the last state read (the ``applier`` fault stays)."""

        self._schedules_seen: object = _UNREAD
        """The state hash's ``schedules_version`` read with the schedules last (None: absent)."""
        self._polls_since_schedules = 0

        # counters
        self.schedule_reads = 0
        """Polls that read the schedules hash too."""
        self.polls = 0
        self.last_poll_at: datetime | None = None
        self.write_failures = 0
        self._write_logged = False

    async def run(self, poll: bool, heartbeat: bool, peers: bool) -> None:
        """One write to Redis: read the state hash (poll), read the peer list (stagger), write
        the record (heartbeat) and publish an acknowledgement. Raises what the call raised (a
        lost Redis, a reply that cannot be read) or the poll's own error."""
        keys = self._keys
        channel = self._channel
        applier = self._applier
        outbox = self._outbox
        sub_gen = channel.generation if channel.subscribed else -1
        poll_seq = applier.apply_seq
        commands: list[tuple[Any, ...]] = []
        quiet: list[tuple[Any, ...]] = []
        schedules = False
        if poll:
            schedules = self._schedules_due(outbox.poll_due)
            self.poll_now = False
            outbox.poll_due = False
            commands.append(("HGETALL", keys.state))
            if schedules:
                commands.append(("HGETALL", keys.schedules))
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
                self.poll_now = True
                if schedules:
                    outbox.poll_due = True  # the schedules were due: still are
            raise
        i = 0
        poll_error: BaseException | None = None
        if poll:
            marker = self._marker(results[i])
            if schedules:
                # the schedules first: the state is applied with them
                poll_error = self._read_schedules(results[i + 1], marker)
            state_error = self._read_state(results[i], poll_seq, sub_gen)
            poll_error = state_error or poll_error
            i += 2 if schedules else 1
            if not schedules:
                self._polls_since_schedules += 1
                if marker is not _UNREAD and marker != self._schedules_seen:
                    # written since they were read: read them now (not at the next poll)
                    outbox.poll_due = True
                    outbox.wake.set()
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

    def _read_state(self, raw: Any, poll_seq: int, sub_gen: int) -> BaseException | None:
        """The poll's reply: applied, or the error to raise once the rest was read."""
        if isinstance(raw, ResponseError) and str(raw).startswith("WRONGTYPE"):
            # the state key is not a hash: no state can be read from it (a fault, not a
            # lost Redis: fail-static would keep running whatever the fleet wants)
            self.polls += 1
            self._state_read(InvalidMessage("bad_state", f"the state key: {raw}"))
            return None
        if isinstance(raw, BaseException):
            self.poll_now = True
            return raw
        self.polls += 1
        self.last_poll_at = now_utc()
        self.apply_failed = False
        applier = self._applier
        try:
            applier.on_poll(as_mapping(raw), poll_seq)
        except Exception as exc:
            self.apply_failed = True
            self._faults.fail("applier", exc)
        else:
            self._state_read(applier.unreadable)
        self._on_polled(sub_gen)
        return None

    def _schedules_due(self, notified: bool) -> bool:
        """Whether this poll reads the schedules hash too: the channel said they changed
        (``notified``), none were read yet, the state hash's ``schedules_version`` was another
        at the last poll (found then: ``run`` asks for this read at once), the key could not be
        read (until it can), or ``SCHEDULES_RECHECK_POLLS`` polls went by (a hand edit writes no
        marker). A missing marker is a value like any other: every schedule write sets one,
        creating the state hash if need be, so a fleet with no state hash has had none since
        its last read."""
        return (notified or self._schedules_seen is _UNREAD
                or self._faults.failing("schedules")
                or self._polls_since_schedules >= SCHEDULES_RECHECK_POLLS)

    @staticmethod
    def _marker(raw: Any) -> object:
        """The ``schedules_version`` of a state read (None: absent; ``_UNREAD``: the read
        failed or was not a hash)."""
        if isinstance(raw, BaseException):
            return _UNREAD
        try:
            mapping = as_mapping(raw)
        except Exception:
            return _UNREAD
        value = mapping.get(_SCHEDULES_VERSION)
        if value is None:
            value = mapping.get(S_SCHEDULES_VERSION)
        return bytes(value) if isinstance(value, (bytes, bytearray)) else \
            (str(value).encode() if value is not None else None)

    def _read_schedules(self, raw: Any, marker: object = _UNREAD) -> BaseException | None:
        """The poll's schedules: handed to the applier, or the fault (the key cannot be read:
        hold), or the error to raise once the rest was read (a lost Redis). ``marker`` is the
        ``schedules_version`` the same round trip read just before them."""
        if not isinstance(raw, BaseException):
            self.schedule_reads += 1
            self._polls_since_schedules = 0
            self._schedules_seen = marker
        if isinstance(raw, NoPermissionError) or (
                isinstance(raw, ResponseError) and str(raw).startswith("WRONGTYPE")):
            # another type (a hand edit), or an ACL of an older release that does not let
            # replicas read it (grant %R~fleetgate:{NAME}:schedules): no window can be told
            self._faults.fail("schedules", InvalidMessage(
                "bad_schedules", f"the schedules key {self._keys.schedules}: {raw}"),
                traceback=False)
            return None
        if isinstance(raw, BaseException):
            self.poll_now = True
            return raw
        try:
            self._applier.on_schedules(as_mapping(raw))
        except Exception as exc:
            self._faults.fail("schedules", exc)
        else:
            self._faults.recover("schedules")
        return None

    def _state_read(self, unreadable: InvalidMessage | None) -> None:
        """A poll read the state hash: ``unreadable`` says why it could not be read (the pool
        is held: the replica cannot tell whether its fleet is paused), None that it could."""
        if unreadable is None:
            self._loss.on_read()  # after the state applied: a pause read keeps its hold
            self._faults.recover("state")
        else:
            self._faults.fail("state", unreadable, traceback=False)


__all__ = ["PolledHook", "RoundTrip"]
