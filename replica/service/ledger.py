"""Ledger: what a replica writes to Redis about the work entries in its hands.

* **Run counts** (``fleetgate:{NAME}:runs``, a hash: entry id -> runs started). Before each run
  of the handler the source calls ``begin_run`` (``HINCRBY``); the reply is the item's run count
  on every replica, this run included. Reads, claims and hand-backs do not touch it, so a retry
  decision counts runs of the handler, never deliveries. A run that was not the item's doing (the
  dependency was down, the replica's own stop cut it off) is given back (``end_run``, ``HINCRBY
  -1``). A run that kills its replica stays counted: an item that keeps doing so is
  dead-lettered like any other failing item. The count is deleted with the entry's ``XACK``.
* **Acks**: ``XACK`` and the ``HDEL`` of the count in one round trip. An ack that cannot reach
  Redis waits in ``unacked`` and goes out with the next lease round (``flush``); ``acking`` holds
  the ids whose ack is on its way, so the replica's own claim sweep never takes them again.
* **Leases**: ``renew`` resets the idle time of the entries the replica still owns (``XCLAIM
  ... JUSTID``, after an ``XPENDING`` per entry) and says which ones another replica took.

A replica that may not write the runs hash (an ACL without ``fleetgate:{NAME}:runs``) logs it
once and counts runs in memory only (``runs_enabled`` turns False).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, RedisError, ResponseError

from replica.service.entry import WorkItem

log = logging.getLogger(__name__)


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

    # ------------------------------------------------------------------ runs

    async def begin_run(self, work: WorkItem) -> None:
        """Count a run of ``work``: ``work.runs`` becomes its count on every replica. If Redis
        does not answer, the run is counted here only (the item runs all the same)."""
        work.counted = False
        if not self.runs_enabled:
            work.runs += 1
            return
        try:
            runs = await self._redis.hincrby(self.runs_key, work.entry_id, 1)
        except (RedisError, OSError) as exc:
            work.runs += 1
            if _refused(exc):
                self._refuse_runs(exc)
            else:
                self._counts["redis_errors"] += 1
                log.warning("counting a run of %s failed (%s): counted here only",
                            work.entry_id, exc)
            return
        work.runs = max(int(runs), 1)
        work.counted = True

    async def end_run(self, work: WorkItem) -> None:
        """Give back the current run of ``work``: it did not fail by the item's doing."""
        work.runs = max(work.runs - 1, 0)
        if work.counted:
            work.counted = False
            await self._redis.hincrby(self.runs_key, work.entry_id, -1)

    def _refuse_runs(self, exc: BaseException) -> None:
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


__all__ = ["Ledger"]
