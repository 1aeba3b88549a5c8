"""Restorer: a replica puts back the state hash Redis forgot (or went back on).

When the state applier asks for it (the hash went missing or back in time after a failover or
a restart without persistence), the sync loop runs ``Restorer.run()``: the Lua script
``restore_state.lua`` writes the applied state back, create-if-absent and the newest version
winning; an older pause found there is kept with its version raised above the applied one
(then read at once). Without permission to run it (the replica ACL) the failure is logged once
and counted, and the coordinator restores (``Fleet.restore_if_missing``).
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import ResponseError

from replica.contract import RESTORE_STATE_LUA, Keys, restore_args
from replica.contract.scripts import RESTORE_RAISED
from replica.control.applier import StateApplier
from replica.control.outbox import Outbox
from replica.control.record import ReplicaRecord
from replica.link.redisio import Link, uncancelled

log = logging.getLogger(__name__)


class Restorer:
    """The restores of one controller, and their counters."""

    def __init__(
        self,
        link: Link,
        outbox: Outbox,
        applier: StateApplier,
        record: ReplicaRecord,
        keys: Keys,
        replica_id: str,
        *,
        io_timeout: float,
    ) -> None:
        self._link = link
        self._outbox = outbox
        self._applier = applier
        self._record = record
        self._keys = keys
        self._fleet = keys.fleet
        self._replica_id = replica_id
        self._io_timeout = io_timeout
        self._logged = False
        self.restores = 0
        """State hashes put back."""
        self.restore_failures = 0
        """Restores refused (NOPERM under the replica ACL) or failed."""

    async def run(self) -> bool:
        """Put the state hash back from the applied state (the Lua script: create-if-absent,
        the newest version winning). True when the hash is to be read now (an older pause was
        kept there, its version raised)."""
        outbox = self._outbox
        state = self._applier.applied
        if state is None or state.version == 0:
            outbox.restore_due = False
            return False
        keys = self._keys
        try:
            async with asyncio.timeout(self._io_timeout):
                written = await uncancelled(self._link.evalsha(
                    RESTORE_STATE_LUA,
                    keys=[keys.state, keys.audit, keys.control],
                    args=restore_args(state, self._replica_id,
                                      sharded=self._record.publish == "SPUBLISH"),
                ))
        except ResponseError as exc:
            # NOPERM under the replica ACL: the coordinator restores (Fleet.restore_if_missing)
            self.restore_failures += 1
            if not self._logged:
                self._logged = True
                log.warning("fleet %s replica %s: cannot restore the state hash (%s): staying "
                            "at v%d; the coordinator restores it", self._fleet,
                            self._replica_id, str(exc)[:120], state.version)
            outbox.restore_due = False
            self._applier.on_restore_refused()
            return False
        outbox.restore_due = False
        if int(written) == RESTORE_RAISED:
            self.restores += 1
            outbox.wake.set()
            log.warning("fleet %s replica %s: the state hash held an older pause: kept, its "
                        "version raised above v%d (%d restores)", self._fleet,
                        self._replica_id, state.version, self.restores)
            return True  # read the raised pause now, not a poll_interval later
        if int(written):
            self.restores += 1
            log.warning("fleet %s replica %s: restored the state hash at v%d (%s) "
                        "(%d restores)", self._fleet, self._replica_id, state.version,
                        "paused" if state.paused else "running", self.restores)
        return False


__all__ = ["Restorer"]
