"""StreamSource: durable work from a Redis stream, fed into the pausable pool.

Work lives in the stream ``fleetgate:{NAME}:work`` (each entry's field ``item`` holds the item
as JSON), read through the consumer group ``fleetgate``; the consumer name is the replica id.

The source reads (``XREADGROUP``, ``BLOCK`` of at most a second, so a pause or a stop is seen
promptly) only while the pool is running and this replica holds fewer than ``capacity`` items
(FLEETGATE_QUEUE_SIZE, default the worker count). It waits on the pool's events (a listener) and
on items finishing, never on a timer. A paused replica therefore leaves new work in Redis.

Where every item is, at each step:

1. **In the stream, undelivered**: nobody has it; any replica may read it.
2. **Pending for this replica** (in the group's PEL under this consumer, and in ``_local``): read
   or claimed, then one of: waiting in the pool's queue, in flight in the handler, or waiting
   locally for a retry. While it is here the source renews its lease every ``claim_idle / 3``
   seconds (``XCLAIM ... JUSTID`` on the entries it still owns), so a long pause or a long item
   does not let another replica take it.
3. **Done**: the handler returned, then ``XACK``. If the ack cannot reach Redis the id waits in
   ``_unacked`` and is acked by the next lease round (a crash in between re-delivers it: at
   least once). Until its ack is answered, this replica's own claim sweep never takes it
   again, however long the ack takes.
4. **Failed**: the entry stays pending. Its delivery count (``XPENDING``) is the number of
   attempts; while it is at most ``max_retries`` the source re-delivers it to itself
   (``XCLAIM``, which counts one more delivery) and runs it again; after that the entry is
   added to the dead-letter stream with its error and acknowledged, in one ``MULTI``.
   A failure while the handler's circuit breaker is open (or a ``BreakerOpen``-like error) is
   an outage, not the item's fault: it is retried without being counted, and not before the
   breaker leaves "open", so an outage dead-letters nothing.
5. **Malformed** (no ``item`` field, not JSON): dead-lettered at once with the reason.
6. **This replica crashes**: its entries stay pending under its name; another replica's
   periodic ``XAUTOCLAIM`` takes those idle for longer than ``claim_idle`` and runs them
   (at least once: an item that was running when the replica died runs again).
7. **This replica stops** (``stop()``): reading stops, in-flight items finish within the
   timeout (their acks are sent), and the items the pool hands back unstarted, and those
   waiting for a retry, are NOT acked: they stay pending, marked idle for ``claim_idle``
   already (``XCLAIM ... IDLE``), so another replica's next claim sweep (every
   ``claim_idle / 2`` at most) takes them. A replica started again under the same id reads
   its own pending entries first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from replica.contract import ITEM_FIELD, WORK_GROUP, format_time, now_utc
from replica.control.redisio import cancel_bounded
from replica.errors import ItemCancelled, ItemTimeout, PoolClosed
from replica.pool.pool import PausablePool
from replica.service.breaker import OPEN, is_breaker_error, state_of
from replica.service.settings import ReplicaSettings
from replica.types import Handler

log = logging.getLogger(__name__)

READ_BLOCK_S: Final = 1.0
"""The longest a read waits in Redis: bounds how late a stop is seen by the reader."""
REDIS_OP_TIMEOUT_S: Final = 5.0
"""Bound on one bookkeeping command (ack, dead letter, delivery count)."""
BACKOFF_MIN_S: Final = 0.1
BACKOFF_MAX_S: Final = 5.0
MAX_ERROR_LEN: Final = 2000


@dataclass(slots=True, eq=False)
class WorkItem:
    """One stream entry in this replica's hands."""

    entry_id: str
    item: Any
    raw: str
    via: str
    """How it arrived: "read", "claim" (from a silent replica) or "history" (own pending)."""
    succeeded: bool = False


@dataclass(frozen=True, slots=True)
class SourceStats:
    """Counters and the current whereabouts of this replica's items."""

    read: int
    claimed: int
    recovered: int
    done: int
    failed: int
    timed_out: int
    retried: int
    outage_retries: int
    dead_lettered: int
    malformed: int
    lost_leases: int
    redis_errors: int
    handed_back: int
    """Entries left pending at ``stop()`` and marked idle for the others to claim at once."""
    held: int
    """Items in this replica's hands (queued + in flight + awaiting retry)."""
    awaiting_retry: int
    unacked: int
    capacity: int
    group_ready: bool


class StreamSource:
    """Feeds ``pool`` (built here, with this source's handler wrapper) from the work stream."""

    def __init__(
        self,
        redis: aioredis.Redis,
        settings: ReplicaSettings,
        handler: Handler,
        *,
        breaker: Any = None,
        breaker_check_interval: float = 1.0,
    ) -> None:
        self._redis = redis
        self.settings = settings
        self._handler = handler
        self._breaker = breaker
        self._breaker_check = breaker_check_interval
        self.stream = settings.work_stream
        self.dead_stream = settings.dead_stream
        self.group = WORK_GROUP
        self.consumer = settings.replica_id
        self.capacity = settings.capacity
        self.max_retries = settings.max_retries
        self.claim_idle = settings.claim_idle
        self.pool = PausablePool(
            self._run,
            workers=settings.workers,
            maxsize=self.capacity,
            item_timeout=settings.item_timeout,
            on_error=self._on_error,
            name=f"pool[{settings.fleet}/{settings.replica_id}]",
            shutdown_grace_period_s=settings.pause_timeout,
        )
        self.pool.add_listener(self._on_pool_event)

        self._local: dict[str, WorkItem] = {}
        self._retry: deque[WorkItem] = deque()
        self._lost: set[str] = set()
        self._unacked: set[str] = set()
        self._acking: set[str] = set()
        """Done, and their XACK sent but not answered yet."""
        self._wake = asyncio.Event()
        self._stopping = False
        self._started = False
        self._stopped = False
        self._group_ready = False
        self._history_cursor: str | None = "0"  # own pending entries first, then ">"
        self._claim_cursor = "0-0"
        self._next_claim = 0.0
        self._reader: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._counts = dict.fromkeys(
            ("read", "claimed", "recovered", "done", "failed", "timed_out", "retried",
             "outage_retries", "dead_lettered", "malformed", "lost_leases", "redis_errors",
             "handed_back"),
            0,
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> StreamSource:
        """Create the consumer group if needed and start reading. The pool must be started.
        Redis being down is not an error: the reader retries with a backoff."""
        if self._started:
            return self
        self._started = True
        try:
            await self._ensure_group()
        except (RedisError, OSError) as exc:
            log.warning("work stream %s not reachable yet (%s); will retry", self.stream, exc)
        self._reader = asyncio.create_task(self._read_loop(), name=f"source-read-{self.consumer}")
        self._keeper = asyncio.create_task(self._keep_loop(), name=f"source-lease-{self.consumer}")
        log.info(
            "reading %s as %s/%s: up to %d items at once, %d retries, claim after %ss idle",
            self.stream, self.group, self.consumer, self.capacity, self.max_retries,
            self.claim_idle,
        )
        return self

    async def stop_reading(self) -> None:
        """Stop taking work from the stream (waits for a read in progress, at most ~1 s)."""
        self._stopping = True
        self._wake.set()
        reader = self._reader
        if reader is None or reader.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(reader), READ_BLOCK_S + REDIS_OP_TIMEOUT_S)
        except TimeoutError:
            await cancel_bounded(reader)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop reading, let in-flight items finish within ``timeout`` (default the pause
        timeout), leave the unstarted ones pending in the stream. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            await self.stop_reading()
            handed_back = await self.pool.stop(
                self.settings.pause_timeout if timeout is None else timeout
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                    await asyncio.shield(self._flush_acks())
            await self._hand_back()
        finally:
            if self._keeper is not None:
                await cancel_bounded(self._keeper)
        left = len(self._local)
        log.info(
            "%s stopped reading %s: %d done, %d handed back unstarted and %d awaiting retry "
            "left pending for other replicas (%d marked for claiming now), %d acks unsent",
            self.consumer, self.stream, self._counts["done"], len(handed_back),
            len(self._retry), self._counts["handed_back"], len(self._unacked),
        )
        if left:
            log.debug("pending entries left: %s", sorted(self._local))

    async def _hand_back(self) -> None:
        """Mark the entries left here (unstarted, awaiting a retry, cut off) as idle for
        ``claim_idle`` already, so the other replicas' next claim takes them instead of one
        ``claim_idle`` later. Best effort: if it fails they are claimed the usual way."""
        if not self._local:
            return
        try:
            async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                handed = await asyncio.shield(
                    self._renew_leases(idle_ms=int(self.claim_idle * 1000))
                )
        except (RedisError, OSError, TimeoutError) as exc:
            log.info("%s could not hand back %d entries (%r): they are claimed after %ss",
                     self.consumer, len(self._local), exc, self.claim_idle)
            return
        self._counts["handed_back"] += handed

    # ------------------------------------------------------------------ state

    @property
    def held(self) -> int:
        return len(self._local)

    @property
    def reader_task(self) -> asyncio.Task[None] | None:
        return self._reader

    @property
    def breaker(self) -> Any:
        return self._breaker

    def stats(self) -> SourceStats:
        c = self._counts
        return SourceStats(
            read=c["read"], claimed=c["claimed"], recovered=c["recovered"], done=c["done"],
            failed=c["failed"], timed_out=c["timed_out"], retried=c["retried"],
            outage_retries=c["outage_retries"], dead_lettered=c["dead_lettered"],
            malformed=c["malformed"], lost_leases=c["lost_leases"],
            handed_back=c["handed_back"],
            redis_errors=c["redis_errors"], held=len(self._local),
            awaiting_retry=len(self._retry), unacked=len(self._unacked),
            capacity=self.capacity, group_ready=self._group_ready,
        )

    # ------------------------------------------------------------------ reading

    def _on_pool_event(self, event: str) -> None:
        self._wake.set()

    def _room(self) -> int:
        return self.capacity - len(self._local)

    def _breaker_open(self) -> bool:
        return self._breaker is not None and state_of(self._breaker) == OPEN

    async def _wait(self, timeout: float | None = None) -> None:
        """Sleep until something changes (an item finishes, the pool resumes, stop)."""
        if timeout is None:
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _read_loop(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stopping:
            _check_cancelled()
            self._wake.clear()
            if self.pool.paused or self.pool.closed:
                await self._wait()
                continue
            if self._breaker_open():
                # Dependency down and the pool not held yet: take nothing until the breaker
                # leaves "open" (follow_breaker will hold the pool within its interval).
                await self._wait(self._breaker_check)
                continue
            self._feed_retries()
            room = self._room()
            if room <= 0:
                await self._wait()
                continue
            try:
                if not self._group_ready:
                    await self._ensure_group()
                got = await self._claim(room)
                if not got and not self._stopping and not self.pool.paused:
                    await self._read(self._room())
                backoff = BACKOFF_MIN_S
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                self._counts["redis_errors"] += 1
                if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                    self._group_ready = False
                log.warning("reading %s failed (%s); retrying in %.1fs", self.stream, exc, backoff)
                await self._wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _ensure_group(self) -> None:
        try:
            await self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
            log.info("created consumer group %s on %s", self.group, self.stream)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True
        self._history_cursor = "0"

    def _feed_retries(self) -> None:
        while self._retry and not self.pool.paused:
            work = self._retry.popleft()
            if work.entry_id in self._lost or work.entry_id not in self._local:
                self._forget(work)
                continue
            try:
                self.pool.put_nowait(work)
            except (PoolClosed, asyncio.QueueFull):
                self._retry.appendleft(work)
                return
            self._counts["retried"] += 1

    async def _claim(self, room: int) -> int:
        """Take entries that silent replicas left idle for longer than claim_idle."""
        now = time.monotonic()
        if now < self._next_claim:
            return 0
        reply = await self._redis.xautoclaim(
            self.stream, self.group, self.consumer, int(self.claim_idle * 1000),
            start_id=self._claim_cursor, count=room,
        )
        cursor = str(reply[0])
        entries = reply[1] or []
        if cursor in ("0-0", "0"):
            self._claim_cursor = "0-0"
            self._next_claim = now + max(self.claim_idle / 2, 0.05)
        else:
            self._claim_cursor = cursor
        got = 0
        for entry_id, fields in entries:
            if await self._admit(str(entry_id), fields, "claim"):
                got += 1
        if got:
            log.info("claimed %d items idle for over %ss on %s", got, self.claim_idle, self.stream)
        return got

    async def _read(self, room: int) -> int:
        if room <= 0:
            return 0
        history = self._history_cursor is not None
        cursor = self._history_cursor if self._history_cursor is not None else ">"
        reply = await self._redis.xreadgroup(
            self.group, self.consumer, {self.stream: cursor}, count=room,
            block=None if history else int(READ_BLOCK_S * 1000),
        )
        entries = _entries(reply)
        if history:
            if not entries:
                self._history_cursor = None
                return 0
            self._history_cursor = str(entries[-1][0])
        got = 0
        for entry_id, fields in entries:
            if await self._admit(str(entry_id), fields, "history" if history else "read"):
                got += 1
        if history and got:
            log.info("recovered %d of this replica's own pending items", got)
        return got

    async def _admit(self, entry_id: str, fields: Any, via: str) -> bool:
        if entry_id in self._local or entry_id in self._acking or entry_id in self._unacked:
            # Held here already, or done with its XACK on the way: this replica's own claim
            # sweep can return such an entry when a stall let it sit past claim_idle.
            return False
        if not fields:  # deleted from the stream while pending: nothing to run
            self._unacked.add(entry_id)
            return False
        raw = fields.get(ITEM_FIELD) if isinstance(fields, dict) else None
        if raw is None:
            await self._dead_letter_malformed(entry_id, fields, f"no {ITEM_FIELD!r} field")
            return False
        try:
            item = json.loads(raw)
        except ValueError as exc:
            await self._dead_letter_malformed(entry_id, fields, f"item is not JSON: {exc}")
            return False
        work = WorkItem(entry_id=entry_id, item=item, raw=str(raw), via=via)
        self._local[entry_id] = work
        try:
            self.pool.put_nowait(work)
        except (PoolClosed, asyncio.QueueFull):
            # Stopping (or a bound we did not expect): the entry stays pending for others.
            self._local.pop(entry_id, None)
            return False
        self._counts[{"read": "read", "claim": "claimed", "history": "recovered"}[via]] += 1
        return True

    def _forget(self, work: WorkItem) -> None:
        if self._local.get(work.entry_id) is work:
            del self._local[work.entry_id]
        self._lost.discard(work.entry_id)
        self._wake.set()

    # ------------------------------------------------------------------ running

    async def _run(self, work: WorkItem) -> None:
        """The pool's handler: run the user's handler, then acknowledge."""
        if work.entry_id in self._lost:  # another replica claimed it while it waited here
            log.info("skipping %s: its lease passed to another replica", work.entry_id)
            self._forget(work)
            return
        await self._handler(work.item)
        work.succeeded = True
        await asyncio.shield(self._ack(work))

    async def _ack(self, work: WorkItem) -> None:
        self._counts["done"] += 1
        self._acking.add(work.entry_id)
        self._forget(work)
        try:
            async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                await self._redis.xack(self.stream, self.group, work.entry_id)
        except (RedisError, OSError, TimeoutError) as exc:
            self._counts["redis_errors"] += 1
            self._unacked.add(work.entry_id)
            log.warning("ack of %s failed (%s); will retry", work.entry_id, exc)
        finally:
            self._acking.discard(work.entry_id)

    async def _on_error(self, work: WorkItem, exc: BaseException) -> None:
        """The pool's on_error: a failure, a timeout, or an item cut off by the drain."""
        if work.succeeded:  # the handler had succeeded; the ack is on its way
            return
        if isinstance(exc, ItemCancelled):
            self._forget(work)  # stays pending in the stream for another replica
            return
        self._counts["timed_out" if isinstance(exc, ItemTimeout) else "failed"] += 1
        if is_breaker_error(exc) or (
            self._breaker is not None and state_of(self._breaker) != "closed"
        ):
            self._counts["outage_retries"] += 1
            log.debug("%s failed during a dependency outage (%r): retried later", work.entry_id, exc)
            self._requeue(work)
            return
        try:
            async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                deliveries = await self._deliveries(work.entry_id)
                if deliveries is None:
                    log.warning("%s failed and is no longer pending here: dropped", work.entry_id)
                    self._forget(work)
                elif deliveries > self.max_retries:
                    await self._dead_letter(work, exc, deliveries)
                else:
                    await self._redis.xclaim(
                        self.stream, self.group, self.consumer, 0, [work.entry_id]
                    )
                    log.warning(
                        "%s failed (attempt %d of %d): %r; retrying",
                        work.entry_id, deliveries, self.max_retries + 1, exc,
                    )
                    self._requeue(work)
        except (RedisError, OSError, TimeoutError) as err:
            self._counts["redis_errors"] += 1
            log.warning("recording the failure of %s failed (%s); retrying it", work.entry_id, err)
            self._requeue(work)

    def _requeue(self, work: WorkItem) -> None:
        """Run ``work`` again: at once when the pool runs (the reader may be blocked in a
        read), else when the reader next feeds retries."""
        if work.entry_id in self._local:
            self._retry.append(work)
            if not self._breaker_open():
                self._feed_retries()
        self._wake.set()

    async def _deliveries(self, entry_id: str) -> int | None:
        rows = await self._redis.xpending_range(
            self.stream, self.group, entry_id, entry_id, 1, consumername=self.consumer
        )
        if not rows:
            return None
        return int(rows[0]["times_delivered"])

    async def _dead_letter(self, work: WorkItem, exc: BaseException, deliveries: int) -> None:
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_LEN]
        await self._move_to_dead(work.entry_id, work.raw, error, deliveries)
        self._counts["dead_lettered"] += 1
        self._forget(work)
        log.warning(
            "%s dead-lettered to %s after %d attempts: %s",
            work.entry_id, self.dead_stream, deliveries, error,
        )

    async def _dead_letter_malformed(self, entry_id: str, fields: Any, why: str) -> None:
        self._counts["malformed"] += 1
        raw = json.dumps(fields, default=str)[:MAX_ERROR_LEN] if fields else ""
        try:
            await self._move_to_dead(entry_id, raw, f"malformed entry: {why}"[:MAX_ERROR_LEN], 1)
            log.warning("malformed entry %s dead-lettered: %s", entry_id, why)
        except (RedisError, OSError) as exc:
            self._counts["redis_errors"] += 1
            log.warning("dead-lettering malformed %s failed (%s)", entry_id, exc)

    async def _move_to_dead(self, entry_id: str, raw: str, error: str, deliveries: int) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xadd(
                self.dead_stream,
                {
                    ITEM_FIELD: raw,
                    "error": error,
                    "entry": entry_id,
                    "stream": self.stream,
                    "replica": self.consumer,
                    "deliveries": str(deliveries),
                    "at": format_time(now_utc()),
                },
            )
            pipe.xack(self.stream, self.group, entry_id)
            await pipe.execute()

    # ------------------------------------------------------------------ leases and acks

    async def _keep_loop(self) -> None:
        every = max(self.claim_idle / 3, 0.05)
        while True:
            _check_cancelled()
            await asyncio.sleep(every)
            try:
                async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                    await self._renew_leases()
                    await self._flush_acks()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as exc:
                self._counts["redis_errors"] += 1
                log.warning("renewing leases on %s failed: %s", self.stream, exc)

    async def _renew_leases(self, idle_ms: int | None = None) -> int:
        """Reset the idle time of the entries this replica holds and still owns (to
        ``idle_ms`` when given: a hand-back); note the ones another replica claimed meanwhile
        (they are skipped if not started yet). Returns how many it renewed."""
        ids = list(self._local)
        if not ids:
            return 0
        async with self._redis.pipeline(transaction=False) as pipe:
            for entry_id in ids:
                pipe.xpending_range(
                    self.stream, self.group, entry_id, entry_id, 1, consumername=self.consumer
                )
            replies = await pipe.execute()
        owned: list[Any] = [entry_id for entry_id, rows in zip(ids, replies, strict=True) if rows]
        lost = [entry_id for entry_id, rows in zip(ids, replies, strict=True) if not rows]
        if owned:
            await self._redis.xclaim(
                self.stream, self.group, self.consumer, 0, owned, idle=idle_ms, justid=True
            )
        for entry_id in lost:
            if entry_id in self._local and entry_id not in self._lost:
                self._lost.add(entry_id)
                self._counts["lost_leases"] += 1
                log.warning("%s was claimed by another replica while held here", entry_id)
        return len(owned)

    async def _flush_acks(self) -> None:
        if not self._unacked:
            return
        ids = sorted(self._unacked)
        try:
            await self._redis.xack(self.stream, self.group, *ids)
        except (RedisError, OSError) as exc:
            self._counts["redis_errors"] += 1
            log.warning("%d acks still unsent (%s)", len(ids), exc)
            return
        self._unacked.difference_update(ids)


def _check_cancelled() -> None:
    """Raise CancelledError if this task was cancelled but the cancellation got lost.

    On Python 3.11, a cancel that lands while redis-py is inside a command can be swallowed
    (the command ends with a ConnectionError or returns); without this check a loop that
    catches RedisError would run on for ever after ``cancel()``."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _entries(reply: Any) -> list[tuple[Any, Any]]:
    """The entries of an XREADGROUP reply for one stream (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        for value in reply.values():
            return list(value[0] if value and isinstance(value[0], list) else value)
        return []
    return list(reply[0][1])


__all__ = ["SourceStats", "StreamSource", "WorkItem"]
