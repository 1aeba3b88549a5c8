"""One snapshot of a fleet's records for everyone who asks: ``Snapshots``.

``fleetgate serve`` answers dashboards, API clients and Prometheus scrapes from one cache per
fleet. Each request costs one round trip of two O(1) commands (the state hash and ``ZCARD`` of
the ``replicas`` set, the snapshot's *fingerprint*); the replica records (``ZRANGE`` and the
records, in bounded batches: ``reads.BATCH``) are read again only when

* the snapshot is ``interval`` seconds old (``FLEETGATE_REFRESH_INTERVAL``, default 1 s), or
* the fingerprint changed: a pause or resume (by anyone: the CLI, another coordinator) or a
  replica that joined or left is seen by the next request, not a second later.

Single flight: while a read is under way every caller awaits that same read, so N requests at
once cost one read of the records (``reads`` counts them). A caller cancelled while it waits
does not cancel the read the others wait for. The figures of the summary (``summary.count``)
are counted once per snapshot, in the read.

The fleet's backlog (``backlog.read_backlog``: its work stream's undelivered, pending and dead
entries, the oldest one's age) is read with the records, once per fleet per snapshot, never per
replica, alongside the records' first read (one more round trip at the same time, two when
entries wait); ``backlog=False`` leaves it out (the bench's baseline).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.client import NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError

from coordinator.fleet.backlog import read_backlog
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import FleetStatus
from coordinator.fleet.reads import Reads
from coordinator.fleet.summary import (
    ATTENTION_CAP,
    DEFAULT_MAX_PAUSE_S,
    DEFAULT_SLOW_ACK_S,
    FleetSummary,
    RecordFigures,
    count,
    summarize,
)
from replica.contract import FleetState, now_utc
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0
MAX_ENTRIES = 2048
"""The most fleets whose snapshots are kept: past it, the least recently asked for (with no
read under way) is dropped, so names asked for once do not pile up."""


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What one cheap read says of a fleet: its state and how many members its replicas set
    has. A snapshot whose fingerprint differs is out of date, however young."""

    state: FleetState
    members: int


@dataclass(frozen=True, slots=True)
class Snap:
    """One read of a fleet's records, and the figures counted from them."""

    status: FleetStatus
    fingerprint: Fingerprint
    started: float
    """The cache's clock when the read started."""
    read_at: datetime
    figures: RecordFigures


class _Entry:
    """The cache of one fleet: its reads, the latest snapshot and the read under way."""

    def __init__(self, fleet: Fleet) -> None:
        self.reads = Reads(fleet.redis, fleet.name, fleet.keys)
        self.fleet = fleet
        self.snap: Snap | None = None
        self.task: asyncio.Task[Snap] | None = None
        self.reads_made = 0


class Snapshots:
    """The per-fleet snapshot cache of a coordinator (see the module's doc).

    ``interval`` is the longest a snapshot answers for (0: every request reads the records,
    concurrent ones still share a read); ``clock`` is for tests."""

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
        slow_ack_s: float = DEFAULT_SLOW_ACK_S,
        backlog: bool = True,
    ) -> None:
        self.interval = max(0.0, float(interval))
        self.backlog = backlog
        """Whether each read reads the fleet's backlog too (``backlog.read_backlog``)."""
        self.slow_ack_s = slow_ack_s
        """An acknowledgement this slow makes its replica need attention (``count``)."""
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self.max_entries = MAX_ENTRIES
        self.reads = 0
        """Reads of the records made, every fleet's (for tests and the bench)."""

    async def snap(self, fleet: Fleet) -> Snap:
        """The fleet's snapshot: the cached one when it is fresh and its fingerprint matches,
        else a new read (shared by every caller meanwhile)."""
        entry = self._entries.pop(fleet.name, None)
        if entry is None:
            entry = _Entry(fleet)
        self._entries[fleet.name] = entry  # the most recently asked for last
        if len(self._entries) > self.max_entries:
            self._evict()
        asked = self._clock()
        current = await self._fingerprint(fleet)
        snap: Snap | None = None
        for _ in range(3):
            snap = entry.snap
            if snap is not None and snap.fingerprint == current and \
                    self._clock() - snap.started < self.interval:
                return snap
            task = entry.task
            if task is None:
                task = entry.task = asyncio.create_task(
                    self._read(entry), name=f"snapshot {fleet.name}")
                task.add_done_callback(functools.partial(self._done, entry))
            snap = await asyncio.shield(task)
            if snap.fingerprint == current or snap.started >= asked:
                return snap  # what the caller saw, or a read begun after it looked
            # a read begun before the change this caller saw: one more
        assert snap is not None
        return snap

    async def status(self, fleet: Fleet) -> FleetStatus:
        """``Fleet.status()``, from the snapshot."""
        return (await self.snap(fleet)).status

    async def summary(
        self, fleet: Fleet, max_pause: float = DEFAULT_MAX_PAUSE_S, now: datetime | None = None
    ) -> FleetSummary:
        """The fleet's summary (``summary.summarize``) from the snapshot, at ``now``."""
        snap = await self.snap(fleet)
        return summarize(snap.status, now, max_pause, figures=snap.figures, read_at=snap.read_at)

    def __len__(self) -> int:
        return len(self._entries)

    def _evict(self) -> None:
        for name in [n for n, e in self._entries.items() if e.task is None]:
            if len(self._entries) <= self.max_entries:
                return
            del self._entries[name]

    def reads_of(self, name: str) -> int:
        """Reads of the records of fleet ``name`` made so far."""
        entry = self._entries.get(name)
        return 0 if entry is None else entry.reads_made

    def forget(self, name: str) -> None:
        """Drop the snapshot of fleet ``name`` (the next request reads again)."""
        entry = self._entries.get(name)
        if entry is not None:
            entry.snap = None

    async def aclose(self) -> None:
        """Cancel the reads under way (a server's shutdown)."""
        tasks = [e.task for e in self._entries.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- inside

    async def _fingerprint(self, fleet: Fleet) -> Fingerprint:
        for attempt in range(2):
            pipe = fleet.redis.pipeline(transaction=False)
            # undecoded: a hash edited by hand may hold bytes that are not UTF-8 (they read as
            # replacement characters), which must not fail every read of the fleet
            pipe.execute_command("HGETALL", fleet.keys.state, **{NEVER_DECODE: True})
            pipe.zcard(fleet.keys.replicas)
            try:
                raw_state, members = await uncancelled(pipe.execute())
                break
            except RedisConnectionError:
                if attempt:  # a pipeline is not retried by redis-py; this read is safe to resend
                    raise
        return Fingerprint(FleetState.from_hash(fleet.name, raw_state), int(members))

    async def _read(self, entry: _Entry) -> Snap:
        started = self._clock()
        read_at = now_utc()
        self.reads += 1
        entry.reads_made += 1
        if self.backlog:  # at the same time as the records: one fleet's read, not one more
            fleet = entry.fleet
            try:
                async with asyncio.TaskGroup() as group:  # one failing cancels the other
                    first = group.create_task(entry.reads.snapshot())
                    second = group.create_task(read_backlog(fleet.redis, fleet.keys))
            except BaseExceptionGroup as failed:  # the first failure as itself (503 for Redis)
                raise failed.exceptions[0] from None
            snapshot, backlog = first.result(), second.result()
        else:
            snapshot, backlog = await entry.reads.snapshot(), None
        infos, unreadable = await entry.reads.infos(snapshot.members)
        status = FleetStatus(state=snapshot.state, replicas=infos, unreadable=unreadable,
                             backlog=backlog)
        members = len(snapshot.members.scores) + snapshot.members.unreadable
        snap = Snap(status, Fingerprint(snapshot.state, members), started, read_at,
                    count(status, read_at, ATTENTION_CAP, self.slow_ack_s))
        entry.snap = snap
        return snap

    @staticmethod
    def _done(entry: _Entry, task: asyncio.Task[Any]) -> None:
        if entry.task is task:
            entry.task = None
        if not task.cancelled() and task.exception() is not None:  # retrieved: never "unretrieved"
            log.debug("fleet snapshot read failed: %s", task.exception())


__all__ = ["DEFAULT_INTERVAL", "Fingerprint", "Snap", "Snapshots"]
