"""Crew: the worker tasks of one pool, started together, cancelled together, watched meanwhile.

Each worker task runs the pool's loop (``PausablePool._worker``) with its own ``Worker``: the
task and the item it is running. ``start()`` returns once every task has reached its loop
(``arrive()``). A worker task ends only when the pool cancels it (``cancel_running()`` at a
drain's deadline, ``cancel_all()`` at ``stop()``) or when something else does; the second
case is logged at once and ``alive()`` names it until the pool stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

log = logging.getLogger(__name__)

EMPTY: Final = object()
"""``Worker.item`` while the worker runs no item."""


class Worker:
    """One worker task and the item it is running (``EMPTY`` while it runs none)."""

    __slots__ = ("item", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.item: Any = EMPTY


def describe_end(task: asyncio.Task[None]) -> str:
    """How a finished worker task ended, in words: "worker pool-worker-2 was cancelled"."""
    if task.cancelled():
        return f"worker {task.get_name()} was cancelled"
    exc = task.exception()
    if exc is None:
        return f"worker {task.get_name()} returned"
    return f"worker {task.get_name()} died: {exc!r}"


class Crew:
    """The worker tasks of the pool ``name`` (their tasks are named ``{name}-worker-{i}``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.members: list[Worker] = []
        self._arrived = 0
        self._all_arrived = asyncio.Event()
        self._stopping = False

    async def start(self, n: int, loop: Callable[[Worker], Coroutine[Any, Any, None]]) -> None:
        """Start ``n`` tasks, each running ``loop(its Worker)``; return once all ``arrive()``."""
        for i in range(n):
            me = Worker()
            me.task = asyncio.create_task(loop(me), name=f"{self.name}-worker-{i}")
            me.task.add_done_callback(self._ended)
            self.members.append(me)
        await self._all_arrived.wait()

    def arrive(self) -> None:
        """Called by each worker task once it runs its loop (the readiness handshake)."""
        self._arrived += 1
        if self._arrived >= len(self.members):
            self._all_arrived.set()

    def cancel_running(self) -> list[asyncio.Task[None]]:
        """Cancel the workers running an item (a drain past its deadline); return their tasks."""
        self._stopping = True
        running = [m.task for m in self.members if m.item is not EMPTY and m.task is not None]
        for task in running:
            task.cancel()
        return running

    async def cancel_all(self) -> None:
        """Cancel every worker task and wait until they have ended."""
        self._stopping = True
        tasks = [m.task for m in self.members if m.task is not None and not m.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def alive(self) -> str | None:
        """None while every worker task runs (or the pool is stopping them); else how the
        first one that ended did."""
        if self._stopping:
            return None
        for m in self.members:
            if m.task is not None and m.task.done():
                return describe_end(m.task)
        return None

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not self._stopping:
            log.error("%s: %s; the pool is not alive", self.name, describe_end(task))


__all__ = ["EMPTY", "Crew", "Worker", "describe_end"]
