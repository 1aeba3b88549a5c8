"""replica.pool.crew: the worker tasks of a pool, started together and watched while they run."""

from __future__ import annotations

import asyncio

import pytest

from replica.pool.crew import EMPTY, Crew, Worker, describe_end


class Loops:
    """A worker loop that arrives, then parks until told to end (or to raise)."""

    def __init__(self, crew: Crew) -> None:
        self.crew = crew
        self.release = asyncio.Event()
        self.error: BaseException | None = None

    async def __call__(self, me: Worker) -> None:
        self.crew.arrive()
        await self.release.wait()
        if self.error is not None:
            raise self.error


async def test_start_returns_once_every_worker_runs_its_loop_and_they_are_named() -> None:
    crew = Crew("jobs")
    await crew.start(3, Loops(crew))
    assert [m.task.get_name() for m in crew.members if m.task] == [
        "jobs-worker-0", "jobs-worker-1", "jobs-worker-2",
    ]
    assert all(m.item is EMPTY for m in crew.members) and crew.alive() is None
    await crew.cancel_all()
    assert all(m.task is not None and m.task.cancelled() for m in crew.members)
    assert crew.alive() is None  # stopped on purpose


async def test_a_worker_task_cancelled_from_outside_is_logged_and_named_by_alive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crew = Crew("jobs")
    await crew.start(2, Loops(crew))
    task = crew.members[1].task
    assert task is not None
    task.cancel()
    await asyncio.wait([task])
    assert crew.alive() == "worker jobs-worker-1 was cancelled"
    assert "jobs: worker jobs-worker-1 was cancelled; the pool is not alive" in caplog.text
    await crew.cancel_all()


async def test_a_worker_task_that_died_or_returned_is_described_with_its_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crew = Crew("jobs")
    loops = Loops(crew)
    loops.error = RuntimeError("pool bug")
    await crew.start(1, loops)
    loops.release.set()
    task = crew.members[0].task
    assert task is not None
    await asyncio.wait([task])
    assert crew.alive() == "worker jobs-worker-0 died: RuntimeError('pool bug')"
    assert "died: RuntimeError('pool bug'); the pool is not alive" in caplog.text

    async def returns() -> None:
        return None

    done = asyncio.create_task(returns(), name="x-worker-0")
    await done
    assert describe_end(done) == "worker x-worker-0 returned"


async def test_cancel_running_cancels_only_the_workers_running_an_item(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crew = Crew("jobs")
    await crew.start(2, Loops(crew))
    busy, idle = crew.members
    busy.item = "an item"
    running = crew.cancel_running()
    assert running == [busy.task]
    await asyncio.wait(running)
    assert idle.task is not None and not idle.task.done()
    assert crew.alive() is None and "not alive" not in caplog.text  # the pool cancelled it
    await crew.cancel_all()
