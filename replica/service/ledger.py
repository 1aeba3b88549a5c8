"""Ledger: what a replica writes to Redis about the work entries in its hands.

* **Run counts** (``fleetgate:{NAME}:runs``, a hash: entry id -> runs started). The source knows
  each item's count before its run without asking Redis then: ``learn_runs`` reads the counts of
  each batch it reads or claims with one ``HMGET``, at admission (an entry the hash does not
  know has 0 runs). Nothing is awaited between the pool handing an item over and the user's
  handler being entered (so no item starts after a pause, by construction): ``begin_run``
  counts the run here at once and *schedules* the ``HINCRBY`` as a task, which is sent when the
  handler first yields to the event loop (its first await that waits); after the handler ends,
  ``settle_run`` waits for that task (bounded by its own timeout) and takes its reply, the
  item's run count on every replica, this run included. So a handler that crashes its process
  before its first await may leave that run uncounted: its item is not dead-lettered for such
  runs and goes on being claimed. Reads, claims and hand-backs do not touch the hash, so a
  retry decision counts runs of the handler, never deliveries. A run that was not the item's
  doing (the dependency was down, the replica's own stop cut it off) is given back (``end_run``,
  ``HINCRBY -1``). A run that kills its replica (once its count went out) stays counted: an item
  that keeps doing so is dead-lettered like any other failing item. The count is deleted with
  the entry's ``XACK`` (sent only once the run's ``HINCRBY`` was answered or given up).
* **Acks**: ``XACK`` and the ``HDEL`` of the count in one round trip. An ack that cannot reach
  Redis waits in ``unacked`` and goes out with the next lease round (``flush``); ``acking`` holds
  the ids whose ack is on its way, so the replica's own claim sweep never takes them again.
* **Leases**: ``renew`` resets the idle time of the entries the replica still owns (``XCLAIM
  ... JUSTID``, after an ``XPENDING`` per entry) and says which ones another replica took.
  ``hand_back`` marks entries idle for ``claim_idle`` already (``XCLAIM ... IDLE ... JUSTID``),
  so the group's next claim sweep takes them; ``pending_here`` lists what is pending for this
  consumer (``XPENDING ... <consumer>``, by pages).

A replica that may not read or write the runs hash (an ACL without ``fleetgate:{NAME}:runs``)
logs it once and counts runs in memory only (``runs_enabled`` turns False).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from redis.client import NEVER_DECODE
from redis.exceptions import NoPermissionError, RedisError, ResponseError

from replica.service.entry import WorkItem, text

log = logging.getLogger(__name__)

PENDING_PAGE: Final = 500
"""Rows per ``XPENDING`` of ``pending_here``."""


def _count_of(value: bytes | str | None) -> int:
    """A count from the runs hash (raw bytes, or None when absent): 0 unless a positive int."""
    if value is None:
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        return 0


def _refused(exc: BaseException) -> bool:
    """NOPERM: the ACL does not allow the command or the key."""
    return isinstance(exc, NoPermissionError) or (
        isinstance(exc, ResponseError) and str(exc).startswith("NOPERM")
    )


class Ledger:
    """Run counts, acknowledgements and leases of one consumer of the work stream."""

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        stream: str,
        group: str,
        consumer: str,
        runs_key: str,
        counts: Counter[str],
    ) -> None:
        self._redis = redis
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.runs_key = runs_key
        self._counts = counts
        self.runs_enabled = True
        self.unacked: set[str] = set()
        """Done (or gone from the stream), their XACK not answered yet: retried by ``flush``."""
        self.acking: set[str] = set()
        """Done, their XACK sent and not answered yet."""
        self._counting: set[asyncio.Task[None]] = set()
        """Run counts (``HINCRBY``) sent and not answered yet."""

    # ------------------------------------------------------------------ runs

    async def learn_runs(self, works: Sequence[WorkItem], timeout: float) -> None:
        """Set each item's ``runs`` to its count in the runs hash (one ``HMGET``), at admission,
        off the start path. If Redis does not answer within ``timeout`` seconds, the counts stay
        0 until the first run's ``HINCRBY`` answers (an item whose runs are used up may then
        run once more)."""
        if not works or not self.runs_enabled:
            return
        try:
            async with asyncio.timeout(timeout):
                counts = await self._redis.execute_command(  # type: ignore[no-untyped-call]
                    "HMGET", self.runs_key, *(work.entry_id for work in works),
                    **{NEVER_DECODE: True},
                )
        except (RedisError, OSError, TimeoutError) as exc:
            if _refused(exc):
                self._refuse_runs(exc)
            else:
                self._counts["redis_errors"] += 1
                log.warning("reading the run counts of %d entries failed (%s): taken as 0 "
                            "until their runs are counted", len(works), exc)
            return
        for work, count in zip(works, counts, strict=True):
            work.runs = _count_of(count)

    def begin_run(self, work: WorkItem, timeout: float) -> None:
        """Count a run of ``work`` without waiting for Redis: ``work.runs`` goes up by one here
        at once and the ``HINCRBY`` is scheduled as a task, sent when the caller first yields
        to the event loop and bounded by ``timeout`` seconds. Call ``settle_run`` after the run:
        then ``work.runs`` is its count on every replica (or counted here only, when Redis did
        not answer) and ``work.counted`` says whether the hash has this run.

        The caller may enter the user's handler right after this returns, in the same step:
        a handler that crashes its process before its first await leaves this run uncounted."""
        work.runs += 1
        work.counted = False
        if not self.runs_enabled:
            return
        task = asyncio.get_running_loop().create_task(
            self._count(work, timeout), name=f"count-run-{work.entry_id}"
        )
        work.counting = task
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def _count(self, work: WorkItem, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                runs = await self._redis.hincrby(self.runs_key, work.entry_id, 1)
        except (RedisError, OSError, TimeoutError) as exc:
            if _refused(exc):
                self._refuse_runs(exc)
            else:
                self._counts["redis_errors"] += 1
                log.warning("counting a run of %s failed (%s): counted here only",
                            work.entry_id, exc)
            return
        work.runs = max(int(runs), 1)
        work.counted = True

    async def settle_run(self, work: WorkItem) -> None:
        """Wait until the ``HINCRBY`` of ``work``'s current run is answered or given up (at
        most the ``timeout`` given to ``begin_run``). Cancelling the wait leaves the count
        going."""
        task = work.counting
        if task is None:
            return
        if not task.done():
            await asyncio.wait((task,))
        work.counting = None

    async def settle_all(self) -> None:
        """Wait until every run's count is answered or given up (at a stop)."""
        if self._counting:
            await asyncio.wait(set(self._counting))

    async def end_run(self, work: WorkItem) -> None:
        """Give back the current run of ``work`` (settled): it did not fail by the item's
        doing."""
        work.runs = max(work.runs - 1, 0)
        if work.counted:
            work.counted = False
            await self._redis.hincrby(self.runs_key, work.entry_id, -1)

    def _refuse_runs(self, exc: BaseException) -> None:
        if not self.runs_enabled:  # said once
            return
        self.runs_enabled = False
        log.warning(
            "this replica may not write %s (%s): runs are counted in memory only, so a "
            "hand-off starts an item's count again", self.runs_key, exc,
        )

    # ------------------------------------------------------------------ acks

    async def ack(self, entry_id: str, timeout: float) -> None:
        """Acknowledge a done entry; if Redis does not answer within ``timeout`` seconds, keep
        it for ``flush``."""
        self.acking.add(entry_id)
        try:
            async with asyncio.timeout(timeout):
                await self.send_acks([entry_id])
        except (RedisError, OSError, TimeoutError) as exc:
            self._counts["redis_errors"] += 1
            self.unacked.add(entry_id)
            log.warning("ack of %s failed (%s); will retry", entry_id, exc)
        finally:
            self.acking.discard(entry_id)

    async def send_acks(self, ids: Sequence[str]) -> None:
        """``XACK`` the entries and delete their run counts, in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xack(self.stream, self.group, *ids)
            if self.runs_enabled:
                pipe.hdel(self.runs_key, *ids)
            replies = await pipe.execute(raise_on_error=False)
        if isinstance(replies[0], Exception):
            raise replies[0]
        if len(replies) > 1 and isinstance(replies[1], Exception):
            if not _refused(replies[1]):
                raise replies[1]
            self._refuse_runs(replies[1])

    async def flush(self) -> None:
        """Send the acks that could not be sent."""
        if not self.unacked:
            return
        ids = sorted(self.unacked)
        try:
            await self.send_acks(ids)
        except (RedisError, OSError) as exc:
            self._counts["redis_errors"] += 1
            log.warning("%d acks still unsent (%s)", len(ids), exc)
            return
        self.unacked.difference_update(ids)

    # ------------------------------------------------------------------ leases

    async def owns(self, entry_id: str) -> bool:
        """Is ``entry_id`` still pending under this consumer?"""
        rows = await self._redis.xpending_range(
            self.stream, self.group, entry_id, entry_id, 1, consumername=self.consumer
        )
        return bool(rows)

    async def renew(
        self, ids: Sequence[str], idle_ms: int | None = None
    ) -> tuple[list[str], list[str]]:
        """Reset the idle time of the entries of ``ids`` this consumer still owns (to
        ``idle_ms`` when given: a hand-back). Returns (owned, taken by another replica)."""
        if not ids:
            return [], []
        async with self._redis.pipeline(transaction=False) as pipe:
            for entry_id in ids:
                pipe.xpending_range(
                    self.stream, self.group, entry_id, entry_id, 1, consumername=self.consumer
                )
            replies: list[Any] = await pipe.execute()
        owned = [entry_id for entry_id, rows in zip(ids, replies, strict=True) if rows]
        lost = [entry_id for entry_id, rows in zip(ids, replies, strict=True) if not rows]
        if owned:
            await self._redis.xclaim(
                self.stream, self.group, self.consumer, 0, owned,  # type: ignore[arg-type]
                idle=idle_ms, justid=True,
            )
        return owned, lost

    async def hand_back(self, ids: Sequence[str], idle_ms: int) -> None:
        """Mark entries pending here idle for ``idle_ms`` already (``XCLAIM <stream> <group>
        <consumer> 0 <ids> IDLE <idle_ms> JUSTID``): a claim sweep for entries idle that long
        takes them at once. The run counts are left as they are."""
        if ids:
            await self._redis.xclaim(
                self.stream, self.group, self.consumer, 0, list(ids),
                idle=idle_ms, justid=True,
            )

    async def pending_here(self) -> list[tuple[str, int]]:
        """The entries pending for this consumer, each with its idle time in ms (``XPENDING
        <stream> <group> <start> + <count> <consumer>``, a page at a time)."""
        found: list[tuple[str, int]] = []
        start = "-"
        while True:
            rows: list[dict[str, Any]] = await self._redis.xpending_range(
                self.stream, self.group, start, "+", PENDING_PAGE, consumername=self.consumer
            )
            found += [(text(row["message_id"]), int(row["time_since_delivered"]))
                      for row in rows]
            if len(rows) < PENDING_PAGE:
                return found
            start = f"({found[-1][0]}"


__all__ = ["Ledger"]
