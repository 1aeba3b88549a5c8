"""The chaos run: a real fleet, a producer, an operator and a fault schedule, then the check.

Phases (``run-end`` says how far a run got):

1. **setup**: a private Redis on 127.0.0.1 (append-only), the link proxy in front of it for the
   first replica (``--topology sentinel`` or ``cluster``: a Sentinel group or a Cluster,
   ``bench.chaos.ha``, and no proxy), ``replicas`` real ``fleetgate-replica`` processes on the
   chaos handler, the observer;
2. **chaos** (``duration`` seconds): the producer, the operator and the faults, all at once;
3. **heal**: the faults end (thawed, restarted, the link passing; on a replicated topology,
   every Redis replica in sync again), the producer and the operator stop; once every replica agrees with the last action (or ``settle_timeout``
   passes), a ``settled`` snapshot;
4. **final**: a resume, waited for, then until the backlog is worked off (``drain_timeout``),
   another snapshot; every replica is stopped with SIGTERM and must exit 0.

Whatever happens (an error, Ctrl-C), every process and server the run started is killed and
reaped before ``run()`` returns. All traffic stays on 127.0.0.1. The history and the logs are
in the work directory, removed at the end unless asked to keep them or a rule broke.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from redis.exceptions import RedisError

from bench.chaos.faults import draw_schedule, proxied_replica, replica_ids
from bench.chaos.ha import HaRedis
from bench.chaos.history import HistoryWriter
from bench.chaos.injector import Injector
from bench.chaos.observer import Observer
from bench.chaos.operator import Operator
from bench.chaos.producer import Producer
from bench.chaos.proxy import LinkProxy
from bench.chaos.replicas import Replicas
from bench.chaos.server import ChaosRedis
from bench.chaos.settings import ChaosSettings
from bench.chaos.switches import SwitchWatch
from replica.contract import WORK_GROUP, Keys
from replica.link.connect import connect

log = logging.getLogger(__name__)

STOP_TIMEOUT_S: Final = 30.0
OPERATOR_END_S: Final = 40.0
"""How long the operator's last call may take once the chaos is over (a CLI call is bounded by
its --timeout and the grace of ``bench.chaos.operator``)."""
SETUP_TIMEOUT_S: Final = 90.0


@dataclass
class RunOutcome:
    """Where the run's history is, and how far it got."""

    workdir: Path
    history_dir: Path
    phase: str


CLEANUP_PART_S: Final = 5.0
"""The longest the clean-up waits for one part of the run (operator, producer, observer,
proxy) to stop, before it goes on to the next and to the server."""


class ChaosRun:
    """One run (``settings``); ``run()`` does it all and always cleans up."""

    def __init__(self, settings: ChaosSettings) -> None:
        self.settings = settings
        self.workdir = settings.workdir or Path(
            tempfile.mkdtemp(prefix=f"fleetgate-chaos-{settings.seed}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.history_dir = self.workdir / "history"
        self.log_dir = self.workdir / "logs"
        self.history_dir.mkdir(exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self.history = HistoryWriter(self.history_dir / "runner.jsonl")
        self.keys = Keys(settings.fleet)
        self.phase = "setup"
        self.server: ChaosRedis | None = None
        self.ha: HaRedis | None = None
        self.url = ""
        """Where every part of the run reaches Redis (a sentinel or cluster URL on HA)."""
        self.proxy: LinkProxy | None = None
        self.replicas: Replicas | None = None
        self.observer: Observer | None = None
        self.producer: Producer | None = None
        self.operator: Operator | None = None
        self.injector: Injector | None = None
        self.switches: asyncio.Task[None] | None = None
        """The watch for failovers no fault scheduled (replicated topologies), until cleanup."""
        self.cleaning = False
        """Set once the run has begun stopping everything it started (``_cleanup``): a stop
        request no longer needs to cancel it."""

    # ------------------------------------------------------------------ the run

    async def run(self) -> RunOutcome:
        try:
            async with asyncio.timeout(SETUP_TIMEOUT_S):
                await self._setup()
            await self._chaos()
            await self._heal()
            await self._final()
            self.phase = "done"
        finally:
            await self._cleanup()
        return RunOutcome(self.workdir, self.history_dir, self.phase)

    async def _setup(self) -> None:
        s = self.settings
        ids = replica_ids(s)
        proxied = proxied_replica(s)
        if s.replicated:
            ha = HaRedis(s.topology, self.keys.state, s.seed)
            self.ha = ha
            await asyncio.to_thread(ha.start)
            for node in ha.group.all:
                self.history.write("start", process="redis", pid=node.pid, port=node.port,
                                   sentinel=node.sentinel)
            self.url = ha.url
            urls = dict.fromkeys(ids, ha.url)
            where: dict[str, Any] = {"redis_url": ha.url}
        else:
            self.server = server = await ChaosRedis(self.workdir).start()
            self.history.write("start", process="redis", pid=server.pid, port=server.port)
            self.proxy = await LinkProxy("127.0.0.1", server.port).start()
            self.url = server.url
            urls = {r: (f"redis://127.0.0.1:{self.proxy.port}/0" if r == proxied
                        else server.url) for r in ids}
            where = {"redis_port": server.port, "proxy_port": self.proxy.port}
        self.history.write("run", seed=s.seed, duration=s.duration, topology=s.topology,
                           fleet=s.fleet, replicas=ids, proxied=proxied, settings=s.header(),
                           **where)
        self.replicas = Replicas(s, urls, self.history, self.history_dir, self.log_dir,
                                 secrets.token_urlsafe(18))
        self.observer = await Observer(self.url, self.keys, ids, self.history).start()
        await asyncio.gather(*(self.replicas.start(r) for r in ids))
        self.producer = Producer(self.url, self.keys, s.rate, s.item_ms, s.seed, self.history)
        self.operator = Operator(s, self.url, self.history)
        self.injector = Injector(
            seed=s.seed, server=self.server, replicas=self.replicas, proxy=self.proxy,
            proxied=proxied, observer=self.observer, producer=self.producer,
            history=self.history, ha=self.ha,
        )

    async def _chaos(self) -> None:
        assert self.producer and self.operator and self.injector
        self.phase = "chaos"
        schedule = draw_schedule(self.settings)
        self.history.write("schedule", faults=[f.describe() for f in schedule])
        t0 = time.monotonic()
        if self.ha is not None:
            injector = self.injector
            self.switches = asyncio.create_task(
                SwitchWatch(self.ha, self.history, lambda: injector.moves).run(),
                name="chaos-switches")
        tasks = [
            asyncio.create_task(self.producer.run(), name="chaos-producer"),
            asyncio.create_task(self.operator.run(), name="chaos-operator"),
            asyncio.create_task(self.injector.run(schedule, t0), name="chaos-injector"),
            asyncio.create_task(self._watch(), name="chaos-watchdog"),
        ]
        over = False
        try:
            await asyncio.sleep(self.settings.duration)
            over = True
        finally:
            tasks[0].cancel()
            if over:  # the operator's call under way ends (bounded), the faults heal
                self.phase = "heal"
                self.operator.stopping.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(tasks[1]), OPERATOR_END_S)
                tasks[1].cancel()
                await self.injector.stop()
            else:  # interrupted: nothing heals, the cleanup kills everything
                tasks[1].cancel()
                await self.injector.abort()
            for task in tasks[2:]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self) -> None:
        """Notice a replica or Redis that exited on its own (rule 7 judges it) and start it
        again, so the run goes on."""
        assert self.replicas
        while True:
            await asyncio.sleep(0.5)
            for life in self.replicas.reap():
                if not life.killed and not life.stopping:
                    log.warning("replica %s (pid %d) exited on its own: %s", life.replica,
                                life.pid, life.proc.returncode)
                    async with self.replicas.locks[life.replica]:
                        current = self.replicas.lives.get(life.replica)
                        if current is life:
                            with contextlib.suppress(RuntimeError):
                                await self.replicas.start(life.replica)
            status = None if self.server is None else self.server.poll()
            if self.server is not None and status is not None:
                self.history.write("exit", process="redis", pid=self.server.pid, status=status,
                                   killed=False)
                self.server.proc = None
                await self.server.start()

    async def _heal(self) -> None:
        assert self.replicas and self.observer
        if self.ha is not None:  # every Redis replica thawed and in sync again
            await asyncio.to_thread(self.ha.thaw_all)
            try:
                await asyncio.to_thread(self.ha.wait_in_sync)
            except (TimeoutError, RedisError, OSError) as exc:
                log.warning("the Redis replicas did not get in sync: %s", exc)
            self.history.write("topology", nodes=await asyncio.to_thread(self.ha.describe))
        for r in self.replicas.ids:  # a replica down at the end of the chaos starts again
            async with self.replicas.locks[r]:
                life = self.replicas.lives.get(r)
                if life is None or life.proc.poll() is not None:
                    await self.replicas.start(r)
        self.history.write("healed")
        await self._resync()
        await self._settle("healed")

    async def _resync(self) -> None:
        """What the observer's polls missed of the audit and dead-letter streams (``resync``)."""
        assert self.observer
        try:
            written = await self.observer.resync()
        except (RedisError, OSError) as exc:
            log.warning("could not read the audit and dead-letter streams whole: %s", exc)
            return
        self.history.write("resynced", entries=written)

    async def _settle(self, phase: str) -> None:
        """Until every live replica agrees with the state hash (its version, and held exactly
        when it is effectively paused), or ``settle_timeout``; then a ``settled`` snapshot."""
        assert self.observer
        deadline = time.monotonic() + self.settings.settle_timeout
        snapshot = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RedisError, OSError):
                snapshot = await self.observer.snapshot()
                if _agrees(snapshot):
                    break
            await asyncio.sleep(0.2)
        with contextlib.suppress(RedisError, OSError):
            snapshot = await self.observer.snapshot()
        self.history.write("settled", phase=phase, **(snapshot or {"state": None,
                                                                   "replicas": []}))

    async def _final(self) -> None:
        assert self.operator and self.replicas
        self.phase = "final"
        await self.operator.final_resume()
        await self._drain()
        await self._resync()
        await self._settle("final")
        await self.replicas.stop_all(STOP_TIMEOUT_S)
        self.phase = "stopped"

    async def _drain(self) -> None:
        """Until the work stream's group has nothing pending and nothing unread."""
        client = connect(self.url, decode_responses=True, socket_timeout=5.0)
        deadline = time.monotonic() + self.settings.drain_timeout
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(RedisError, OSError):
                    groups = await client.xinfo_groups(self.keys.work)
                    group = next((g for g in groups if g.get("name") == WORK_GROUP), None)
                    # nothing pending, nothing after the last delivered entry ("lag" is not
                    # to be trusted after a failover: the promoted node's count of entries
                    # added and the group's of entries read can disagree for ever)
                    if group is not None and not group.get("pending") and not \
                            await client.xrange(self.keys.work,
                                                f"({group['last-delivered-id']}", "+", count=1):
                        self.history.write("drained")
                        return
                await asyncio.sleep(0.25)
            detail: dict[str, Any] = {}
            with contextlib.suppress(RedisError, OSError):  # what was left, for the record
                detail["groups"] = await client.xinfo_groups(self.keys.work)
                detail["pending"] = await client.xpending(self.keys.work, WORK_GROUP)
                detail["length"] = await client.xlen(self.keys.work)
            self.history.write("drain-timeout", **detail)
        finally:
            await client.aclose()

    async def _cleanup(self) -> None:
        """Every process and server of the run, stopped and reaped, whatever happened. Each
        part's stop is bounded (``CLEANUP_PART_S``), so a Redis call that hangs cannot keep the
        run, or its server, alive."""
        self.cleaning = True
        if self.switches is not None:
            self.switches.cancel()
            await asyncio.gather(self.switches, return_exceptions=True)
        if self.replicas is not None:
            self.replicas.kill_everything()
        parts: list[Callable[[], Awaitable[object]]] = [
            p.aclose for p in (self.operator, self.producer) if p is not None]
        if self.observer is not None:
            parts.append(self.observer.stop)
        if self.proxy is not None:
            parts.append(self.proxy.stop)
        for stop in parts:
            with contextlib.suppress(Exception):  # TimeoutError included
                async with asyncio.timeout(CLEANUP_PART_S):
                    await stop()
        if self.ha is not None:
            await asyncio.to_thread(self.ha.stop, self.log_dir)
            self.history.write("exit", process="redis", pid=None, status=None, killed=False,
                               stopping=True)
        if self.server is not None:
            pid = self.server.pid
            status = self.server.stop()
            if status is not None:
                self.history.write("exit", process="redis", pid=pid, status=status,
                                   killed=False, stopping=True)
        self.history.write("run-end", phase=self.phase)
        self.history.close()

    def discard(self) -> None:
        """Remove the work directory (after a clean run that was not asked to keep it)."""
        shutil.rmtree(self.workdir, ignore_errors=True)


def _agrees(snapshot: dict[str, object]) -> bool:
    state = snapshot.get("state")
    replicas = snapshot.get("replicas")
    if not isinstance(state, dict) or not isinstance(replicas, list):
        return False
    return all(r.get("applied_version") == state["version"]
               and r.get("fleet_held") == state["effectively_paused"]
               and not r.get("stale") for r in replicas)


__all__ = ["ChaosRun", "RunOutcome"]
