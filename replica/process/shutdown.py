"""Ending a command's process promptly on SIGINT and SIGTERM: for entry points only.

The library never installs signal handlers; the entry points (``fleetgate-replica``, and the
``fleetgate`` commands that run until stopped: ``status --watch``, ``pause``/``resume --wait``,
``serve``, ``demo``) do, through ``Shutdown``. Its promise: the process ends within about a
second of the signal, wherever it is, a Redis call that hangs included.

* The signal's callback runs in the event loop (``loop.add_signal_handler``) and starts the
  command's own stop: ``run()`` cancels the main task; the replica sets its stop event.
* One cancellation is not enough: redis-py (asyncio) can swallow a cancellation that lands
  inside a call (see ``replica.link.redisio.uncancelled``), so ``cancel_until_done`` cancels
  the task again every ``RECANCEL_EVERY_S`` until it has ended.
* A watchdog thread, armed by the first signal (or by the entry point, once its own drain is
  over), ends the process with ``os._exit(status)`` if it is still there ``WATCHDOG_S`` later:
  a task that keeps swallowing its cancellation, a thread that cannot be cancelled, an exit
  handler that hangs.
* Once the command has stopped, the entry point ends the process with ``exit_now`` when a
  signal stopped it: the interpreter's teardown (measured: up to a second on a loaded 2-core
  machine for the demo) runs after the watchdog can no longer run.

A signal that was ignored when the process started stays ignored: a background job (``cmd &``
in a script, ``nohup``, some CI runners) starts with SIGINT ignored, so that a Ctrl-C meant for
its shell does not stop it. Python does the same for its own KeyboardInterrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, NoReturn, TypeVar

T = TypeVar("T")

WATCHDOG_S: Final = 0.75
"""How long after the first signal (or ``arm()``) the process may still be there."""

RECANCEL_EVERY_S: Final = 0.1
"""How often ``cancel_until_done`` cancels a task that has not ended yet."""

LEFTOVERS_S: Final = 0.2
"""How long ``run()`` waits, after the main task, for the tasks it left to end once cancelled."""

HANDLED: Final = (signal.SIGINT, signal.SIGTERM)

_signalled: list[signal.Signals] = []
"""Every signal a ``Shutdown`` of this process received."""


def signalled() -> bool:
    """Whether a signal stopped (or is stopping) a command of this process."""
    return bool(_signalled)


def exit_now(status: int) -> NoReturn:
    """End the process at once with ``status``, its output and log flushed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def conventional_status(sig: signal.Signals) -> int:
    """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM (the shells' convention)."""
    return 128 + int(sig)


class Interrupted(Exception):
    """The command was stopped by ``signal``; ``status`` is the exit status to end with."""

    def __init__(self, sig: signal.Signals, status: int) -> None:
        super().__init__(f"interrupted by {sig.name}")
        self.signal = sig
        self.status = status


class Shutdown:
    """SIGINT and SIGTERM for one entry point's event loop (see the module docstring).

    ``exit_status(sig)`` gives the status the command ends with when ``sig`` stopped it (the
    watchdog exits with it too); ``status`` may be changed afterwards (a second signal that
    cuts a drain short, for example).
    """

    def __init__(self, exit_status: Callable[[signal.Signals], int] = conventional_status) -> None:
        self.received: list[signal.Signals] = []
        self.status = 0
        self.before_exit: Callable[[], None] | None = None
        """Run by the watchdog just before ``os._exit`` (the demo kills its children there). It
        runs in the watchdog's thread while the main thread may be stuck: no locks, no I/O
        that can block; its errors are ignored."""
        self._exit_status = exit_status
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self._watchdog: threading.Timer | None = None

    @property
    def first(self) -> signal.Signals | None:
        """The first signal received, if any."""
        return self.received[0] if self.received else None

    # ------------------------------------------------------------------ handlers

    def install(
        self,
        loop: asyncio.AbstractEventLoop,
        on_signal: Callable[[signal.Signals], None],
        *,
        arm: bool = True,
    ) -> None:
        """Call ``on_signal(sig)`` in ``loop`` for every SIGINT and SIGTERM (those not ignored
        at start); with ``arm``, the first one also arms the watchdog. Only in the main thread
        (elsewhere nothing is installed, as for ``asyncio.run``)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._loop = loop
        for sig in HANDLED:
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:
                continue
            self._previous[sig] = previous
            loop.add_signal_handler(sig, self._received, sig, on_signal, arm)

    def uninstall(self) -> None:
        """Give the signals back the handlers they had before ``install``."""
        loop, self._loop = self._loop, None
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            if loop is not None and not loop.is_closed():
                loop.remove_signal_handler(sig)
            if handler is not None:  # None: set outside Python, cannot be put back from here
                signal.signal(sig, handler)

    def _received(
        self, sig: signal.Signals, on_signal: Callable[[signal.Signals], None], arm: bool
    ) -> None:
        self.received.append(sig)
        _signalled.append(sig)
        if len(self.received) == 1:
            self.status = self._exit_status(sig)
            if arm:
                self.arm()
        on_signal(sig)

    # ------------------------------------------------------------------ ending

    def arm(self, seconds: float = WATCHDOG_S) -> None:
        """End the process with ``os._exit(self.status)`` in ``seconds``, unless it has ended
        by then; a second call starts the countdown again."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = threading.Timer(seconds, self._exit_now)
        self._watchdog.daemon = True
        self._watchdog.name = "shutdown-watchdog"
        self._watchdog.start()

    def disarm(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _exit_now(self) -> None:
        # No logging, no flush: either could wait on a lock the stuck main thread holds.
        if self.before_exit is not None:
            with contextlib.suppress(BaseException):
                self.before_exit()
        os._exit(self.status)

    @staticmethod
    def cancel_until_done(task: asyncio.Future[Any], every: float = RECANCEL_EVERY_S) -> None:
        """Cancel ``task`` now, and again every ``every`` seconds until it is done."""
        loop = task.get_loop()

        def again() -> None:
            if not task.done():
                task.cancel()
                loop.call_later(every, again)

        again()

    # ------------------------------------------------------------------ running

    def run(
        self,
        main: Coroutine[Any, Any, T],
        *,
        on_signal: Callable[[signal.Signals], None] | None = None,
    ) -> T:
        """``asyncio.run(main)``, where SIGINT and SIGTERM cancel ``main`` until it ends; then
        ``Interrupted`` is raised (whatever ``main`` raised meanwhile: an error on the way out
        is part of the interruption). A ``main`` that returns normally returns its value.
        ``on_signal(sig)``, when given, is called first, in the loop, for every signal."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            task = loop.create_task(main)

            def stop(sig: signal.Signals) -> None:
                if on_signal is not None:
                    on_signal(sig)
                self.cancel_until_done(task)

            self.install(loop, stop)
            try:
                result = loop.run_until_complete(task)
            except BaseException as exc:
                first = self.first
                if first is not None and isinstance(exc, Exception | asyncio.CancelledError):
                    raise Interrupted(first, self.status) from None
                raise
            finally:
                self.uninstall()
                self._finish(loop)
            return result
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    def _finish(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel what ``main`` left running and wait a little for it (bounded, unlike
        ``asyncio.run``: a task that swallows its cancellation must not hold the exit)."""
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        with contextlib.suppress(BaseException):
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=LEFTOVERS_S))
            loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), LEFTOVERS_S))
        for t in tasks:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: no "exception was never retrieved" at exit


__all__ = [
    "HANDLED",
    "RECANCEL_EVERY_S",
    "WATCHDOG_S",
    "Interrupted",
    "Shutdown",
    "conventional_status",
    "exit_now",
    "signalled",
]
