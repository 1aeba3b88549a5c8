"""A Redis primary with one replica (``redis-server --replicaof``), on free loopback ports.

``Replicated`` (fixture ``replicated``, taken by importing ``replicated_fixture``)::

    from tests.replication import replicated_fixture  # noqa: F401 (the replicated fixture)

``primary`` and ``replica`` are ``LocalRedis`` servers; ``url`` is the primary's. Started in
sync: the replica confirms the primary's writes (``WAIT``), and the primary's ``INFO
commandstats`` start from zero then. ``freeze()`` stops the replica
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
        # diskless sync at once (7.0 waits 5 s by default for more replicas to join)
        self.primary = LocalRedis(extra_args=["--repl-diskless-sync-delay", "0"])
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
        """Return once the replica confirms a write of the primary's (``WAIT 1``): its link
        up, online, and taking the stream. "Online at the primary's offset" is not enough
        right after a full sync: both offsets are 0 then, and the first writes may go
        unconfirmed for a moment."""
        deadline = time.monotonic() + timeout
        with self._client(self.primary) as p:
            while time.monotonic() < deadline:
                p.incr("replication:fixture:sync")
                if int(p.execute_command("WAIT", 1, 100)) >= 1:
                    p.config_resetstat()  # INFO commandstats: the test's own calls only
                    return
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


SHORT = 0.3
"""The confirmation timeout of the tests that expect none to come."""


def waits(url: str) -> int:
    """WAIT calls the server at ``url`` has answered so far."""
    with SyncRedis.from_url(url, decode_responses=True) as r:
        stats = r.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


__all__ = ["SHORT", "Replicated", "replicated_fixture", "waits"]
