"""Real replicated Redis topologies for the tests: a Sentinel group and a Redis Cluster, each
started from ``redis-server`` on free loopback ports, in a temporary directory of its own.

Stable API (other test modules rely on it; extend it, do not change it):

``Node``
    One ``redis-server`` process (a data node or a sentinel). ``host``, ``port``, ``address``
    (``(host, port)``), ``url`` (``redis://host:port/0``), ``pid``, ``running``; ``client()``
    a synchronous ``redis.Redis`` (str replies) the caller closes; ``kill()`` (SIGKILL, waits),
    ``start()`` (again, same port and directory), ``freeze()`` (SIGSTOP) and ``thaw()``
    (SIGCONT), ``stop()`` (SIGTERM, then SIGKILL).

``SentinelGroup`` (fixture ``sentinel_group``)
    One master, one replica (``servers``: the master first, as started) and three sentinels
    (``sentinels``), monitoring ``SERVICE`` (``"fleetgate"``) with ``down-after-milliseconds
    1000``, ``failover-timeout 3000`` and a quorum of 2. ``url`` is
    ``redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/fleetgate``;
    ``sentinel_url(user=..., password=..., query=...)`` builds other forms. ``master()`` is the
    node the sentinels name now (``SENTINEL get-master-addr-by-name``, asked of each live
    sentinel: they must agree), ``replica_nodes()`` the others. ``wait_for_failover(old)``
    returns the new master once every live sentinel names a node other than ``old``, that
    node answers ``role:master`` and, if ``old`` still runs, ``old`` is its replica.
    ``wait_in_sync()`` returns once every running replica's link is up and its offset is the
    master's. Started in sync: the replica has synced and every sentinel knows the replica and
    the two other sentinels.

``Cluster`` (fixture ``redis_cluster``)
    Three primaries and three replicas (``nodes``), ``cluster-node-timeout 1000``,
    ``cluster-replica-validity-factor 0``, created with ``redis-cli --cluster create ...
    --cluster-replicas 1 --cluster-yes``. ``url`` is ``redis+cluster://`` with every node as
    a seed. ``slot_of(key)`` (``CLUSTER KEYSLOT``), ``primary_for(key)`` (the node that
    serves the key's slot now, as a live node's ``CLUSTER SHARDS`` says and that node agrees),
    ``replica_of(primary)``, ``wait_for_failover(old, key)`` (the new primary of the key's
    slot once it serves it and every live node says ``cluster_state:ok``),
    ``wait_in_sync()``. Started with ``cluster_state:ok`` on every node and every replica in
    sync.

Every wait polls Redis answers (``INFO replication``, ``CLUSTER INFO``/``SHARDS``,
``SENTINEL ...``), never a fixed sleep, and raises ``TimeoutError`` naming what it waited for.
Teardown kills every process (frozen ones too) and removes the directory. The fixtures skip the
test when ``redis-server`` or ``redis-cli`` is missing. A test module takes the fixtures
``sentinel_group`` and ``redis_cluster`` by importing their functions::

    from tests.topology import sentinel_group_fixture  # noqa: F401 (the sentinel_group fixture)
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import pytest
from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from coordinator.demo.localredis import free_port

HOST: Final = "127.0.0.1"
SERVICE: Final = "fleetgate"
POLL_S: Final = 0.05
T = TypeVar("T")


def _wait(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Call ``probe`` until it returns something other than None (Redis errors count as
    None), or raise ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            found = probe()
        except (RedisError, OSError) as exc:
            found, last = None, exc
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            why = f" (last error: {last!r})" if last is not None else ""
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}{why}")
        time.sleep(POLL_S)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port at most 55535 whose cluster bus port (10000 above) is free too."""
    for _ in range(1000):
        port = random.randint(20000, 55535)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class Node:
    """One ``redis-server`` process on a free loopback port."""

    def __init__(self, directory: Path, args: Sequence[str], *, conf: str | None = None,
                 sentinel: bool = False, port: int | None = None) -> None:
        self.host = HOST
        self.port = port or free_port()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sentinel = sentinel
        self._args = list(args)
        self._conf = conf
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> Node:
        """Start (or start again); returns once it answers PING."""
        if self.running:
            return self
        server = shutil.which("redis-server")
        assert server is not None
        common = ["--port", str(self.port), "--bind", self.host, "--dir", str(self.dir),
                  "--daemonize", "no", "--logfile", str(self.dir / "server.log")]
        if self._conf is not None:
            conf = self.dir / "node.conf"
            if not conf.exists():  # a sentinel rewrites its file: keep it on a restart
                conf.write_text(self._conf)
            argv = [server, str(conf), *(["--sentinel"] if self.sentinel else []), *common]
        else:
            argv = [server, *common, "--save", "", "--appendonly", "no", *self._args]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      cwd=self.dir)

        def answers() -> bool | None:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited: {self.log_tail()}")
            with self.client() as c:
                return True if c.ping() else None

        _wait(f"redis-server on port {self.port} to answer", answers, timeout)
        return self

    def client(self, **kwargs: Any) -> SyncRedis:
        """A synchronous client of this node (str replies); the caller closes it."""
        kwargs.setdefault("socket_timeout", 2.0)
        kwargs.setdefault("socket_connect_timeout", 1.0)
        return SyncRedis(host=self.host, port=self.port, decode_responses=True, **kwargs)

    def info(self, section: str) -> dict[str, Any]:
        with self.client() as c:
            return dict(c.info(section))

    def log_tail(self, lines: int = 5) -> str:
        path = self.dir / "server.log"
        if not path.exists():
            return ""
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL (a frozen process too) and wait for it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)

    def freeze(self) -> None:
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT, in case it is frozen), SIGKILL after 5 s."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def __repr__(self) -> str:
        return f"<Node {self.host}:{self.port}{' sentinel' if self.sentinel else ''}>"


def _require_binaries() -> None:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server and redis-cli are needed for a replicated topology")


class _Topology:
    def __init__(self, prefix: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.all: list[Node] = []

    def _node(self, name: str, args: Sequence[str] = (), **kw: Any) -> Node:
        node = Node(self.dir / name, args, **kw)
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


class SentinelGroup(_Topology):
    """One master, one replica, three sentinels (see the module docstring)."""

    SERVICE: Final = SERVICE

    def __init__(self) -> None:
        super().__init__("fleetgate-sentinel-")
        self.servers = [self._node("server-0"), self._node("server-1")]
        self.sentinels: list[Node] = []

    def start(self, timeout: float = 30.0) -> SentinelGroup:
        first, second = self.servers
        first.start()
        second._args = ["--replicaof", first.host, str(first.port)]
        second.start()
        _wait("the replica to sync", lambda: _replication_in_sync(first, [second]), timeout)
        for i in range(3):
            conf = (
                f"sentinel monitor {SERVICE} {first.host} {first.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 3000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            self.sentinels.append(self._node(f"sentinel-{i}", conf=conf, sentinel=True).start())
        _wait("every sentinel to know the replica and the two other sentinels",
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
        auth = f"{user}:{password}@" if user or password else ""
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinel_addresses)
        path = f"/{SERVICE}" + (f"/{db}" if db is not None else "")
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
        return _wait("the sentinels to agree on the master", self._named_master, timeout)

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

        return _wait(f"a failover away from {old}", promoted, timeout)

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        def synced() -> bool | None:
            current = self._named_master()
            if current is None:
                return None
            return _replication_in_sync(current, [n for n in self.servers if n is not current])

        _wait("every running replica to be in sync with the master", synced, timeout)


class Cluster(_Topology):
    """Three primaries and three replicas (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("fleetgate-cluster-")
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0"]
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
        return _wait(f"a primary serving slot {slot}", lambda: self._serving(slot), timeout)

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

        return _wait(f"slot {slot} to fail over away from {old}", promoted, timeout)

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        def synced() -> bool | None:
            if not self._ok_everywhere():
                return None
            shards = self._shards()
            if len(shards) < 3:
                return None
            for _, primary, replicas in shards:
                if not replicas or not _replication_in_sync(primary, replicas):
                    return None
            return True

        _wait("the cluster to be ok with every replica in sync", synced, timeout)


@pytest.fixture(name="sentinel_group")
def sentinel_group_fixture() -> Iterator[SentinelGroup]:
    """A started Sentinel group of this test's own; every process killed at the end."""
    _require_binaries()
    group = SentinelGroup()
    try:
        yield group.start()
    finally:
        group.stop()


@pytest.fixture(name="redis_cluster")
def redis_cluster_fixture() -> Iterator[Cluster]:
    """A started Redis Cluster of this test's own; every process killed at the end."""
    _require_binaries()
    cluster = Cluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


__all__ = ["SERVICE", "Cluster", "Node", "SentinelGroup", "redis_cluster_fixture",
           "sentinel_group_fixture"]
