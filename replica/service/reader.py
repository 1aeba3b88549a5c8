"""StreamReader: the loop that takes entries from the work stream into this replica's hands.

It reads only while the pool runs, the handler's breaker is not open and ``Holdings`` has room,
and otherwise waits for something to change (``Holdings.changed``: an item left, a retry fell
due, the pool resumed), never on a timer. Each round it first sweeps the group for entries idle
for longer than ``claim_idle`` (``XAUTOCLAIM``, at most every ``claim_idle / 2``: entries of a
replica that died, or that a stopping or paused one handed back), then reads: first this
replica's own pending entries (a restart under the same id), then new ones (``XREADGROUP ...
>``, blocking for ``READ_BLOCK_S`` at most, less when the next sweep is due sooner).

**A held replica reads nothing.** While the pool is held (by any source: the fleet, an operator,
the breaker, the control plane, a stop), no read and no claim sweep is sent. The reads go over a
connection of their own (``ReadLine``), which a hold or a stop closes at once: a read blocked in
Redis ends then, so nothing waits for it, and it cannot return entries later. What a read or a
sweep returns once the pool is held anyway (its reply was on its way) is handed back to the group
at once (``XCLAIM ... IDLE <claim_idle> JUSTID``: the next claim sweep, this replica's or a
peer's, takes it). So is what Redis may have delivered to a read whose reply was lost (closed,
timed out): the entries pending for this consumer that it does not hold and that were delivered
lately (``XPENDING ... <consumer>``). Items already in the pool when the hold came stay there,
their leases renewed. Once the pool is released, the first round sweeps at once, so what was
handed back comes back without waiting for ``claim_idle``.

The two commands that return entries are sent undecoded (redis-py's ``NEVER_DECODE``, or
``disable_decoding`` on the read connection), whatever the client's ``decode_responses``: their
replies are raw bytes, so no entry's bytes can make a read fail, and each entry is decoded on its
own (``replica.service.entry.decode``). An entry that cannot be decoded goes to the dead-letter
stream at once, whole, with the reason, and the others of its batch are taken as usual: no entry
can stop the reader. The run counts of the entries of each batch are read with one ``HMGET``
before they go into the pool (``Ledger.learn_runs``), so the start of a run waits for no round
trip. A Redis error makes it wait (0.1 s doubling up to 5 s) and try again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

import redis.asyncio as aioredis
from redis.client import NEVER_DECODE
from redis.exceptions import RedisError, ResponseError

from replica.contract import WORK_GROUP
from replica.service.deadletter import DeadLetters
from replica.service.entry import (
    MalformedEntry,
    RawFields,
    WorkItem,
    decode,
    read_entries,
    text,
)
from replica.service.holdings import Holdings
from replica.service.ledger import Ledger
from replica.service.readline import ReadAborted, ReadLine
from replica.service.settings import ReplicaSettings

log = logging.getLogger(__name__)

READ_BLOCK_S: Final = 5.0
"""The longest a read waits in Redis (``BLOCK``). A hold or a stop does not wait for it (it
closes the read's connection), so this only sets what an idle replica costs Redis: one
``XREADGROUP`` every 5 s (1,000 a second for 5,000 idle replicas)."""
MIN_BLOCK_S: Final = 0.01
"""The shortest ``BLOCK`` (``BLOCK 0`` would wait for ever), when a sweep is due at once."""
REDIS_OP_TIMEOUT_S: Final = 5.0
"""Bound on one bookkeeping command (run count, ack, dead letter)."""
BACKOFF_MIN_S: Final = 0.1
BACKOFF_MAX_S: Final = 5.0
VIA_COUNTER: Final = {"read": "read", "claim": "claimed", "history": "recovered"}
RAW: Final = {NEVER_DECODE: True}
HANDED_KEPT: Final = 10_000
"""How many handed-back entry ids a reader remembers, to log taking them again as such."""
"""Command option: read this reply undecoded, even on a client with decode_responses=True."""


def check_cancelled() -> None:
    """Raise CancelledError if this task was cancelled but the cancellation got lost.

    On Python 3.11, a cancel that lands while redis-py is inside a command can be swallowed
    (the command ends with a ConnectionError or returns); without this check a loop that
    catches RedisError would run on for ever after ``cancel()``."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class StreamReader:
    """Reads the work stream for one consumer into ``holdings``."""

    def __init__(
        self,
        redis: aioredis.Redis,
        settings: ReplicaSettings,
        holdings: Holdings,
        *,
        ledger: Ledger,
        dead_letters: DeadLetters,
        counts: Counter[str],
        breaker_open: Callable[[], bool],
        breaker_check_interval: float,
    ) -> None:
        self._redis = redis
        self.stream = settings.work_stream
        self.group = WORK_GROUP
        self.consumer = settings.replica_id
        self.claim_idle = settings.claim_idle
        self.holdings = holdings
        self.pool = holdings.pool
        self._ledger = ledger
        self._dead_letters = dead_letters
        self._counts = counts
        self._breaker_open = breaker_open
        self._breaker_check = breaker_check_interval
        self.stopping = False
        self.group_ready = False
        self.parked = asyncio.Event()
        """Set while the loop waits for the pool to be released (held or closed), with nothing
        of its own in progress: no read, and what a read returned after the hold handed back."""
        self._line = ReadLine(redis, self.stream)
        self._unsettled = False
        """A read or a sweep failed after it was sent: Redis may have delivered entries to this
        consumer that it never saw (``_settle`` hands them back)."""
        self._history_cursor: str | None = "0"  # own pending entries first, then ">"
        self._claim_cursor = "0-0"
        self._next_claim = 0.0
        self._handed: dict[str, None] = {}
        """The entries this replica handed back lately (oldest first, at most ``HANDED_KEPT``),
        so that taking them again is logged as what it is, not as a claim of a silent peer's."""

    def stop(self) -> None:
        """Stop after the current round; a read in progress is aborted at once."""
        self.stopping = True
        self._line.abort()
        self.holdings.changed.set()

    def abort_read(self) -> None:
        """End a read in progress now (the pool was just held): it takes nothing more."""
        self._line.abort()

    def _held(self) -> bool:
        """No new work may be taken: the pool is held or closed, or the reader stops."""
        return self.pool.paused or self.pool.closed or self.stopping

    async def _wait(self, timeout: float | None = None) -> None:
        """Sleep until something changes (an item leaves, the pool resumes, stop)."""
        changed = self.holdings.changed
        if timeout is None:
            await changed.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)

    async def loop(self) -> None:
        try:
            await self._rounds()
            if self._unsettled:  # stopping: what an aborted read delivered goes back too
                try:
                    async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                        await self._settle()
                except (RedisError, OSError) as exc:  # TimeoutError included
                    log.info("%s could not hand back what its last read may have taken (%r): "
                             "claimed after %ss", self.consumer, exc, self.claim_idle)
        finally:
            await self._line.close()

    async def _rounds(self) -> None:
        backoff = BACKOFF_MIN_S
        holdings = self.holdings
        while not self.stopping:
            check_cancelled()
            holdings.changed.clear()
            try:
                if self._unsettled:
                    await self._settle()
                if self.pool.paused or self.pool.closed:
                    self.parked.set()
                    await self._wait()
                    self.parked.clear()
                    continue
                if self._breaker_open():
                    # Dependency down and the pool not held yet: take nothing until the breaker
                    # leaves "open" (follow_breaker will hold the pool within its interval).
                    await self._wait(self._breaker_check)
                    continue
                holdings.feed_due()
                room = holdings.room()
                if room <= 0:
                    await self._wait()
                    continue
                if not self.group_ready:
                    await self.ensure_group()
                got = await self._claim(room)
                if not got and not self._held():
                    await self._read(holdings.room())
                backoff = BACKOFF_MIN_S
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                self._counts["redis_errors"] += 1
                if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                    self.group_ready = False
                log.warning("reading %s failed (%s); retrying in %.1fs", self.stream, exc, backoff)
                await self._wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def ensure_group(self) -> None:
        """Create the consumer group (and the stream) unless it exists."""
        try:
            await self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
            log.info("created consumer group %s on %s", self.group, self.stream)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self.group_ready = True
        self._history_cursor = "0"

    async def _claim(self, room: int) -> int:
        """Take entries that silent replicas left idle for longer than claim_idle."""
        now = time.monotonic()
        if now < self._next_claim:
            return 0
        try:
            reply = await self._redis.execute_command(  # type: ignore[no-untyped-call]
                "XAUTOCLAIM", self.stream, self.group, self.consumer,
                int(self.claim_idle * 1000), self._claim_cursor, "COUNT", room, **RAW,
            )
        except (RedisError, OSError) as exc:
            self._note_lost_reply(exc)
            raise
        cursor = text(reply[0])
        if cursor in ("0-0", "0"):
            self._claim_cursor = "0-0"
            self._next_claim = now + max(self.claim_idle / 2, 0.05)
        else:
            self._claim_cursor = cursor
        entries = [(text(entry_id), fields) for entry_id, fields in reply[1] or []
                   if entry_id is not None]
        got = await self._admit(entries, "claim")
        if got:
            own = sum(1 for entry_id, _ in entries if entry_id in self._handed)
            for entry_id, _ in entries:
                self._handed.pop(entry_id, None)
            if own:
                log.info("took back %d items it had handed back on %s", own, self.stream)
            if got > own:
                log.info("claimed %d items idle for over %ss, or handed back by a peer, on %s",
                         got - own, self.claim_idle, self.stream)
        return got

    async def _read(self, room: int) -> int:
        if room <= 0:
            return 0
        history = self._history_cursor is not None
        cursor = self._history_cursor if self._history_cursor is not None else ">"
        block_s = 0.0
        if not history:  # wake up for the next sweep; READ_BLOCK_S looked up now (tests)
            block_s = min(READ_BLOCK_S, max(self._next_claim - time.monotonic(), MIN_BLOCK_S))
        block = ["BLOCK", max(int(block_s * 1000), 1)] if block_s else []
        try:
            reply = await self._line.read(
                ("XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", room, *block,
                 "STREAMS", self.stream, cursor),
                block_s + REDIS_OP_TIMEOUT_S,
            )
        except ReadAborted:
            self._unsettled = True
            return 0
        except (RedisError, OSError) as exc:
            self._note_lost_reply(exc)
            raise
        entries = read_entries(reply)
        if history:
            if not entries:
                self._history_cursor = None
                return 0
            self._history_cursor = text(entries[-1][0])
        got = await self._admit([(text(entry_id), fields) for entry_id, fields in entries],
                                "history" if history else "read")
        if history and got:
            log.info("recovered %d of this replica's own pending items", got)
        return got

    async def _admit(self, entries: Sequence[tuple[str, RawFields | None]], via: str) -> int:
        """Hold a batch: each entry decoded on its own (a malformed one is dead-lettered), the
        run counts of the good ones read with one ``HMGET`` (so a run needs no round trip
        before its handler), then each queued in the pool. How many were taken. A batch that
        comes once the pool is held (before or during its admission) is handed back."""
        if self._held():
            await self._hand_back([e for e, _ in entries if not self._known(e)])
            return 0
        works: list[WorkItem] = []
        for entry_id, fields in entries:
            work = await self._decode(entry_id, fields, via)
            if work is not None:
                works.append(work)
        if not works:
            return 0
        await self._ledger.learn_runs(works, REDIS_OP_TIMEOUT_S)
        if self._held():
            await self._hand_back([work.entry_id for work in works])
            return 0
        got = 0
        for work in works:
            if self.holdings.take(work):
                got += 1
        self._counts[VIA_COUNTER[via]] += got
        return got

    def _known(self, entry_id: str) -> bool:
        """Held here, or done with its XACK on the way (or to be retried)."""
        ledger = self._ledger
        return entry_id in self.holdings or entry_id in ledger.acking or entry_id in ledger.unacked

    async def _hand_back(self, ids: Sequence[str]) -> None:
        """Give entries pending here back to the group now: marked idle for ``claim_idle``
        already, so the next claim sweep (a peer's, or this replica's once it reads again)
        takes them. If Redis does not answer, ``_settle`` tries again."""
        if not ids:
            return
        try:
            await self._ledger.hand_back(ids, int(self.claim_idle * 1000))
        except (RedisError, OSError) as exc:
            self._note_lost_reply(exc)
            raise
        self._counts["handed_back"] += len(ids)
        for entry_id in ids:
            self._handed[entry_id] = None
        while len(self._handed) > HANDED_KEPT:
            del self._handed[next(iter(self._handed))]
        self._next_claim = 0.0  # sweep in the first round this replica reads again
        self._claim_cursor = "0-0"
        log.info("%s handed %d entries back to %s/%s (read once its pool was held, or by a "
                 "read whose reply was lost)", self.consumer, len(ids), self.stream, self.group)

    async def _settle(self) -> None:
        """Hand back what a read or a sweep whose reply was lost may have delivered here: the
        entries pending for this consumer, delivered lately (idle for less than half of
        ``claim_idle``; older ones are claimable already or soon, and leaving them alone never
        undoes a peer's claim), that it does not hold."""
        fresh_ms = self.claim_idle * 1000 / 2
        try:
            rows = await self._ledger.pending_here()
            await self._hand_back([entry_id for entry_id, idle_ms in rows
                                   if idle_ms < fresh_ms and not self._known(entry_id)])
        except ResponseError as exc:  # no group any more, or an ACL: asking again won't help
            log.warning("%s cannot hand back what a lost reply may have delivered (%s): "
                        "claimed after %ss", self.consumer, exc, self.claim_idle)
        self._unsettled = False

    def _note_lost_reply(self, exc: BaseException) -> None:
        """A command that may deliver entries failed: unless Redis answered (with an error),
        it may have delivered some."""
        if not isinstance(exc, ResponseError):
            self._unsettled = True

    async def _decode(self, entry_id: str, fields: RawFields | None, via: str) -> WorkItem | None:
        """The item of one entry of a batch, or None (not to be held: dead-lettered, or held
        or done already)."""
        ledger = self._ledger
        if self._known(entry_id):
            # Held here already, or done with its XACK on the way: this replica's own claim
            # sweep can return such an entry when a stall let it sit past claim_idle.
            return None
        if not fields:  # deleted from the stream while pending: nothing to run
            ledger.unacked.add(entry_id)
            return None
        try:
            return decode(entry_id, fields, via)
        except MalformedEntry as exc:
            await self._bury_malformed(entry_id, fields, exc.reason)
        except Exception as exc:  # one entry never stops the reader
            await self._bury_malformed(entry_id, fields, f"cannot be decoded: {exc!r}")
        return None

    async def _bury_malformed(self, entry_id: str, fields: RawFields, why: str) -> None:
        """Dead-letter an entry that is not an item. If Redis does not answer, the entry stays
        pending here and comes back with this replica's claim sweep."""
        self._counts["malformed"] += 1
        try:
            async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                await self._dead_letters.write(entry_id, fields, f"malformed entry: {why}", 0,
                                               forget_runs=False)
            log.warning("malformed entry %s dead-lettered: %s", entry_id, why)
        except (RedisError, OSError, TimeoutError) as exc:
            self._counts["redis_errors"] += 1
            log.warning("dead-lettering malformed %s failed (%s): claimed again after %ss",
                        entry_id, exc, self.claim_idle)


__all__ = ["READ_BLOCK_S", "REDIS_OP_TIMEOUT_S", "StreamReader", "check_cancelled"]
