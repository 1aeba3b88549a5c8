"""Waiters: callers parked on futures until the pool wakes them, one at a time or all at once.

The pool parks three kinds of callers this way: ``wait_quiet()`` (until nothing is in
flight), ``join()`` (until every item is done) and ``put()`` on a full bounded queue (until
there is room for one more item). Woken callers re-check their condition themselves.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Waiters:
    """Futures parked until woken.

    With ``relay=True`` (the producers of a full queue, woken one per free slot) a waiter
    whose wait ends by an exception after it was woken passes its wake-up on to the next one,
    so a cancelled ``put()`` never swallows the room another producer is waiting for.
    """

    __slots__ = ("_relay", "pending")

    def __init__(self, *, relay: bool = False) -> None:
        self.pending: deque[asyncio.Future[None]] = deque()
        """The parked futures, oldest first: the pool's hot path tests it (one C-level check)
        before calling ``wake_one()``. Always the same deque."""
        self._relay = relay

    def __len__(self) -> int:
        return len(self.pending)

    async def wait(self, timeout: float | None = None) -> None:
        """Park until woken. Raises ``TimeoutError`` past ``timeout`` (None: no limit)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except BaseException:
            fut.cancel()
            if fut in self.pending:
                self.pending.remove(fut)
            elif self._relay and fut.done() and not fut.cancelled():
                self.wake_one()  # woken, then cancelled: pass the wake-up on
            raise

    def wake_one(self) -> None:
        """Wake the oldest waiter still waiting (it leaves the line)."""
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def wake_all(self) -> None:
        """Wake every waiter."""
        futures = list(self.pending)
        self.pending.clear()
        for fut in futures:
            if not fut.done():
                fut.set_result(None)


__all__ = ["Waiters"]
