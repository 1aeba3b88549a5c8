"""RetryPolicy and Backoffs: when an item is given up, how long each retry waits, and where a
waiting item is."""

from __future__ import annotations

import asyncio

import pytest

from replica.service.entry import WorkItem
from replica.service.retry import Backoffs, RetryPolicy


def item(entry_id: str) -> WorkItem:
    return WorkItem(entry_id=entry_id, item=None, fields={}, via="read")


def test_an_item_is_given_up_after_max_retries_failed_runs() -> None:
    policy = RetryPolicy(max_retries=3, backoff=1.0, backoff_max=60.0)
    assert [policy.exhausted(runs) for runs in range(1, 6)] == [False, False, False, True, True]


@pytest.mark.parametrize("jitter", [0.0, 0.5, 0.999])
def test_each_retry_waits_twice_as_long_between_half_and_all_of_its_step_up_to_the_cap(
    jitter: float,
) -> None:
    policy = RetryPolicy(max_retries=10, backoff=0.5, backoff_max=3.0)
    steps = [policy.step(runs) for runs in range(1, 7)]
    assert steps == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    for runs, step in enumerate(steps, start=1):
        assert step / 2 <= policy.delay(runs, rng=lambda: jitter) <= step


def test_a_huge_run_count_does_not_overflow_the_step() -> None:
    assert RetryPolicy(max_retries=1000, backoff=1.0, backoff_max=60.0).step(1000) == 60.0


async def test_items_fall_due_in_the_order_their_backoffs_pass_and_leave_in_that_order() -> None:
    due = asyncio.Event()
    backoffs = Backoffs(due.set)
    backoffs.wait(item("late"), 0.2)
    backoffs.wait(item("early"), 0.01)
    backoffs.make_due(item("now"))
    assert (backoffs.waiting, backoffs.due, len(backoffs)) == (2, 1, 3)
    async with asyncio.timeout(10):
        while backoffs.due < 3:
            due.clear()
            await due.wait()
    first = backoffs.pop_due()
    assert first is not None and first.entry_id == "now"
    backoffs.put_back(first)  # the pool had no room: it stays first
    order = [w.entry_id for w in iter(backoffs.pop_due, None)]
    assert order == ["now", "early", "late"] and len(backoffs) == 0


async def test_clearing_stops_every_timer_and_returns_every_item() -> None:
    calls: list[int] = []
    backoffs = Backoffs(lambda: calls.append(1))
    backoffs.wait(item("a"), 0.01)
    backoffs.make_due(item("b"))
    left = backoffs.clear()
    assert sorted(w.entry_id for w in left) == ["a", "b"] and len(backoffs) == 0
    await asyncio.sleep(0.05)  # the cleared timer's moment passes: nothing falls due
    assert calls == [1] and backoffs.due == 0
