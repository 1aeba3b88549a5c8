"""The processes the tests start, and real ``fleetgate-replica`` processes.

``Processes`` (the ``processes`` fixture of conftest.py) starts a test's processes and, whatever
happens, kills their process groups, reaps them and closes their pipes when the test ends. Each
starts as a terminal would start it, however the suite itself was started: a background job
(``make test &``, ``nohup``, some CI runners) runs with SIGINT ignored, a child inherits an
ignored signal (``subprocess`` resets only SIGPIPE and SIGXFSZ), and a test that sends Ctrl-C
assumes its default action. ``with_default_signals(args)`` is that launch.

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
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import httpx
import redis.asyncio as aioredis

from coordinator.demo.localredis import free_port
from coordinator.fleet.fleet import Fleet
from replica.contract import WORK_GROUP, Keys

REPLICA = str(Path(sys.executable).with_name("fleetgate-replica"))
TOKEN = "process-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START_DEADLINE_S = 90.0
"""A hang guard on a replica process's start (not a measurement): on a machine loaded far past
its cores (CI beside other runs) the interpreter's imports alone took over 30 s."""
REAP_TIMEOUT_S: Final = 10.0

# Run by the test's own interpreter before the command (-I -S: a few ms): the signals named in
# argv[1] (comma-separated, may be empty) ignored, every other one a test sends at its default
# action, nothing blocked; then exec, which keeps both (and the process id).
_LAUNCHER: Final = """\
import os, signal, sys
ignored = {getattr(signal, "SIG" + name) for name in sys.argv[1].split(",") if name}
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_SETMASK, ())
os.execvp(sys.argv[2], sys.argv[2:])
"""


def _descendants(pids: Sequence[int]) -> list[int]:
    """The living descendants of ``pids``, read from /proc (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid ...": the command name may hold spaces and parentheses
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def with_default_signals(args: Sequence[str], ignored: Sequence[str] = ()) -> list[str]:
    """``args`` started with SIGINT, SIGTERM, SIGHUP and SIGQUIT at their default action (those
    named in ``ignored``, e.g. ``["INT"]``, ignored instead) and no signal blocked."""
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, ",".join(ignored), *args]


class Processes:
    """The processes one test starts, each in a process group of its own with the signal
    dispositions of ``with_default_signals``. ``close()``/``aclose()`` kill every group, reap
    every process and close every pipe, whatever the test did; the ``processes`` fixture calls
    ``aclose()``."""

    def __init__(self) -> None:
        self._popens: list[subprocess.Popen[str]] = []
        self._tasks: list[asyncio.subprocess.Process] = []

    def start(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE,
        ignored: Sequence[str] = (),
    ) -> subprocess.Popen[str]:
        """Start ``args`` (text pipes); see the class docstring."""
        proc = subprocess.Popen(
            with_default_signals(args, ignored), env=None if env is None else dict(env),
            cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=True, process_group=0,
        )
        self._popens.append(proc)
        return proc

    async def start_async(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: int | None = asyncio.subprocess.PIPE,
        stdout: int | None = asyncio.subprocess.PIPE,
        stderr: int | None = None,
    ) -> asyncio.subprocess.Process:
        """``start`` for an asyncio test: an ``asyncio.subprocess.Process`` (bytes pipes)."""
        proc = await asyncio.create_subprocess_exec(
            *with_default_signals(args), env=None if env is None else dict(env),
            stdin=stdin, stdout=stdout, stderr=stderr, process_group=0,
        )
        self._tasks.append(proc)
        return proc

    def kill(self) -> None:
        """SIGKILL every process group this started and every descendant of its processes
        still attached to them (the demo starts its replicas in sessions of their own)."""
        pids = [p.pid for p in self._popens if p.returncode is None]
        pids += [p.pid for p in self._tasks if p.returncode is None]
        descendants = _descendants(pids)
        for pid in [p.pid for p in self._popens] + [p.pid for p in self._tasks]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in descendants:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill, reap and close the pipes of the ``start``ed processes."""
        self.kill()
        popens, self._popens = self._popens, []
        for proc in popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=REAP_TIMEOUT_S)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    async def aclose(self) -> None:
        """``close()``, and the same for the ``start_async``ed processes."""
        self.close()
        tasks, self._tasks = self._tasks, []
        for proc in tasks:
            try:
                # reads what is left of the pipes to their end, closes them, reaps
                await asyncio.wait_for(proc.communicate(), REAP_TIMEOUT_S)
            except (TimeoutError, OSError, ValueError):
                transport = getattr(proc, "_transport", None)
                if transport is not None:
                    transport.close()


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
            with_default_signals([REPLICA]), env=full, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
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


async def start_healthy(
    procs: list[ReplicaProcess], envs: Mapping[str, Mapping[str, str]], log_dir: Path
) -> None:
    """Start a replica per id of ``envs`` with its environment, each appended to ``procs`` (for
    the caller to end: ``kill_all``), and wait until each answers /healthz; one that lost the
    race for its port gets one more try."""
    first = len(procs)
    for replica_id, env in envs.items():
        procs.append(spawn(replica_id, env, log_dir))
    for i in range(first, len(procs)):
        rp = procs[i]
        try:
            await wait_healthy(rp)
        except RuntimeError:
            if "cannot listen" not in rp.log():
                raise
            procs[i] = spawn(rp.id, envs[rp.id], log_dir)  # lost a port race: one more try
            await wait_healthy(procs[i])


def kill_all(procs: Sequence[ReplicaProcess]) -> None:
    """Kill every replica of ``procs`` and reap it (a bounded wait each)."""
    for rp in procs:
        rp.kill()
    for rp in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            rp.proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def replica_processes(
    n: int, env: Mapping[str, str], log_dir: Path, prefix: str = "proc"
) -> AsyncIterator[list[ReplicaProcess]]:
    """Start ``n`` replicas, wait until each answers /healthz, kill the rest on exit."""
    procs: list[ReplicaProcess] = []
    try:
        await start_healthy(procs, {f"{prefix}-{i}": env for i in range(n)}, log_dir)
        yield procs
    finally:
        kill_all(procs)


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
