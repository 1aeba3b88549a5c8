"""Circuit breakers and the pool: pause while the dependency is down (the guide's section 3).

``follow_breaker(pool, breaker, every)`` looks at ``breaker.state`` every ``every`` seconds:
while it is open the pool is held with ``source="breaker"``; otherwise that hold, and only that
one, is released, so an operator's or the fleet's pause outlives the breaker closing.

``Breaker`` is a Protocol: anything with a ``state`` of closed, open or half-open. ``state_of``
normalises the spellings of common libraries (pybreaker's ``"half-open"`` and its state
objects, ``"half_open"``, purgatory's ``"opened"`` / ``"half-opened"``, enums). A breaker that
turns half-open only when a call is attempted (pybreaker does) would keep a paused pool paused
for ever, since a paused pool makes no calls: ``state_of`` reports such a breaker half-open
once its ``reset_timeout`` has passed since ``opened_at``, and the pool lets a probe through.

``AsyncCircuitBreaker`` is the default breaker for asyncio handlers. pybreaker 1.x runs async
calls only through tornado; aiobreaker and purgatory only move from open to half-open on a
call (see above). So this one is small and written here: its state is derived from the clock,
half-open lets ONE probe call through while the other callers wait for its outcome, and
``BreakerOpen`` is what calls get while it is open (the source retries those items without
counting them against ``max_retries``).

    breaker = AsyncCircuitBreaker()          # FLEETGATE_BREAKER_FAIL_MAX / _RESET_TIMEOUT

    async def handle(item):
        async with breaker:
            await call_the_dependency(item)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from enum import Enum
from types import TracebackType
from typing import Any, Final, Literal, Protocol, TypeVar, runtime_checkable

from replica.errors import BreakerOpen
from replica.pool.holds import BREAKER_SOURCE
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)

BreakerState = Literal["closed", "open", "half-open"]
CLOSED: Final = "closed"
OPEN: Final = "open"
HALF_OPEN: Final = "half-open"

_SPELLINGS: Final[dict[str, BreakerState]] = {
    "closed": "closed",
    "close": "closed",
    "open": "open",
    "opened": "open",
    "half-open": "half-open",
    "half_open": "half-open",
    "halfopen": "half-open",
    "half-opened": "half-open",
    "half_opened": "half-open",
}

T = TypeVar("T")


@runtime_checkable
class Breaker(Protocol):
    """A circuit breaker as the pool sees it: only its state."""

    @property
    def state(self) -> Any: ...


def _spelling(value: Any) -> str:
    if isinstance(value, Enum):
        value = value.value if isinstance(value.value, str) else value.name
    elif not isinstance(value, str):
        value = getattr(value, "name", value)  # pybreaker's state objects have a name
    return str(value).strip().lower().replace(" ", "-")


def state_of(breaker: Any) -> BreakerState:
    """The breaker's state as "closed", "open" or "half-open". An unknown state counts as
    closed (the pool is never held on a state nobody understands); a failing ``state`` too."""
    try:
        raw = getattr(breaker, "current_state", None)  # pybreaker: the plain string
        if not isinstance(raw, str):
            raw = breaker.state
        state = _SPELLINGS.get(_spelling(raw))
    except Exception:
        log.exception("reading the breaker's state failed; taking it as closed")
        return CLOSED
    if state is None:
        log.warning("unknown breaker state %r; taking it as closed", raw)
        return CLOSED
    if state == OPEN and _reset_timeout_passed(breaker):
        return HALF_OPEN
    return state


def _reset_timeout_passed(breaker: Any) -> bool:
    """For breakers that leave "open" only on a call: has their reset timeout passed?"""
    if isinstance(breaker, AsyncCircuitBreaker):
        return False
    opened_at = getattr(breaker, "opened_at", None)
    if opened_at is None:  # pybreaker keeps it in its state storage (also for Redis storage)
        opened_at = getattr(getattr(breaker, "_state_storage", None), "opened_at", None)
    reset = getattr(breaker, "reset_timeout", None)
    if not isinstance(reset, int | float) or isinstance(reset, bool):
        return False
    if isinstance(opened_at, datetime):
        if opened_at.tzinfo is None:
            opened_at = opened_at.replace(tzinfo=UTC)
        return datetime.now(UTC) >= opened_at + timedelta(seconds=float(reset))
    return False


def is_breaker_error(exc: BaseException) -> bool:
    """True for "the breaker refused the call" errors (ours, pybreaker's, purgatory's)."""
    if isinstance(exc, BreakerOpen):
        return True
    names = {klass.__name__ for klass in type(exc).__mro__}
    return bool(names & {"CircuitBreakerError", "CircuitBreakerOpen", "OpenedState"})


async def follow_breaker(pool: PausablePool, breaker: Any, every: float = 1.0) -> None:
    """Hold the pool (``source="breaker"``) while ``breaker`` is open; release that hold, and
    only that one, otherwise. Runs until cancelled (the hold is left as it is then)."""
    if every <= 0:
        raise ValueError("every must be positive")
    while True:
        state = state_of(breaker)
        held = BREAKER_SOURCE in pool.holds
        if state == OPEN and not held:
            log.warning(
                "dependency down (breaker open): pausing %s with %d queued, %d in flight",
                pool.name, pool.queued, pool.in_flight,
            )
            pool.hold("dependency down: circuit breaker open", BREAKER_SOURCE)
        elif state != OPEN and held:
            log.info(
                "dependency recovering (breaker %s): releasing the breaker hold on %s, %d queued",
                state, pool.name, pool.queued,
            )
            pool.resume(BREAKER_SOURCE)
        await asyncio.sleep(every)


class AsyncCircuitBreaker:
    """A circuit breaker for asyncio calls.

    closed: calls run; ``fail_max`` consecutive failures open it. open: calls raise
    ``BreakerOpen`` at once until ``reset_timeout`` has passed, then it is half-open: the next
    call is a probe and the others wait for its outcome; a successful probe closes it, a failed
    one opens it again. ``None`` takes the value from ``BreakerSettings`` (the environment).
    Exceptions in ``exclude`` do not count as failures.
    """

    def __init__(
        self,
        fail_max: int | None = None,
        reset_timeout: float | None = None,
        *,
        exclude: tuple[type[BaseException], ...] = (),
        name: str = "breaker",
    ) -> None:
        if fail_max is None or reset_timeout is None:
            from replica.service.settings import load_breaker_settings

            defaults = load_breaker_settings()
            fail_max = defaults.fail_max if fail_max is None else fail_max
            reset_timeout = defaults.reset_timeout if reset_timeout is None else reset_timeout
        if fail_max < 1:
            raise ValueError("fail_max must be at least 1")
        if reset_timeout <= 0:
            raise ValueError("reset_timeout must be positive")
        self.fail_max = fail_max
        self.reset_timeout = reset_timeout
        self.exclude = exclude
        self.name = name
        self.fail_counter = 0
        self.opened_count = 0
        self._opened_at: float | None = None  # monotonic
        self._probe: asyncio.Future[bool] | None = None
        self._probe_task: asyncio.Task[Any] | None = None

    # -- state

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return CLOSED
        if self._probe is not None:
            return HALF_OPEN
        if time.monotonic() - self._opened_at >= self.reset_timeout:
            return HALF_OPEN
        return OPEN

    def open(self) -> None:
        """Open the breaker now (also what ``fail_max`` failures do)."""
        if self._opened_at is None:
            self.opened_count += 1
            log.warning("%s opened after %d failures", self.name, self.fail_counter)
        self._opened_at = time.monotonic()

    def close(self) -> None:
        """Close the breaker now."""
        if self._opened_at is not None:
            log.info("%s closed", self.name)
        self._opened_at = None
        self.fail_counter = 0

    # -- calls

    async def call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await func(*args, **kwargs)`` under the breaker."""
        async with self:
            return await func(*args, **kwargs)

    async def __aenter__(self) -> AsyncCircuitBreaker:
        while True:
            state = self.state
            if state == CLOSED:
                return self
            if state == OPEN:
                raise BreakerOpen(f"{self.name} is open: the dependency is considered down")
            if self._probe is None:  # half-open and nobody probing: this call is the probe
                self._probe = asyncio.get_running_loop().create_future()
                self._probe_task = asyncio.current_task()
                return self
            # Someone is probing: wait for its outcome, then look again.
            await asyncio.shield(self._probe)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        probe = self._probe
        is_probe = probe is not None and asyncio.current_task() is self._probe_task
        failed = isinstance(exc, Exception) and not isinstance(exc, self.exclude)
        if failed:
            self.fail_counter += 1
            if is_probe or (self._opened_at is None and self.fail_counter >= self.fail_max):
                self.open()
        elif exc is None and (is_probe or self._opened_at is None):
            self.close()
        if is_probe and probe is not None:
            # Any outcome of the probe (even a cancellation) ends it; the waiters look again.
            self._probe = None
            self._probe_task = None
            if not probe.done():
                probe.set_result(exc is None)


__all__ = [
    "BREAKER_SOURCE",
    "AsyncCircuitBreaker",
    "Breaker",
    "BreakerOpen",
    "BreakerState",
    "follow_breaker",
    "is_breaker_error",
    "state_of",
]
