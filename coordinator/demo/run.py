"""`fleetgate demo`: a real fleet on one machine, the guide's measurement at fleet scale.

Three ``fleetgate-replica`` processes (the demo handler, 50 ms items, 4 workers each) and the
coordinator API share one Redis (``FLEETGATE_REDIS_URL``, else a private server on a free port).
The demo enqueues 600 items, pauses the fleet mid-run and waits until every replica is quiet,
holds 0.5 s while checking that no item starts, resumes, waits for the rest, and prints what it
measured. Exit status 0 when every check held, 1 otherwise. Every process it started, Redis
included, is stopped when it ends, whatever happens.

SIGINT (Ctrl-C) or SIGTERM ends it within a second, even when Redis hangs: the demo SIGTERMs
every process at once, gives them ``STOP_GRACE_S`` to stop, SIGKILLs what is left, and exits
130 or 143 (0 once ``--serve`` keeps the fleet up: Ctrl-C is how that ends). A watchdog kills
everything and exits if even that hangs (``replica.service.shutdown``).

Where the items are: in the work stream (not yet read), pending in the consumer group (read by
a replica, in its pool or its handler), or done (``demo:done`` counts completions per item). A
paused replica reads nothing, so during the hold new items stay in the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import redis
import redis.asyncio as aioredis
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.fleet.fleet import Fleet
from replica.contract import Keys, parse_time
from replica.contract.urls import redact_url
from replica.service.shutdown import Interrupted, Shutdown, conventional_status

ITEMS = 600
REPLICAS = 3
WORKERS = 4
ITEM_SECONDS = 0.05
HOLD_SECONDS = 0.5
PAUSE_AT = 200  # items done when the pause is called: mid-run
STOP_GRACE_S = 0.5
"""How long the processes get to stop after a signal before they are killed."""
STOP_WAIT_S = 15.0
"""How long each gets at the end of an uninterrupted run."""


@dataclass
class DemoResult:
    items: int
    pause_fanout_ms: float = float("nan")
    pause_to_quiet_ms: float = float("nan")
    resume_fanout_ms: float = float("nan")
    started_during_hold: int = -1
    completed: int = 0
    lost: int = -1
    duplicated: int = -1
    acks: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    stragglers: list[str] = field(default_factory=list)
    total_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.started_during_hold == 0
            and self.lost == 0
            and self.completed == self.items
            and not self.stragglers
        )


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    port: int
    terminated: bool = False


class Demo:
    """Starts and stops the demo's processes; ``run()`` does the scenario."""

    def __init__(self, console: Console, *, items: int = ITEMS, replicas: int = REPLICAS) -> None:
        self.console = console
        self.items = items
        self.n_replicas = replicas
        self.token = secrets.token_urlsafe(18)
        self.redis_server: LocalRedis | None = None
        self.redis_url = ""
        self.fleet_name = "demo"
        self.procs: list[_Proc] = []
        self.logdir = Path(tempfile.mkdtemp(prefix="fleetgate-demo-"))
        self.api_port = 0
        self.serving = False  # the fleet is up for --serve: Ctrl-C is how the demo ends
        self.stop_by: float | None = None  # set by a signal: when the processes must be gone

    # ------------------------------------------------------------------ processes

    def start_redis(self) -> None:
        url = os.environ.get("FLEETGATE_REDIS_URL")
        if url:
            try:
                with redis.Redis.from_url(url, socket_connect_timeout=3) as probe:
                    probe.ping()
            except (redis.RedisError, ValueError) as exc:
                raise RuntimeError(f"cannot reach Redis at {redact_url(url)}: {exc}") from None
            self.redis_url = url
            self.fleet_name = f"demo-{secrets.token_hex(3)}"  # never touch a real fleet
            self.console.print(
                f"redis: {escape(redact_url(url))} (FLEETGATE_REDIS_URL), fleet {self.fleet_name}"
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
        if self.redis_server is not None:
            if self.stop_by is not None:
                self.redis_server.kill()
            self.redis_server.stop()
            self.redis_server = None

    def on_signal(self, sig: signal.Signals) -> None:
        """The first SIGINT or SIGTERM: every process is told to stop at once."""
        if self.stop_by is None:
            self.stop_by = time.monotonic() + STOP_GRACE_S
            self.terminate_all()

    # ------------------------------------------------------------------ scenario

    async def run(self, serve: bool = False) -> DemoResult:
        result = DemoResult(items=self.items)
        t_begin = time.monotonic()
        self.start_redis()
        self.start_replicas()
        self.start_api()
        client = aioredis.Redis.from_url(self.redis_url, decode_responses=True)
        try:
            await self.wait_http()
            fleet = Fleet(client, self.fleet_name)
            keys = Keys(self.fleet_name)
            await self._wait_registered(fleet)
            self.console.print(
                f"fleet {self.fleet_name!r}: {self.n_replicas} replicas x {WORKERS} workers, "
                f"coordinator API on http://127.0.0.1:{self.api_port}/"
            )
            self.console.print(f"admin token (shown once): {self.token}")
            await fleet.enqueue({"id": f"item-{i:04d}", "n": i} for i in range(self.items))
            self.console.print(f"enqueued {self.items} items of {ITEM_SECONDS * 1000:.0f} ms")
            await self._scenario(client, fleet, keys, result)
            result.total_s = time.monotonic() - t_begin
            self._print_summary(result)
            if serve:
                await self._serve_until_interrupted()
        finally:
            await client.aclose()
        return result

    async def _wait_registered(self, fleet: Fleet, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            live = [r for r in await fleet.replicas() if not r.stale]
            if len(live) >= self.n_replicas:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(live)} of {self.n_replicas} replicas registered")
            await asyncio.sleep(0.05)

    async def _scenario(
        self, client: aioredis.Redis, fleet: Fleet, keys: Keys, result: DemoResult
    ) -> None:
        ids = [p.name for p in self.procs if p.name.startswith("replica")]
        done_by: Counter[str] = Counter()
        log_cursor = "0-0"
        starts: list[tuple[int, str]] = []  # (at ms, replica id)

        async def read_log(block_ms: int = 50) -> None:
            nonlocal log_cursor
            # block=None, not 0: XREAD BLOCK 0 would wait forever
            reply = cast(
                "list[Any]",
                await client.xread({keys.demo_log: log_cursor}, count=2000, block=block_ms or None),
            )
            for _stream, entries in reply or []:
                for entry_id, raw in entries:
                    fields: dict[str, str] = raw
                    log_cursor = entry_id
                    if fields.get("event") == "end":
                        done_by[fields.get("replica", "?")] += 1
                    elif fields.get("event") == "start":
                        starts.append((int(fields.get("at", "0")), fields.get("replica", "?")))

        progress = Progress(
            TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=self.console, transient=False,
        )
        with progress:
            total_task = progress.add_task("all replicas", total=self.items)
            per = {
                f"{self.fleet_name}-replica-{i}": progress.add_task(
                    f"{self.fleet_name}-replica-{i}", total=self.items
                )
                for i in range(1, len(ids) + 1)
            }

            def refresh() -> None:
                progress.update(total_task, completed=sum(done_by.values()))
                for rid, task in per.items():
                    progress.update(task, completed=done_by.get(rid, 0))

            while sum(done_by.values()) < min(PAUSE_AT, self.items):
                await read_log()
                refresh()

            # -- pause mid-run, wait until every replica is quiet
            t0 = time.monotonic()
            state = await fleet.pause("demo: maintenance window", by="demo")
            report = await fleet.wait(state.version, timeout=20.0)
            t_quiet = time.monotonic()
            result.stragglers += [r.id for r in report.stragglers]
            result.pause_to_quiet_ms = (t_quiet - t0) * 1000
            changed = state.changed_at or state.since
            acked = [_offset_ms(changed, r.acked_at) for r in report.replicas]
            quiet = [_offset_ms(changed, r.quiet_at) for r in report.replicas]
            result.acks = {r.id: (a, q) for r, a, q in zip(report.replicas, acked, quiet, strict=True)}
            result.pause_fanout_ms = max((a for a in acked if a is not None), default=float("nan"))
            applied_ms = {
                r.id: _epoch_ms(r.applied_at) for r in await fleet.replicas() if r.applied_at
            }

            # -- hold: nothing may start
            await read_log(block_ms=0)
            await asyncio.sleep(HOLD_SECONDS)
            resume_wall_ms = time.time() * 1000
            await read_log(block_ms=0)
            refresh()
            # Judged by the handler's own start times: after the replica applied the pause and
            # before the resume was called.
            result.started_during_hold = sum(
                1
                for at, rid in starts
                if applied_ms.get(rid, float("inf")) < at < resume_wall_ms
            )

            # -- resume and finish
            t1 = time.monotonic()
            state = await fleet.resume(by="demo")
            resumed = await fleet.wait(state.version, timeout=20.0)
            result.resume_fanout_ms = (time.monotonic() - t1) * 1000
            result.stragglers += [r.id for r in resumed.stragglers]
            deadline = time.monotonic() + 60
            while await client.hlen(keys.demo_done) < self.items and time.monotonic() < deadline:
                await read_log()
                refresh()
            await read_log(block_ms=0)
            refresh()

        done = {k: int(v) for k, v in (await client.hgetall(keys.demo_done)).items()}
        result.completed = len(done)
        result.lost = self.items - sum(1 for i in range(self.items) if f"item-{i:04d}" in done)
        result.duplicated = sum(1 for v in done.values() if v > 1)

    def _print_summary(self, r: DemoResult) -> None:
        c = self.console
        c.print("\nacknowledgements of the pause (ms after the change was written):")
        for rid, (acked, quiet) in sorted(r.acks.items()):
            c.print(f"  {rid:<24} applied {_fmt(acked):>8}   quiet {_fmt(quiet):>8}")
        c.print("\nsummary")
        c.print(f"  pause fan-out (all applied)     {_fmt(r.pause_fanout_ms)} ms")
        c.print(f"  pause to quiet (call to all)    {_fmt(r.pause_to_quiet_ms)} ms")
        c.print(f"  resume fan-out (call to all)    {_fmt(r.resume_fanout_ms)} ms")
        c.print(f"  items started during the hold   {r.started_during_hold}")
        c.print(f"  completed                       {r.completed}/{r.items}")
        c.print(f"  lost                            {r.lost}")
        c.print(f"  duplicated                      {r.duplicated}")
        if r.stragglers:
            c.print(f"  stragglers                      {', '.join(r.stragglers)}")
        c.print(f"  total                           {r.total_s:.1f} s")
        c.print("all checks held" if r.ok else "A CHECK FAILED")

    async def _serve_until_interrupted(self) -> None:
        url = f"http://127.0.0.1:{self.api_port}/"
        self.console.print(f"\ndashboard: {url}  (token: {self.token})  Ctrl-C stops everything")
        self.serving = True
        await asyncio.Event().wait()  # until SIGINT or SIGTERM cancels the demo (see main)


def _epoch_ms(value: Any) -> float:
    dt = value if not isinstance(value, str) else parse_time(value)
    return dt.timestamp() * 1000 if dt is not None else float("inf")


def _offset_ms(origin: Any, value: Any) -> float | None:
    if origin is None or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) * 1000
    return _epoch_ms(value) - _epoch_ms(origin)


def _fmt(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:.1f}"


def main(serve: bool = False, json_out: bool = False) -> int:
    """Run the demo; with ``json_out`` the progress goes to stderr and the result, as JSON, to
    stdout."""
    console = Console(highlight=False, stderr=json_out)
    demo = Demo(console)
    shutdown = Shutdown(lambda sig: 0 if demo.serving else conventional_status(sig))
    shutdown.before_exit = demo.kill_all

    try:
        result = shutdown.run(demo.run(serve=serve), on_signal=demo.on_signal)
    except Interrupted as exc:
        return exc.status
    except KeyboardInterrupt:
        return 130
    except (RuntimeError, TimeoutError, OSError, redis.RedisError) as exc:
        print(f"fleetgate demo: {exc} (logs in {demo.logdir})", file=sys.stderr)
        return 1
    finally:
        # Bounded after a signal; another Ctrl-C must not cut it short and leave processes.
        ignored = {sig: signal.signal(sig, signal.SIG_IGN) for sig in dict.fromkeys(shutdown.received)}
        try:
            demo.stop_all()
        finally:
            for sig, handler in ignored.items():
                signal.signal(sig, handler)
    if not result.ok:
        console.print(f"process logs: {demo.logdir}")
    if json_out:
        print(json.dumps({**dataclasses.asdict(result), "ok": result.ok}, default=str))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main(serve="--serve" in sys.argv[1:], json_out="--json" in sys.argv[1:]))
