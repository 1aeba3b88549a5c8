"""`fleetgate serve` as an orchestrator runs it: up on a port, down on SIGTERM with status 0,
and what uvicorn itself does with a HEAD or an oversized body."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from coordinator.demo.localredis import free_port
from coordinator.settings import redact
from coordinator.web.server import JsonFormatter
from tests.procs import Processes

pytestmark = pytest.mark.slow


def _wait_healthy(
    proc: subprocess.Popen[str], port: int, log: Path, timeout: float = 120.0
) -> None:
    """Until /healthz answers: a hang guard (a fresh-clone run beside make bench's 5,000
    replicas saw serve take over 30 s to start). The server's log goes to the file ``log``,
    never to a pipe nobody reads: a full pipe blocks the server's next log line, and with it
    its event loop (CI saw it: a shared Redis with schedules every 2 s, ten minutes of
    occurrences to audit, 200 KB of log lines before the server answered)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # another process's port: no event to wait on
    raise AssertionError(f"fleetgate serve did not answer /healthz: {log.read_text()[-4000:]}")


@pytest.mark.timeout(300)  # past _wait_healthy's hang guard
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_shuts_down_gracefully_on_a_signal_and_exits_zero(
    redis_url: str, sig: int, processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    env = {**os.environ, "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_ADMIN_TOKEN": "t" * 24}
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = processes.start(  # SIGINT at its default disposition, however the suite started
            [sys.executable, "-m", "coordinator", "serve", "--port", str(port)], env=env,
            stdout=out, stderr=subprocess.STDOUT,
        )
    _wait_healthy(proc, port, log)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    err = log.read_text()
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err


def test_a_password_in_the_redis_url_never_reaches_a_log_line() -> None:
    assert redact("redis://replica:s3cret@redis:6379/0") == "redis://replica:***@redis:6379/0"
    assert redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_json_log_lines_carry_the_extra_fields() -> None:
    import json
    import logging

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "overdue %s", ("orders",), None)
    record.fleet = "orders"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "overdue orders" and line["fleet"] == "orders"
    assert line["level"] == "WARNING"


def _text(log: Path) -> str:
    return log.read_text()


async def _serve(processes: Processes, redis_url: str, log: Path) -> int:
    """``fleetgate serve`` on a free port, once it answers /healthz; its log goes to ``log``."""
    port = free_port()
    env = {**os.environ, "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_ADMIN_TOKEN": "t" * 24}
    with log.open("w") as err:
        proc = processes.start(
            [sys.executable, "-m", "coordinator", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(timeout=1) as client:
        while time.monotonic() < deadline:
            assert proc.poll() is None, _text(log)
            try:
                if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    return port
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)  # another process's port: no event to wait on
    raise AssertionError(f"fleetgate serve did not answer /healthz: {_text(log)}")


async def test_a_declared_body_over_the_limit_gets_413_before_the_server_reads_it(
    redis_url: str, processes: Processes, tmp_path: Path
) -> None:
    port = await _serve(processes, redis_url, tmp_path / "serve.log")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        # 50 MB announced, not a byte of it sent, no token: the answer must not wait for it
        writer.write(
            b"POST /api/fleet/pause HTTP/1.1\r\nHost: coordinator\r\n"
            b"Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n"
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        assert head.startswith(b"HTTP/1.1 413 "), head
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = json.loads(await asyncio.wait_for(reader.readexactly(length), 20))
        assert "FLEETGATE_MAX_BODY" in body["detail"]
    finally:
        writer.close()
        await writer.wait_closed()


async def test_the_server_answers_head_with_the_headers_of_get_and_no_body(
    redis_url: str, processes: Processes, tmp_path: Path
) -> None:
    port = await _serve(processes, redis_url, tmp_path / "serve.log")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        for path in ("/", "/healthz", "/static/app.js"):
            get = await client.get(path)
            head = await client.head(path)
            assert (head.status_code, get.status_code) == (200, 200), path
            assert head.content == b""
            assert head.headers["content-type"] == get.headers["content-type"]
            if path != "/healthz":
                assert head.headers["content-length"] == get.headers["content-length"]


def test_the_listening_socket_is_tcp_so_each_connection_gets_tcp_nodelay() -> None:
    # asyncio sets TCP_NODELAY on an accepted socket only when its proto says TCP (proto 0 does
    # not): without it every response after a keep-alive connection's first waited ~40 ms
    import socket

    from coordinator.web.server import listen

    sock = listen("127.0.0.1", 0)
    try:
        sock.listen()
        with socket.create_connection(sock.getsockname()):
            accepted, _ = sock.accept()
            with accepted:
                assert (sock.proto, accepted.proto) == (socket.IPPROTO_TCP, socket.IPPROTO_TCP)
    finally:
        sock.close()
