"""The injector: carries out the fault schedule (``bench.chaos.faults``) on the run's parts.

Each fault runs in a task of its own: ``fault-start`` in the history, the fault, its duration,
the healing, ``fault-end``. ``stop()`` cuts every duration short and waits until every fault
has healed (frozen replicas thawed, the link passing, Redis up, killed replicas started again),
so what the run does next happens on a healed fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bench.chaos.faults import FREEZE, HA_FAILOVERS, KILL, LINK, Fault
from bench.chaos.ha import HaRedis
from bench.chaos.handler import FAIL, HANG
from bench.chaos.history import HistoryWriter
from bench.chaos.observer import OBSERVER_NAME, Observer
from bench.chaos.producer import Producer
from bench.chaos.proxy import LinkProxy
from bench.chaos.replicas import Replicas
from bench.chaos.server import ChaosRedis
from replica.demo import item_id

log = logging.getLogger(__name__)

GARBAGE_EVERY_S: Final = 0.05
ADMIN_NAME: Final = "chaos-admin"


class Injector:
    """Runs faults against the parts of one run."""

    def __init__(self, *, seed: int, server: ChaosRedis | None, replicas: Replicas,
                 proxy: LinkProxy | None, proxied: str, observer: Observer, producer: Producer,
                 history: HistoryWriter, ha: HaRedis | None = None) -> None:
        self._server = server
        self.ha = ha
        self.replicas = replicas
        self._proxy = proxy
        self.proxied = proxied
        self.observer = observer
        self.producer = producer
        self.history = history
        self.rng = random.Random(f"garbage:{seed}")
        self.admin = aioredis.Redis.from_url(
            server.url if server is not None else "redis://127.0.0.1:1/0",  # unused on HA
            client_name=ADMIN_NAME, socket_timeout=3.0, socket_connect_timeout=2.0)
        self.primary_lock = asyncio.Lock()
        """One fault that moves a primary at a time (they wait for each other)."""
        self.moves = 0
        """Moved at the start and at the end of each fault that moves a primary: odd while one
        is under way (``bench.chaos.switches`` tells those from the unplanned ones)."""
        self.healing = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.done: list[Fault] = []

    async def run(self, schedule: list[Fault], t0: float) -> None:
        """Start each fault at ``t0`` + its offset (``time.monotonic()``), until stopped."""
        for fault in schedule:
            delay = t0 + fault.at - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.healing.wait(), delay)
            if self.healing.is_set():
                return
            self.tasks.append(asyncio.create_task(self._one(fault), name=f"fault-{fault.id}"))

    async def stop(self) -> None:
        """Cut every fault short and wait for all of them to heal."""
        self.healing.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.admin.aclose()

    async def abort(self) -> None:
        """Stop at once: every fault task cancelled, nothing healed (the run's cleanup kills
        what is left)."""
        self.healing.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.admin.aclose()

    async def _hold(self, seconds: float) -> None:
        """Wait the fault's duration (less when stopping)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.healing.wait(), max(0.0, seconds))

    @property
    def server(self) -> ChaosRedis:
        assert self._server is not None, "one server's fault on a replicated topology"
        return self._server

    @property
    def proxy(self) -> LinkProxy:
        assert self._proxy is not None, "a link fault on a replicated topology"
        return self._proxy

    async def _one(self, fault: Fault) -> None:
        target = self.proxied if fault.kind == LINK else fault.target
        if fault.kind in HA_FAILOVERS:
            async with self.primary_lock:  # the one before may still be failing over
                if not self.healing.is_set():
                    self.moves += 1
                    try:
                        await self._run(fault, target)
                    finally:
                        self.moves += 1
                return
        if fault.kind in (KILL, FREEZE):
            lock = self.replicas.locks[target]
            if lock.locked():  # still restarting after an earlier fault, say
                self.history.write("fault-skipped", id=fault.id, kind=fault.kind, target=target,
                                   why="another fault holds the replica")
                return
            async with lock:
                await self._run(fault, target)
        else:
            await self._run(fault, target)

    async def _run(self, fault: Fault, target: str) -> None:
        start: dict[str, Any] = {}
        end: dict[str, Any] = {}
        life = self.replicas.lives.get(target)
        if fault.kind in (KILL, FREEZE) and (life is None or life.proc.poll() is not None):
            self.history.write("fault-skipped", id=fault.id, kind=fault.kind, target=target,
                               why="the replica is not running")
            return
        if life is not None and fault.kind in (KILL, FREEZE, LINK):
            start["pid"] = life.pid
        self.history.write("fault-start", id=fault.id, kind=fault.kind, target=target,
                           params=fault.params, **start)
        try:
            await getattr(self, "_" + fault.kind.replace("-", "_"))(fault, end)
        except Exception as exc:  # a fault that could not be done is said, and the run goes on
            log.exception("fault %d (%s) failed", fault.id, fault.kind)
            end["error"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            self.history.write("fault-end", id=fault.id, kind=fault.kind, target=target, **end)
            self.done.append(fault)

    # ------------------------------------------------------------------ the faults

    async def _kill(self, fault: Fault, end: dict[str, Any]) -> None:
        self.replicas.kill(fault.target)
        await self._hold(fault.duration)
        life = await self.replicas.start(fault.target)
        end["pid"] = life.pid

    async def _freeze(self, fault: Fault, end: dict[str, Any]) -> None:
        life = self.replicas.freeze(fault.target)
        try:
            await self._hold(fault.duration)
        finally:
            if life is not None:
                self.replicas.thaw(life)

    async def _redis_restart(self, fault: Fault, end: dict[str, Any]) -> None:
        empty = fault.params.get("mode") == "empty"
        held = await self._work_items() if empty else {}
        pid = self.server.pid
        status = self.server.kill()
        self.history.write("exit", process="redis", pid=pid, status=status, killed=True)
        if empty:
            self.server.wipe()
            self.history.write("wiped", id=fault.id, **held)
        await self._hold(fault.duration)
        for attempt in range(5):
            try:
                await self.server.start()
                break
            except (RuntimeError, TimeoutError):
                if attempt == 4:
                    raise
                await asyncio.sleep(0.5)
        end["pid"] = self.server.pid

    async def _work_items(self) -> dict[str, Any]:
        """The items in the work stream (unread or pending), its last entry id and when it
        was read, just before an empty restart forgets them (``items`` None when Redis did
        not answer)."""
        read_at = time.time()
        try:
            async with asyncio.timeout(2.0):
                entries: Any = await self.admin.xrange(self.observer.keys.work,
                                                       count=1_000_000)
        except (RedisError, OSError, TimeoutError):
            return {"items": None, "last": None, "read_at": read_at}
        items = []
        for _entry_id, fields in entries or []:
            with contextlib.suppress(ValueError, UnicodeDecodeError, AttributeError):
                items.append(item_id(json.loads(fields.get(b"item", b"null"))))
        last = bytes(entries[-1][0]).decode() if entries else None
        return {"items": items, "last": last, "read_at": read_at}

    async def _pubsub_kill(self, fault: Fault, end: dict[str, Any]) -> None:
        if self.ha is not None:
            killed = 0
            for i in range(int(fault.params.get("times", 1))):
                if i:
                    await asyncio.sleep(0.3)
                with contextlib.suppress(RedisError, OSError, TimeoutError):
                    killed += await asyncio.to_thread(self.ha.pubsub_kill, OBSERVER_NAME)
            end["killed"] = killed
            return
        killed = 0
        for i in range(int(fault.params.get("times", 1))):
            if i:
                await asyncio.sleep(0.3)
            with contextlib.suppress(RedisError, OSError):
                clients = await self.admin.client_list(_type="pubsub")
                for client in clients:
                    if client.get("name") != OBSERVER_NAME:
                        with contextlib.suppress(RedisError):
                            await self.admin.client_kill_filter(_id=client["id"])
                            killed += 1
        end["killed"] = killed

    async def _link(self, fault: Fault, end: dict[str, Any]) -> None:
        self.proxy.set_mode(fault.params["mode"], float(fault.params.get("delay", 0.0)))
        try:
            await self._hold(fault.duration)
        finally:
            self.proxy.heal()

    async def _garbage(self, fault: Fault, end: dict[str, Any]) -> None:
        channel = self.observer.keys.control
        sent = 0
        deadline = time.monotonic() + fault.duration
        client, command = self.admin, "PUBLISH"
        node = None
        if self.ha is not None:  # on the fleet's primary (SPUBLISH on a cluster)
            primary = await asyncio.to_thread(self.ha.primary)
            client = node = aioredis.Redis(host=primary.host, port=primary.port,
                                           socket_timeout=3.0, client_name=ADMIN_NAME)
            command = "SPUBLISH" if self.ha.topology == "cluster" else "PUBLISH"
        try:
            while time.monotonic() < deadline and not self.healing.is_set():
                with contextlib.suppress(RedisError, OSError):
                    await client.execute_command(  # type: ignore[no-untyped-call]
                        command, channel, self._garbage_message())
                    sent += 1
                await asyncio.sleep(GARBAGE_EVERY_S)
        finally:
            if node is not None:
                await node.aclose()
        end["sent"] = sent

    def _garbage_message(self) -> bytes | str:
        rng = self.rng
        fleet = self.observer.keys.fleet
        old = list(self.observer.messages)
        roll = rng.random()
        if old and roll < 0.4:
            return rng.choice(old[:-1] or old)  # a replay: older (or the same) version
        junk: list[bytes | str] = [
            b"not json at all",
            b"\xff\xfe\x00garbage",
            "{}",
            "[1, 2, 3]",
            json.dumps({"fleet": fleet, "paused": "yes", "version": "seven"}),
            json.dumps({"fleet": "another-fleet", "paused": False, "version": 10**6,
                        "reason": "", "by": "x", "since": None}),
            json.dumps({"fleet": fleet, "pad": "x" * 70_000}),
            '{"fleet": "' + fleet + '", "paused": tru',
        ]
        return rng.choice(junk)

    # ------------------------------------------------------------------ the replicated ones

    def _ha(self) -> HaRedis:
        assert self.ha is not None, "a replicated topology's fault on one server"
        return self.ha

    @staticmethod
    def _said(found: dict[str, Any], end: dict[str, Any]) -> None:
        end.update({k: v for k, v in found.items() if not k.startswith("_")})

    async def _primary_kill(self, fault: Fault, end: dict[str, Any]) -> None:
        ha = self._ha()
        found = await asyncio.to_thread(ha.primary_kill_start)
        self._said(found, end)
        await self._hold(fault.duration)
        end["pid"] = await asyncio.to_thread(ha.restart, found)

    async def _shard_kill(self, fault: Fault, end: dict[str, Any]) -> None:
        ha = self._ha()
        found = await asyncio.to_thread(ha.shard_kill_start)
        self._said(found, end)
        await self._hold(fault.duration)
        end["pid"] = await asyncio.to_thread(ha.restart, found)

    async def _failover(self, fault: Fault, end: dict[str, Any]) -> None:
        self._said(await asyncio.to_thread(self._ha().failover), end)

    async def _lossy_failover(self, fault: Fault, end: dict[str, Any]) -> None:
        ha = self._ha()
        found = await asyncio.to_thread(ha.lossy_start)
        self._said(found, end)
        try:
            await self._hold(fault.duration)
        finally:
            self._said(await asyncio.to_thread(ha.lossy_end, found), end)

    async def _sentinel_kill(self, fault: Fault, end: dict[str, Any]) -> None:
        ha = self._ha()
        found = await asyncio.to_thread(ha.sentinel_kill_start)
        self._said(found, end)
        try:
            await self._hold(fault.duration)
        finally:
            end["pid"] = await asyncio.to_thread(ha.sentinel_restart, found)

    async def _bad_handler(self, fault: Fault, end: dict[str, Any]) -> None:
        self.producer.bad = {FAIL: float(fault.params.get("fail", 0.15)),
                             HANG: float(fault.params.get("hang", 0.1))}
        try:
            await self._hold(fault.duration)
        finally:
            self.producer.bad = {}


__all__ = ["Injector"]
