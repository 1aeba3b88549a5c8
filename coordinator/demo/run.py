"""`fleetgate demo`: a real fleet on one machine, the guide's measurement at fleet scale.

Three ``fleetgate-replica`` processes (the demo handler, 50 ms items, 4 workers each) and the
coordinator API share one Redis (``FLEETGATE_REDIS_URL``, else a private server on a free port).
The demo enqueues 600 items, pauses the fleet mid-run with the hold ``db`` and waits until every
replica is quiet, adds a second, overlapping hold ``payments`` (another team), holds 0.5 s while
checking that no item starts, releases ``db`` and checks that the fleet stays paused (every
replica still held by ``payments``, still no item starting), releases ``payments``, waits for
the rest, and prints what it measured. Exit status 0 when every check held, 1 otherwise. Every
process it started, Redis included, is stopped when it ends, whatever happens (the processes:
``coordinator.demo.processes``).

SIGINT (Ctrl-C) or SIGTERM ends it within a second, even when Redis hangs: the demo SIGTERMs
every process at once, gives them ``STOP_GRACE_S`` to stop, SIGKILLs what is left, and exits
130 or 143 (0 once ``--serve`` keeps the fleet up: Ctrl-C is how that ends). A watchdog kills
everything and exits if even that hangs (``replica.process.shutdown``).

Where the items are: in the work stream (not yet read), pending in the consumer group (read by
a replica, in its pool or its handler), or done (``demo:done`` counts completions per item). A
paused replica reads nothing, so during the hold new items stay in the stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import redis.asyncio as aioredis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coordinator.demo.processes import (
    ITEM_SECONDS,
    STOP_GRACE_S,
    STOP_WAIT_S,
    WORKERS,
    DemoProcesses,
)
from coordinator.fleet.fleet import Fleet
from replica.contract import FleetState, Keys, parse_time
from replica.errors import ContractError
from replica.link.connect import connect
from replica.process.shutdown import Interrupted, Shutdown, conventional_status

ITEMS = 600
REPLICAS = 3
HOLD_SECONDS = 0.5
PAUSE_AT = 200  # items done when the pause is called: mid-run


@dataclass
class DemoResult:
    items: int
    pause_fanout_ms: float = float("nan")
    pause_to_quiet_ms: float = float("nan")
    resume_fanout_ms: float = float("nan")
    started_during_hold: int = -1
    held_after_first_release: bool = False
    """After ``db`` was released, the fleet read paused and every replica was still held."""
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
            and self.held_after_first_release
            and self.lost == 0
            and self.completed == self.items
            and not self.stragglers
        )


class Demo(DemoProcesses):
    """The demo: its processes (``DemoProcesses``), and ``run()``, the scenario."""

    def __init__(self, console: Console, *, items: int = ITEMS, replicas: int = REPLICAS) -> None:
        super().__init__(console, replicas)
        self.items = items
        self.serving = False  # the fleet is up for --serve: Ctrl-C is how the demo ends

    # ------------------------------------------------------------------ scenario

    async def run(self, serve: bool = False) -> DemoResult:
        result = DemoResult(items=self.items)
        t_begin = time.monotonic()
        self.start_redis()
        self.start_replicas()
        self.start_api()
        client = connect(self.redis_url, decode_responses=True)
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

            # -- pause mid-run (hold db), wait until every replica is quiet
            t0 = time.monotonic()
            state = await fleet.pause("demo: database maintenance", by="demo-dba", hold="db",
                                      for_wait=True)
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

            # -- a second team pauses too (hold payments): the holds overlap
            state = await fleet.pause("demo: payments incident", by="demo-oncall",
                                      hold="payments", for_wait=True)
            second = await fleet.wait(state.version, timeout=20.0)
            result.stragglers += [r.id for r in second.stragglers]
            self.console.print(f"fleet paused by holds {_holds(state)}")

            # -- hold: nothing may start
            await read_log(block_ms=0)
            await asyncio.sleep(HOLD_SECONDS)

            # -- the first team is done: release db; payments still holds every replica
            state = await fleet.resume(by="demo-dba", hold="db", for_wait=True)
            released = await fleet.wait(state.version, timeout=20.0)
            result.stragglers += [r.id for r in released.stragglers]
            records = await fleet.replicas()
            result.held_after_first_release = (
                state.effectively_paused() and released.ok
                and len(records) >= self.n_replicas and all(r.fleet_held for r in records)
            )
            self.console.print(
                f"released hold db: fleet still {'paused' if state.paused else 'RUNNING'} by "
                f"{_holds(state) or 'nothing'} (v{state.version}, "
                f"{sum(1 for r in records if r.fleet_held)}/{len(records)} replicas held)"
            )
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

            # -- release the last hold (payments): the fleet resumes; finish
            t1 = time.monotonic()
            state = await fleet.resume(by="demo-oncall", hold="payments", for_wait=True)
            self.console.print(f"released hold payments: fleet "
                               f"{'paused' if state.paused else 'running'} (v{state.version})")
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
        c.print(f"  held after one hold released    {'yes' if r.held_after_first_release else 'NO'}")
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


def _holds(state: FleetState) -> str:
    return ", ".join(h.name for h in state.active_holds())


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
    # Piped (not a terminal), a line is never wrapped: a log reader greps whole lines.
    stream = sys.stderr if json_out else sys.stdout
    console = Console(highlight=False, stderr=json_out, soft_wrap=not stream.isatty())
    demo = Demo(console)
    shutdown = Shutdown(lambda sig: 0 if demo.serving else conventional_status(sig))
    shutdown.before_exit = demo.kill_all

    try:
        result = shutdown.run(demo.run(serve=serve), on_signal=demo.on_signal)
    except Interrupted as exc:
        return exc.status
    except KeyboardInterrupt:
        return 130
    except ContractError as exc:  # FLEETGATE_REDIS_URL cannot work as written
        print(f"fleetgate demo: FLEETGATE_REDIS_URL: {exc}", file=sys.stderr)
        return 2
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


__all__ = [
    "HOLD_SECONDS", "ITEMS", "ITEM_SECONDS", "PAUSE_AT", "REPLICAS", "STOP_GRACE_S", "STOP_WAIT_S",
    "WORKERS", "Demo", "DemoResult", "main",
]


if __name__ == "__main__":
    raise SystemExit(main(serve="--serve" in sys.argv[1:], json_out="--json" in sys.argv[1:]))
