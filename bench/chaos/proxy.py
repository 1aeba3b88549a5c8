"""A TCP proxy between one replica and Redis that can slow, cut or black-hole the link.

``LinkProxy`` listens on 127.0.0.1 and forwards every connection to the target, byte for byte,
in both directions. Its mode says how:

* ``pass``: at once;
* ``delay``: each chunk is held ``delay`` seconds after it was read (order is kept; the link
  gets slower, not narrower);
* ``drop``: every open connection is reset at once, and new ones are reset as they come, until
  the mode changes (a link that keeps failing);
* ``blackhole``: nothing is forwarded and nothing is closed: the bytes wait in the proxy, as
  packets a dead path drops would be retransmitted, and flow again once the mode changes
  (unless the client gave up meanwhile).

It only ever connects to the target it was given (the runner gives it 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Final

log = logging.getLogger(__name__)

PASS: Final = "pass"
DELAY: Final = "delay"
DROP: Final = "drop"
BLACKHOLE: Final = "blackhole"
MODES: Final = (PASS, DELAY, DROP, BLACKHOLE)
CHUNK: Final = 65536


class _Pipe:
    """One direction of one connection: reads chunks, writes them when the mode lets it."""

    def __init__(self, proxy: LinkProxy, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.reader = reader
        self.writer = writer
        self.chunks: deque[tuple[float, bytes]] = deque()
        self.more = asyncio.Event()
        self.eof = False

    async def read(self) -> None:
        try:
            while True:
                data = await self.reader.read(CHUNK)
                if not data:
                    break
                self.chunks.append((time.monotonic() + self.proxy.delay_now(), data))
                self.more.set()
                if not self.proxy.flowing.is_set():
                    self.proxy.holding.set()
        except (ConnectionError, OSError):
            pass
        finally:
            self.eof = True
            self.more.set()

    async def write(self) -> None:
        proxy = self.proxy
        try:
            while True:
                while not self.chunks:
                    if self.eof:
                        return
                    self.more.clear()
                    await self.more.wait()
                await proxy.flowing.wait()
                due, data = self.chunks[0]
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue  # the mode may have changed meanwhile
                self.chunks.popleft()
                self.writer.write(data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                self.writer.write_eof()


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None

    def reset(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class LinkProxy:
    """Forwards 127.0.0.1:``port`` to ``target_host``:``target_port``; see the module."""

    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.port = listen_port
        self.mode = PASS
        self.delay = 0.0
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.holding = asyncio.Event()
        """Set once a black hole holds bytes (cleared when the link heals)."""
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> LinkProxy:
        self._server = await asyncio.start_server(self._on_connect, self.listen_host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        """Stop listening, reset every connection, and wait for the proxy's tasks."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.mode = DROP  # a connection being set up now is reset too
        self.flowing.set()
        for link in list(self._links):
            link.reset()
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> LinkProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def connections(self) -> int:
        return len(self._links)

    # ------------------------------------------------------------------ modes

    def set_mode(self, mode: str, delay: float = 0.0) -> None:
        """Switch to ``mode`` (``delay`` seconds for ``delay``); ``drop`` resets every open
        connection at once."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        self.mode = mode
        self.delay = delay if mode == DELAY else 0.0
        if mode == BLACKHOLE:
            self.flowing.clear()
        else:
            self.flowing.set()
            self.holding.clear()
        if mode == DROP:
            for link in list(self._links):
                link.reset()
        log.info("proxy :%d -> %s", self.port, mode if mode != DELAY else f"delay {delay}s")

    def heal(self) -> None:
        self.set_mode(PASS)

    def delay_now(self) -> float:
        return self.delay if self.mode == DELAY else 0.0

    # ------------------------------------------------------------------ connections

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Each connection is served by a task of the proxy's own (asyncio would otherwise
        report the cancellation of its own task at ``stop()`` as an error)."""
        task = asyncio.create_task(self._serve(reader, writer), name=f"proxy-{self.port}-link")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self._links.add(link)
        self.accepted += 1
        try:
            if self.mode == DROP:
                return
            await self.flowing.wait()  # a black hole answers no connection either
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    self.target_host, self.target_port
                )
            except OSError:
                return
            link.upstream = up_writer
            if self.mode == DROP:
                return
            pipes = (_Pipe(self, reader, up_writer), _Pipe(self, up_reader, writer))
            await asyncio.gather(*(p.read() for p in pipes), *(p.write() for p in pipes))
        finally:
            self._links.discard(link)
            link.reset()


__all__ = ["BLACKHOLE", "DELAY", "DROP", "MODES", "PASS", "LinkProxy"]
