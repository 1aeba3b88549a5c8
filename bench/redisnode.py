"""One ``redis-server`` process on a free loopback port, for the replicated topologies of
``bench/topology.py`` (a data node or a sentinel): start, freeze, thaw, kill, restart.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from coordinator.demo.localredis import free_port

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


def cluster_port() -> int:
    """A free port at most 55535 whose cluster bus port (10000 above) is free too."""
    return free_port(HOST, also_free=10000)


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

        wait_for(f"redis-server on port {self.port} to answer", answers, timeout)
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


__all__ = ["HOST", "POLL_S", "Node", "cluster_port", "wait_for"]
