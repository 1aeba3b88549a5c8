"""PausablePool: the guarantees S1 to S11 of the pool issue, each shown by a test."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replica import ItemCancelled, ItemTimeout, PausablePool, PoolClosed
from replica.errors import HandlerCancelled, HandlerExited


class Recorder:
    """A handler that records the order of starts and ends, and can be blocked per item."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.events: list[tuple[str, Any]] = []
        self.starts: list[Any] = []
        self.ends: dict[Any, float] = {}
        self.gates: dict[Any, asyncio.Event] = {}
        self._start_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def mark(self, what: str, value: Any = None) -> None:
        self.events.append((what, value))

    async def __call__(self, item: Any) -> None:
        self.starts.append(item)
        self.mark("start", item)
        for n, fut in self._start_waiters:
            if len(self.starts) >= n and not fut.done():
                fut.set_result(None)
        gate = self.gates.get(item)
        if gate is not None:
            await gate.wait()
        elif self.seconds:
            await asyncio.sleep(self.seconds)
        else:
            await asyncio.sleep(0)
        self.ends[item] = time.monotonic()
        self.mark("end", item)

    async def wait_starts(self, n: int, timeout: float = 10.0) -> None:
        """Wait until ``n`` items have started (an event from the handler, no polling)."""
        if len(self.starts) >= n:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._start_waiters.append((n, fut))
        await asyncio.wait_for(fut, timeout)

    def starts_after(self, marker: str) -> list[Any]:
        index = self.events.index((marker, None))
        return [v for what, v in self.events[index:] if what == "start"]


# --------------------------------------------------------------------------- S1


async def test_no_item_starts_after_pause_even_on_a_worker_already_handed_an_item() -> None:
    rec = Recorder()
    async with PausablePool(rec, workers=4) as pool:
        # Every worker is parked waiting for an item; these four are handed straight to them.
        for i in range(4):
            pool.put_nowait(i)
        rec.mark("pause-called")
        await pool.pause("maintenance")  # runs before any parked worker wakes
        await asyncio.sleep(0.05)
        assert rec.starts_after("pause-called") == []
        assert pool.queued == 4 and pool.in_flight == 0
        pool.resume()
        await pool.join(timeout=10)
    assert rec.starts == [0, 1, 2, 3]


async def test_no_item_starts_after_pause_while_items_are_in_flight() -> None:
    rec = Recorder(seconds=0.02)
    async with PausablePool(rec, workers=4) as pool:
        for i in range(40):
            pool.put_nowait(i)
        await rec.wait_starts(6)
        rec.mark("pause-called")
        await pool.pause("incident", timeout=10)
        rec.mark("paused")
        await asyncio.sleep(0.1)
        assert rec.starts_after("pause-called") == []
        pool.resume()
        await pool.join(timeout=10)
    assert sorted(rec.starts) == list(range(40))


# --------------------------------------------------------------------------- S2


async def test_pause_returns_once_the_items_in_flight_have_finished() -> None:
    rec = Recorder()
    async with PausablePool(rec, workers=3) as pool:
        for i in range(3):
            rec.gates[i] = asyncio.Event()
            pool.put_nowait(i)
        await rec.wait_starts(3)
        pausing = asyncio.create_task(pool.pause("x", timeout=10))
        await asyncio.sleep(0.02)
        assert not pausing.done(), "pause() returned while items were in flight"
        rec.gates[0].set()
        rec.gates[1].set()
        await asyncio.sleep(0.02)
        assert not pausing.done()
        rec.gates[2].set()
        await pausing
        returned = time.monotonic()
        assert pool.in_flight == 0 and pool.quiet
        # "within a few milliseconds of the last one finishing": generous on a loaded machine
        assert returned - max(rec.ends.values()) < 0.25
        pool.resume()


async def test_pause_raises_timeout_error_when_in_flight_work_outlasts_it_and_stays_paused() -> None:
    rec = Recorder()
    rec.gates["stuck"] = asyncio.Event()
    async with PausablePool(rec, workers=2) as pool:
        pool.put_nowait("stuck")
        await rec.wait_starts(1)
        with pytest.raises(TimeoutError):
            await pool.pause("x", timeout=0.05)
        assert pool.paused and pool.holds == {"operator": "x"}
        pool.put_nowait("later")
        await asyncio.sleep(0.02)
        assert rec.starts == ["stuck"]
        rec.gates["stuck"].set()
        await pool.wait_quiet(timeout=10)
        pool.resume()
        await pool.join(timeout=10)
    assert rec.starts == ["stuck", "later"]


# --------------------------------------------------------------------------- S3


async def test_items_start_in_put_order_across_many_pause_resume_cycles() -> None:
    rec = Recorder()
    async with PausablePool(rec, workers=4) as pool:
        n = 0
        for cycle in range(30):
            for _ in range(7):
                pool.put_nowait(n)
                n += 1
            for _ in range(cycle % 4):
                await asyncio.sleep(0)
            if cycle % 2 == 0:
                await pool.pause(f"cycle {cycle}", timeout=10)
            else:
                pool.hold(f"cycle {cycle}", source="breaker")
            for _ in range(3):
                pool.put_nowait(n)
                n += 1
            pool.resume()
            pool.resume("breaker")
        await pool.join(timeout=10)
    assert rec.starts == list(range(n))


async def test_order_holds_when_a_pause_lands_between_waking_workers_and_their_running() -> None:
    # The smallest case the property test found against an earlier design that reserved items
    # for parked workers: two items handed to two parked workers, a pause before either ran,
    # then a resume. The stale wake-up of one worker must not start item 1 before item 0.
    rec = Recorder()
    async with PausablePool(rec, workers=3) as pool:
        pool.put_nowait(0)
        pool.put_nowait(1)
        pool.hold("blip", source="operator")
        pool.resume("operator")
        await pool.join(timeout=10)
    assert rec.starts == [0, 1]


# --------------------------------------------------------------------------- S4


async def test_the_guides_measurement_four_workers_hundred_items_of_fifty_ms() -> None:
    rec = Recorder(seconds=0.05)
    async with PausablePool(rec, workers=4) as pool:
        for i in range(100):
            pool.put_nowait(i)
        await rec.wait_starts(10)
        await asyncio.sleep(0.02)  # pause while items are mid-flight
        assert pool.in_flight > 0
        rec.mark("pause-called")
        async with asyncio.timeout(5):  # a hang guard, below the pause's own timeout
            await pool.pause("seed scenario", timeout=10)
        # it returned once the items in flight at the call had ended, and no other started
        assert pool.in_flight == 0 and len(rec.ends) == len(rec.starts)
        rec.mark("hold-start")
        started_before_hold = len(rec.starts)
        await asyncio.sleep(0.5)
        rec.mark("hold-end")
        assert rec.starts_after("pause-called") == []
        assert len(rec.starts) == started_before_hold
        assert pool.queued == 100 - started_before_hold
        pool.resume()
        await pool.join(timeout=30)
    assert sorted(rec.starts) == list(range(100)), "lost or duplicated items"
    assert len(rec.ends) == 100
    assert rec.starts == list(range(100))


# --------------------------------------------------------------------------- S5


async def test_pool_stays_paused_while_any_source_holds_a_pause() -> None:
    rec = Recorder()
    async with PausablePool(rec, workers=2) as pool:
        await pool.pause("db maintenance", source="operator")
        await pool.pause("payments api down", source="breaker")
        assert pool.holds == {"operator": "db maintenance", "breaker": "payments api down"}
        pool.put_nowait(1)
        assert pool.resume("breaker") is False  # the breaker closing must not resume it
        await asyncio.sleep(0.02)
        assert pool.paused and pool.holds == {"operator": "db maintenance"}
        assert rec.starts == []
        assert pool.resume("operator") is True
        await pool.join(timeout=10)
    assert rec.starts == [1]


async def test_pausing_twice_with_one_source_updates_its_reason_and_releasing_nothing_is_a_no_op() -> None:
    async with PausablePool(Recorder(), workers=1) as pool:
        await pool.pause("first", source="operator")
        since = pool.stats().paused_since
        await pool.pause("second", source="operator")
        assert pool.holds == {"operator": "second"}
        assert pool.stats().paused_since == since
        assert pool.resume("breaker") is False
        assert pool.paused
        assert pool.resume("operator") is True
        assert pool.resume("operator") is False
        assert not pool.paused and pool.stats().paused_since is None


# --------------------------------------------------------------------------- S6


async def test_an_item_past_its_timeout_is_cancelled_counted_reported_and_the_worker_goes_on() -> None:
    errors: list[tuple[Any, BaseException]] = []

    async def handler(item: str) -> None:
        if item == "slow":
            await asyncio.sleep(60)

    async with PausablePool(
        handler, workers=1, item_timeout=0.1, on_error=lambda i, e: errors.append((i, e))
    ) as pool:
        pool.put_nowait("slow")
        pool.put_nowait("fast")
        await pool.join(timeout=10)
        stats = pool.stats()
    assert stats.timed_out == 1 and stats.processed == 1 and stats.failed == 0
    assert [(i, type(e)) for i, e in errors] == [("slow", ItemTimeout)]
    assert isinstance(errors[0][1], TimeoutError)


async def test_pause_never_waits_longer_than_one_items_deadline() -> None:
    rec = Recorder()
    rec.gates = {"a": asyncio.Event(), "b": asyncio.Event()}  # never set: stuck items

    async with PausablePool(rec, workers=2, item_timeout=0.2) as pool:
        pool.put_nowait("a")
        pool.put_nowait("b")
        await rec.wait_starts(2)
        await pool.pause("x", timeout=30)  # returns at the items' deadline, not after 60 s
        assert pool.quiet and pool.stats().timed_out == 2
        pool.resume()


async def test_a_handler_raising_timeout_error_itself_counts_as_failed_not_timed_out() -> None:
    async def handler(item: int) -> None:
        raise TimeoutError("dependency timed out")

    async with PausablePool(handler, workers=1, item_timeout=5) as pool:
        pool.put_nowait(1)
        await pool.join(timeout=10)
        assert pool.stats().failed == 1 and pool.stats().timed_out == 0


# --------------------------------------------------------------------------- S7


async def test_a_handler_exception_is_counted_and_passed_to_an_async_on_error() -> None:
    seen: list[tuple[Any, str]] = []

    async def on_error(item: Any, exc: BaseException) -> None:
        await asyncio.sleep(0)
        seen.append((item, str(exc)))

    async def handler(item: int) -> None:
        if item % 2:
            raise ValueError(f"bad {item}")

    async with PausablePool(handler, workers=2, on_error=on_error) as pool:
        for i in range(6):
            pool.put_nowait(i)
        await pool.join(timeout=10)
        stats = pool.stats()
    assert stats.failed == 3 and stats.processed == 3
    assert sorted(seen) == [(1, "bad 1"), (3, "bad 3"), (5, "bad 5")]


async def test_an_exception_in_on_error_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def on_error(item: Any, exc: BaseException) -> None:
        raise RuntimeError("the hook itself broke")

    async def handler(item: int) -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="replica.pool.worker"):
        async with PausablePool(handler, workers=1, on_error=on_error) as pool:
            pool.put_nowait(1)
            pool.put_nowait(2)
            await pool.join(timeout=10)
            assert pool.stats().failed == 2
    assert any("on_error hook failed" in r.message for r in caplog.records)


# --------------------------------------------------------------------------- handlers that escape


@pytest.mark.parametrize("item_timeout", [None, 30.0], ids=["no-deadline", "under-a-deadline"])
async def test_a_cancelled_error_escaping_a_handler_whose_worker_was_not_cancelled_fails_that_item(
    item_timeout: float | None,
) -> None:
    errors: list[tuple[Any, BaseException]] = []
    done: list[str] = []

    async def handler(item: str) -> None:
        if item.startswith("bad"):
            shared = asyncio.create_task(asyncio.sleep(60))  # a task the handler awaits ...
            asyncio.get_running_loop().call_soon(shared.cancel)  # ... that something else cancels
            await shared
        done.append(item)

    async with PausablePool(
        handler, workers=1, item_timeout=item_timeout, on_error=lambda i, e: errors.append((i, e))
    ) as pool:
        for item in ("bad-1", "good-1", "bad-2", "good-2"):
            pool.put_nowait(item)
        await pool.join(timeout=10)  # one worker: it served the whole queue
        stats = pool.stats()
        assert pool.alive() is None
    assert done == ["good-1", "good-2"]
    assert (stats.failed, stats.processed, stats.cancelled, stats.timed_out) == (2, 2, 0, 0)
    assert [i for i, _ in errors] == ["bad-1", "bad-2"]
    for _, exc in errors:
        assert isinstance(exc, HandlerCancelled) and isinstance(exc, Exception)
        assert isinstance(exc.__cause__, asyncio.CancelledError)


def _exit() -> None:
    sys.exit()


def _exit_3() -> None:
    sys.exit(3)


def _interrupt() -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("escape", "raised"),
    [(_exit, "SystemExit(None)"), (_exit_3, "SystemExit(3)"), (_interrupt, "KeyboardInterrupt()")],
    ids=["sys.exit()", "sys.exit(3)", "KeyboardInterrupt"],
)
async def test_a_handler_raising_system_exit_or_keyboard_interrupt_fails_that_item_and_goes_on(
    escape: Any, raised: str
) -> None:
    errors: list[tuple[Any, BaseException]] = []
    done: list[str] = []

    async def handler(item: str) -> None:
        await asyncio.sleep(0)
        if item == "bad":
            escape()
        done.append(item)

    async with PausablePool(handler, workers=1, on_error=lambda i, e: errors.append((i, e))) as pool:
        for item in ("bad", "good", "bad", "good"):
            pool.put_nowait(item)
        await pool.join(timeout=10)
        stats = pool.stats()
        assert pool.alive() is None
    assert done == ["good", "good"] and (stats.failed, stats.processed) == (2, 2)
    assert [i for i, _ in errors] == ["bad", "bad"]
    for _, exc in errors:
        assert isinstance(exc, HandlerExited) and isinstance(exc, Exception)
        assert isinstance(exc.__cause__, (SystemExit, KeyboardInterrupt))
        assert raised in str(exc)


async def test_an_escape_with_no_on_error_is_logged_as_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def handler(item: int) -> None:
        sys.exit(1)

    async with PausablePool(handler, workers=1) as pool:
        pool.put_nowait(1)
        await pool.join(timeout=10)
        assert pool.stats().failed == 1 and pool.alive() is None
    assert "HandlerExited('the handler raised SystemExit(1)" in caplog.text


async def test_a_cancelled_error_escaping_on_error_is_logged_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def on_error(item: Any, exc: BaseException) -> None:
        shared: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        shared.cancel()  # cancelled by something else: not the worker's cancellation
        await shared

    async def handler(item: int) -> None:
        raise ValueError("boom")

    async with PausablePool(handler, workers=1, on_error=on_error) as pool:
        pool.put_nowait(1)
        pool.put_nowait(2)
        await pool.join(timeout=10)
        assert pool.stats().failed == 2 and pool.alive() is None
    assert caplog.text.count("on_error hook failed") == 2


# --------------------------------------------------------------------------- liveness


async def test_the_pool_is_alive_until_a_worker_task_is_gone_and_then_says_which(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = PausablePool(Recorder(), workers=2, name="jobs")
    assert pool.alive() is None  # not started: nothing is missing
    async with pool:
        assert pool.alive() is None
        worker = next(t for t in asyncio.all_tasks() if t.get_name() == "jobs-worker-1")
        worker.cancel()  # by something other than the pool
        await asyncio.wait([worker])
        assert pool.alive() == "worker jobs-worker-1 was cancelled"
        assert "jobs: worker jobs-worker-1 was cancelled; the pool is not alive" in caplog.text
        pool.put_nowait(1)  # the other worker still serves
        await pool.join(timeout=10)
    assert pool.alive() is None  # stopped on purpose


async def test_workers_cancelled_by_a_drain_past_its_deadline_leave_the_pool_alive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = Recorder()
    rec.gates["stuck"] = asyncio.Event()  # never set
    pool = PausablePool(rec, workers=2)
    await pool.start()
    pool.put_nowait("stuck")
    await rec.wait_starts(1)
    await pool.drain(timeout=0.05)
    assert pool.stats().cancelled == 1
    assert pool.alive() is None and "not alive" not in caplog.text
    await pool.stop()


# --------------------------------------------------------------------------- S8


async def test_a_bounded_queue_gives_producers_backpressure_paused_or_not() -> None:
    rec = Recorder()
    async with PausablePool(rec, workers=1, maxsize=2) as pool:
        await pool.pause("x")
        pool.put_nowait(1)
        await pool.put(2)
        with pytest.raises(asyncio.QueueFull):
            pool.put_nowait(3)
        blocked = asyncio.create_task(pool.put(3))
        await asyncio.sleep(0.05)
        assert not blocked.done(), "put() did not wait on a full queue while paused"
        pool.resume()
        await asyncio.wait_for(blocked, 10)
        await pool.join(timeout=10)
        # and while running: a blocked handler keeps the queue full
        rec.gates[10] = asyncio.Event()
        pool.put_nowait(10)
        await rec.wait_starts(4)
        pool.put_nowait(11)
        pool.put_nowait(12)
        running_blocked = asyncio.create_task(pool.put(13))
        await asyncio.sleep(0.05)
        assert not running_blocked.done()
        rec.gates[10].set()
        await asyncio.wait_for(running_blocked, 10)
        await pool.join(timeout=10)
    assert rec.starts == [1, 2, 3, 10, 11, 12, 13]


async def test_a_cancelled_put_does_not_swallow_a_wake_up() -> None:
    rec = Recorder()
    async with PausablePool(rec, workers=1, maxsize=1) as pool:
        await pool.pause("x")
        pool.put_nowait(1)
        first = asyncio.create_task(pool.put(2))
        second = asyncio.create_task(pool.put(3))
        await asyncio.sleep(0.01)
        first.cancel()
        pool.resume()
        await asyncio.wait_for(second, 10)
        await pool.join(timeout=10)
        with pytest.raises(asyncio.CancelledError):
            await first
    assert rec.starts == [1, 3]


# --------------------------------------------------------------------------- S9


async def test_drain_hands_back_unstarted_items_in_order_and_lets_in_flight_finish() -> None:
    rec = Recorder(seconds=0.05)
    pool = PausablePool(rec, workers=2)
    await pool.start()
    for i in range(10):
        pool.put_nowait(i)
    await rec.wait_starts(2)
    unstarted = await pool.drain(timeout=10)
    assert unstarted == list(range(2, 10))
    assert sorted(rec.ends) == [0, 1]
    with pytest.raises(PoolClosed):
        await pool.put(99)
    with pytest.raises(PoolClosed):
        pool.put_nowait(99)
    assert await pool.drain() == unstarted  # idempotent
    assert await pool.stop() == unstarted
    await pool.stop()


async def test_drain_past_its_deadline_cancels_in_flight_items_and_reports_them() -> None:
    errors: list[tuple[Any, BaseException]] = []
    rec = Recorder()
    rec.gates = {i: asyncio.Event() for i in range(3)}  # never set: stuck items

    pool = PausablePool(rec, workers=2, on_error=lambda i, e: errors.append((i, e)))
    await pool.start()
    for i in range(3):
        pool.put_nowait(i)
    await rec.wait_starts(2)
    unstarted = await pool.drain(timeout=0.05)
    assert unstarted == [2]
    assert sorted(i for i, _ in errors) == [0, 1]
    assert all(isinstance(e, ItemCancelled) for _, e in errors)
    assert pool.in_flight == 0 and pool.stats().cancelled == 2
    await pool.stop()


async def test_leaving_async_with_drains_and_keeps_what_it_handed_back() -> None:
    rec = Recorder()
    async with PausablePool(rec, workers=1) as pool:
        await pool.pause("x")
        for i in range(5):
            pool.put_nowait(i)
    assert pool.handed_back == [0, 1, 2, 3, 4]
    assert pool.closed and rec.starts == []


# --------------------------------------------------------------------------- S10


async def test_cancelling_a_task_that_awaits_pause_leaves_the_pool_consistent() -> None:
    rec = Recorder()
    rec.gates[1] = asyncio.Event()
    async with PausablePool(rec, workers=2) as pool:
        pool.put_nowait(1)
        await rec.wait_starts(1)
        waiter = asyncio.create_task(pool.pause("x", timeout=None))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert pool.paused and pool.holds == {"operator": "x"}
        rec.gates[1].set()
        await pool.wait_quiet(timeout=10)
        pool.put_nowait(2)
        pool.resume()
        await pool.join(timeout=10)
    assert rec.starts == [1, 2]


async def test_leaving_async_with_cancels_idle_workers_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        async with PausablePool(Recorder(), workers=8) as pool:
            pool.put_nowait(1)
            await pool.join(timeout=10)
        tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("pool-worker")]
        assert tasks == []
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]


async def test_cancelling_the_task_that_owns_the_pool_cancels_its_workers() -> None:
    started = asyncio.Event()

    async def owner() -> None:
        async def handler(item: int) -> None:
            started.set()
            await asyncio.sleep(60)

        async with PausablePool(handler, workers=2, shutdown_grace_period_s=0.05) as pool:
            pool.put_nowait(1)
            await asyncio.sleep(60)

    task = asyncio.create_task(owner())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --------------------------------------------------------------------------- S11

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 5)),
        st.tuples(st.just("hold"), st.sampled_from(["operator", "breaker", "fleet"])),
        st.tuples(st.just("release"), st.sampled_from(["operator", "breaker", "fleet"])),
        st.tuples(st.just("pause"), st.sampled_from(["operator", "breaker", "fleet"])),
        st.tuples(st.just("ticks"), st.integers(0, 6)),
    ),
    max_size=40,
)


async def _scenario(ops: list[tuple[str, Any]]) -> None:
    rec = Recorder()
    violations: list[Any] = []
    pool: PausablePool

    async def handler(item: int) -> None:
        if pool.paused:
            violations.append(item)
        await rec(item)

    pool = PausablePool(handler, workers=3)
    async with pool:
        n = 0
        for op, arg in ops:
            if op == "put":
                for _ in range(arg):
                    pool.put_nowait(n)
                    n += 1
            elif op == "hold":
                pool.hold("because", source=arg)
            elif op == "release":
                pool.resume(arg)
            elif op == "pause":
                task = asyncio.create_task(pool.pause("wait", source=arg, timeout=10))
                await task
                assert pool.in_flight == 0
            else:
                for _ in range(arg):
                    await asyncio.sleep(0)
            assert pool.paused == bool(pool.holds)
            assert pool.queued + pool.in_flight + len(set(rec.ends)) >= 0
        for source in list(pool.holds):
            pool.resume(source)
        await pool.join(timeout=10)
    assert violations == [], "an item started while the pool was paused"
    assert rec.starts == list(range(n)), "start order differs from put order, or items lost"
    assert len(rec.ends) == n


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_any_sequence_of_pauses_and_resumes_keeps_order_and_loses_nothing(
    ops: list[tuple[str, Any]],
) -> None:
    asyncio.run(_scenario(ops))


# --------------------------------------------------------------------------- extras


async def test_listeners_hear_paused_quiet_and_resumed() -> None:
    events: list[str] = []
    rec = Recorder()
    rec.gates[1] = asyncio.Event()
    async with PausablePool(rec, workers=1) as pool:
        pool.add_listener(events.append)
        pool.put_nowait(1)
        await rec.wait_starts(1)
        pool.hold("x")
        assert events == ["paused"]
        rec.gates[1].set()
        await pool.wait_quiet(timeout=10)
        assert events == ["paused", "quiet"]
        pool.resume()
        assert events == ["paused", "quiet", "resumed"]
    assert events[-1] == "drained"


async def test_wait_for_is_awaitable_both_ways() -> None:
    async with PausablePool(Recorder(), workers=1) as pool:
        paused = asyncio.create_task(pool.wait_for(True))
        await asyncio.sleep(0)
        assert not paused.done()
        pool.hold("x", source="fleet")
        await asyncio.wait_for(paused, 5)
        running = asyncio.create_task(pool.wait_for(False))
        await asyncio.sleep(0)
        assert not running.done()
        pool.resume("fleet")
        await asyncio.wait_for(running, 5)


async def test_stats_report_the_pause_and_the_counts() -> None:
    async with PausablePool(Recorder(), workers=2, maxsize=10) as pool:
        for i in range(4):
            pool.put_nowait(i)
        await pool.join(timeout=10)
        await pool.pause("maintenance", source="operator")
        pool.put_nowait(9)
        stats = pool.stats()
    assert stats.processed == 4 and stats.put == 5 and stats.queued == 1
    assert stats.paused and stats.holds == {"operator": "maintenance"}
    assert stats.paused_since is not None and stats.pause_seconds >= 0
    assert stats.maxsize == 10 and stats.workers == 2


def test_bad_arguments_are_refused_with_a_clear_error() -> None:
    async def handler(item: Any) -> None:
        return None

    with pytest.raises(ValueError, match="workers"):
        PausablePool(handler, workers=0)
    with pytest.raises(ValueError, match="maxsize"):
        PausablePool(handler, maxsize=-1)
    with pytest.raises(ValueError, match="item_timeout"):
        PausablePool(handler, item_timeout=0)
