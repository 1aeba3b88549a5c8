"""ItemRunner: how a pool worker runs one item: its deadline, its outcome, its report.

``PausablePool`` owns the queue and the gate; each of its worker tasks pops an item and runs it
through the pool's ``ItemRunner``, which calls the handler (under ``item_timeout`` when set),
counts the outcome and tells ``on_error`` about failures, timeouts and items cut off by a drain.
The pool's hot path calls the handler itself when there is no ``item_timeout``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Final

from replica.errors import ItemCancelled, ItemTimeout
from replica.types import ErrorHook, Handler, Item

log = logging.getLogger(__name__)

REPORT_CANCELLED_S: Final = 1.0
"""How long a cancelled worker waits for ``on_error`` to hear about its item."""


class ItemRunner:
    """Runs the pool's items through its handler and counts how they ended."""

    __slots__ = (
        "_on_error", "cancelled", "failed", "handler", "item_timeout", "name", "processed",
        "timed_out",
    )

    def __init__(
        self, handler: Handler, item_timeout: float | None, on_error: ErrorHook | None, name: str
    ) -> None:
        self.handler = handler
        self.item_timeout = item_timeout
        self._on_error = on_error
        self.name = name
        self.processed = 0
        """Items whose handler returned (the pool's hot path counts them itself)."""
        self.failed = 0
        self.timed_out = 0
        self.cancelled = 0

    async def call_with_deadline(self, item: Item) -> None:
        """Run the handler under ``item_timeout``; past it, raise ``ItemTimeout``."""
        deadline = asyncio.timeout(self.item_timeout)
        try:
            async with deadline:
                await self.handler(item)
        except TimeoutError as exc:
            if deadline.expired():
                raise ItemTimeout(f"item ran past item_timeout={self.item_timeout}s") from exc
            raise

    async def failed_item(self, item: Item, exc: Exception) -> None:
        """Count a failure (or a timeout) and report it."""
        if isinstance(exc, ItemTimeout):
            self.timed_out += 1
            log.warning("%s item timed out after %ss", self.name, self.item_timeout)
        else:
            self.failed += 1
        await self.report(item, exc)

    async def cancelled_item(self, item: Item) -> None:
        """Count an item cut off by the worker's cancellation, and report it within a bound.

        The caller is being cancelled: it lets the cancellation through afterwards."""
        self.cancelled += 1
        try:
            async with asyncio.timeout(REPORT_CANCELLED_S):
                await self.report(item, ItemCancelled("drain deadline passed"))
        except (TimeoutError, asyncio.CancelledError):
            log.warning("%s on_error for a cancelled item did not finish", self.name)

    async def report(self, item: Item, exc: BaseException) -> None:
        """Tell ``on_error`` (plain or async); its own exceptions are logged, not raised."""
        if self._on_error is None:
            if not isinstance(exc, TimeoutError):
                log.error("%s handler failed: %r", self.name, exc)
            return
        try:
            result = self._on_error(item, exc)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s on_error hook failed", self.name)


__all__ = ["ItemRunner"]
