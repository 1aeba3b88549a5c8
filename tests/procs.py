"""Real ``fleetgate-replica`` processes for the multi-process tests.

``replica_processes(...)`` starts N replicas on free ports with the given environment, waits
(bounded) for each one's ``/healthz``, and always kills what is left on exit. Each process
writes its log to a file the test can read. The helpers below read what the demo handler
recorded in Redis and pause or resume the fleet through ``coordinator.Fleet``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from coordinator.demo.localredis import free_port
from coordinator.fleet.fleet import Fleet
from replica.contract import WORK_GROUP, Keys

REPLICA = str(Path(sys.executable).with_name("fleetgate-replica"))
TOKEN = "process-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START_DEADLINE_S = 30.0


@dataclass
class ReplicaProcess:
    id: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    async def wait(self, timeout: float) -> int:
        """The exit status, waiting at most ``timeout`` seconds (TimeoutError past it)."""
        async with asyncio.timeout(timeout):
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    return rc
                await asyncio.sleep(0.05)


def base_env(redis_url: str, fleet: str, **settings: Any) -> dict[str, str]:
    """The environment of a test replica: fast intervals, a token, the demo handler."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env.update({
        "FLEETGATE_REDIS_URL": redis_url,
        "FLEETGATE_FLEET": fleet,
        "FLEETGATE_ADMIN_TOKEN": TOKEN,
        "FLEETGATE_HANDLER": "replica.demo:sleep",
        "FLEETGATE_POLL_INTERVAL": "0.2",
        "FLEETGATE_HEARTBEAT_INTERVAL": "0.5",
        "FLEETGATE_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    })
    for key, value in settings.items():
        env[f"FLEETGATE_{key.upper()}"] = str(value)
    return env


def spawn(replica_id: str, env: Mapping[str, str], log_dir: Path) -> ReplicaProcess:
    port = free_port()
    full = dict(env)
    full["FLEETGATE_REPLICA_ID"] = replica_id
    full["FLEETGATE_PORT"] = str(port)
    log_path = log_dir / f"{replica_id}.log"
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            [REPLICA], env=full, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    return ReplicaProcess(replica_id, port, proc, log_path, full)


async def wait_healthy(rp: ReplicaProcess, deadline: float = START_DEADLINE_S) -> None:
    """Poll /healthz (another process's port: no event to wait on) with a bounded deadline."""
    async with httpx.AsyncClient(timeout=2.0) as client:
        async with asyncio.timeout(deadline):
            while True:
                if rp.proc.poll() is not None:
                    raise RuntimeError(f"{rp.id} exited {rp.proc.returncode}:\n{rp.log()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(rp.url + "/healthz")).status_code == 200:
                        return
                await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def replica_processes(
    n: int, env: Mapping[str, str], log_dir: Path, prefix: str = "proc"
) -> AsyncIterator[list[ReplicaProcess]]:
    """Start ``n`` replicas, wait until each answers /healthz, kill the rest on exit."""
    procs: list[ReplicaProcess] = []
    try:
        for i in range(n):
            procs.append(spawn(f"{prefix}-{i}", env, log_dir))
        for i, rp in enumerate(procs):
            try:
                await wait_healthy(rp)
            except RuntimeError:
                if "cannot listen" not in rp.log():
                    raise
                procs[i] = spawn(rp.id, env, log_dir)  # lost a port race: one more try
                await wait_healthy(procs[i])
        yield procs
    finally:
        for rp in procs:
            rp.kill()
        for rp in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                rp.proc.wait(timeout=10)


# ---------------------------------------------------------------------------- Redis side


async def enqueue(redis: aioredis.Redis, fleet: str, count: int) -> list[str]:
    """``count`` items like ``fleetgate enqueue --count N`` makes, through ``Fleet.enqueue``."""
    ids = [f"item-{i:06d}" for i in range(1, count + 1)]
    await Fleet(redis, fleet).enqueue({"id": item_id, "n": int(item_id[-6:])} for item_id in ids)
    return ids


async def done_counts(redis: aioredis.Redis, fleet: str) -> dict[str, int]:
    raw = await redis.hgetall(Keys(fleet).demo_done)
    return {k: int(v) for k, v in raw.items()}


async def demo_log(redis: aioredis.Redis, fleet: str) -> list[dict[str, str]]:
    return [fields for _, fields in await redis.xrange(Keys(fleet).demo_log)]


async def pending(redis: aioredis.Redis, fleet: str) -> int:
    with contextlib.suppress(aioredis.ResponseError):
        summary = await redis.xpending(Keys(fleet).work, WORK_GROUP)
        return int(summary["pending"])
    return 0


async def wait_done(redis: aioredis.Redis, fleet: str, count: int, timeout: float = 90.0) -> None:
    """Poll the demo's done hash (written by other processes) until ``count`` items are done."""
    async with asyncio.timeout(timeout):
        while True:
            if len(await done_counts(redis, fleet)) >= count:
                return
            await asyncio.sleep(0.05)


async def set_fleet_state(redis: aioredis.Redis, fleet: str, action: str, reason: str = "") -> int:
    """Pause or resume the fleet through ``coordinator.Fleet``; the new state's version."""
    f = Fleet(redis, fleet)
    if action == "pause":
        state = await f.pause(reason, by="process-tests")
    else:
        state = await f.resume(by="process-tests")
    return state.version


def now_ms() -> int:
    return int(time.time() * 1000)
