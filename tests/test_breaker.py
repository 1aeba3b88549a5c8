"""Circuit breakers and the pool: follow_breaker, the state normaliser, AsyncCircuitBreaker."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pybreaker
import pytest

from replica.pool.pool import PausablePool
from replica.service.breaker import (
    AsyncCircuitBreaker,
    BreakerOpen,
    follow_breaker,
    is_breaker_error,
    state_of,
)


class Color(enum.Enum):
    OPEN = "open"
    HALF = "half_open"


class NamedState:
    def __init__(self, name: str) -> None:
        self.name = name


class StateHolder:
    """The smallest Breaker: an object with a state (what the Protocol asks for)."""

    def __init__(self, state: Any) -> None:
        self.state = state


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("closed", "closed"),
        ("OPEN", "open"),
        ("opened", "open"),
        ("half-open", "half-open"),
        ("half_open", "half-open"),
        ("half-opened", "half-open"),
        (Color.OPEN, "open"),
        (Color.HALF, "half-open"),
        (NamedState("open"), "open"),
        ("on fire", "closed"),
        (None, "closed"),
    ],
)
def test_breaker_states_are_normalised_from_common_spellings(raw: Any, expected: str) -> None:
    assert state_of(StateHolder(raw)) == expected


def test_a_pybreaker_open_past_its_reset_timeout_reads_half_open() -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    with pytest.raises(pybreaker.CircuitBreakerError):
        breaker.call(_fail)
    assert state_of(breaker) == "open"
    breaker._state_storage.opened_at = datetime.now(UTC) - timedelta(seconds=61)
    # pybreaker would stay "open" until a call; a paused pool makes none, so we read half-open.
    assert breaker.current_state == "open"
    assert state_of(breaker) == "half-open"


def _fail() -> None:
    raise ConnectionError("down")


def test_breaker_refusals_of_common_libraries_are_recognised() -> None:
    assert is_breaker_error(BreakerOpen("x"))
    assert is_breaker_error(pybreaker.CircuitBreakerError("x"))
    assert not is_breaker_error(ConnectionError("x"))


@pytest.fixture
async def pool() -> AsyncIterator[PausablePool]:
    async def handler(item: Any) -> None:
        await asyncio.sleep(0)

    async with PausablePool(handler, workers=2, name="breaker-test") as p:
        yield p


@pytest.fixture
async def follow() -> AsyncIterator[Callable[[PausablePool, Any], None]]:
    tasks: list[asyncio.Task[None]] = []

    def start(pool: PausablePool, breaker: Any) -> None:
        tasks.append(asyncio.create_task(follow_breaker(pool, breaker, every=0.02)))

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def wait_holds(pool: PausablePool, holds: dict[str, str], timeout: float = 5.0) -> None:
    """The hold set changes without a pool event when another hold stays: poll (bounded)."""
    async with asyncio.timeout(timeout):
        while True:
            if pool.holds == holds:
                return
            await asyncio.sleep(0.01)


async def test_the_pool_is_held_while_the_breaker_is_open_and_released_after(
    pool: PausablePool, follow: Callable[[PausablePool, Any], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="replica.service.breaker")
    pool.hold("x", "test")
    for i in range(3):
        await pool.put(i)
    pool.resume("test")
    await pool.join(5)
    breaker = AsyncCircuitBreaker(fail_max=1, reset_timeout=60)
    follow(pool, breaker)
    breaker.open()
    await asyncio.wait_for(pool.wait_for(True), 5)
    assert pool.holds == {"breaker": "dependency down: circuit breaker open"}
    assert any("pausing" in r.getMessage() and "0 queued" in r.getMessage()
               for r in caplog.records)
    breaker.close()
    await asyncio.wait_for(pool.wait_for(False), 5)


async def test_closing_the_breaker_releases_only_its_own_hold(
    pool: PausablePool, follow: Callable[[PausablePool, Any], None]
) -> None:
    breaker = AsyncCircuitBreaker(fail_max=1, reset_timeout=60)
    follow(pool, breaker)
    breaker.open()
    await wait_holds(pool, {"breaker": "dependency down: circuit breaker open"})
    pool.hold("investigating", "operator")
    breaker.close()
    await wait_holds(pool, {"operator": "investigating"})
    assert pool.paused  # the operator's pause outlives the breaker


async def test_follow_breaker_works_with_a_real_pybreaker(
    pool: PausablePool, follow: Callable[[PausablePool, Any], None]
) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=0.3)
    follow(pool, breaker)
    for _ in range(2):
        with pytest.raises((ConnectionError, pybreaker.CircuitBreakerError)):
            breaker.call(_fail)
    await asyncio.wait_for(pool.wait_for(True), 5)
    assert "breaker" in pool.holds
    # Past reset_timeout the pool is released so that a call can probe the dependency...
    await asyncio.wait_for(pool.wait_for(False), 5)
    assert breaker.call(lambda: "ok") == "ok"  # ...and the probe closes the breaker
    assert breaker.current_state == "closed"


async def test_the_async_breaker_opens_after_fail_max_consecutive_failures() -> None:
    breaker = AsyncCircuitBreaker(fail_max=3, reset_timeout=60)

    async def down() -> None:
        raise ConnectionError("down")

    async def up() -> str:
        return "ok"

    for _ in range(2):
        with pytest.raises(ConnectionError):
            await breaker.call(down)
    assert await breaker.call(up) == "ok"  # a success resets the count
    for _ in range(3):
        with pytest.raises(ConnectionError):
            await breaker.call(down)
    assert breaker.state == "open"
    with pytest.raises(BreakerOpen):
        await breaker.call(up)
    assert breaker.opened_count == 1


async def test_half_open_lets_one_probe_through_while_the_others_wait() -> None:
    breaker = AsyncCircuitBreaker(fail_max=1, reset_timeout=0.05)
    breaker.open()
    await asyncio.sleep(0.06)
    assert breaker.state == "half-open"
    probe_running = asyncio.Event()
    finish = asyncio.Event()
    calls: list[str] = []

    async def probe() -> str:
        calls.append("probe")
        probe_running.set()
        await finish.wait()
        return "probe"

    async def other() -> str:
        calls.append("other")
        return "other"

    first = asyncio.create_task(breaker.call(probe))
    await probe_running.wait()
    second = asyncio.create_task(breaker.call(other))
    await asyncio.sleep(0.02)
    assert calls == ["probe"] and not second.done()  # waiting for the probe's outcome
    finish.set()
    assert await first == "probe" and await second == "other"
    assert breaker.state == "closed"


async def test_a_failed_probe_opens_the_breaker_again_and_refuses_the_waiters() -> None:
    breaker = AsyncCircuitBreaker(fail_max=1, reset_timeout=0.05)
    breaker.open()
    await asyncio.sleep(0.06)
    probing = asyncio.Event()

    async def failing_probe() -> None:
        probing.set()
        await asyncio.sleep(0.01)
        raise ConnectionError("still down")

    async def other() -> None:
        return None

    first = asyncio.create_task(breaker.call(failing_probe))
    await probing.wait()
    second = asyncio.create_task(breaker.call(other))
    with pytest.raises(ConnectionError):
        await first
    with pytest.raises(BreakerOpen):
        await second
    assert breaker.state == "open"


async def test_excluded_exceptions_do_not_count_as_failures() -> None:
    breaker = AsyncCircuitBreaker(fail_max=1, reset_timeout=60, exclude=(KeyError,))

    async def missing() -> None:
        raise KeyError("not found is an answer, not an outage")

    with pytest.raises(KeyError):
        await breaker.call(missing)
    assert breaker.state == "closed"


def test_the_default_breaker_takes_its_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETGATE_BREAKER_FAIL_MAX", "7")
    monkeypatch.setenv("FLEETGATE_BREAKER_RESET_TIMEOUT", "2.5")
    breaker = AsyncCircuitBreaker()
    assert (breaker.fail_max, breaker.reset_timeout) == (7, 2.5)
