"""replica.pool.holds: named holds, paused while any is on, awaitable both ways."""

from __future__ import annotations

import asyncio

from replica.pool.holds import BREAKER_SOURCE, FLEET_SOURCE, OPERATOR_SOURCE, Holds


def test_held_while_any_source_holds_and_free_when_the_last_lets_go() -> None:
    holds = Holds()
    assert not holds and holds.names() == "nobody" and holds.since is None
    assert holds.hold(FLEET_SOURCE, "db maintenance") is True  # was free
    since = holds.since
    assert holds.hold(BREAKER_SOURCE, "payments down") is False  # already held
    assert holds.hold(FLEET_SOURCE, "db maintenance, longer") is False  # a new reason only
    assert holds.items == {FLEET_SOURCE: "db maintenance, longer", BREAKER_SOURCE: "payments down"}
    assert holds.names() == "breaker, fleet" and holds.since == since
    assert holds.release(OPERATOR_SOURCE) is False  # never held
    assert holds.release(FLEET_SOURCE) is False  # the breaker still holds
    assert holds and FLEET_SOURCE not in holds and BREAKER_SOURCE in holds
    assert holds.release(BREAKER_SOURCE) is True
    assert not holds and holds.since is None and holds.since_monotonic is None


def test_items_is_a_copy() -> None:
    holds = Holds()
    holds.hold(OPERATOR_SOURCE, "looking into it")
    holds.items[OPERATOR_SOURCE] = "changed"  # type: ignore[index]
    assert holds.items == {OPERATOR_SOURCE: "looking into it"}


async def test_waiters_wake_on_the_direction_they_wait_for() -> None:
    holds = Holds()
    await asyncio.wait_for(holds.wait_for(False), 1)  # already free: at once
    held = asyncio.create_task(holds.wait_for(True))
    free = asyncio.create_task(holds.wait_for(False))
    await asyncio.sleep(0)
    assert free.done() and not held.done()
    holds.hold(FLEET_SOURCE, "x")
    await asyncio.wait_for(held, 1)
    free_again = asyncio.create_task(holds.wait_for(False))
    holds.hold(BREAKER_SOURCE, "y")
    holds.release(FLEET_SOURCE)
    await asyncio.sleep(0)
    assert not free_again.done()  # one source still holds
    holds.release(BREAKER_SOURCE)
    await asyncio.wait_for(free_again, 1)


async def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    holds = Holds()
    waiter = asyncio.create_task(holds.wait_for(True))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert holds._waiters == []
    holds.hold(FLEET_SOURCE, "x")  # no waiter left to wake
