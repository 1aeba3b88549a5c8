"""StreamSource: durable work from a Redis stream, fed into the pausable pool.

Work lives in the stream ``fleetgate:{NAME}:work`` (each entry's field ``item`` holds the item
as JSON), read through the consumer group ``fleetgate``; the consumer name is the replica id.
The parts: ``StreamReader`` reads while the pool runs and has room (a held replica sends no
read: a hold closes the read in progress, and what a read still returns goes back to the group
at once), ``Holdings`` knows where each held item is, ``Ledger`` writes run counts, acks and
leases, ``RetryPolicy``/``Backoffs`` space out retries, ``DeadLetters`` and ``Trimmer``.

Where every item is, at each step (nothing is lost: an entry leaves the group's pending list
only with its XACK, after a success or with its dead letter):

1. **Unread**, in the stream: any replica may read it.
2. **Pending for this replica**: read or claimed, then exactly one of: queued in the pool,
   running, or out of the pool waiting out a retry backoff (not in flight: a pause does not
   wait for it), then due until the pool takes it back. Its lease is renewed every
   ``claim_idle / 3`` seconds, so no other replica takes it meanwhile.
3. **Running**: the handler is entered in the step the pool hands the item over, nothing
   awaited before it (no item starts after a pause). Its run count, read with its batch at
   admission (one ``HMGET``), decides first whether it may run; the run is then counted
   (``HINCRBY fleetgate:{NAME}:runs <id> 1``, sent at the handler's first await and settled
   after it ends: a handler that crashes its process before its first await may leave that
   run uncounted). Runs of the handler on every replica, so hand-offs and claims never count
   as attempts.
4. **Done**: ``XACK`` with the ``HDEL`` of its count; an ack Redis did not answer is retried
   by the next lease round (a crash in between runs it again: at least once).
5. **Failed**: any exception the pool reports for a run (a handler's stray ``CancelledError``,
   ``SystemExit`` or ``KeyboardInterrupt`` included) is a failed run, except ``ItemCancelled``
   (8). After at most ``max_retries`` failed runs it waits out a backoff and runs again; then it
   is dead-lettered (letter, ``XACK``, ``HDEL`` in one ``MULTI``), saying how many runs failed.
   A failure while the breaker is not closed (or a ``BreakerOpen``-like error) is an outage:
   the run is given back and the item runs again once the breaker is not open.
6. **Malformed** (no ``item`` field, not UTF-8, not JSON): dead-lettered at once, whole.
7. **This replica crashes**: its entries stay pending; another replica's ``XAUTOCLAIM`` takes
   them after ``claim_idle``. A run that crashed its replica stays counted, so an item that
   keeps killing replicas is dead-lettered without running once its runs are used up.
8. **This replica stops**: in-flight items finish within the timeout (one cut off past it gives
   its run back); what is left (unstarted, awaiting a retry) stays pending, marked idle for
   ``claim_idle`` already, so the others' next claim sweep takes it. So does an entry a read
   returns once the pool is held (by a pause or the stop): it is handed back, never queued;
   items queued before the hold stay queued (their leases renewed) until the pool is released.
9. **Acknowledged**: trimmed from the stream once every consumer group is past it.

If Redis does not answer a dead letter, the entry stays pending and comes back with this
replica's claim sweep. If the reader stops anyway (a defect), ``stopped`` says why: the replica
is then not ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from replica.contract import WORK_GROUP
from replica.errors import ItemCancelled, ItemTimeout
from replica.link.redisio import cancel_bounded
from replica.pool.pool import PausablePool
from replica.service.breaker import CLOSED, OPEN, is_breaker_error, state_of
from replica.service.deadletter import DeadLetters, error_text
from replica.service.entry import WorkItem
from replica.service.holdings import Holdings
from replica.service.ledger import Ledger
from replica.service.reader import READ_BLOCK_S, REDIS_OP_TIMEOUT_S, StreamReader, check_cancelled
from replica.service.retry import RetryPolicy
from replica.service.settings import ReplicaSettings
from replica.service.stats import SourceStats
from replica.service.trim import Trimmer
from replica.types import Handler

log = logging.getLogger(__name__)


class StreamSource:
    """Feeds ``pool`` (built here, with this source's handler wrapper) from the work stream.
    ``redis`` may decode responses or not: entries are read undecoded either way. The blocking
    reads go over a connection of their own from its pool (``ReadLine``), with their own
    timeout."""

    def __init__(
        self,
        redis: aioredis.Redis,
        settings: ReplicaSettings,
        handler: Handler,
        *,
        breaker: Any = None,
        breaker_check_interval: float = 1.0,
    ) -> None:
        self.settings = settings
        self._handler = handler
        self._breaker = breaker
        self._breaker_check = breaker_check_interval
        self.stream = settings.work_stream
        self.dead_stream = settings.dead_stream
        self.consumer = settings.replica_id
        self.capacity = settings.capacity
        self.claim_idle = settings.claim_idle
        self.retry = RetryPolicy.from_settings(settings)
        self.pool = PausablePool(
            self._run,
            workers=settings.workers,
            maxsize=self.capacity,
            item_timeout=settings.item_timeout,
            on_error=self._on_error,
            name=f"pool[{settings.fleet}/{settings.replica_id}]",
            shutdown_grace_period_s=settings.pause_timeout,
        )
        self._counts: Counter[str] = Counter()
        self.holdings = Holdings(self.pool, self.capacity, self._counts, self._breaker_open)
        self.pool.add_listener(self._on_pool_event)
        self.ledger = Ledger(redis, stream=self.stream, group=WORK_GROUP,
                             consumer=self.consumer, runs_key=settings.runs_key,
                             counts=self._counts)
        self.dead_letters = DeadLetters(redis, stream=self.stream, dead_stream=self.dead_stream,
                                        runs_key=settings.runs_key, group=WORK_GROUP,
                                        consumer=self.consumer)
        self.trimmer = Trimmer(redis, self.stream, self._counts)
        self.reader = StreamReader(
            redis, settings, self.holdings, ledger=self.ledger, dead_letters=self.dead_letters,
            counts=self._counts, breaker_open=self._breaker_open,
            breaker_check_interval=breaker_check_interval,
        )
        self._started = False
        self._stopped = False
        self._stopped_why: str | None = None
        self._trimmed_at = 0  # entries acknowledged at the last trim
        self._reader: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> StreamSource:
        """Create the consumer group if needed and start reading. The pool must be started.
        Redis being down is not an error: the reader retries with a backoff."""
        if self._started:
            return self
        self._started = True
        try:
            await self.reader.ensure_group()
        except (RedisError, OSError) as exc:
            log.warning("work stream %s not reachable yet (%s); will retry", self.stream, exc)
        self._reader = asyncio.create_task(self.reader.loop(), name=f"source-read-{self.consumer}")
        self._reader.add_done_callback(self._reader_ended)
        self._keeper = asyncio.create_task(self._keep_loop(), name=f"source-lease-{self.consumer}")
        log.info(
            "reading %s as %s/%s: up to %d items at once, %d retries, claim after %ss idle",
            self.stream, WORK_GROUP, self.consumer, self.capacity, self.retry.max_retries,
            self.claim_idle,
        )
        return self

    def _reader_ended(self, task: asyncio.Task[None]) -> None:
        if self.reader.stopping:
            return
        exc = None if task.cancelled() else task.exception()
        self._stopped_why = repr(exc) if exc is not None else "the reader was cancelled"
        log.error("the work source stopped reading %s: %s", self.stream, self._stopped_why,
                  exc_info=exc)

    async def stop_reading(self) -> None:
        """Stop taking work from the stream: a read in progress is aborted, and what it may
        have delivered is handed back (bounded by ``REDIS_OP_TIMEOUT_S``)."""
        self.reader.stop()
        reader = self._reader
        if reader is None or reader.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(reader), REDIS_OP_TIMEOUT_S + 1.0)
        except TimeoutError:
            await cancel_bounded(reader)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop reading, let in-flight items finish within ``timeout`` (default the pause
        timeout), leave the unstarted ones and those awaiting a retry pending in the stream.
        Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            await self.stop_reading()
            handed_back = await self.pool.stop(
                self.settings.pause_timeout if timeout is None else timeout
            )
            retrying = self.holdings.clear_retries()
            await self.ledger.settle_all()  # bounded: each count gives up after its timeout
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                    await asyncio.shield(self.ledger.flush())
            await self._hand_back()
        finally:
            if self._keeper is not None:
                await cancel_bounded(self._keeper)
        log.info(
            "%s stopped reading %s: %d done, %d handed back unstarted and %d awaiting retry "
            "left pending for other replicas (%d marked for claiming now), %d acks unsent",
            self.consumer, self.stream, self._counts["done"], len(handed_back), retrying,
            self._counts["handed_back"], len(self.ledger.unacked),
        )
        if self.holdings.items:
            log.debug("pending entries left: %s", sorted(self.holdings.items))

    async def _hand_back(self) -> None:
        """Mark the entries left here as idle for ``claim_idle`` already, so the other
        replicas' next claim takes them. Best effort: else they are claimed the usual way."""
        left = list(self.holdings.items)
        if not left:
            return
        try:
            async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                owned, _ = await asyncio.shield(
                    self.ledger.renew(left, idle_ms=int(self.claim_idle * 1000))
                )
        except (RedisError, OSError, TimeoutError) as exc:
            log.info("%s could not hand back %d entries (%r): they are claimed after %ss",
                     self.consumer, len(left), exc, self.claim_idle)
            return
        self._counts["handed_back"] += len(owned)

    # ------------------------------------------------------------------ state

    @property
    def held(self) -> int:
        return len(self.holdings)

    @property
    def reader_task(self) -> asyncio.Task[None] | None:
        return self._reader

    @property
    def breaker(self) -> Any:
        return self._breaker

    @property
    def stopped(self) -> str | None:
        """Why the source stopped reading on its own, or None (reading, or stopped on purpose)."""
        return self._stopped_why

    def stats(self) -> SourceStats:
        c = self._counts
        backoffs = self.holdings.backoffs
        return SourceStats(
            read=c["read"], claimed=c["claimed"], recovered=c["recovered"], done=c["done"],
            failed=c["failed"], timed_out=c["timed_out"], retried=c["retried"],
            outage_retries=c["outage_retries"], dead_lettered=c["dead_lettered"],
            malformed=c["malformed"], lost_leases=c["lost_leases"],
            redis_errors=c["redis_errors"], handed_back=c["handed_back"], trimmed=c["trimmed"],
            held=len(self.holdings), awaiting_retry=len(backoffs), retries_due=backoffs.due,
            unacked=len(self.ledger.unacked), capacity=self.capacity,
            group_ready=self.reader.group_ready, stopped=self._stopped_why,
        )

    def _on_pool_event(self, event: str) -> None:
        if event == "paused":  # held: a read in progress takes nothing more
            self.reader.abort_read()
        elif event == "resumed":
            self.holdings.feed_due()
        self.holdings.changed.set()

    def _breaker_open(self) -> bool:
        return self._breaker is not None and state_of(self._breaker) == OPEN

    # ------------------------------------------------------------------ running

    async def _run(self, work: WorkItem) -> None:
        """The pool's handler: enter the user's handler in the very step the pool hands the item
        over (nothing is awaited before it, so no item starts after a pause), then acknowledge.

        The checks before the run use what is known already (the lease, the run count read at
        admission); the run's ``HINCRBY`` is scheduled, not awaited (``Ledger.begin_run``): it
        goes out at the handler's first await and is settled after the handler ends. A handler
        that crashes its process before its first await may leave that run uncounted."""
        if work.entry_id in self.holdings.lost:  # another replica claimed it while it waited
            log.info("skipping %s: its lease passed to another replica", work.entry_id)
            self.holdings.forget(work)
            return
        if self.retry.exhausted(work.runs):
            # Its earlier runs never ended here: each one ended its replica (or its dead letter
            # could not be written). It is not run again.
            await self._bury(work, f"{work.runs} runs started and none of them finished",
                             work.runs)
            return
        self.ledger.begin_run(work, REDIS_OP_TIMEOUT_S)
        await self._handler(work.item)
        work.succeeded = True
        await asyncio.shield(self._ack(work))

    async def _ack(self, work: WorkItem) -> None:
        self._counts["done"] += 1
        await self.ledger.settle_run(work)  # its HINCRBY lands before the HDEL of the ack
        self.holdings.forget(work)
        await self.ledger.ack(work.entry_id, REDIS_OP_TIMEOUT_S)

    def _outage(self, exc: BaseException) -> bool:
        return is_breaker_error(exc) or (
            self._breaker is not None and state_of(self._breaker) != CLOSED
        )

    async def _on_error(self, work: WorkItem, exc: BaseException) -> None:
        """The pool's on_error: a failed run (any exception from the handler, a timeout), or a
        run cut off by the drain (``ItemCancelled``)."""
        if work.succeeded:  # the handler had succeeded; the ack is on its way
            return
        await self.ledger.settle_run(work)  # work.runs: the count Redis answered for this run
        if type(exc) is ItemCancelled:  # this replica's stop cut the run off
            await self._end_run(work)
            self.holdings.forget(work)  # stays pending in the stream for another replica
            return
        self._counts["timed_out" if isinstance(exc, ItemTimeout) else "failed"] += 1
        if work.entry_id in self.holdings.lost:
            log.info("%s failed after its lease passed to another replica: %r", work.entry_id, exc)
            self.holdings.forget(work)
            return
        if self._outage(exc):
            self._counts["outage_retries"] += 1
            log.debug("%s failed during a dependency outage (%r): retried later", work.entry_id, exc)
            await self._end_run(work)
            # Due after one look at the breaker; fed only once it is not open.
            self.holdings.retry_later(work, self._breaker_check)
            return
        if self.retry.exhausted(work.runs):
            await self._bury(work, error_text(exc), work.runs)
            return
        delay = self.retry.delay(work.runs)
        log.warning("%s failed (run %d of %d): %r; retrying in %.2fs",
                    work.entry_id, work.runs, self.retry.max_retries + 1, exc, delay)
        self.holdings.retry_later(work, delay)

    async def _end_run(self, work: WorkItem) -> None:
        try:
            async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                await self.ledger.end_run(work)
        except (RedisError, OSError, TimeoutError) as exc:
            self._counts["redis_errors"] += 1
            log.warning("giving back a run of %s failed (%s): it stays counted", work.entry_id, exc)

    async def _bury(self, work: WorkItem, error: str, runs: int) -> None:
        """Dead-letter a failed item. If Redis does not answer, the entry stays pending here
        and comes back with this replica's claim sweep (and is buried then, without a run)."""
        try:
            async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                if not await self.ledger.owns(work.entry_id):
                    log.warning("%s failed and is no longer pending here: dropped", work.entry_id)
                else:
                    await self.dead_letters.write(work.entry_id, work.fields, error, runs,
                                                  forget_runs=self.ledger.runs_enabled)
                    self._counts["dead_lettered"] += 1
                    log.warning("%s dead-lettered to %s after %d failed runs: %s",
                                work.entry_id, self.dead_stream, runs, error)
        except (RedisError, OSError, TimeoutError) as exc:
            self._counts["redis_errors"] += 1
            log.warning("dead-lettering %s failed (%s): it stays pending, claimed again after %ss",
                        work.entry_id, exc, self.claim_idle)
        self.holdings.forget(work)

    # ------------------------------------------------------------------ leases, acks, trim

    async def _keep_loop(self) -> None:
        every = max(self.claim_idle / 3, 0.05)
        while True:
            check_cancelled()
            await asyncio.sleep(every)
            try:
                async with asyncio.timeout(REDIS_OP_TIMEOUT_S):
                    _, lost = await self.ledger.renew(list(self.holdings.items))
                    self._counts["lost_leases"] += self.holdings.note_lost(lost)
                    await self.ledger.flush()
                    await self._trim()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as exc:
                self._counts["redis_errors"] += 1
                log.warning("renewing leases on %s failed: %s", self.stream, exc)

    async def _trim(self) -> None:
        acked = self._counts["done"] + self._counts["dead_lettered"] + self._counts["malformed"]
        if acked != self._trimmed_at:
            await self.trimmer.trim()
            self._trimmed_at = acked


__all__ = ["READ_BLOCK_S", "SourceStats", "StreamSource", "WorkItem"]
