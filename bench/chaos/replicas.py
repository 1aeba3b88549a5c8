"""The run's ``fleetgate-replica`` processes: started, killed, frozen, thawed, restarted, reaped.

Each replica id has one life at a time (a process); a restart is a new life under the same id,
as a rescheduled pod would be. Every start and every exit goes to the history (``spawn``,
``healthy``, ``exit`` with the status and whether the schedule killed it). A replica runs in a
session of its own, with SIGINT and SIGTERM at their default action whatever the runner's
were, its output in ``logs/<id>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench.chaos.handler import HISTORY_ENV
from bench.chaos.history import HistoryWriter
from bench.chaos.settings import ChaosSettings
from coordinator.demo.localredis import free_port

REPLICA_BIN: Final = str(Path(sys.executable).with_name("fleetgate-replica"))
HANDLER_REF: Final = "bench.chaos.handler:handle"
REPO: Final = Path(__file__).resolve().parents[2]
_LAUNCHER: Final = """\
import os, signal, sys
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_SETMASK, ())
os.execv(sys.argv[1], sys.argv[1:])
"""


@dataclass
class Life:
    """One process of a replica."""

    replica: str
    proc: subprocess.Popen[bytes]
    port: int
    started: float
    killed: bool = False
    """The schedule killed it (its exit is expected)."""
    stopping: bool = False
    """The runner asked it to stop (SIGTERM): it must exit 0."""
    frozen: bool = False
    reaped: bool = field(default=False)

    @property
    def pid(self) -> int:
        return self.proc.pid


class Replicas:
    """The replicas of one run (``urls`` maps each id to the Redis URL it uses)."""

    def __init__(self, settings: ChaosSettings, urls: dict[str, str], history: HistoryWriter,
                 history_dir: Path, log_dir: Path, token: str) -> None:
        self.settings = settings
        self.urls = urls
        self.history = history
        self.history_dir = history_dir
        self.log_dir = log_dir
        self.token = token
        self.lives: dict[str, Life] = {}
        self.all_lives: list[Life] = []
        self.locks: dict[str, asyncio.Lock] = {r: asyncio.Lock() for r in urls}
        """Held by whoever kills, freezes or restarts a replica: one at a time."""

    @property
    def ids(self) -> list[str]:
        return list(self.urls)

    def _env(self, replica: str, port: int) -> dict[str, str]:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
        env.update({
            "FLEETGATE_REDIS_URL": self.urls[replica],
            "FLEETGATE_FLEET": s.fleet,
            "FLEETGATE_REPLICA_ID": replica,
            "FLEETGATE_HOST": "127.0.0.1",
            "FLEETGATE_PORT": str(port),
            "FLEETGATE_HANDLER": HANDLER_REF,
            "FLEETGATE_ADMIN_TOKEN": self.token,
            "FLEETGATE_WORKERS": str(s.workers),
            "FLEETGATE_POLL_INTERVAL": str(s.poll_interval),
            "FLEETGATE_HEARTBEAT_INTERVAL": str(s.heartbeat_interval),
            "FLEETGATE_CLAIM_IDLE": str(s.claim_idle),
            "FLEETGATE_ITEM_TIMEOUT": str(s.item_timeout),
            "FLEETGATE_MAX_RETRIES": str(s.max_retries),
            "FLEETGATE_RETRY_BACKOFF": str(s.retry_backoff),
            "FLEETGATE_RETRY_BACKOFF_MAX": str(max(1.0, s.retry_backoff)),
            "FLEETGATE_PAUSE_TIMEOUT": str(s.pause_timeout),
            "FLEETGATE_LOG_LEVEL": "INFO",
            HISTORY_ENV: str(self.history_dir),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(s.extra_env)
        return env

    # ------------------------------------------------------------------ lives

    def spawn(self, replica: str) -> Life:
        """Start a new life of ``replica`` (the previous one must be gone)."""
        current = self.lives.get(replica)
        if current is not None and current.proc.poll() is None:
            raise RuntimeError(f"{replica} is running already (pid {current.pid})")
        port = free_port()
        with (self.log_dir / f"{replica}.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _LAUNCHER, REPLICA_BIN],
                env=self._env(replica, port), cwd=str(REPO), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        life = Life(replica, proc, port, time.time())
        self.lives[replica] = life
        self.all_lives.append(life)
        self.history.write("spawn", replica=replica, pid=proc.pid, port=port)
        return life

    async def wait_healthy(self, life: Life, timeout: float = 60.0) -> bool:
        """Until ``/healthz`` answers 200 (True), the process exits or ``timeout`` (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if life.proc.poll() is not None:
                self.reap()
                return False
            if await _healthz(life.port):
                self.history.write("healthy", replica=life.replica, pid=life.pid)
                return True
            await asyncio.sleep(0.1)
        return False

    async def start(self, replica: str) -> Life:
        """Spawn and wait until healthy; another try if it exited on its own at start (its
        port taken meanwhile)."""
        for _ in range(3):
            life = self.spawn(replica)
            if await self.wait_healthy(life):
                return life
            if life.proc.poll() is None:
                raise RuntimeError(f"{replica} did not become healthy (see {self.log_dir})")
            if life.killed:
                return life
        raise RuntimeError(f"{replica} exited at start (see {self.log_dir}/{replica}.log)")

    def kill(self, replica: str) -> Life | None:
        """SIGKILL (an expected exit) and reap; the life killed."""
        life = self.lives.get(replica)
        if life is None or life.proc.poll() is not None:
            return None
        life.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(life.pid, signal.SIGKILL)
        life.proc.wait(timeout=10)
        self.reap()
        return life

    def freeze(self, replica: str) -> Life | None:
        life = self.lives.get(replica)
        if life is None or life.proc.poll() is not None:
            return None
        life.frozen = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(life.pid, signal.SIGSTOP)
        return life

    def thaw(self, life: Life) -> None:
        if life.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(life.pid, signal.SIGCONT)
            life.frozen = False

    def reap(self) -> list[Life]:
        """Record the exit of every life that ended since the last call."""
        ended = []
        for life in self.all_lives:
            if not life.reaped and life.proc.poll() is not None:
                life.reaped = True
                ended.append(life)
                self.history.write("exit", replica=life.replica, pid=life.pid,
                                   status=life.proc.returncode, killed=life.killed,
                                   stopping=life.stopping)
        return ended

    async def stop_all(self, timeout: float) -> None:
        """SIGTERM every live replica (thawed first) and wait for their exits; SIGKILL past
        ``timeout`` (then their exits say so)."""
        live = [life for life in self.lives.values() if life.proc.poll() is None]
        for life in live:
            self.thaw(life)
            life.stopping = True
            with contextlib.suppress(ProcessLookupError):
                life.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while True:  # other processes' exits: nothing to wait on but their status
            if all(life.proc.poll() is not None for life in live):
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        self.kill_everything()

    def kill_everything(self) -> None:
        """Whatever happens: no process of the run is left (thawed, killed, reaped)."""
        for life in self.all_lives:
            if life.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(life.pid, signal.SIGCONT)
                    os.killpg(life.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    life.proc.wait(timeout=10)
        self.reap()


async def _healthz(port: int) -> bool:
    """One GET /healthz on 127.0.0.1:``port``: True for a 200."""
    try:
        async with asyncio.timeout(2.0):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                await writer.drain()
                status = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, IndexError):
        return False


__all__ = ["HANDLER_REF", "Life", "Replicas"]
