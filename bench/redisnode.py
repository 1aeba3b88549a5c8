"""One ``redis-server`` process on a free loopback port, for the replicated topologies of
``bench/topology.py`` (a data node or a sentinel): start, freeze, thaw, kill, restart.

The binary is ``coordinator.demo.localredis.find_server_binary()``'s (``FLEETGATE_REDIS_SERVER``,
else ``redis-server`` on PATH), or the one given: a ``valkey-server`` runs a sentinel with
``--sentinel`` as ``redis-server`` does. With ``NodeTls`` the node speaks TLS only (its port is
the TLS port, ``--port 0``), replicates and monitors over TLS, and requires a client
certificate; its ``client()`` and ``url`` use the client certificate and the CA.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from coordinator.demo.localredis import find_server_binary, free_port

HOST: Final = "127.0.0.1"
POLL_S: Final = 0.05
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float) -> T:
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


@dataclass(frozen=True)
class NodeTls:
    """The PEM files of a TLS topology: the CA, the nodes' certificate and key (which they also
    present as clients, to each other), and a client certificate and key for the callers."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path

    def server_args(self, port: int) -> list[str]:
        return ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(self.cert),
                "--tls-key-file", str(self.key), "--tls-ca-cert-file", str(self.ca),
                "--tls-auth-clients", "yes", "--tls-replication", "yes", "--tls-cluster", "yes"]

    def client_kwargs(self) -> dict[str, Any]:
        """redis-py's arguments for a client of a node."""
        return {"ssl": True, "ssl_ca_certs": str(self.ca), "ssl_certfile": str(self.client_cert),
                "ssl_keyfile": str(self.client_key)}

    @property
    def query(self) -> str:
        """The TLS parameters of a fleetgate ``rediss`` URL (every form takes the same)."""
        return (f"ssl_ca_certs={self.ca}&ssl_certfile={self.client_cert}"
                f"&ssl_keyfile={self.client_key}")


def cluster_port() -> int:
    """A free port at most 55535 whose cluster bus port (10000 above) is free too."""
    return free_port(HOST, also_free=10000)


class Node:
    """One ``redis-server`` process on a free loopback port."""

    def __init__(self, directory: Path, args: Sequence[str], *, conf: str | None = None,
                 sentinel: bool = False, port: int | None = None, binary: str | None = None,
                 tls: NodeTls | None = None) -> None:
        self.host = HOST
        self.port = port or free_port()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sentinel = sentinel
        self._args = list(args)
        self._conf = conf
        self.binary = binary
        self.tls = tls
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://{self.host}:{self.port}/0?{self.tls.query}"
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
        server = self.binary or find_server_binary()
        assert server is not None, "no redis-server (or FLEETGATE_REDIS_SERVER) to start"
        port = ["--port", str(self.port)] if self.tls is None else self.tls.server_args(self.port)
        common = [*port, "--bind", self.host, "--dir", str(self.dir),
                  "--daemonize", "no", "--logfile", str(self.dir / "server.log")]
        if self._conf is not None:
            conf = self.dir / "node.conf"
            if not conf.exists():  # a sentinel rewrites its file: keep it on a restart
                conf.write_text(self._conf)
            argv = [server, str(conf), *(["--sentinel"] if self.sentinel else []), *common]
        else:
            # a replica's full sync starts at once: 7.0 waits 5 s for more replicas to join a
            # diskless sync, which every topology start and every failover's resync paid
            argv = [server, *common, "--save", "", "--appendonly", "no",
                    "--repl-diskless-sync-delay", "0", *self._args]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      cwd=self.dir)

        def answers() -> bool | None:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"{server} on port {self.port} exited: {self.log_tail()}")
            with self.client() as c:
                return True if c.ping() else None

        wait_for(f"{server} on port {self.port} to answer", answers, timeout)
        return self

    def client(self, **kwargs: Any) -> SyncRedis:
        """A synchronous client of this node (str replies); the caller closes it."""
        kwargs.setdefault("socket_timeout", 2.0)
        kwargs.setdefault("socket_connect_timeout", 1.0)
        if self.tls is not None:
            kwargs = self.tls.client_kwargs() | kwargs
        return SyncRedis(host=self.host, port=self.port, decode_responses=True, **kwargs)

    def info(self, section: str) -> dict[str, Any]:
        with self.client() as c:
            return dict(c.info(section))

    def log(self) -> str:
        """What the server logged so far (a sentinel: its +/- events); empty before it did."""
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, lines: int = 5) -> str:
        return " | ".join(self.log().splitlines()[-lines:])

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


__all__ = ["HOST", "POLL_S", "Node", "NodeTls", "cluster_port", "wait_for"]
