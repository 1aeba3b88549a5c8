"""SourceStats: a snapshot of the work source's counters and of where its items are, taken by
``StreamSource.stats()`` (the replica's metrics and its admin view read it)."""

from __future__ import annotations

from dataclasses import dataclass


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
    """Entries left pending (at ``stop()``, or read once the pool was held) and marked idle
    for the group's next claim sweep to take at once."""
    trimmed: int
    """Acknowledged entries this replica trimmed from the stream."""
    held: int
    """Items in this replica's hands (queued + in flight + awaiting retry)."""
    awaiting_retry: int
    """Items out of the pool until their retry: waiting out a backoff, or due."""
    retries_due: int
    """Of those, the ones whose backoff passed, waiting for the pool (paused, full)."""
    unacked: int
    capacity: int
    group_ready: bool
    stopped: str | None = None
    """Why the source stopped reading on its own (a defect), or None."""


__all__ = ["SourceStats"]
