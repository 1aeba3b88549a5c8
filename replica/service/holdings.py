"""Holdings: the work items in this replica's hands, and where each one is.

Every item held is pending for this replica in the stream (its lease renewed) and in
``items``, and is exactly one of:

* **in the pool**: queued, or running in the handler (or being settled just after its run);
* **out of the pool until a retry** (``backoffs``): waiting out its backoff, then due, until
  the pool runs and has room for it.

The pool holds at most ``capacity`` items (queued and running); as many again may wait out a
backoff, so items failing during an outage do not stop other items from being read and tried
(which is what lets a circuit breaker see the outage), while the total stays bounded.
``changed`` is set whenever room may have opened: an item left, a retry fell due.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from replica.errors import PoolClosed
from replica.pool.pool import PausablePool
from replica.service.entry import WorkItem
from replica.service.retry import Backoffs

log = logging.getLogger(__name__)


class Holdings:
    """The items this replica holds: in the pool, or out of it until their retry."""

    def __init__(
        self,
        pool: PausablePool,
        capacity: int,
        counts: Counter[str],
        breaker_open: Callable[[], bool],
    ) -> None:
        self.pool = pool
        self.capacity = capacity
        self._counts = counts
        self._breaker_open = breaker_open
        self.items: dict[str, WorkItem] = {}
        self.lost: set[str] = set()
        """Held here, but another replica claimed them meanwhile (skipped if not started)."""
        self.backoffs = Backoffs(self._on_due)
        self.changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.items

    def in_pool(self) -> int:
        """Items queued or running (or being settled after their run)."""
        return len(self.items) - len(self.backoffs)

    def room(self) -> int:
        """How many more entries to take: the pool's room after the due retries, and at most
        ``capacity`` more held than that while some wait out a backoff."""
        return min(self.capacity - self.in_pool() - self.backoffs.due,
                   2 * self.capacity - len(self.items))

    def take(self, work: WorkItem) -> bool:
        """Hold a new item and queue it in the pool; False (not held) if the pool refuses."""
        self.items[work.entry_id] = work
        try:
            self.pool.put_nowait(work)
        except (PoolClosed, asyncio.QueueFull):
            # Stopping (or a bound we did not expect): the entry stays pending for others.
            self.items.pop(work.entry_id, None)
            return False
        return True

    def forget(self, work: WorkItem) -> None:
        """``work`` is no longer held here (done, dead, or left pending for others)."""
        if self.items.get(work.entry_id) is work:
            del self.items[work.entry_id]
        self.lost.discard(work.entry_id)
        self.changed.set()

    def retry_later(self, work: WorkItem, delay: float) -> None:
        """Take ``work`` out of the pool's count until ``delay`` seconds have passed (its place
        in the pool is free meanwhile)."""
        self.backoffs.wait(work, delay)
        self.changed.set()

    def note_lost(self, ids: list[str]) -> int:
        """Mark entries another replica claimed while held here; how many are new."""
        new = 0
        for entry_id in ids:
            if entry_id in self.items and entry_id not in self.lost:
                self.lost.add(entry_id)
                new += 1
                log.warning("%s was claimed by another replica while held here", entry_id)
        return new

    def _on_due(self) -> None:
        self.feed_due()
        self.changed.set()

    def feed_due(self) -> None:
        """Put the retries that are due back into the pool, while it runs and has room."""
        while self.backoffs.due and not self.pool.paused and not self._breaker_open():
            work = self.backoffs.pop_due()
            if work is None:
                return
            if work.entry_id in self.lost or work.entry_id not in self.items:
                self.forget(work)
                continue
            if self.in_pool() > self.capacity:  # it counts in the pool since it left backoffs
                self.backoffs.put_back(work)
                return
            try:
                self.pool.put_nowait(work)
            except (PoolClosed, asyncio.QueueFull):
                self.backoffs.put_back(work)
                return
            self._counts["retried"] += 1

    def clear_retries(self) -> int:
        """Stop every backoff (at a stop); the items stay held, to be handed back."""
        return len(self.backoffs.clear())


__all__ = ["Holdings"]
