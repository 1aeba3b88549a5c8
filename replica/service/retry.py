"""Retries of failed items: when to give up (``RetryPolicy``) and the wait before each one
(``Backoffs``).

An item whose handler failed runs again after a backoff, exponential with jitter: the wait
before the n-th retry is ``min(retry_backoff_max, retry_backoff * 2**(n-1))`` times a random
factor between 0.5 and 1 ("equal jitter": retries of items that failed together spread out, and
no wait is shorter than half its step). After ``max_retries`` failed runs the item is
dead-lettered. Runs are counted by the source (``fleetgate:{NAME}:runs``), not here.

``Backoffs`` holds the items waiting out their backoff. Such an item is in this replica's hands
(its lease is renewed) but NOT in the pool: it is not in flight, not queued, and a pause does not
wait for it. When its time comes it is *due*: it waits here, in the order it fell due, until the
source puts it back into the pool (at once when the pool runs and has room).
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from replica.service.entry import WorkItem
from replica.service.settings import ReplicaSettings


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many failed runs an item gets, and how long it waits before each retry."""

    max_retries: int
    backoff: float
    """Seconds before the first retry."""
    backoff_max: float
    """The longest wait."""

    @classmethod
    def from_settings(cls, settings: ReplicaSettings) -> RetryPolicy:
        return cls(settings.max_retries, settings.retry_backoff, settings.retry_backoff_max)

    def exhausted(self, failed_runs: int) -> bool:
        """True once an item failed more than ``max_retries`` runs: dead-letter it."""
        return failed_runs > self.max_retries

    def step(self, failed_runs: int) -> float:
        """The wait after ``failed_runs`` failed runs, before jitter."""
        exponent = min(max(failed_runs - 1, 0), 62)
        return min(self.backoff_max, self.backoff * 2.0**exponent)

    def delay(self, failed_runs: int, rng: Callable[[], float] = random.random) -> float:
        """The wait before the next run: between half and all of ``step(failed_runs)``."""
        return self.step(failed_runs) * (0.5 + 0.5 * rng())


class Backoffs:
    """Items waiting out a retry backoff, then due; ``on_due()`` is called as each falls due."""

    def __init__(self, on_due: Callable[[], None]) -> None:
        self._on_due = on_due
        self._waiting: dict[str, tuple[WorkItem, asyncio.TimerHandle]] = {}
        self._due: deque[WorkItem] = deque()

    def __len__(self) -> int:
        return len(self._waiting) + len(self._due)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._waiting or any(w.entry_id == entry_id for w in self._due)

    @property
    def waiting(self) -> int:
        """Items whose backoff has not passed yet."""
        return len(self._waiting)

    @property
    def due(self) -> int:
        """Items whose backoff passed, waiting to go back into the pool."""
        return len(self._due)

    def wait(self, work: WorkItem, delay: float) -> None:
        """Hold ``work`` for ``delay`` seconds, then make it due."""
        if delay <= 0:
            self.make_due(work)
            return
        handle = asyncio.get_running_loop().call_later(delay, self._fall_due, work)
        self._waiting[work.entry_id] = (work, handle)

    def make_due(self, work: WorkItem) -> None:
        """``work`` may run again now (an outage retry, or a backoff that passed)."""
        self._due.append(work)
        self._on_due()

    def _fall_due(self, work: WorkItem) -> None:
        if self._waiting.pop(work.entry_id, None) is not None:
            self.make_due(work)

    def pop_due(self) -> WorkItem | None:
        """The item that fell due first, or None."""
        return self._due.popleft() if self._due else None

    def put_back(self, work: WorkItem) -> None:
        """Return an item ``pop_due`` gave that could not go into the pool; it stays first."""
        self._due.appendleft(work)

    def clear(self) -> list[WorkItem]:
        """Stop every timer; the items that were waiting or due, for the caller to hand back."""
        items = [work for work, _ in self._waiting.values()]
        for _, handle in self._waiting.values():
            handle.cancel()
        items.extend(self._due)
        self._waiting.clear()
        self._due.clear()
        return items


__all__ = ["Backoffs", "RetryPolicy"]
