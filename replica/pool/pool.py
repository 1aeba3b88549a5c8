"""PausablePool: an asyncio worker pool that can stop taking work without stopping.

Design (why it is not the guide's Event gate):

* Items wait in one FIFO deque, and the only way an item leaves it to run is a worker popping
  the head *and entering the handler in the same synchronous step*, while no hold is on. So
  items start in put order across any number of pause/resume cycles, and no item starts after
  ``pause()`` (or ``hold()``) ran. Nothing is ever put back: the guide's put-back moves an item
  to the tail.
* An idle worker parks on a future. ``put()`` and ``resume()`` only *wake* parked workers; a
  woken worker re-checks the gate and the deque when it runs, and parks again if the pool was
  paused meanwhile or another worker took the item. A worker that was already waiting for an
  item when the pause began therefore takes nothing.
* The gate is a set of named holds (``Holds``): paused while any source holds it.
* The hot path has no per-item Event wait: a busy worker pops and runs; only an idle worker
  creates a future.

Where an item is, at every moment: in the deque (``queued``), in a handler (``in_flight``),
done, or handed back by ``drain()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Final

from replica.errors import PoolClosed
from replica.pool.crew import EMPTY, Crew, Worker
from replica.pool.holds import Holds
from replica.pool.listeners import Listeners
from replica.pool.runner import ItemRunner, as_failure
from replica.pool.stats import PoolStats
from replica.pool.view import PoolView
from replica.pool.waiters import Waiters
from replica.types import ErrorHook, Handler, Item, Listener

log = logging.getLogger(__name__)

DRAIN_SOURCE: Final = "drain"


class PausablePool(PoolView):
    """A pool of asyncio workers that can be paused by several independent sources.

    ``handler`` is ``async def handler(item)``; ``on_error(item, exc)`` (plain or async) hears
    about failures, timeouts and cancelled items, always as an ``Exception`` (whatever the
    handler raised: see ``replica.pool.runner``). ``maxsize`` bounds the queue (0: unbounded).
    What it shows of itself (``paused``, ``holds``, ``stats()``, ...) is ``PoolView``'s.
    """

    def __init__(
        self,
        handler: Handler,
        workers: int = 4,
        maxsize: int = 0,
        item_timeout: float | None = None,
        on_error: ErrorHook | None = None,
        *,
        name: str = "pool",
        shutdown_grace_period_s: float = 30.0,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if maxsize < 0:
            raise ValueError("maxsize must be 0 (unbounded) or more")
        if item_timeout is not None and item_timeout <= 0:
            raise ValueError("item_timeout must be positive or None")
        self._runner = ItemRunner(handler, item_timeout, on_error, name)
        self._workers = workers
        self._maxsize = maxsize
        self.name = name
        self.shutdown_grace_period_s = shutdown_grace_period_s

        self._items: deque[Item] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()  # parked workers, oldest first
        self._waking = 0  # parked workers woken whose loop has not run yet
        self._open = True  # no hold is on: the one flag the hot path reads
        self._putters = Waiters(relay=True)  # producers waiting for room, oldest first
        self._quiet_waiters = Waiters()
        self._join_waiters = Waiters()
        self._listeners = Listeners(name)
        self._holds = Holds()
        self._in_flight = 0
        self._unfinished = 0
        self._crew = Crew(name)
        self._closed = False
        self._started = False
        self._drained: list[Item] | None = None
        self.handed_back: list[Item] = []
        """Items the last drain returned unstarted (kept so ``async with`` loses nothing)."""
        self._put = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> PausablePool:
        """Start the workers; returns once every worker is parked and ready. Idempotent."""
        if self._closed:
            raise PoolClosed(f"{self.name} is closed")
        if self._started:
            return self
        self._started = True
        await self._crew.start(self._workers, self._worker)  # once every worker runs its loop
        return self

    async def __aenter__(self) -> PausablePool:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self, timeout: float | None = None) -> list[Item]:
        """Drain (with ``shutdown_grace_period_s`` unless ``timeout`` is given), then cancel the
        workers. Idempotent. Returns the unstarted items, also kept in ``handed_back``."""
        if self._drained is None:
            try:
                await self.drain(self.shutdown_grace_period_s if timeout is None else timeout)
            except BaseException:
                await self._crew.cancel_all()
                raise
        await self._crew.cancel_all()
        return list(self.handed_back)

    # ------------------------------------------------------------------ producers

    def put_nowait(self, item: Item) -> None:
        """Add ``item``; raises ``asyncio.QueueFull`` when the bounded queue is full."""
        if self._closed:
            raise PoolClosed(f"{self.name} is drained: it takes no new items")
        if self._maxsize and len(self._items) >= self._maxsize:
            raise asyncio.QueueFull
        self._put += 1
        self._unfinished += 1
        self._items.append(item)
        if self._idle and self._open and self._waking < len(self._items):
            self._wake_one()

    async def put(self, item: Item) -> None:
        """Add ``item``, waiting while the bounded queue is full (paused or not)."""
        while self._maxsize and len(self._items) >= self._maxsize and not self._closed:
            await self._putters.wait()  # woken once per item a worker takes (or by a drain)
        self.put_nowait(item)

    # ------------------------------------------------------------------ pause switch

    def hold(self, reason: str, source: str = "operator") -> bool:
        """Pause on behalf of ``source`` without waiting. True when the pool just paused.

        Holding again with the same source updates its reason.
        """
        if source in self._holds and self._holds.items[source] == reason:
            return False
        just_paused = self._holds.hold(source, reason)
        self._open = False
        if just_paused:
            log.info(
                "%s paused by %s (%s): %d in flight, %d queued",
                self.name, source, reason, self._in_flight, self.queued,
            )
            self._listeners.emit("paused")
            if self._in_flight == 0:
                self._listeners.emit("quiet")
        else:
            log.info("%s hold %s: %s (held by %s)", self.name, source, reason, self._holds.names())
        return just_paused

    async def pause(
        self, reason: str = "paused", source: str = "operator", timeout: float | None = 30.0
    ) -> None:
        """Stop handing out items at once, then wait until nothing is in flight.

        Raises ``TimeoutError`` when in-flight items outlast ``timeout``; the pool stays paused.
        Cancelling the wait leaves the hold in place.
        """
        self.hold(reason, source)
        await self.wait_quiet(timeout)

    def resume(self, source: str = "operator") -> bool:
        """Release ``source``'s hold. True when that resumed the pool; a no-op for a source that
        holds nothing."""
        if source not in self._holds or (source == DRAIN_SOURCE and self._closed):
            return False
        resumed = self._holds.release(source)
        self._open = not self._holds
        if resumed and not self._closed:
            log.info("%s resumed by %s: %d queued", self.name, source, self.queued)
            self._dispatch()
            self._listeners.emit("resumed")
        else:
            log.info("%s released by %s, still held by %s", self.name, source, self._holds.names())
        return resumed

    release = resume

    async def wait_quiet(self, timeout: float | None = None) -> None:
        """Wait until nothing is in flight (does not pause by itself)."""
        if self._in_flight:
            await self._quiet_waiters.wait(timeout)

    async def wait_for(self, paused: bool) -> None:
        """Wait until the pool is paused (``True``) or running (``False``)."""
        await self._holds.wait_for(paused)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` on "paused", "resumed", "quiet" (paused and nothing in
        flight) and "drained". Listeners run synchronously and must not block."""
        self._listeners.add(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    # ------------------------------------------------------------------ join / drain

    async def join(self, timeout: float | None = None) -> None:
        """Wait until every item put so far is done (or handed back)."""
        if self._unfinished:
            await self._join_waiters.wait(timeout)

    async def drain(self, timeout: float | None = 30.0) -> list[Item]:
        """Stop taking items, let in-flight ones finish, return the unstarted ones in order.

        Past ``timeout`` the in-flight items are cancelled and reported to ``on_error`` with
        ``ItemCancelled``. After a drain, ``put()`` raises ``PoolClosed``. A second call returns
        the same list.
        """
        if self._drained is not None:
            return list(self._drained)
        self._closed = True
        self._holds.hold(DRAIN_SOURCE, "draining")
        self._open = False
        unstarted = list(self._items)
        self._items.clear()
        self._unfinished -= len(unstarted)
        self.handed_back = unstarted
        self._drained = unstarted
        self._putters.wake_all()  # they will see PoolClosed
        log.info(
            "%s draining: %d in flight, %d handed back", self.name, self._in_flight, len(unstarted)
        )
        try:
            await self.wait_quiet(timeout)
        except TimeoutError:
            running = self._crew.cancel_running()
            log.warning(
                "%s drain deadline (%ss) passed: cancelled %d in-flight items",
                self.name, timeout, len(running),
            )
            if running:  # each reports its item to on_error (ItemCancelled), then ends
                await asyncio.shield(asyncio.wait(running, timeout=5.0))
        if self._unfinished == 0:
            self._join_waiters.wake_all()
        self._listeners.emit("drained")
        return list(unstarted)

    # ------------------------------------------------------------------ internals

    def _wake_one(self) -> None:
        self._waking += 1
        self._idle.popleft().set_result(None)

    def _dispatch(self) -> None:
        """Wake as many parked workers as there are queued items nobody is coming for."""
        while self._idle and self._open and self._waking < len(self._items):
            self._wake_one()

    def _settle(self) -> None:
        """Called when in-flight work drops to zero or every item is done."""
        if self._in_flight == 0:
            self._quiet_waiters.wake_all()
            if not self._open and self._listeners:
                self._listeners.emit("quiet")
        if self._unfinished == 0:
            self._join_waiters.wake_all()

    async def _worker(self, me: Worker) -> None:
        loop = asyncio.get_running_loop()
        items = self._items
        runner = self._runner
        handler = runner.handler
        putters = self._putters
        waiting_putters = putters.pending
        quiet_waiters = self._quiet_waiters.pending
        self._crew.arrive()
        while True:
            # -- take the head, only while the gate is open; the handler is entered in this
            # same synchronous step, so start order is pop order is put order.
            if self._open and items:
                item = items.popleft()
                if waiting_putters:
                    putters.wake_one()
            else:
                fut: asyncio.Future[None] = loop.create_future()
                self._idle.append(fut)
                try:
                    await fut
                except asyncio.CancelledError:
                    if fut in self._idle:
                        self._idle.remove(fut)
                    elif fut.done() and not fut.cancelled():  # woken, then cancelled: pass it on
                        self._waking -= 1
                        self._dispatch()
                    raise
                self._waking -= 1
                continue  # re-check the gate and the deque: a pause may have come meanwhile
            # -- run it
            self._in_flight += 1
            me.item = item
            try:
                if runner.item_timeout is None:
                    await handler(item)
                else:
                    await runner.call_with_deadline(item)
                runner.processed += 1
            except GeneratorExit:  # the coroutine is being closed: nothing may be awaited
                raise
            except BaseException as exc:
                failure = as_failure(exc)  # whatever the handler raised fails its item only
                if failure is None:  # this worker is being cancelled: the item is cut off
                    self._done(me)
                    await runner.cancelled_item(item)
                    raise
                try:
                    await runner.failed_item(item, failure)
                finally:
                    self._done(me)
                continue
            # -- done (inlined _done: this is the hot path)
            me.item = EMPTY
            self._in_flight -= 1
            self._unfinished -= 1
            if not self._in_flight and (quiet_waiters or not self._open or not self._unfinished):
                self._settle()

    def _done(self, me: Worker) -> None:
        me.item = EMPTY
        self._in_flight -= 1
        self._unfinished -= 1
        if not self._in_flight or not self._unfinished:
            self._settle()


__all__ = ["DRAIN_SOURCE", "PausablePool", "PoolStats"]
