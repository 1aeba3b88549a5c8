"""The replicated Redis of a chaos run on the topologies production runs, and its faults.

``--topology sentinel``: a ``bench.topology.SentinelGroup`` (a primary, a replica, three
sentinels); ``--topology cluster``: a ``bench.topology.Cluster`` (three primaries, three
replicas). The fleet's keys share one slot (``{fleet}``), so "the primary" is the one serving
the fleet. The data nodes save nothing (as the suite's), but a replica writes what a full sync
sent it to disk: a node killed comes back with that copy, as a replica of the primary of the
moment, and syncs.

The faults (each blocks until the topology is whole again, so call them in a thread):

| fault | how |
| --- | --- |
| ``primary_kill`` | SIGKILL of the fleet's primary; once the failover promoted its replica, and ``down`` seconds more, it starts again (a replica) |
| ``failover`` | ``SENTINEL FAILOVER`` (``CLUSTER FAILOVER`` on the replica) with the old primary alive |
| ``lossy_failover`` | the replica frozen (SIGSTOP) and its link filled, so that every write from then on stays in the primary's memory: acknowledged to the clients, confirmed to none (``WAIT``); the primary killed, the replica thawed and promoted: those writes are lost |
| ``sentinel_kill`` | a sentinel killed, started again ``down`` seconds later (Sentinel) |
| ``shard_kill`` | the primary of another shard killed, failed over and started again (Cluster: every slot refuses writes until then) |
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
from pathlib import Path
from typing import Any, Final

from redis.exceptions import ResponseError

from bench.chaos.settings import CLUSTER, SENTINEL
from bench.redisnode import wait_for
from bench.topology import SERVICE, Cluster, Node, SentinelGroup, quicken
from replica.link.slots import slot_of

log = logging.getLogger(__name__)

FAILOVER_TIMEOUT_S: Final = 60.0
JUNK_CHUNK: Final = 65_536
UNSENT_AT_LEAST: Final = 2_000_000
"""Bytes the primary must hold unsent for its frozen replica before the writes that follow are
surely in its memory only (the kernel's socket buffers are full)."""


class HaRedis:
    """A Sentinel group or a Cluster serving the fleet whose keys hash like ``key``."""

    def __init__(self, topology: str, key: str, seed: int) -> None:
        if topology not in (SENTINEL, CLUSTER):
            raise ValueError(f"not a replicated topology: {topology!r}")
        self.topology = topology
        self.key = key
        self.junk = f"chaos-junk:{key[key.index('{'):key.index('}') + 1]}"
        """A key in the fleet's slot that no fleet reads (fills a frozen replica's link)."""
        self.rng = random.Random(f"ha:{seed}")
        self.group: SentinelGroup | Cluster = (SentinelGroup() if topology == SENTINEL
                                               else Cluster())

    @property
    def url(self) -> str:
        return self.group.url

    @property
    def data_nodes(self) -> list[Node]:
        group = self.group
        return group.servers if isinstance(group, SentinelGroup) else group.nodes

    def start(self) -> HaRedis:
        self.group.start()
        for node in self.data_nodes:
            _quick_sync(node)
        return self

    def stop(self, logs: Path | None = None) -> None:
        """Every process killed (frozen ones too), each node's log copied into ``logs`` (as
        ``redis-<port>.log``, ``sentinel-<port>.log``), the directory removed."""
        for node in self.group.all:
            node.stop()
            if logs is not None:
                name = f"{'sentinel' if node.sentinel else 'redis'}-{node.port}.log"
                with contextlib.suppress(OSError):
                    shutil.copyfile(node.dir / "server.log", logs / name)
        self.group.stop()

    # ------------------------------------------------------------------ who is who

    def primary(self) -> Node:
        group = self.group
        if isinstance(group, SentinelGroup):
            return group.master(FAILOVER_TIMEOUT_S)
        return group.primary_for(self.key, FAILOVER_TIMEOUT_S)

    def replica_of(self, primary: Node) -> Node:
        group = self.group
        if isinstance(group, SentinelGroup):
            return next(n for n in group.servers if n is not primary)
        return group.replica_of(primary)

    def _failed_over(self, old: Node, key: str | None = None) -> Node:
        group = self.group
        if isinstance(group, SentinelGroup):
            return group.wait_for_failover(old, FAILOVER_TIMEOUT_S)
        return group.wait_for_failover(old, key or self.key, FAILOVER_TIMEOUT_S)

    def _restart(self, node: Node, primary: Node) -> int | None:
        """Start ``node`` again: a replica of ``primary``. Its new pid."""
        if isinstance(self.group, SentinelGroup):
            node._args = ["--replicaof", primary.host, str(primary.port)]  # as the group does
        node.start()
        _quick_sync(node)
        self.settle()
        return node.pid

    def named_primary(self) -> int | None:
        """The port of the node the topology names the fleet's primary now (every live
        sentinel agreeing; the slot's owner in the cluster), None when it cannot be told."""
        group = self.group
        try:
            if isinstance(group, SentinelGroup):
                node = group._named_master()
                return None if node is None else node.port
            return group.primary_for(self.key, 1.0).port
        except Exception:  # a node down, a sentinel restarting: not told this time
            return None

    def demoted(self, port: int) -> bool:
        """The node at ``port`` no longer serves as a primary: down, or a replica."""
        node = next((n for n in self.data_nodes if n.port == port), None)
        if node is None or not node.running:
            return True
        try:
            return node.info("replication").get("role") != "master"
        except Exception:  # it stopped answering: it takes no more writes
            return True

    def wait_in_sync(self) -> None:
        self.group.wait_in_sync(FAILOVER_TIMEOUT_S)

    def settle(self) -> None:
        """Until every Redis replica is in sync again (a restarted node, or one the sentinels
        reconfigure, syncs in full): a fault ends, and the next one starts, on a whole
        topology. Said, not raised, when it does not happen in time."""
        try:
            self.wait_in_sync()
        except (TimeoutError, OSError) as exc:
            log.warning("the Redis replicas did not get in sync: %s", exc)

    def describe(self) -> list[dict[str, Any]]:
        """What each sentinel says of the master, or each cluster node of the cluster (for the
        history: a topology left broken is seen at once)."""
        group = self.group
        out: list[dict[str, Any]] = []
        if isinstance(group, SentinelGroup):
            for s in group.sentinels:
                try:
                    with s.client() as c:
                        m = c.execute_command("SENTINEL", "MASTER", SERVICE)
                    if isinstance(m, list):
                        m = dict(zip(m[::2], m[1::2], strict=False))
                    out.append({"sentinel": s.port, "master": m.get("port"),
                                "flags": m.get("flags"), "replicas": m.get("num-slaves"),
                                "failover": m.get("failover-state")})
                except Exception as exc:  # a node down says so
                    out.append({"sentinel": s.port, "error": str(exc)[:100]})
            return out
        for node in group.nodes:
            try:
                with node.client() as c:
                    info = str(c.execute_command("CLUSTER", "INFO"))
                    role = c.info("replication").get("role")
                out.append({"node": node.port, "role": role,
                            "ok": "cluster_state:ok" in info})
            except Exception as exc:
                out.append({"node": node.port, "error": str(exc)[:100]})
        return out

    # ------------------------------------------------------------------ the faults

    def primary_kill_start(self) -> dict[str, Any]:
        self.settle()
        old = self.primary()
        old.kill()
        new = self._failed_over(old)
        return {"old": old.port, "new": new.port, "_old": old, "_new": new}

    def restart(self, found: dict[str, Any]) -> int | None:
        return self._restart(found["_old"], found["_new"])

    def failover(self) -> dict[str, Any]:
        self.settle()
        old = self.primary()
        group = self.group
        if isinstance(group, SentinelGroup):
            sentinel = next(s for s in group.sentinels if s.running)

            def asked() -> bool | None:
                # NOGOODSLAVE: the sentinel has not yet seen the replica in sync: ask again
                with sentinel.client() as c, contextlib.suppress(ResponseError):
                    c.execute_command("SENTINEL", "FAILOVER", SERVICE)
                    return True
                return None

            wait_for("a sentinel to take the failover", asked, FAILOVER_TIMEOUT_S)
        else:
            with group.replica_of(old).client() as c:
                c.execute_command("CLUSTER", "FAILOVER")
        new = self._failed_over(old)
        self.settle()
        return {"old": old.port, "new": new.port}

    def lossy_start(self) -> dict[str, Any]:
        """Freeze the primary's replica and fill its link: from now on, what the primary
        acknowledges no replica has."""
        self.settle()
        old = self.primary()
        frozen = self.replica_of(old)
        frozen.freeze()
        try:
            held = self._starve(old)
        except BaseException:
            frozen.thaw()
            raise
        return {"old": old.port, "frozen": frozen.port, "unsent": held, "_old": old,
                "_frozen": frozen}

    def lossy_end(self, found: dict[str, Any]) -> dict[str, Any]:
        """Kill the primary, thaw the replica: it is promoted without the writes since."""
        old, frozen = found["_old"], found["_frozen"]
        try:
            old.kill()
        finally:
            frozen.thaw()
        new = self._failed_over(old)
        pid = self._restart(old, new)
        with contextlib.suppress(Exception), new.client() as c:
            c.delete(self.junk)
        return {"new": new.port, "pid": pid}

    def thaw_all(self) -> None:
        """Whatever a fault cut short left frozen."""
        for node in self.data_nodes:
            with contextlib.suppress(ProcessLookupError):
                node.thaw()

    def _starve(self, primary: Node, limit: int = 1000) -> int:
        with primary.client() as c:
            for _ in range(limit):
                c.append(self.junk, "x" * JUNK_CHUNK)
                replicas = c.client_list(_type="replica")
                omem = max((int(r.get("omem", 0)) for r in replicas), default=0)
                if omem - JUNK_CHUNK >= UNSENT_AT_LEAST:
                    return omem - JUNK_CHUNK
        raise RuntimeError(f"{primary} sent {limit * JUNK_CHUNK} bytes to a frozen replica")

    def sentinel_kill_start(self) -> dict[str, Any]:
        group = self.group
        assert isinstance(group, SentinelGroup)
        sentinel = self.rng.choice([s for s in group.sentinels if s.running])
        sentinel.kill()
        return {"sentinel": sentinel.port, "_node": sentinel}

    def sentinel_restart(self, found: dict[str, Any]) -> int | None:
        node: Node = found["_node"]
        node.start()
        quicken(node)  # a runtime setting: gone with the process
        return node.pid

    def shard_kill_start(self) -> dict[str, Any]:
        """Kill the primary of a shard that does not serve the fleet; once failed over."""
        self.settle()
        group = self.group
        assert isinstance(group, Cluster)
        ours = self.primary()
        shards = [s for s in group._shards() if s[1] is not ours]
        ranges, old, _ = self.rng.choice(shards)
        key = _key_in(ranges[0])
        old.kill()
        new = self._failed_over(old, key)
        return {"old": old.port, "new": new.port, "_old": old, "_new": new}

    # ------------------------------------------------------------------ the channel

    def pubsub_kill(self, spare: str) -> int:
        """``CLIENT KILL`` of every pub/sub connection on the fleet's primary but ``spare``'s
        and the sentinels' own (``sentinel-…-pubsub``): a sentinel whose link is down counts
        the primary unreachable since its last answer, and two that lose theirs at once on a
        loaded machine can fail it over (``down-after-milliseconds`` 1 s), a failover the
        schedule never said (``bench.chaos.switches`` records those that happen anyway)."""
        killed = 0
        with self.primary().client() as c:
            for client in c.client_list(_type="pubsub"):
                name = str(client.get("name") or "")
                if name != spare and not name.startswith("sentinel-"):
                    with contextlib.suppress(Exception):
                        c.client_kill_filter(_id=client["id"])
                        killed += 1
        return killed

    def publish(self, channel: str, message: bytes | str) -> None:
        """On the fleet's primary: ``SPUBLISH`` on a cluster, ``PUBLISH`` else."""
        command = "SPUBLISH" if self.topology == CLUSTER else "PUBLISH"
        with self.primary().client() as c:
            c.execute_command(command, channel, message)


def _quick_sync(node: Node) -> None:
    """A full sync at once (7.0 waits 5 s for more replicas to join)."""
    with contextlib.suppress(Exception), node.client() as c:
        c.config_set("repl-diskless-sync-delay", 0)


def _key_in(slots: tuple[int, int]) -> str:
    lo, hi = slots
    for n in range(1_000_000):
        key = f"chaos-probe-{n}"
        if lo <= slot_of(key) <= hi:
            return key
    raise RuntimeError(f"no key found in slots {lo}-{hi}")


__all__ = ["HaRedis"]
