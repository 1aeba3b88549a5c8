"""replica.pool.runner: how a worker runs one item, and what on_error hears of each outcome."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from replica.errors import HandlerCancelled, HandlerExited, ItemCancelled, ItemTimeout
from replica.pool import runner as runner_module
from replica.pool.runner import ItemRunner, as_failure


async def _noop(item: Any) -> None:
    return None


class Heard:
    """An on_error hook that records what it hears."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, BaseException]] = []

    def __call__(self, item: Any, exc: BaseException) -> None:
        self.calls.append((item, exc))


def test_an_ordinary_exception_is_its_own_failure() -> None:
    exc = ValueError("bad item")
    assert as_failure(exc) is exc


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (SystemExit(), "the handler raised SystemExit(None)"),
        (SystemExit(3), "the handler raised SystemExit(3)"),
        (SystemExit("bye"), "the handler raised SystemExit('bye')"),
        (KeyboardInterrupt(), "the handler raised KeyboardInterrupt()"),
    ],
)
def test_system_exit_and_keyboard_interrupt_become_handler_exited(
    exc: BaseException, text: str
) -> None:
    failure = as_failure(exc)
    assert isinstance(failure, HandlerExited) and str(failure) == text
    assert failure.__cause__ is exc


async def test_a_cancelled_error_is_a_failure_only_while_the_task_is_not_being_cancelled() -> None:
    stray = asyncio.CancelledError()
    failure = as_failure(stray)
    assert isinstance(failure, HandlerCancelled) and failure.__cause__ is stray

    seen: list[Exception | None] = []

    async def being_cancelled() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError as exc:
            seen.append(as_failure(exc))
            raise

    task = asyncio.create_task(being_cancelled())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait([task])
    assert seen == [None]  # the worker's own cancellation: it must end the worker


async def test_an_item_past_its_deadline_raises_item_timeout_and_a_handlers_own_does_not() -> None:
    async def slow(item: Any) -> None:
        await asyncio.sleep(60)

    async def times_out(item: Any) -> None:
        raise TimeoutError("dependency")

    with pytest.raises(ItemTimeout, match=r"item_timeout=0\.01s"):
        await ItemRunner(slow, 0.01, None, "jobs").call_with_deadline(1)
    with pytest.raises(TimeoutError, match="dependency") as info:
        await ItemRunner(times_out, 30, None, "jobs").call_with_deadline(1)
    assert not isinstance(info.value, ItemTimeout)


async def test_failures_and_timeouts_are_counted_apart_and_reported() -> None:
    heard = Heard()
    runner = ItemRunner(_noop, 5, heard, "jobs")
    await runner.failed_item("a", ValueError("x"))
    await runner.failed_item("b", ItemTimeout("late"))
    assert (runner.failed, runner.timed_out) == (1, 1)
    assert [(i, type(e)) for i, e in heard.calls] == [("a", ValueError), ("b", ItemTimeout)]


async def test_without_on_error_a_failure_is_logged_and_a_timeout_is_not_logged_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = ItemRunner(_noop, 5, None, "jobs")
    await runner.report("a", ValueError("bad"))
    await runner.report("b", ItemTimeout("late"))
    assert "jobs handler failed: ValueError('bad')" in caplog.text and "late" not in caplog.text


@pytest.mark.parametrize(
    "raised",
    [RuntimeError("hook broke"), SystemExit(2), asyncio.CancelledError()],
    ids=["an exception", "sys.exit", "a stray CancelledError"],
)
async def test_whatever_the_on_error_hook_raises_is_logged_not_raised(
    raised: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    async def hook(item: Any, exc: BaseException) -> None:
        await asyncio.sleep(0)
        raise raised

    await ItemRunner(_noop, None, hook, "jobs").report("a", ValueError("x"))
    assert "jobs on_error hook failed" in caplog.text


async def test_a_cancelled_item_is_counted_and_reported_within_a_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runner_module, "REPORT_CANCELLED_S", 0.05)
    heard = Heard()
    await ItemRunner(_noop, None, heard, "jobs").cancelled_item("a")
    assert [(i, type(e)) for i, e in heard.calls] == [("a", ItemCancelled)]

    async def hangs(item: Any, exc: BaseException) -> None:
        await asyncio.sleep(60)

    runner = ItemRunner(_noop, None, hangs, "jobs")
    await runner.cancelled_item("b")  # returns at the bound
    assert runner.cancelled == 1
    assert "jobs on_error for a cancelled item did not finish" in caplog.text


async def test_the_workers_own_cancellation_goes_through_a_running_on_error_hook() -> None:
    started = asyncio.Event()

    async def hook(item: Any, exc: BaseException) -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(ItemRunner(_noop, None, hook, "jobs").report("a", ValueError()))
    await started.wait()
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled()
