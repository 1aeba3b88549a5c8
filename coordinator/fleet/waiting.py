"""``Fleet.wait``: until every live replica applied a version and, for a pause, is quiet (for a
resume: no longer held by the fleet), or the time is up.

``wait`` subscribes to the acknowledgements before it reads the records (so nothing falls
between the two; with ``Fleet.listen()`` it is subscribed already and reads no record), then
follows the acknowledgements as they come, with a slow poll of the silent replicas' records as
a fallback, which waits while acknowledgements keep coming (``coordinator.fleet.fallback``).
No step does a round trip per replica.

The replicas of a fleet share one Redis user, so one could publish another's acknowledgement.
The final word on a replica that ``wait`` read the record of (a straggler: its record said it
had not got there) is therefore its record, not an acknowledgement alone: when the
acknowledgements would end the wait, the records of those replicas are checked in one script
call (``CONFIRM_LUA`` of ``coordinator.fleet.confirm``, which answers with the few that
disagree), and one whose record disagrees is waited for on its record alone. That read is one round trip at the end of a wait
that read records anyway (``wait`` subscribing for itself reads every record at its start).
A listening ``Fleet`` whose replicas all acknowledge in time reads no record at all (the fast
path, no round trip added): there an acknowledgement is taken as it comes.

Who is waited for: every replica live at the change, from the snapshot ``wait`` takes: the
``replicas`` set as ``pause(for_wait=True)`` read it with the change (its membership then: one
that stops cleanly right after is named as having left), else one read of the set (none when
the change's script, which counts but never lists it, counted 0), judged by each one's
record at its first read: its heartbeat was not stale at the change. Once waited for, a replica
is let go only when it left: a clean stop removed both its record and its member (``GONE``,
listed in ``excused``), seen in one read of the set with the state, while Redis has not lost
the change (its version is in the state) and the acknowledgements channel has not broken (a
Redis restart empties both). A replica whose heartbeat went stale during the wait (frozen, cut
off, killed: from here they look the same, and its items may still run) is a straggler,
``unreachable``, with when it was last heard and its ``in_flight`` then.

A replica Redis forgot (an empty restart lost its record and its member) cannot be known here
until it registers again, so a wait does not vouch for the fleet when the state hash was put
back (its ``restored_at``, read with the state at no extra round trip) within the live window
before the change: the report is not ok, with ``redis_lost_at``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from coordinator.fleet.acks import _fast_ack, _Times, _View
from coordinator.fleet.changes import LastChange
from coordinator.fleet.confirm import CONFIRM_LUA
from coordinator.fleet.fallback import FallbackPoll
from coordinator.fleet.listener import AckListener, next_buffered, next_reply, subscribe_acks
from coordinator.fleet.models import (
    GONE,
    Excused,
    WaitReport,
)
from coordinator.fleet.reads import Members, Reads, Snapshot
from coordinator.fleet.waitscope import Scope, begin, scoped_disagreements, scoped_fields
from replica.contract import (
    STALE_HEARTBEATS,
    FleetState,
    Keys,
)
from replica.link.subscription import Subscription

log = logging.getLogger(__name__)

LIVE_HEARTBEAT_S: Final = 10.0
"""Before its record is read, a replica counts as live when its heartbeat score is within
2.5 times this (the default heartbeat interval)."""
LIVE_AT_CHANGE_S: Final = STALE_HEARTBEATS * LIVE_HEARTBEAT_S
"""A replica heard within this long before the change counts as live at the change even when
2.5 of its own heartbeat intervals are shorter: a fleet with short heartbeats does not lose a
replica frozen for a few seconds (a GC pause, a throttled container) from its waits."""

class Waiter:
    """The waits of one fleet (``Fleet.wait`` delegates to it)."""

    def __init__(self, redis: Redis, keys: Keys, reads: Reads, listener: AckListener) -> None:
        self.redis = redis
        self.keys = keys
        self.reads = reads
        self.listener = listener
        self.confirm_script = redis.register_script(CONFIRM_LUA)

    async def wait(
        self, version: int, timeout: float, poll_interval: float, last: LastChange | None,
        scope: Scope = None,
    ) -> WaitReport:
        return await _Run(self, version, poll_interval, scope).run(timeout, last)


class _Run:
    """One ``wait``: what it knows of each replica, who it waits for (``required``: live at the
    change), who it still waits for (``pending``), who left (``excused``)."""

    def __init__(self, waiter: Waiter, version: int, poll_interval: float, scope: Scope) -> None:
        self.scope = scope  # holds for part of the fleet (coordinator.fleet.waitscope)
        self.w = waiter
        self.version = version
        self.fallback = FallbackPoll(poll_interval, time.monotonic())
        self.views: dict[str, _View] = {}
        self.required: set[str] = set()
        self.pending: set[str] = set()
        self.excused: dict[str, str] = {}
        self.pause = True
        self.state: FleetState | None = None
        self.changed_ts: float | None = None
        self.restored_at: datetime | None = None
        """The latest ``restored_at`` of the state hash this wait read: when Redis last lost
        data (and the hash was put back)."""
        self.unsure = False
        """Redis may have lost data during this wait (the acks channel broke, or the state is
        behind the version): a replica missing from the set may not have left, so none is
        excused."""

    async def run(self, timeout: float, last: LastChange | None) -> WaitReport:
        t0 = time.monotonic()
        deadline = t0 + max(0.0, timeout)
        listener = self.w.listener
        own: Subscription | None = None
        sub = listener.sub
        try:
            if sub is None:
                # Subscribe first, then read: an ack published before the subscription is in
                # the record already (replicas write the record, then publish).
                own = sub = await subscribe_acks(self.w.redis, self.w.keys, deadline)
            if last is not None and last.state.version == self.version and \
                    time.monotonic() - last.at < 1.0:
                # from pause()/resume(): the state as written, the members as read with it
                members = last.members
                if members is None:  # not read with the change (no for_wait): read once now
                    members = Members({}) if last.registered == 0 else \
                        await self.w.reads.members()
                    self.w.reads.noted(members.unreadable)
                snapshot = Snapshot(last.state, members, last.restored_at)
            else:
                snapshot = await self.w.reads.snapshot()
            await self._start(snapshot, listening_before=own is None)
            own = await self._follow(sub, own, deadline)
            await self._final_word()
        finally:
            if own is not None:
                await own.close()
        return self._report(time.monotonic() - t0, timeout)

    async def _start(self, snapshot: Snapshot, listening_before: bool) -> None:
        state = self.state = snapshot.state
        self._note_restore(snapshot)
        self.pause = state.paused
        self.scope = begin(self.scope, state)
        listening_before = listening_before and self.scope is None  # labels: read the records
        changed_at = state.changed_at or state.since
        self.changed_ts = changed_at.timestamp() if changed_at is not None else None
        since = self.w.listener.since
        members = snapshot.members.scores
        if listening_before and since is not None and changed_at is not None and \
                changed_at >= since:
            # Listening since before the change: every ack for it comes on the channel, so no
            # record needs reading now (the fallback poll reads the silent ones, and judges
            # then whether each was live at the change).
            now_ms = time.time() * 1000
            for r, score in members.items():
                if now_ms - score <= STALE_HEARTBEATS * LIVE_HEARTBEAT_S * 1000:
                    view = self.views[r] = _View(r)
                    view.alive = True
                    view.score = score
                    self.required.add(r)
                    self.pending.add(r)
        else:
            ids = list(members)
            for r in ids:
                view = self.views[r] = _View(r)
                view.score = members[r]
            await self._refresh(ids)

    def _note_restore(self, snapshot: Snapshot) -> None:
        at = snapshot.restored_at
        if at is not None and (self.restored_at is None or at > self.restored_at):
            self.restored_at = at

    def _redis_lost_at(self) -> datetime | None:
        """When Redis lost its data, if that was recent enough for a replica live at the
        change to have been forgotten and not registered again: ``restored_at`` after the
        change less the live window (``LIVE_AT_CHANGE_S``, or 2.5 of the longest heartbeat
        interval this wait saw). The coordinator cannot know a replica Redis forgot, so such
        a wait does not vouch for the fleet."""
        at = self.restored_at
        if at is None:
            return None
        changed = self.changed_ts if self.changed_ts is not None else time.time()
        longest = max((v.interval for v in self.views.values()), default=LIVE_HEARTBEAT_S)
        window = max(LIVE_AT_CHANGE_S, STALE_HEARTBEATS * longest)
        return at if at.timestamp() > changed - window else None

    def _reached(self, replica: str) -> bool:
        return self.views[replica].reached(self.version, self._pause_of(replica))

    def _pause_of(self, replica: str) -> bool:
        """Whether ``replica`` is waited for to be quiet (else to run)."""
        return self.pause if self.scope is None else self.scope.held(replica, self.pause)

    async def _follow(
        self, sub: Subscription | None, own: Subscription | None, deadline: float
    ) -> Subscription | None:
        """Follow acks and poll records until nobody is pending (and the records confirm it)
        or the deadline. Returns the subscription to close (a broken shared one's, too)."""
        listening, fallback = sub is not None, self.fallback
        fallback.start(time.monotonic())
        while True:
            if not self.pending:
                unconfirmed = [r for r in self.required if self.views[r].needs_check]
                if not unconfirmed:
                    break
                await self._confirm(unconfirmed)
                if not self.pending:
                    break
            now = time.monotonic()
            if now >= deadline:
                break
            step = min(deadline, fallback.due_at) - now
            if listening and sub is not None:
                try:
                    reply = await next_reply(sub, step)
                    while reply is not None:  # a burst: the replies one socket read brought
                        self._on_ack(reply)
                        if not self.pending:
                            break
                        reply = next_buffered(sub)
                except (RedisError, OSError) as exc:
                    listening = False  # carry on with the records alone
                    self.unsure = True  # a Redis restart breaks the channel, and empties it
                    if own is None:
                        own = self.w.listener.detach()  # a broken shared subscription
                    log.info("fleet %s: lost the acknowledgements channel (%r): polling the "
                             "records", self.w.keys.fleet, exc)
            else:
                await asyncio.sleep(step)
            if self.pending and fallback.due(time.monotonic(), listening):
                await self._fallback()
                fallback.polled(time.monotonic())
        return own

    async def _fallback(self) -> None:
        """Read the set (with the state) and the pending replicas' records, and any replica
        new to the set: who left is excused, who joined is waited for."""
        log.debug("fleet %s: polling the records of %d pending replicas", self.w.keys.fleet,
                  len(self.pending))
        members = await self._members()
        ids = [*self.pending, *(r for r in members if r not in self.views)]
        for r in ids:
            view = self.views.get(r)
            if view is None:
                view = self.views[r] = _View(r)
            view.score = members.get(r, view.score)
        await self._refresh(ids)
        self._excuse_gone(members)

    async def _members(self) -> dict[str, float]:
        """The ``replicas`` set, read with the state: a state behind this wait's version means
        Redis lost data (an empty restart), after which nobody is excused."""
        self._note_restore(snapshot := await self.w.reads.snapshot())
        if snapshot.state.version < self.version and not self.unsure:
            self.unsure = True
            log.warning("fleet %s: the state is at v%d, behind v%d: Redis lost data during the "
                        "wait, so no replica missing from the set is taken as gone",
                        self.w.keys.fleet, snapshot.state.version, self.version)
        return snapshot.members.scores

    def _excuse_gone(self, members: Mapping[str, float]) -> None:
        """Excuse the pending replicas that left: out of the set, and no record (both read
        after the other replicas' records)."""
        if self.unsure:
            return
        for r in [r for r in self.pending if r not in members and not self.views[r].present]:
            self.pending.discard(r)
            self.required.discard(r)
            self.excused[r] = GONE
            log.info("fleet %s: %s left (its record and member are gone): excused from the "
                     "wait for v%d", self.w.keys.fleet, r, self.version)

    async def _final_word(self) -> None:
        """The records of whoever is still pending (for an accurate why) and of the stragglers
        acknowledgements vouched for since their records were read, in one read; and when one
        of them has no record any more, the set, to tell one that left from one gone silent."""
        unconfirmed = {r for r in self.required if self.views[r].needs_check}
        ids = sorted(self.pending | unconfirmed)
        if not ids:
            return
        await self._refresh(ids)
        if not self.unsure and any(not self.views[r].present for r in self.pending):
            self._excuse_gone(await self._members())

    async def _refresh(self, ids: Sequence[str]) -> None:
        """Read the records of ``ids`` (views already made): a replica read for the first
        time is waited for only if it was live at the change; each one waited for is pending
        until it gets there."""
        scope = self.scope
        records = await self.w.reads.records(ids, scoped_fields(scope))
        now = time.time()
        required, pending = self.required, self.pending
        for replica_id, values in zip(ids, records, strict=True):
            view = self.views.get(replica_id)
            if view is None:
                view = self.views[replica_id] = _View(replica_id)
            view.from_record(values, now)
            if scope is not None:
                scope.note(replica_id, values)
            if not view.judged:
                view.judged = True
                # a record key that is not a hash (None) is skipped, as every reader does
                at = self.changed_ts if self.changed_ts is not None else now
                if values is not None and view.live_at_change(at, now, LIVE_AT_CHANGE_S) and \
                        (scope is None or scope.admits(replica_id)):
                    required.add(replica_id)
                else:  # stale at the change, or an id an acknowledgement alone named
                    required.discard(replica_id)
                    pending.discard(replica_id)
            if replica_id in required:
                if view.reached(self.version, self._pause_of(replica_id)):
                    pending.discard(replica_id)
                else:
                    pending.add(replica_id)

    async def _confirm(self, ids: Sequence[str]) -> None:
        """Check the records of replicas resolved by acknowledgements, in one script call per
        batch that answers only with those that disagree."""
        log.debug("fleet %s: checking the records of %d replicas against their acks",
                  self.w.keys.fleet, len(ids))
        batches = scoped_disagreements(self.w.confirm_script, self.w.reads, ids, self.version,
                                       self._pause_of)
        async for batch, disagree in batches:
            now = time.time()
            for r in batch:
                view = self.views[r]
                values = disagree.get(r)
                if values is None:
                    view.confirmed = True
                    continue
                view.from_record(list(values), now)
                view.suspect = True
                log.warning("fleet %s: the record of %s does not confirm its acknowledgement of "
                            "v%d: waiting on its record alone", self.w.keys.fleet, r, self.version)
                if not self._reached(r):
                    self.pending.add(r)  # gone silent, or left: the fallback tells which

    def _on_ack(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) < 3 or reply[0] != b"message":
            return  # a subscribe confirmation, a pong (RESP3 pushes are a list's subclass)
        ack = _fast_ack(reply[2])
        if ack is None:
            return
        replica, version = ack[0], ack[1]
        view = self.views.get(replica)
        if view is None:
            if version < self.version:
                return  # an old ack still in the channel, from a replica not in this wait
            view = self.views[replica] = _View(replica)
            self.required.add(replica)
            self.pending.add(replica)
        elif view.suspect:
            return  # its record contradicted its acks: only the record counts now
        elif replica not in self.pending and version == view.applied_version and \
                self._reached(replica):
            return  # an earlier ack of a version it got to, arriving late: changes nothing
        view.from_ack(ack)
        if replica in self.pending and self._reached(replica):
            self.pending.discard(replica)
            self.fallback.resolved()

    def _report(self, elapsed: float, timeout: float) -> WaitReport:
        state = self.state
        changed = state.changed_at or state.since if state is not None else None
        times = _Times(changed)
        results = [self.views[r].result(r not in self.pending, times, self.version,
                                        self._pause_of(r))
                   for r in sorted(self.required)]
        lost = self._redis_lost_at()
        report = WaitReport(
            version=self.version,
            ok=not self.pending and lost is None,
            action="pause" if self.pause else "resume",
            elapsed_s=elapsed,
            replicas=results,
            excused=[Excused(r, why) for r, why in sorted(self.excused.items())],
            redis_lost_at=lost,
        )
        if self.pending:
            log.warning("fleet %s: %d of %d replicas did not reach v%d within %.1f s: %s",
                        self.w.keys.fleet, len(self.pending), len(results), self.version,
                        timeout, ", ".join(f"{r.id} ({r.why})" for r in report.stragglers[:10]))
        if lost is not None:
            log.warning("fleet %s: Redis lost its data at %s (the state hash was restored): "
                        "replicas it forgot may not have registered again, so the wait for v%d "
                        "is not ok", self.w.keys.fleet, lost.isoformat(), self.version)
        return report
