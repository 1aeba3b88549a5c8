"""Webhook receivers for the notification tests: real HTTP servers on loopback.

``Hook`` is a small HTTP/1.1 server (asyncio streams) that records every request and answers
with the status its ``answers`` say, in order (the last one repeats); an answer of ``None``
holds the request open until ``release()``: a receiver that hangs. ``verify`` is the
receiver-side check of the older ``X-Fleetgate-Signature``; ``verify_standard`` and
``first_time`` are the README's receiver check of the Standard Webhooks headers, word for word. ``quick`` and ``notifier`` give a test a
notifier with short backoffs that signs its requests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from coordinator.notify.consumer import Notifier
from coordinator.notify.settings import NotifySettings

SECRET = "webhook-secret-for-tests"


def quick(*urls: str, **extra: Any) -> NotifySettings:
    """Settings for a test: short backoff, a secret."""
    values: dict[str, Any] = {"secret": SECRET.encode(), "backoff": 0.02, "backoff_max": 0.1,
                              "block": 0.5, **extra}
    return NotifySettings(urls=urls, **values)


@contextlib.asynccontextmanager
async def notifier(redis_url: str, fleet: str, settings: NotifySettings,
                   consumer: str | None = None) -> AsyncIterator[Notifier]:
    """A started ``Notifier`` on a client of its own; stopped, and the client closed, after."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        async with Notifier(client, fleet, settings, consumer=consumer) as n:
            yield n
    finally:
        await client.aclose()


def verify(secret: str, body: bytes, header: str) -> bool:
    """The README's receiver check."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)


TOLERANCE_S = 300  # 5 minutes: an older (or later) request is refused, a replay with it


def verify_standard(
    secret: str, body: bytes, headers: dict[str, str], now: float | None = None
) -> bool:
    """body: the request's raw bytes; headers: its headers, names in lower case."""
    key = secret.encode()
    if secret.startswith("whsec_"):
        key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    if not msg_id or not stamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > TOLERANCE_S:
        return False  # stale, or from the future: a captured request replayed ends here
    signed = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(expected, sig.removeprefix("v1,"))
        for sig in headers.get("webhook-signature", "").split() if sig.startswith("v1,")
    )


seen: dict[str, float] = {}  # webhook-id -> when it was first accepted


def first_time(msg_id: str, keep_s: float = 3600.0) -> bool:
    """False for an id accepted before (a retry whose answer was lost): answer it 2xx, skip it."""
    now = time.time()
    for old in [i for i, at in seen.items() if now - at > keep_s]:
        del seen[old]
    if msg_id in seen:
        return False
    seen[msg_id] = now
    return True


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int | None
    """What it was answered (None: held until released)."""

    def json(self) -> Any:
        return json.loads(self.body)


class Hook:
    """One receiver on 127.0.0.1: ``async with Hook([500, 200]) as hook: hook.url``."""

    def __init__(
        self, answers: list[int | None] | None = None, path: str = "/hook",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.answers = list(answers or [200])
        self.tls = tls
        self.path = path
        self.requests: list[Request] = []
        self.holding = 0
        """Requests held open right now."""
        self._released = asyncio.Event()
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.url = ""

    async def __aenter__(self) -> Hook:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}{self.path}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):  # a handler still reading sees the end of it
            writer.close()
        handlers = list(self._handlers)
        if handlers:
            await asyncio.wait(handlers, timeout=10)
        if self._server is not None:
            await self._server.wait_closed()

    def release(self) -> None:
        """Answer every held request (200) and hold no more."""
        self._released.set()

    @property
    def accepted(self) -> list[Request]:
        return [r for r in self.requests if r.status is not None and 200 <= r.status < 300]

    async def wait_for(self, count: int, *, accepted: bool = False, timeout: float = 30.0) -> None:
        """Until ``count`` requests came (``accepted``: were answered 2xx)."""
        async with asyncio.timeout(timeout):
            while len(self.accepted if accepted else self.requests) < count:
                self._changed.clear()
                await self._changed.wait()

    def _answer(self) -> int | None:
        index = min(len(self.requests), len(self.answers) - 1)
        return self.answers[index]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            request_line = (await reader.readline()).decode("latin-1").split()
            headers: dict[str, str] = {}
            while True:
                line = (await reader.readline()).decode("latin-1").rstrip("\r\n")
                if not line:
                    break
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status = self._answer()
            request = Request(request_line[0], request_line[1], headers, body, status)
            self.requests.append(request)
            self._changed.set()
            if status is None:
                self.holding += 1
                try:
                    await self._released.wait()
                finally:
                    self.holding -= 1
                status = request.status = 200
                self._changed.set()
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                         .encode())
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._handlers.discard(task)
            self._writers.discard(writer)


@contextlib.asynccontextmanager
async def hooks(*answers: list[int | None]) -> AsyncIterator[list[Hook]]:
    """Several ``Hook``s at once."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(Hook(a)) for a in answers]


async def settle(predicate: Callable[[], bool], *notifiers: Notifier, timeout: float = 30.0) -> None:
    """Until ``predicate()`` holds, checked at every change of the notifiers' counters."""
    async with asyncio.timeout(timeout):
        while not predicate():
            waits = [asyncio.ensure_future(n.stats.changed().wait()) for n in notifiers]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
