"""Real replicas for coordinator tests: N x (PausablePool + FleetController) on a real Redis.

``replicas(url, fleet, n)`` runs them in the test's own event loop (async tests).
``ReplicaThread`` runs the same in a thread with its own loop, for sync tests that drive the
CLI in-process (``asyncio.run`` inside) or a browser (Playwright's sync API).
``run_cli(...)`` runs the real ``fleetgate`` console script in a subprocess.

The handler of every pool records what it ran; an item ``{"hold": true}`` stays in flight
until ``release()``, so a test can make a replica that does not get quiet in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis.asyncio as aioredis

from replica.contract import Keys
from replica.control.controller import FleetController
from replica.pool.pool import PausablePool

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
FLEETGATE = str(Path(sys.executable).with_name("fleetgate"))


@dataclass
class Replica:
    id: str
    pool: PausablePool
    controller: FleetController
    client: aioredis.Redis
    ran: list[Any] = field(default_factory=list)


@dataclass
class Kit:
    """The running replicas of one fleet."""

    fleet: str
    replicas: list[Replica]
    gate: asyncio.Event
    held: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a ``{"hold": true}`` item starts."""

    def release(self) -> None:
        """Let every ``{"hold": true}`` item finish."""
        self.gate.set()

    def put(self, index: int, item: Any) -> None:
        self.replicas[index].pool.put_nowait(item)

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.replicas]


@contextlib.asynccontextmanager
async def replicas(
    redis_url: str,
    fleet: str,
    n: int = 3,
    *,
    workers: int = 2,
    poll_interval: float = 0.2,
    heartbeat_interval: float = 0.5,
    prefix: str = "r",
) -> AsyncIterator[Kit]:
    """Start ``n`` replicas following ``fleet``; stop them (records removed) on exit."""
    gate = asyncio.Event()
    kit = Kit(fleet=fleet, replicas=[], gate=gate)
    stack = contextlib.AsyncExitStack()
    async with stack:
        for i in range(n):
            rid = f"{prefix}{i + 1}"
            ran: list[Any] = []

            async def handler(item: Any, ran: list[Any] = ran) -> None:
                ran.append(item)
                if isinstance(item, dict) and item.get("hold"):
                    kit.held.set()
                    await gate.wait()
                else:
                    await asyncio.sleep(0.01)

            client = aioredis.Redis.from_url(redis_url, decode_responses=True)
            stack.push_async_callback(client.aclose)
            pool = PausablePool(handler, workers=workers, name=rid, shutdown_grace_period_s=2.0)
            await stack.enter_async_context(pool)
            controller = FleetController(
                pool, client, fleet, rid,
                poll_interval=poll_interval, heartbeat_interval=heartbeat_interval, host="testhost",
            )
            await stack.enter_async_context(controller)
            stack.callback(gate.set)  # release held items before the pools drain
            kit.replicas.append(Replica(rid, pool, controller, client, ran))
        yield kit


class ReplicaThread:
    """``replicas(...)`` in a thread of its own: ``with ReplicaThread(url, fleet, 3) as kit``."""

    def __init__(self, redis_url: str, fleet: str, n: int = 3, **options: Any) -> None:
        self._args = (redis_url, fleet, n)
        self._options = options
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="replicas", daemon=True)
        self._stop: asyncio.Event | None = None
        self._done: asyncio.Future[None] | None = None
        self.kit: Kit | None = None
        self.leftovers: list[str] = []

    def call(self, fn: Callable[[], Awaitable[T]] | Callable[[], T], timeout: float = 30.0) -> T:
        """Run ``fn()`` in the replicas' loop (awaited if it returns an awaitable)."""

        async def run() -> T:
            result = fn()
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                return await result  # type: ignore[no-any-return]
            return result  # type: ignore[return-value]

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def __enter__(self) -> Kit:
        self._thread.start()
        started: asyncio.Future[Kit] = self._loop.create_future()

        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                async with replicas(*self._args, **self._options) as kit:
                    started.set_result(kit)
                    await self._stop.wait()
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise

        def begin() -> None:
            self._done = asyncio.ensure_future(main())

        self._loop.call_soon_threadsafe(begin)
        self.kit = asyncio.run_coroutine_threadsafe(_wait(started), self._loop).result(30)
        return self.kit

    def __exit__(self, *exc: object) -> None:
        async def finish() -> None:
            assert self._stop is not None and self._done is not None
            self._stop.set()
            await self._done

        async def leftovers() -> list[str]:
            # what the components left running (a bug of theirs): cancel it and say so
            current = asyncio.current_task()
            left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
            for task in left:
                task.cancel()
            if left:
                await asyncio.wait(left, timeout=10)
            return sorted(t.get_name() for t in left)

        try:
            asyncio.run_coroutine_threadsafe(finish(), self._loop).result(30)
            self.leftovers = asyncio.run_coroutine_threadsafe(leftovers(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
        if self.leftovers:  # the controller's bug, not the test's: say so, do not fail here
            logging.getLogger(__name__).warning(
                "tasks left running after the replicas stopped (cancelled): %s", self.leftovers
            )


async def _wait(fut: asyncio.Future[T]) -> T:
    return await fut


def run_cli(
    *args: str,
    redis_url: str | None = None,
    fleet: str | None = None,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``fleetgate`` script (falls back to ``python -m coordinator.cli.app``)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    full_env.update(env or {})
    if redis_url is not None:
        full_env["FLEETGATE_REDIS_URL"] = redis_url
    if fleet is not None:
        full_env["FLEETGATE_FLEET"] = fleet
    command = [FLEETGATE] if os.path.exists(FLEETGATE) else [sys.executable, "-m", "coordinator.cli.app"]
    return subprocess.run(
        [*command, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
        env=full_env, cwd=ROOT,
    )


async def cli_logged(
    redis_url: str, fleet: str, *args: str, timeout: float = 180.0
) -> subprocess.CompletedProcess[str]:
    """``run_cli`` in a thread (the test's event loop runs on meanwhile), its exit status, time
    and output printed for pytest to show on a failure; ``timeout`` is a hang guard."""
    t0 = time.monotonic()
    done = await asyncio.to_thread(run_cli, *args, redis_url=redis_url, fleet=fleet,
                                   timeout=timeout)
    print(f"fleetgate {' '.join(args)}: exit {done.returncode} in "
          f"{time.monotonic() - t0:.1f}s\n{done.stdout}{done.stderr}")
    return done


async def until(predicate: Callable[[], Coroutine[Any, Any, bool]], timeout: float = 20.0) -> None:
    """Poll ``predicate`` (for conditions with no event: another process's state in Redis)."""
    async with asyncio.timeout(timeout):
        while True:
            if await predicate():
                return
            await asyncio.sleep(0.05)


async def audit(redis: aioredis.Redis, fleet: str) -> list[dict[str, Any]]:
    """The fleet's audit trail, oldest first: each entry's fields."""
    return [fields for _id, fields in await redis.xrange(Keys(fleet).audit)]


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Sync ``until``."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set ``FLEETGATE_*``-style variables for the block (for in-process CLI runs)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
