"""Slow and idle HTTP clients, against both real servers: `fleetgate serve` and
`fleetgate-replica`, each a process of its own, spoken to over raw sockets.

A client has FLEETGATE_HTTP_HEADER_TIMEOUT seconds (1 s here) to send a whole request, from the
moment its connection opens or its last response was sent: a connection that sends nothing,
half a request line, half a header block, or a header a byte at a time, is closed by the server.
Beyond FLEETGATE_HTTP_MAX_CONNECTIONS open at once, a connection is answered 503 and closed.
Normal requests keep working throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest

from coordinator.demo.localredis import free_port
from tests.procs import Processes, base_env, replica_processes

pytestmark = pytest.mark.slow

HEADER_TIMEOUT_S = 1.0
CLOSED_WITHIN_S = 15.0
"""How long a test waits for the server to close a connection: far past the 1 s timeout
(a loaded machine), far short of never (what the server did before)."""

Server = Callable[[float, int], AbstractAsyncContextManager[int]]


def _text(log: Path) -> str:
    return log.read_text()


@contextlib.asynccontextmanager
async def _coordinator(
    redis_url: str, processes: Processes, log: Path, header_timeout: float, max_connections: int
) -> AsyncIterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env.update({
        "FLEETGATE_REDIS_URL": redis_url, "FLEETGATE_ADMIN_TOKEN": "t" * 24,
        "FLEETGATE_HTTP_HEADER_TIMEOUT": str(header_timeout),
        "FLEETGATE_HTTP_MAX_CONNECTIONS": str(max_connections),
    })
    with log.open("w") as err:
        proc = processes.start(
            [sys.executable, "-m", "coordinator", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(timeout=1) as client:
        while True:
            assert proc.poll() is None, _text(log)
            assert time.monotonic() < deadline, f"serve did not answer: {_text(log)}"
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    break
            await asyncio.sleep(0.1)  # another process's port: no event to wait on
    yield port


@contextlib.asynccontextmanager
async def _replica(
    redis_url: str, fleet: str, log_dir: Path, header_timeout: float, max_connections: int
) -> AsyncIterator[int]:
    env = base_env(redis_url, fleet, http_header_timeout=header_timeout,
                   http_max_connections=max_connections)
    async with replica_processes(1, env, log_dir, prefix="slow") as procs:
        yield procs[0].port


@pytest.fixture(params=["coordinator", "replica"])
def server(
    request: pytest.FixtureRequest, redis_url: str, processes: Processes, fleet_name: str,
    tmp_path: Path,
) -> Server:
    def start(header_timeout: float, max_connections: int) -> AbstractAsyncContextManager[int]:
        if request.param == "coordinator":
            return _coordinator(redis_url, processes, tmp_path / "serve.log", header_timeout,
                                max_connections)
        return _replica(redis_url, fleet_name, tmp_path, header_timeout, max_connections)

    return start


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    """True once the server closed the connection (EOF or reset), False if it kept it open for
    CLOSED_WITHIN_S."""
    try:
        async with asyncio.timeout(CLOSED_WITHIN_S):
            while True:
                if not await reader.read(65536):
                    return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length: its status and body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CLOSED_WITHIN_S)
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return status, await reader.readexactly(length)


async def _healthz(port: int) -> int:
    async with httpx.AsyncClient(timeout=10) as client:
        return (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code


async def _trickle(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    """A slowloris: one byte of ``data`` at a time, a byte every ``every`` seconds (the
    client's behaviour under test, not a wait for something)."""
    with contextlib.suppress(ConnectionError):
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(every)


async def test_connections_that_send_nothing_or_half_a_request_are_closed_by_the_server(
    server: Server,
) -> None:
    async with server(HEADER_TIMEOUT_S, 64) as port:
        partial = {
            "nothing": b"",
            "half a request line": b"GET /hea",
            "half the headers": b"GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n",
            "half a body": (b"POST /pool/pause HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                            b"\r\nContent-Length: 100\r\n\r\n{\"reason\":"),
        }
        connections = {}
        for name, data in partial.items():
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            await writer.drain()
            connections[name] = (reader, writer)
        # a slowloris: a header byte every 0.2 s, for longer than the timeout
        slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
        trickling = asyncio.create_task(
            _trickle(slow_writer, b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 200, 0.2)
        )
        try:
            closed = dict(zip(
                [*connections, "a byte at a time"],
                await asyncio.gather(
                    *(_closed_by_server(r) for r, _ in connections.values()),
                    _closed_by_server(slow_reader),
                ), strict=True,
            ))
            assert closed == dict.fromkeys(closed, True), closed
            assert await _healthz(port) == 200  # a normal request still works
        finally:
            trickling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await trickling
            for _, writer in [*connections.values(), (slow_reader, slow_writer)]:
                writer.close()


async def test_half_a_second_request_on_a_kept_alive_connection_is_closed_by_the_server(
    server: Server,
) -> None:
    async with server(HEADER_TIMEOUT_S, 64) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            status, _ = await _response(reader)
            assert status == 200
            writer.write(b"GET /healthz HTTP/1.1\r\nHo")  # the next request, never finished
            await writer.drain()
            assert await _closed_by_server(reader)
        finally:
            writer.close()


async def test_connections_beyond_the_limit_are_refused_with_503_and_the_rest_still_work(
    server: Server,
) -> None:
    limit = 4
    async with server(60.0, limit) as port:  # a long timeout: the idle ones stay open
        opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(limit + 2)]
        try:
            # the refused ones are answered and closed before they send a byte; the others wait
            reads = [asyncio.create_task(r.read()) for r, _ in opened]
            refused: list[bytes] = []
            async with asyncio.timeout(CLOSED_WITHIN_S):
                while len(refused) < 2:
                    done, _ = await asyncio.wait(
                        [t for t in reads if not t.done()], return_when=asyncio.FIRST_COMPLETED
                    )
                    refused += [t.result() for t in done]
            # (the start-up's own health-check connection may still be counted for a moment,
            # refusing one more: at least the two beyond the limit are refused, never all)
            waiting = [c for c, t in zip(opened, reads, strict=True) if not t.done()]
            assert waiting, "every connection was refused"
            for answer in refused:
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 503 "), answer
                assert "FLEETGATE_HTTP_MAX_CONNECTIONS" in json.loads(body)["detail"]
            # the open ones are served
            for task in reads:
                task.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
            for reader, writer in waiting:
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                await writer.drain()
                assert (await _response(reader))[0] == 200
        finally:
            for _, writer in opened:
                writer.close()
        # once the clients are gone, a new connection is served again
        deadline = time.monotonic() + CLOSED_WITHIN_S
        while True:
            try:
                if await _healthz(port) == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "still refused after every client left"
            await asyncio.sleep(0.1)  # the server's connection_lost: no event to wait on
