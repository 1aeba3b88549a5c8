"""PoolStats: a snapshot of a pool's counters and state, taken by ``PausablePool.stats()``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A snapshot of the pool's counters and state."""

    processed: int
    """Items whose handler returned."""
    failed: int
    """Items whose handler raised (timeouts not included), ``CancelledError`` while its worker
    was not cancelled, ``SystemExit`` and ``KeyboardInterrupt`` included."""
    timed_out: int
    """Items cancelled at ``item_timeout``."""
    cancelled: int
    """Items cut off by a drain past its deadline."""
    put: int
    """Items accepted by ``put()``/``put_nowait()`` in all."""
    handed_back: int
    """Items returned unstarted by ``drain()``."""
    in_flight: int
    queued: int
    workers: int
    maxsize: int
    paused: bool
    holds: Mapping[str, str]
    paused_since: datetime | None
    """Wall-clock UTC time the current pause began, or None while running."""
    pause_seconds: float
    """How long the current pause has lasted (0.0 while running)."""
    closed: bool


__all__ = ["PoolStats"]
