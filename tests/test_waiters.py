"""replica.pool.waiters: callers parked until woken, one at a time or all at once."""

from __future__ import annotations

import asyncio

import pytest

from replica.pool.waiters import Waiters


async def _parked(waiters: Waiters, n: int) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(waiters.wait()) for _ in range(n)]
    await asyncio.sleep(0)  # each runs up to its wait
    assert len(waiters) == n
    return tasks


async def test_wake_one_wakes_the_oldest_waiter_and_wake_all_the_rest() -> None:
    waiters = Waiters()
    first, second, third = await _parked(waiters, 3)
    waiters.wake_one()
    await asyncio.sleep(0)
    assert first.done() and not second.done() and not third.done() and len(waiters) == 2
    waiters.wake_all()
    await asyncio.gather(second, third)
    assert len(waiters) == 0


async def test_a_wait_past_its_timeout_raises_and_leaves_no_waiter_behind() -> None:
    waiters = Waiters()
    with pytest.raises(TimeoutError):
        await waiters.wait(timeout=0.01)
    assert len(waiters) == 0


async def test_a_relay_waiter_cancelled_after_its_wake_up_passes_it_on() -> None:
    waiters = Waiters(relay=True)
    first, second = await _parked(waiters, 2)
    waiters.wake_one()  # for the first ...
    first.cancel()  # ... which is cancelled before it runs
    await asyncio.wait([first])
    await asyncio.wait_for(second, 5)  # the wake-up reached the second
    assert first.cancelled() and len(waiters) == 0


async def test_a_waiter_without_relay_cancelled_after_its_wake_up_wakes_nobody() -> None:
    waiters = Waiters()
    first, second = await _parked(waiters, 2)
    waiters.wake_one()
    first.cancel()
    await asyncio.wait([first])
    await asyncio.sleep(0)
    assert not second.done() and len(waiters) == 1
    second.cancel()
    await asyncio.wait([second])
    assert len(waiters) == 0
