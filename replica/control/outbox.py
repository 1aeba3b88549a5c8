"""Outbox: what a replica owes Redis, and the fast path that sends a change at once.

The state applier fills it (an acknowledgement to publish, a record that changed, a state hash
to put back); the sync loop empties it in its next round trip. At a change, ``kick()`` first
tries the fast path: the record's change and the acknowledgement written straight onto the
controller's connection, behind ``CLIENT REPLY SKIP``, with no round trip and no task switch
(what makes a fleet-wide change reach a thousand replicas in milliseconds).
"""

from __future__ import annotations

import asyncio
import logging

from replica.control.record import ReplicaRecord
from replica.link.redisio import Link

log = logging.getLogger(__name__)


class Outbox:
    """Pending writes of one controller, and the event that wakes its sync loop."""

    __slots__ = ("_fleet", "_link", "_record", "acks", "heartbeats", "open", "poll_due",
                 "record_dirty", "restore_due", "wake")

    def __init__(self, link: Link, record: ReplicaRecord, fleet: str) -> None:
        self._link = link
        self._record = record
        self._fleet = fleet
        self.acks: set[str] = set()
        """Events to acknowledge (``applied``, ``quiet``, ``resumed``)."""
        self.record_dirty = True
        """The record changed since it was last written."""
        self.poll_due = False
        """Read the state and the schedules at the next round trip (the schedules changed)."""
        self.restore_due = False
        """The state hash is to be put back from the applied state."""
        self.wake = asyncio.Event()
        """Set when the sync loop has something to do now."""
        self.open = False
        """The controller runs (between ``start()`` and ``stop()``): the fast path may write."""
        self.heartbeats = 0
        """Record writes sent (by the fast path or the sync loop)."""

    def take_acks(self) -> set[str]:
        """The pending acknowledgements, which the caller now sends (or gives back)."""
        acks, self.acks = self.acks, set()
        return acks

    def kick(self) -> None:
        """Send what changed: the record and the ack straight onto the link when it can take
        them without a round trip (the fast path at a fleet-wide change), else through the
        sync loop."""
        if self.acks and self.open:
            try:
                sent = self._link.write_raw(self._record.change_wire(self.acks))
            except Exception as exc:  # a transport that broke: the sync loop reconnects
                log.debug("fleet %s: direct write failed: %r", self._fleet, exc)
                sent = False
            if sent:
                self.acks = set()
                self.record_dirty = False
                self.heartbeats += 1
                return
        self.wake.set()


__all__ = ["Outbox"]
