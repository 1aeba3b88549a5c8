"""The processes of ``fleetgate demo``: Redis (``FLEETGATE_REDIS_URL``, else a private server
on a free port), the ``fleetgate-replica`` processes and the coordinator API; started, watched
until they answer, signalled, and stopped (``DemoProcesses``). The scenario is
``coordinator.demo.run``'s.

Stopping: every process is SIGTERMed at once (a replica drains), given ``STOP_WAIT_S`` (after a
signal: until ``stop_by``, ``STOP_GRACE_S`` after it) and SIGKILLed if still there; a private
Redis is then stopped (after a signal: killed). ``kill_all`` is the watchdog's last step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
from rich.console import Console
from rich.markup import escape

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.fleet.registry import forget
from replica.contract import Keys
from replica.contract.keys import FLEETS_KEY
from replica.contract.urls import check_redis_url, redact_url
from replica.link.connect import connect


def _on_a_thread(work: Any) -> Any:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


async def _remove_fleet(url: str, fleet: str) -> int:
    """Delete every key of ``fleet`` (they share its hash tag) and its registry entry; the
    number of keys deleted."""
    client = connect(url, socket_connect_timeout=3, socket_timeout=3)
    try:
        pattern = Keys(fleet).prefix.replace("[", "\\[").replace("]", "\\]") + ":*"
        keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
        for key in keys:  # one by one: a cluster's keys of one fleet share a slot anyway
            await client.delete(key)
        await forget(client, fleet)
        return len(keys)
    finally:
        await client.aclose()


def _ping(url: str) -> None:
    """PING what ``url`` names (any topology: the one connection factory), on a thread of its
    own: the demo's loop may be running."""

    async def ping() -> None:
        client = connect(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            await client.ping()
        finally:
            await client.aclose()

    _on_a_thread(ping())

WORKERS = 4
ITEM_SECONDS = 0.05
STOP_GRACE_S = 0.5
"""How long the processes get to stop after a signal before they are killed."""
STOP_WAIT_S = 15.0
"""How long each gets at the end of an uninterrupted run."""


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    port: int
    terminated: bool = False


class DemoProcesses:
    """Starts and stops the demo's processes: Redis, ``replicas`` replicas and the API."""

    def __init__(self, console: Console, replicas: int) -> None:
        self.console = console
        self.n_replicas = replicas
        self.token = secrets.token_urlsafe(18)
        self.redis_server: LocalRedis | None = None
        self.redis_url = ""
        self.fleet_name = "demo"
        self.shared = False  # a Redis the user gave: what the demo wrote is removed at the end
        self.procs: list[_Proc] = []
        self.logdir = Path(tempfile.mkdtemp(prefix="fleetgate-demo-"))
        self.api_port = 0
        self.stop_by: float | None = None  # set by a signal: when the processes must be gone

    def start_redis(self) -> None:
        url = os.environ.get("FLEETGATE_REDIS_URL")
        if url:
            check_redis_url(url)  # a URL that can never work: ContractError, exit 2
            try:
                _ping(url)
            except (redis.RedisError, ValueError) as exc:
                raise RuntimeError(f"cannot reach Redis at {redact_url(url)}: {exc}") from None
            self.redis_url = url
            self.fleet_name = f"demo-{secrets.token_hex(3)}"  # never touch a real fleet
            self.shared = True
            self.console.print(
                f"redis: {escape(redact_url(url))} (FLEETGATE_REDIS_URL), fleet {self.fleet_name} "
                "(removed when the demo ends)"
            )
            return
        self.redis_server = LocalRedis().start()
        self.redis_url = self.redis_server.url
        self.console.print(
            f"redis: private {Path(self.redis_server.binary).name} on port {self.redis_server.port}"
        )

    def _spawn(self, name: str, args: list[str], env: dict[str, str], port: int) -> _Proc:
        log = self.logdir / f"{name}.log"
        full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as out:
            popen = subprocess.Popen(
                args, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        proc = _Proc(name, popen, log, port)
        self.procs.append(proc)
        return proc

    def start_replicas(self) -> None:
        for i in range(1, self.n_replicas + 1):
            port = free_port()
            self._spawn(
                f"replica-{i}",
                [sys.executable, "-m", "replica", "--handler", "replica.demo:sleep"],
                {
                    "FLEETGATE_REDIS_URL": self.redis_url,
                    "FLEETGATE_FLEET": self.fleet_name,
                    "FLEETGATE_REPLICA_ID": f"{self.fleet_name}-replica-{i}",
                    "FLEETGATE_PORT": str(port),
                    "FLEETGATE_WORKERS": str(WORKERS),
                    "FLEETGATE_ADMIN_TOKEN": self.token,
                    "FLEETGATE_DEMO_ITEM_SECONDS": str(ITEM_SECONDS),
                    "FLEETGATE_POLL_INTERVAL": "1",
                    "FLEETGATE_LOG_LEVEL": "INFO",
                },
                port,
            )

    def start_api(self) -> None:
        self.api_port = free_port()
        self._spawn(
            "coordinator",
            [sys.executable, "-m", "coordinator", "serve", "--port", str(self.api_port)],
            {
                "FLEETGATE_REDIS_URL": self.redis_url,
                "FLEETGATE_FLEET": self.fleet_name,
                "FLEETGATE_ADMIN_TOKEN": self.token,
                "FLEETGATE_ADMIN_NAME": "demo-operator",
            },
            self.api_port,
        )

    async def wait_http(self, timeout: float = 30.0) -> None:
        """Every process answers /healthz (bounded; a process that exits is an error)."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=1.0) as client:
            for proc in self.procs:
                while True:
                    if proc.popen.poll() is not None:
                        raise RuntimeError(f"{proc.name} exited: {self._tail(proc)}")
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get(f"http://127.0.0.1:{proc.port}/healthz")).status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{proc.name} did not answer /healthz: {self._tail(proc)}")
                    await asyncio.sleep(0.1)

    def _tail(self, proc: _Proc, lines: int = 3) -> str:
        try:
            return " | ".join(proc.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def terminate_all(self) -> None:
        """SIGTERM every process now, once (a second SIGTERM stops a replica at once, its
        drain cut short); they stop on their own, ``stop_all`` reaps them."""
        for proc in self.procs:
            if not proc.terminated and proc.popen.poll() is None:
                proc.terminated = True
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)

    def kill_all(self) -> None:
        """SIGKILL every process and Redis: the watchdog's last step (no waiting, no locks)."""
        for proc in list(self.procs):
            if proc.popen.returncode is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
        if self.redis_server is not None:
            self.redis_server.kill()

    def stop_all(self) -> None:
        """SIGTERM every process (replicas drain), wait, kill what is left; stop Redis. After a
        signal the wait ends at ``stop_by`` and a private Redis is killed, not asked to stop."""
        self.terminate_all()
        for proc in self.procs:
            timeout = STOP_WAIT_S if self.stop_by is None else max(self.stop_by - time.monotonic(), 0)
            try:
                proc.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(timeout=5)
        self.procs.clear()
        if self.shared:
            self.remove_shared_fleet()
        if self.redis_server is not None:
            if self.stop_by is not None:
                self.redis_server.kill()
            self.redis_server.stop()
            self.redis_server = None

    def remove_shared_fleet(self) -> None:
        """On a shared Redis, once no replica runs: delete what the demo wrote there (its
        fleet's keys and registry entry), or say how to when Redis does not answer."""
        self.shared = False
        try:
            removed = _on_a_thread(_remove_fleet(self.redis_url, self.fleet_name))
        except (redis.RedisError, OSError, ValueError) as exc:
            pattern = f"{Keys(self.fleet_name).prefix}:*"
            self.console.print(
                f"could not remove demo fleet {self.fleet_name} ({escape(str(exc))}): delete the "
                f"keys {escape(pattern)} and ZREM {FLEETS_KEY} {self.fleet_name}"
            )
            return
        self.console.print(f"removed demo fleet {self.fleet_name}: {removed} keys and its registry entry")

    def on_signal(self, sig: signal.Signals) -> None:
        """The first SIGINT or SIGTERM: every process is told to stop at once."""
        if self.stop_by is None:
            self.stop_by = time.monotonic() + STOP_GRACE_S
            self.terminate_all()


__all__ = ["ITEM_SECONDS", "STOP_GRACE_S", "STOP_WAIT_S", "WORKERS", "DemoProcesses"]
