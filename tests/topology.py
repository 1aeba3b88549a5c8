"""Real replicated Redis topologies for the tests: a Sentinel group and a Redis Cluster, each
started from ``redis-server`` on free loopback ports, in a temporary directory of its own.
The classes live in ``bench/topology.py`` (the failover bench runs them too, without pytest);
this module re-exports them and adds the fixtures.

Stable API (other test modules rely on it; extend it, do not change it):

``Node``
    One ``redis-server`` process (a data node or a sentinel). ``host``, ``port``, ``address``
    (``(host, port)``), ``url`` (``redis://host:port/0``), ``pid``, ``running``; ``client()``
    a synchronous ``redis.Redis`` (str replies) the caller closes; ``kill()`` (SIGKILL, waits),
    ``start()`` (again, same port and directory), ``freeze()`` (SIGSTOP) and ``thaw()``
    (SIGCONT), ``stop()`` (SIGTERM, then SIGKILL), ``log()`` (what it logged so far: a
    sentinel's +/- events).

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

``Cluster`` (fixture ``redis_cluster``; ``shared_cluster``, module-scoped, for tests that
neither kill nor reconfigure it)
    Three primaries and three replicas (``nodes``), ``cluster-node-timeout 1000``,
    ``cluster-replica-validity-factor 0``, created with ``redis-cli --cluster create ...
    --cluster-replicas 1 --cluster-yes``. ``url`` is ``redis+cluster://`` with every node as
    a seed. ``slot_of(key)`` (``CLUSTER KEYSLOT``), ``primary_for(key)`` (the node that
    serves the key's slot now, as a live node's ``CLUSTER SHARDS`` says and that node agrees),
    ``replica_of(primary)``, ``wait_for_failover(old, key)`` (the new primary of the key's
    slot once it serves it and every live node says ``cluster_state:ok``),
    ``wait_in_sync()``. Started with ``cluster_state:ok`` on every node and every replica in
    sync.

In a TLS cell of the compatibility matrix (``pytest --compat``, ``tests/compatkit.py``)
``sentinel_group`` is TLS only (``bench.redisnode.NodeTls``: certificates made by ``trustme``,
client certificates required, replication and monitoring over TLS; ``url`` is the
``rediss+sentinel://`` form). In every cell the nodes run the cell's server binary.

Every wait polls Redis answers (``INFO replication``, ``CLUSTER INFO``/``SHARDS``,
``SENTINEL ...``), never a fixed sleep, and raises ``TimeoutError`` naming what it waited for.
Teardown kills every process (frozen ones too) and removes the directory. The fixtures skip the
test when ``redis-server`` or ``redis-cli`` is missing. A test module takes the fixtures
``sentinel_group`` and ``redis_cluster`` by importing their functions::

    from tests.topology import sentinel_group_fixture  # noqa: F401 (the sentinel_group fixture)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.topology import SERVICE, Cluster, Node, NodeTls, SentinelGroup, binaries_found
from tests import compatkit
from tests.tlskit import make_tls_files


def _require_binaries() -> None:
    if not binaries_found():
        pytest.skip("redis-server and redis-cli are needed for a replicated topology")


@pytest.fixture(name="sentinel_group")
def sentinel_group_fixture() -> Iterator[SentinelGroup]:
    """A started Sentinel group of this test's own (TLS in a TLS cell); every process killed
    at the end."""
    _require_binaries()
    cell = compatkit.current()
    certs = Path(tempfile.mkdtemp(prefix="fleetgate-sentinel-tls-"))
    tls = None
    if cell is not None and cell.tls:
        files = make_tls_files(certs)
        tls = NodeTls(files.ca, files.server_cert, files.server_key, files.client_cert,
                      files.client_key)
    group = SentinelGroup(tls=tls)
    try:
        yield group.start()
    finally:
        group.stop()
        shutil.rmtree(certs, ignore_errors=True)


@pytest.fixture(name="redis_cluster")
def redis_cluster_fixture() -> Iterator[Cluster]:
    """A started Redis Cluster of this test's own; every process killed at the end."""
    _require_binaries()
    cluster = Cluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(name="shared_cluster", scope="module")
def shared_cluster_fixture() -> Iterator[Cluster]:
    """One started Redis Cluster for the tests of a module that neither kill nor reconfigure
    it (each uses keys of its own); every process killed after the module."""
    _require_binaries()
    cluster = Cluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


__all__ = ["SERVICE", "Cluster", "Node", "SentinelGroup", "redis_cluster_fixture",
           "sentinel_group_fixture", "shared_cluster_fixture"]
