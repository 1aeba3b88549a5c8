"""PoolView: what a ``PausablePool`` shows of itself, read-only: whether it is paused and by
whom, its counts, whether its workers live, and ``stats()`` (a ``PoolStats`` snapshot).

``PausablePool`` inherits it; the state it reads is the pool's own, set by ``replica.pool.pool``.
"""

from __future__ import annotations

import time
from collections import deque

from replica.pool.crew import Crew
from replica.pool.holds import Holds
from replica.pool.runner import ItemRunner
from replica.pool.stats import PoolStats
from replica.types import Item


class PoolView:
    """The read-only side of ``PausablePool``."""

    # the pool's state, kept by PausablePool (replica.pool.pool)
    _runner: ItemRunner
    _workers: int
    _maxsize: int
    _items: deque[Item]
    _holds: Holds
    _in_flight: int
    _crew: Crew
    _closed: bool
    _started: bool
    _put: int
    handed_back: list[Item]

    @property
    def paused(self) -> bool:
        return bool(self._holds)

    @property
    def holds(self) -> dict[str, str]:
        """``{source: reason}`` of the pauses in force."""
        return dict(self._holds.items)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return len(self._items)

    @property
    def quiet(self) -> bool:
        """Paused and nothing in flight."""
        return self.paused and self._in_flight == 0

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def closed(self) -> bool:
        return self._closed

    def alive(self) -> str | None:
        """None while every worker task runs (or before start, or once drained); else which
        one is gone and how: "worker pool-worker-2 was cancelled" (a handler cannot end one)."""
        if not self._started or self._closed:
            return None
        return self._crew.alive()

    def stats(self) -> PoolStats:
        since = self._holds.since_monotonic
        runner = self._runner
        return PoolStats(
            processed=runner.processed,
            failed=runner.failed,
            timed_out=runner.timed_out,
            cancelled=runner.cancelled,
            put=self._put,
            handed_back=len(self.handed_back),
            in_flight=self._in_flight,
            queued=self.queued,
            workers=self._workers,
            maxsize=self._maxsize,
            paused=self.paused,
            holds=self.holds,
            paused_since=self._holds.since,
            pause_seconds=0.0 if since is None else time.monotonic() - since,
            closed=self._closed,
        )


__all__ = ["PoolView"]
