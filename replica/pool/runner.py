"""ItemRunner: how a pool worker runs one item: its deadline, its outcome, its report.

``PausablePool`` owns the queue and the gate; each of its worker tasks pops an item and runs it
through the pool's ``ItemRunner``, which calls the handler (under ``item_timeout`` when set),
counts the outcome and tells ``on_error`` about failures, timeouts and items cut off by a drain.
The pool's hot path calls the handler itself when there is no ``item_timeout``.

Whatever a handler raises is a failure of its item, never the end of its worker: an
``Exception`` as it is; a ``CancelledError`` while the worker task is not being cancelled
(``Task.cancelling()`` is 0: the handler awaited something that something else cancelled) as
``HandlerCancelled``; ``SystemExit``, ``KeyboardInterrupt`` or any other ``BaseException`` as
``HandlerExited``. ``on_error`` therefore only ever hears ordinary exceptions, the original one
as their ``__cause__``. Only the worker's own cancellation (a drain past its deadline, ``stop()``,
or whoever cancels the task) ends a worker: its item is reported as ``ItemCancelled``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Final

from replica.errors import HandlerCancelled, HandlerExited, ItemCancelled, ItemTimeout
from replica.types import ErrorHook, Handler, Item

log = logging.getLogger(__name__)

REPORT_CANCELLED_S: Final = 1.0
"""How long a cancelled worker waits for ``on_error`` to hear about its item."""


def being_cancelled() -> bool:
    """Whether the running task is being cancelled (a ``cancel()`` not yet uncancelled)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def as_failure(exc: BaseException) -> Exception | None:
    """What ``on_error`` hears for an item whose handler raised ``exc``; None when ``exc`` is
    the running worker's own cancellation, which must end the worker."""
    if isinstance(exc, Exception):
        return exc
    failure: Exception
    if isinstance(exc, asyncio.CancelledError):
        if being_cancelled():
            return None
        failure = HandlerCancelled(
            "the handler raised CancelledError while its worker was not cancelled "
            "(did it await a task or future that something else cancelled?)"
        )
    else:
        raised = f"SystemExit({exc.code!r})" if isinstance(exc, SystemExit) else repr(exc)
        failure = HandlerExited(f"the handler raised {raised}")
    failure.__cause__ = exc
    return failure


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

    async def report(self, item: Item, exc: Exception) -> None:
        """Tell ``on_error`` (plain or async); its own exceptions are logged, not raised."""
        if self._on_error is None:
            if not isinstance(exc, TimeoutError):
                log.error("%s handler failed: %r", self.name, exc)
            return
        try:
            result = self._on_error(item, exc)
            if inspect.isawaitable(result):
                await result
        except GeneratorExit:
            raise
        except BaseException as err:  # the hook must not end the worker either
            if isinstance(err, asyncio.CancelledError) and being_cancelled():
                raise
            log.exception("%s on_error hook failed", self.name)


__all__ = ["ItemRunner"]
