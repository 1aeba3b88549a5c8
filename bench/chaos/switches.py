"""Failovers no fault scheduled, recorded as faults (``unplanned-failover``).

A Sentinel group or a Cluster fails its primary over by itself when it finds it unreachable
long enough (``down-after-milliseconds`` and ``cluster-node-timeout`` are 1 s here): on a loaded
machine, a primary slow to answer, or sentinels that lost their links to it, are enough. Such a
failover is what the scheduled ones are (the old primary, not yet demoted, keeps taking the
writes of the clients still connected to it, which its demotion discards; those clients read
its state, not the new primary's), but the history said nothing of it, so the checker judged
what it did to the fleet as if nothing had happened: changes "applied late" by replicas still
on the old primary, and duplicates "unexplained".

``SwitchWatch`` asks the topology every ``POLL_S`` which node serves the fleet's primary. A
change seen while no scheduled failover is under way (``Injector.moving``) is written as a
fault window of kind ``unplanned-failover``: it starts ``LEAD_S`` before it was seen (the
promotion precedes the sentinels' naming it) and ends once the old primary no longer serves
as one (down, or demoted to a replica), so that the checker judges it as the scheduled ones.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Final

from bench.chaos.faults import REDIS_TARGET, UNPLANNED_FAILOVER
from bench.chaos.ha import HaRedis
from bench.chaos.history import HistoryWriter

POLL_S: Final = 0.25
LEAD_S: Final = 2.0
"""How long before a new primary is named its promotion may have begun (the sentinels agree,
elect a leader and promote in about a second here)."""
DEMOTION_TIMEOUT_S: Final = 60.0
FIRST_ID: Final = 100_001
"""Ids of these windows, apart from the schedule's (1, 2, ...)."""


class SwitchWatch:
    """Watches ``ha`` for primaries that change while ``moving()`` is False."""

    def __init__(self, ha: HaRedis, history: HistoryWriter,
                 moving: Callable[[], int]) -> None:
        self.ha = ha
        self.history = history
        self.moving = moving
        """A count the injector moves on each scheduled failover's start and end, odd while
        one is under way."""
        self.ids = itertools.count(FIRST_ID)
        self.seen = 0
        """Unplanned failovers recorded."""
        self.polls = 0
        self.started = asyncio.Event()
        """Set once the primary of the start is known (a failover after it is seen)."""

    async def run(self) -> None:
        known = await asyncio.to_thread(self.ha.named_primary)
        generation = self.moving()
        self.started.set()
        while True:
            await asyncio.sleep(POLL_S)
            now = await asyncio.to_thread(self.ha.named_primary)
            current = self.moving()
            self.polls += 1
            if now is None:  # not told this time: the next poll judges (generation kept)
                continue
            if current != generation or current % 2:  # a scheduled one: its own window
                generation, known = current, now
                continue
            if now == known:
                continue
            if known is not None:
                await self._window(known, now)
            known = now

    async def _window(self, old: int, new: int) -> None:
        seen = time.time()
        fid = next(self.ids)
        self.seen += 1
        self.history.write("fault-start", t=seen - LEAD_S, id=fid, kind=UNPLANNED_FAILOVER,
                           target=REDIS_TARGET, params={"old": old, "new": new, "seen": seen})
        deadline = time.monotonic() + DEMOTION_TIMEOUT_S
        while time.monotonic() < deadline:
            if await asyncio.to_thread(self.ha.demoted, old):
                break
            await asyncio.sleep(POLL_S)
        self.history.write("fault-end", id=fid, kind=UNPLANNED_FAILOVER, target=REDIS_TARGET,
                           old=old, new=new)


__all__ = ["SwitchWatch"]
