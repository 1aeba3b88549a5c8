"""A Redis primary with one replica (``redis-server --replicaof``), on free loopback ports.

``Replicated`` (fixture ``replicated``, taken by importing ``replicated_fixture``)::

    from tests.replication import replicated_fixture  # noqa: F401 (the replicated fixture)

``primary`` and ``replica`` are ``LocalRedis`` servers; ``url`` is the primary's. Started in
sync: the replica's link is up and its offset is the primary's. ``freeze()`` stops the replica
with SIGSTOP (its connection stays open, so the primary still counts it as connected, and it
acknowledges nothing), ``thaw()`` continues it. Teardown thaws and stops both. Every wait polls
Redis's own answers (``INFO replication``), never a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis as SyncRedis

from coordinator.demo.localredis import LocalRedis, find_server_binary


class Replicated:
    """A primary and its replica."""

    def __init__(self) -> None:
        self.primary = LocalRedis()
        self.replica = LocalRedis()
        self._replica_pid: int | None = None
        self.frozen = False

    @property
    def url(self) -> str:
        return self.primary.url

    def start(self, timeout: float = 20.0) -> Replicated:
        self.primary.start()
        self.replica.extra_args = ["--replicaof", self.primary.host, str(self.primary.port)]
        self.replica.start()
        with self._client(self.replica) as r:
            self._replica_pid = int(r.info("server")["process_id"])
        self.wait_in_sync(timeout)
        return self

    def _client(self, server: LocalRedis) -> SyncRedis:
        return SyncRedis(host=server.host, port=server.port, decode_responses=True,
                         socket_timeout=5)

    def primary_info(self) -> dict[str, Any]:
        with self._client(self.primary) as p:
            info: dict[str, Any] = p.info("replication")
        return info

    def wait_in_sync(self, timeout: float = 20.0) -> None:
        """Return once the replica's link is up and it has the primary's offset."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._client(self.replica) as r:
                mine = r.info("replication")
            theirs = self.primary_info()
            slave = theirs.get("slave0")
            if (mine.get("master_link_status") == "up" and isinstance(slave, dict)
                    and slave.get("state") == "online"
                    and int(slave["offset"]) == int(theirs["master_repl_offset"])):
                return
            time.sleep(0.02)
        raise TimeoutError(f"the replica did not get in sync in {timeout}s")

    def freeze(self) -> None:
        """SIGSTOP the replica: connected for the primary, confirming nothing."""
        assert self._replica_pid is not None
        os.kill(self._replica_pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen and self._replica_pid is not None:
            os.kill(self._replica_pid, signal.SIGCONT)
        self.frozen = False

    def stop(self) -> None:
        self.thaw()
        self.replica.stop()
        self.primary.stop()


@pytest.fixture(name="replicated")
def replicated_fixture() -> Iterator[Replicated]:
    """A primary with one replica in sync, stopped (thawed first) at the end."""
    if find_server_binary() is None:
        pytest.skip("no redis-server for a replicated pair")
    pair = Replicated()
    try:
        yield pair.start()
    finally:
        pair.stop()


__all__ = ["Replicated", "replicated_fixture"]
