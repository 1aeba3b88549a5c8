"""Real replicated Redis topologies from ``redis-server`` on loopback ports: a
``SentinelGroup`` (one master, one replica, three sentinels) and a ``Cluster`` (three primaries,
three replicas), of ``bench.redisnode.Node``s. The tests' fixtures (``tests/topology.py``, whose
docstring is the API) and the failover bench (``bench/failover.py``) both run them; nothing here
imports pytest.

Both take the server ``binary`` (default: ``FLEETGATE_REDIS_SERVER``, else ``redis-server``;
a ``valkey-server`` runs them alike) and the Sentinel group takes ``tls`` (``NodeTls``: every
node and sentinel TLS only, replication and monitoring over TLS; ``url`` is then the
``rediss+sentinel://`` form with the TLS parameters). The cluster is created with ``redis-cli``,
whatever the server.

A group's ``wait_in_sync`` also waits until every live sentinel sees each replica as one: a
``SENTINEL FAILOVER`` asked sooner (right after another) can be undone by a sentinel that still
takes the server it promotes for the old master. Its sentinels send INFO every second
(``INFO_PERIOD_MS``; Sentinel's own period is 10 s), so that wait is a second, not ten.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from redis.exceptions import RedisError, ResponseError

from bench.redisnode import HOST, Node, NodeTls, cluster_port, wait_for
from coordinator.demo.localredis import find_server_binary

SERVICE: Final = "fleetgate"


class _Topology:
    def __init__(self, prefix: str, binary: str | None = None, tls: NodeTls | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.all: list[Node] = []
        self.binary = binary or find_server_binary()
        self.tls = tls

    def _node(self, name: str, args: Sequence[str] = (), **kw: Any) -> Node:
        node = Node(self.dir / name, args, binary=self.binary, tls=self.tls, **kw)
        self.all.append(node)
        return node

    def node_at(self, address: tuple[str, int]) -> Node:
        host, port = address
        for node in self.all:
            if node.port == int(port):
                return node
        raise KeyError(f"no node at {host}:{port}")

    def stop(self) -> None:
        """Kill every process and remove the directory."""
        for node in self.all:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _replication_in_sync(master: Node, replicas: Sequence[Node]) -> bool | None:
    """True when each running replica's link is up and it is at the master's offset."""
    info = master.info("replication")
    if info.get("role") != "master":
        return None
    offset = int(info.get("master_repl_offset", 0))
    for replica in replicas:
        if not replica.running:
            continue
        rinfo = replica.info("replication")
        if (rinfo.get("role") != "slave" or rinfo.get("master_link_status") != "up"
                or int(rinfo.get("master_port", 0)) != master.port
                or int(rinfo.get("master_sync_in_progress", 0))
                or int(rinfo.get("slave_repl_offset", -1)) < offset):
            return None
    return True


INFO_PERIOD_MS: Final = 1000
"""How often a sentinel of a group sends INFO to the servers (Sentinel's own is 10 s): a
server's role change reaches every sentinel within a second, so ``wait_in_sync`` (which waits
for that) costs a second, not ten, after each failover."""


def quicken(sentinel: Node) -> None:
    """``SENTINEL DEBUG info-period`` (Redis 7 and Valkey; a runtime setting, so again after a
    restart of the sentinel). A server without it keeps its 10 s: slower, still correct."""
    with contextlib.suppress(ResponseError), sentinel.client() as c:
        c.execute_command("SENTINEL", "DEBUG", "info-period", str(INFO_PERIOD_MS))


class SentinelGroup(_Topology):
    """One master, one replica, three sentinels (see the module docstring)."""

    SERVICE: Final = SERVICE

    def __init__(self, *, binary: str | None = None, tls: NodeTls | None = None) -> None:
        super().__init__("fleetgate-sentinel-", binary, tls)
        self.servers = [self._node("server-0"), self._node("server-1")]
        self.sentinels: list[Node] = []

    def start(self, timeout: float = 30.0) -> SentinelGroup:
        first, second = self.servers
        first.start()
        second._args = ["--replicaof", first.host, str(first.port)]
        second.start()
        wait_for("the replica to sync", lambda: _replication_in_sync(first, [second]), timeout)
        for i in range(3):
            conf = (
                f"sentinel monitor {SERVICE} {first.host} {first.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 3000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            sentinel = self._node(f"sentinel-{i}", conf=conf, sentinel=True).start()
            self.sentinels.append(sentinel)
            quicken(sentinel)
        wait_for("every sentinel to know the replica and the two other sentinels",
              self._sentinels_ready, timeout)
        return self

    def _sentinels_ready(self) -> bool | None:
        for s in self.sentinels:
            with s.client() as c:
                master = c.execute_command("SENTINEL", "MASTER", SERVICE)
            if isinstance(master, list):
                master = dict(zip(master[::2], master[1::2], strict=False))
            if int(master.get("num-slaves", 0)) < 1 or int(master.get("num-other-sentinels", 0)) < 2:
                return None
        return True

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [s.address for s in self.sentinels]

    def sentinel_url(self, *, scheme: str = "redis+sentinel", user: str = "",
                     password: str = "", db: int | None = None, query: str = "") -> str:
        """A URL of the group; on a TLS group, the ``rediss`` form of ``scheme`` with the TLS
        parameters before ``query``'s."""
        auth = f"{user}:{password}@" if user or password else ""
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinel_addresses)
        path = f"/{SERVICE}" + (f"/{db}" if db is not None else "")
        if self.tls is not None:
            scheme = scheme.replace("redis+", "rediss+", 1) if scheme.startswith("redis+") else scheme
            query = "&".join(q for q in (self.tls.query, query) if q)
        return f"{scheme}://{auth}{hosts}{path}" + (f"?{query}" if query else "")

    @property
    def url(self) -> str:
        return self.sentinel_url()

    def _named_master(self) -> Node | None:
        named: set[tuple[str, int]] = set()
        for s in self.sentinels:
            if not s.running:
                continue
            with s.client() as c:
                answer = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            if not answer:
                return None
            named.add((answer[0], int(answer[1])))
        if len(named) != 1:
            return None
        return self.node_at(named.pop())

    def master(self, timeout: float = 10.0) -> Node:
        """The node every live sentinel names as the master."""
        return wait_for("the sentinels to agree on the master", self._named_master, timeout)

    def replica_nodes(self) -> list[Node]:
        current = self.master()
        return [n for n in self.servers if n is not current]

    def wait_for_failover(self, old: Node, timeout: float = 30.0) -> Node:
        """The new master, once every live sentinel names it, it says ``role:master`` and
        ``old``, if it runs, is its replica."""

        def promoted() -> Node | None:
            new = self._named_master()
            if new is None or new is old or not new.running:
                return None
            if new.info("replication").get("role") != "master":
                return None
            if old.running and old.info("replication").get("role") != "slave":
                return None
            return new

        try:
            return wait_for(f"a failover away from {old}", promoted, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {self.describe()}") from None

    def wait_settled(self, timeout: float = 30.0) -> Node:
        """The master, once every live sentinel names it and none has a failover in progress:
        until then fleetgate cannot tell a primary without replicas from one a failover is
        replacing, and waits for a replica to confirm each change (``NotConfirmed`` when there
        is none: a sentinel still on a failover attempt of its own, under load, made a resume
        right after a failover exit 4)."""

        def settled() -> Node | None:
            current = self._named_master()
            if current is None:
                return None
            for s in self.sentinels:
                if not s.running:
                    continue
                with s.client() as c:
                    answer = c.execute_command("SENTINEL", "MASTER", SERVICE)
                state = answer if isinstance(answer, dict) else dict(
                    zip(answer[::2], answer[1::2], strict=False))
                if "failover_in_progress" in str(state.get("flags", "")):
                    return None
            return current

        try:
            return wait_for("the sentinels to settle on one master", settled, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {self.describe()}") from None

    def describe(self, log_lines: int = 40) -> str:
        """What each sentinel names as the master, each server's replication role, and the
        last lines of each sentinel's log (its +/- events): the text of a failover timeout."""
        parts: list[str] = []
        for s in self.sentinels:
            try:
                with s.client() as c:
                    named = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                parts.append(f"{s} names {named}")
            except (RedisError, OSError) as exc:
                parts.append(f"{s}: {exc!r}")
        for n in self.servers:
            try:
                info = n.info("replication")
                parts.append(f"{n}: role {info.get('role')}, master port "
                             f"{info.get('master_port', '-')}, link "
                             f"{info.get('master_link_status', '-')}, offset "
                             f"{info.get('master_repl_offset')}")
            except (RedisError, OSError) as exc:
                parts.append(f"{n}: {exc!r}")
        for s in self.sentinels:
            tail = s.log().splitlines()[-log_lines:]
            parts.append(f"{s} log:\n  " + "\n  ".join(tail))
        return "\n".join(parts)

    def _sentinels_see(self, master: Node) -> bool | None:
        """True when every live sentinel's last INFO of each other running server shows it
        a replica of ``master``. Until then a sentinel that saw a server as a master (the old
        one, before another sentinel converted it) goes on to convert it itself, some 8 s
        after it first saw it so: a failover asked meanwhile that promotes that very server is
        undone by that ``+convert-to-slave`` and aborted (``-failover-abort-slave-timeout``),
        and the master stays where it was (seen in CI: the second of two back-to-back
        failovers)."""
        others = {n.port for n in self.servers if n is not master and n.running}
        for s in self.sentinels:
            if not s.running:
                continue
            with s.client() as c:
                answer = c.execute_command("SENTINEL", "REPLICAS", SERVICE)
            seen: set[int] = set()
            for entry in answer or []:
                r = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2],
                                                                   strict=False))
                flags = str(r.get("flags", ""))
                if "s_down" in flags or "disconnected" in flags:
                    continue
                if r.get("role-reported") == "slave" and \
                        int(r.get("master-port", 0)) == master.port:
                    seen.add(int(r["port"]))
            if not others <= seen:
                return None
        return True

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        """Until every running replica is in sync with the master every live sentinel names,
        and every live sentinel sees it as that master's replica (a failover asked before then
        can be undone: see ``_sentinels_see``)."""
        seen = ["nothing read yet"]  # what the last probe found short, for the timeout's text

        def synced() -> bool | None:
            current = self._named_master()
            seen[0] = "the sentinels do not name one master"
            if current is None:
                return None
            seen[0] = f"a replica of {current} not in sync"
            if not _replication_in_sync(current, [n for n in self.servers if n is not current]):
                return None
            seen[0] = f"a sentinel that does not see every replica of {current} as one"
            return self._sentinels_see(current)

        try:
            wait_for("every running replica to be in sync with the master", synced, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last seen: {seen[0]}; {self.describe()}") from None


class Cluster(_Topology):
    """Three primaries and three replicas (see the module docstring)."""

    def __init__(self, *, binary: str | None = None) -> None:
        super().__init__("fleetgate-cluster-", binary)
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0",
                # CLUSTER SLOTS lists a replica only once its offset is not 0, which the
                # master's first replication ping makes so: 10 s by default, 1 s here
                "--repl-ping-replica-period", "1"]
        self.nodes = [self._node(f"node-{i}", args, port=cluster_port()) for i in range(6)]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{n.host}:{n.port}" for n in self.nodes)

    def start(self, timeout: float = 60.0) -> Cluster:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        assert cli is not None
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"{n.host}:{n.port}" for n in self.nodes),
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-500:]}"
                               f"{created.stderr[-500:]}")
        self.wait_in_sync(timeout)
        return self

    def _ok_everywhere(self) -> bool | None:
        live = [n for n in self.nodes if n.running]
        for node in live:
            with node.client() as c:
                info = c.execute_command("CLUSTER", "INFO")
            text = info if isinstance(info, str) else str(info)
            if "cluster_state:ok" not in text:
                return None
        return True

    def _shards(self) -> list[tuple[list[tuple[int, int]], Node, list[Node]]]:
        """(slot ranges, primary, replicas) per shard, as the first live node answers."""
        for node in self.nodes:
            if not node.running:
                continue
            with node.client() as c:
                raw = c.execute_command("CLUSTER", "SLOTS")
            shards = []
            for entry in raw:
                start, end, primary, *replicas = entry
                shards.append((
                    [(int(start), int(end))],
                    self.node_at((primary[0], int(primary[1]))),
                    [self.node_at((r[0], int(r[1]))) for r in replicas],
                ))
            return shards
        raise RuntimeError("no cluster node is running")

    def slot_of(self, key: str) -> int:
        for node in self.nodes:
            if node.running:
                with node.client() as c:
                    return int(c.execute_command("CLUSTER", "KEYSLOT", key))
        raise RuntimeError("no cluster node is running")

    def _serving(self, slot: int) -> Node | None:
        for ranges, primary, _ in self._shards():
            if any(a <= slot <= b for a, b in ranges):
                if not primary.running or primary.info("replication").get("role") != "master":
                    return None
                return primary
        return None

    def primary_for(self, key: str, timeout: float = 10.0) -> Node:
        slot = self.slot_of(key)
        return wait_for(f"a primary serving slot {slot}", lambda: self._serving(slot), timeout)

    def replica_of(self, primary: Node) -> Node:
        for _, p, replicas in self._shards():
            if p is primary and replicas:
                return replicas[0]
        raise KeyError(f"{primary} has no replica")

    def wait_for_failover(self, old: Node, key: str, timeout: float = 30.0) -> Node:
        """The new primary of ``key``'s slot, once it serves it and the cluster is ok."""
        slot = self.slot_of(key)

        def promoted() -> Node | None:
            new = self._serving(slot)
            if new is None or new is old or not self._ok_everywhere():
                return None
            return new

        return wait_for(f"slot {slot} to fail over away from {old}", promoted, timeout)

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        seen = ["nothing read yet"]  # what the last probe found short, for the timeout's text

        def synced() -> bool | None:
            seen[0] = "a node without cluster_state:ok"
            if not self._ok_everywhere():
                return None
            shards = self._shards()
            seen[0] = f"{len(shards)} shards in CLUSTER SLOTS"
            if len(shards) < 3:
                return None
            for _, primary, replicas in shards:
                if not replicas or not _replication_in_sync(primary, replicas):
                    seen[0] = (f"{primary} with replicas {[str(r) for r in replicas]} not in "
                               f"sync: {[r.info('replication') for r in replicas]}")
                    return None
            return True

        try:
            wait_for("the cluster to be ok with every replica in sync", synced, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last seen: {seen[0]}"[:2000]) from None


def binaries_found() -> bool:
    """A server binary (``FLEETGATE_REDIS_SERVER``, else ``redis-server``) and ``redis-cli``."""
    return find_server_binary() is not None and shutil.which("redis-cli") is not None


__all__ = ["HOST", "SERVICE", "Cluster", "Node", "NodeTls", "SentinelGroup", "binaries_found",
           "cluster_port"]
