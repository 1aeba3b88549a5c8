"""What the Sentinel and Cluster tests share: replicas' views from their HTTP side and from their
records, and the CLI as a subprocess on a replicated topology's URL.

Everything here polls another process's state (its ``/pool``, its record in Redis) with a
bounded deadline: there is no event to wait on across processes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import httpx
import redis.asyncio as aioredis

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import ReplicaInfo
from replica.contract import now_utc
from tests.fleetkit import run_cli
from tests.procs import AUTH, ReplicaProcess


def logs(procs: Sequence[ReplicaProcess]) -> str:
    return "\n".join(f"--- {rp.id} ---\n{rp.log()[-3000:]}" for rp in procs)


async def cli(*args: str, url: str, fleet: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``fleetgate ARGS --redis-url URL`` in a subprocess (off the event loop)."""
    return await asyncio.to_thread(run_cli, *args, "--redis-url", url, fleet=fleet,
                                   timeout=timeout)


async def pools(http: httpx.AsyncClient, procs: Sequence[ReplicaProcess]) -> list[dict[str, Any]]:
    return [(await http.get(rp.url + "/pool", headers=AUTH)).json() for rp in procs]


async def until_pools(
    http: httpx.AsyncClient,
    procs: Sequence[ReplicaProcess],
    pred: Callable[[dict[str, Any]], bool],
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """Every replica's ``/pool`` once ``pred`` holds for all of them."""
    async with asyncio.timeout(timeout):
        while True:
            states = await pools(http, procs)
            if all(pred(s) for s in states):
                return states
            await asyncio.sleep(0.05)


async def until_following(
    redis: aioredis.Redis,
    fleet: str,
    ids: Sequence[str],
    version: int,
    since: datetime,
    timeout: float = 30.0,
) -> dict[str, ReplicaInfo]:
    """The records of ``ids`` once each was written after ``since`` (a heartbeat on the Redis
    that answers now), says its control channel is connected and has ``version`` applied."""
    f = Fleet(redis, fleet)
    last: dict[str, ReplicaInfo] = {}
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    last = {r.id: r for r in await f.replicas()}
                except (aioredis.RedisError, OSError):
                    last = {}
                if all(
                    i in last and last[i].heartbeat_at is not None
                    and last[i].heartbeat_at > since and last[i].control == "connected"
                    and last[i].applied_version == version
                    for i in ids
                ):
                    return last
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"replicas not following v{version} since {since}: "
                             f"{ {k: (v.applied_version, v.control, v.heartbeat_at) for k, v in last.items()} }") from None


def status_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


__all__ = ["cli", "logs", "now_utc", "pools", "status_json", "until_following", "until_pools"]
