"""The benches' worker processes: the fan-out baseline's plain redis-py subscribers
(``RawSubscribers``), and idle replicas (``run_controllers``).

``size`` subscribers of one channel are spread over worker processes (this module run as
``python -m bench.workers URL CHANNEL N plain|sharded``), each connecting
``CONNECT_BATCH`` at a time. The protocol on a worker's stdout: ``READY`` once every
subscription is confirmed, then ``GOT <round> <time>`` when the last of its subscribers received
round ``<round>`` (``time``: the latest receipt, this host's clock); ``quit`` published ends it.
``round()`` publishes the next round (``PUBLISH``, or ``SPUBLISH`` for shard subscribers) and
answers the ms from the publish to the last subscriber receiving it.

``run_controllers`` is the body of a benchmark's controller worker: idle pools, each with a
``FleetController`` on a client of its own, ``READY`` once all started, stopped at ``STOP`` on
stdin (``STOPPED``). Also ``split`` (a size over N processes) and ``expect`` (a line from a
worker).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any, Final

import redis.asyncio as aioredis

from replica import FleetController, PausablePool

ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONNECT_BATCH: Final = 50
"""Subscribers a worker connects at a time: thousands of connections at once overflow Redis's
accept queue, and a client whose handshake the server dropped waits for ever."""


def split(size: int, processes: int) -> list[int]:
    """``size`` over at most ``processes`` parts, as even as can be (no empty part)."""
    base, extra = divmod(size, processes)
    return [base + (1 if i < extra else 0) for i in range(processes) if base or i < extra]


async def expect(proc: asyncio.subprocess.Process, word: str, timeout: float = 120.0) -> str:
    """The next line of ``proc`` that starts with ``word`` (others are skipped)."""
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode().strip()
        if not line:
            raise RuntimeError(f"worker exited before {word}")
        if line.startswith(word):
            return line


class RawSubscribers:
    """``size`` plain subscribers of ``channel`` on ``url`` over ``processes`` workers."""

    def __init__(self, url: str, channel: str, size: int, processes: int, *,
                 sharded: bool = False) -> None:
        self._url, self._channel, self._size = url, channel, size
        self._processes, self._sharded = processes, sharded
        self._procs: list[asyncio.subprocess.Process] = []
        self._admin = aioredis.Redis.from_url(url)
        self._round = 0

    async def __aenter__(self) -> RawSubscribers:
        mode = "sharded" if self._sharded else "plain"
        self._procs = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.workers", self._url, self._channel, str(n),
                mode, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                cwd=ROOT)
            for n in split(self._size, self._processes)
        ]
        await asyncio.gather(*(expect(p, "READY") for p in self._procs))
        return self

    async def _publish(self, data: str) -> None:
        if self._sharded:
            await self._admin.spublish(self._channel, data)
        else:
            await self._admin.publish(self._channel, data)

    async def round(self) -> float:
        """Publish the next round: the ms until the last subscriber received it."""
        r, self._round = self._round, self._round + 1
        t0 = time.time()
        await self._publish(str(r))
        lines = await asyncio.gather(*(expect(p, f"GOT {r} ") for p in self._procs))
        return (max(float(line.split()[2]) for line in lines) - t0) * 1000

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._publish("quit")
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in self._procs)), 30)
        finally:
            for p in self._procs:
                if p.returncode is None:
                    p.kill()
                    await p.wait()
            await self._admin.aclose()


async def run_controllers(clients: list[aioredis.Redis], fleet: str, prefix: str, *,
                          start_batch: int = 50, **options: Any) -> None:
    """One idle pool and ``FleetController`` per client (ids ``prefix-i``; ``options`` go to
    the controllers), started ``start_batch`` at a time, until ``STOP`` on stdin."""

    async def handler(item: Any) -> None:
        return None

    pools = [PausablePool(handler, workers=2) for _ in clients]
    controllers = [FleetController(p, c, fleet, f"{prefix}-{i}", **options)
                   for i, (p, c) in enumerate(zip(pools, clients, strict=True))]
    for p in pools:
        await p.start()
    for i in range(0, len(controllers), start_batch):
        await asyncio.gather(*(c.start() for c in controllers[i:i + start_batch]))
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "STOP":
            break
    await asyncio.gather(*(c.stop() for c in controllers))
    for p in pools:
        await p.stop(timeout=1.0)
    for c in clients:
        await c.aclose()
    print("STOPPED", flush=True)


async def worker(url: str, channel: str, n: int, sharded: bool) -> None:
    """``n`` subscribers (the module docstring's protocol)."""
    got: dict[int, list[float]] = {}
    done = asyncio.Event()
    kind, confirm = ("smessage", "ssubscribe") if sharded else ("message", "subscribe")

    async def listen(pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(timeout=None)
            if message is None or message["type"] != kind:
                continue
            t, data = time.time(), message["data"]
            if data == b"quit":
                done.set()
                return
            r = int(data)
            got.setdefault(r, []).append(t)
            if len(got[r]) == n:
                print(f"GOT {r} {max(got.pop(r))!r}", flush=True)

    clients: list[aioredis.Redis] = []
    tasks: list[asyncio.Task[None]] = []
    for start in range(0, n, CONNECT_BATCH):
        batch = []
        for _ in range(min(CONNECT_BATCH, n - start)):
            client = aioredis.Redis.from_url(url, socket_connect_timeout=10)
            clients.append(client)
            batch.append(client.pubsub())
        await asyncio.gather(*((p.ssubscribe if sharded else p.subscribe)(channel)
                               for p in batch))
        for pubsub in batch:  # the confirmation, before the next batch connects
            message = None
            while message is None or message["type"] != confirm:
                message = await pubsub.get_message(timeout=30)
                if message is None:
                    raise RuntimeError(f"no {confirm} confirmation within 30 s")
        tasks += [asyncio.create_task(listen(p)) for p in batch]
    print("READY", flush=True)
    await done.wait()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in clients:
        await client.aclose()


if __name__ == "__main__":
    url, channel, count, mode = sys.argv[1:5]
    asyncio.run(worker(url, channel, int(count), mode == "sharded"))
