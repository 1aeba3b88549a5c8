"""Signed webhook POSTs, retried: ``sign``, ``post`` and one ``Receiver`` per URL.

``post`` is a small HTTP/1.1 client on asyncio streams (http and https; no proxies, no
redirects): the coordinator has no HTTP client among its run-time dependencies, and a webhook
needs one request and its status line. Every attempt is bounded by ``timeout``, connecting
included, so a receiver that hangs costs one attempt's timeout, never more.

A ``Receiver`` delivers its deliveries one after the other, in the order it got them, in a
task of its own: a receiver that is down or hangs holds back no other receiver and nothing
else in the process. A failed attempt (no connection, a timeout, a status other than 2xx) is
logged and retried after ``backoff`` seconds, twice as long each time (jittered, at most
``backoff_max``), until the event is ``max_age`` old; then it is given up with a log line.

Signatures (with a secret) follow the Standard Webhooks specification: ``webhook-id`` (the same
on every retry: deduplicate on it), ``webhook-timestamp`` (the attempt's time, epoch seconds)
and ``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, so a receiver can
refuse a stale or replayed request. The key is the secret's bytes, or, for a secret written as
the specification does (``whsec_`` and base64), the bytes it encodes. The older
``X-Fleetgate-Signature: sha256=<hex>`` (the body only, keyed with the secret's bytes as
written) is still sent, for one release.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import random
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

from coordinator.notify.settings import NotifySettings, receiver_label
from replica.link.redisio import cancel_bounded

log = logging.getLogger(__name__)

SIGNATURE_HEADER: Final = "X-Fleetgate-Signature"
"""The older signature (the body only): sent for one more release beside the standard ones."""
WEBHOOK_ID: Final = "webhook-id"
WEBHOOK_TIMESTAMP: Final = "webhook-timestamp"
WEBHOOK_SIGNATURE: Final = "webhook-signature"
STANDARD_PREFIX: Final = b"whsec_"
USER_AGENT: Final = "fleetgate-notify/0.1"
_MAX_STATUS_LINE: Final = 8192


class HttpError(Exception):
    """The receiver's answer is not HTTP."""


def sign(secret: bytes, body: bytes) -> str:
    """The value of ``X-Fleetgate-Signature``: ``sha256=`` and the hex HMAC-SHA256 of the
    exact body bytes under ``secret``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signing_key(secret: bytes) -> bytes:
    """The HMAC key of ``webhook-signature``: the bytes a ``whsec_<base64>`` secret encodes,
    or any other secret's own bytes. Raises ``ValueError`` on a ``whsec_`` secret whose rest
    is not base64 (or is empty)."""
    if not secret.startswith(STANDARD_PREFIX):
        return secret
    rest = secret[len(STANDARD_PREFIX):].rstrip(b"=")
    try:
        key = base64.b64decode(rest + b"=" * (-len(rest) % 4), validate=True)
    except binascii.Error:
        raise ValueError("a secret that starts with whsec_ must be base64 after it") from None
    if not key:
        raise ValueError("a secret that starts with whsec_ must be base64 after it")
    return key


def sign_standard(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The value of ``webhook-signature``: ``v1,`` and the base64 HMAC-SHA256 of
    ``id.timestamp.body`` under ``key`` (``signing_key``'s)."""
    content = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


_ssl_context: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = ssl.create_default_context()
    return _ssl_context


async def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST ``body`` (JSON) to ``url`` and return the status code, all within ``timeout``.

    Raises ``TimeoutError``, ``OSError`` (no connection, TLS) or ``HttpError``."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        host_header += f":{parts.port}"
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {host_header}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        f"User-Agent: {USER_AGENT}",
    ]
    if parts.username is not None:
        basic = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        lines.append("Authorization: Basic " + base64.b64encode(basic).decode())
    for name, value in headers.items():
        if "\r" in name + value or "\n" in name + value:
            raise ValueError("a header may not hold a line break")
        lines.append(f"{name}: {value}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(
            host, port, ssl=_tls() if https else None, server_hostname=host if https else None,
            limit=_MAX_STATUS_LINE,
        )
        try:
            writer.write(request)
            await writer.drain()
            try:
                line = await reader.readline()
            except ValueError:  # longer than the limit
                raise HttpError("the status line is too long") from None
            return _status(line)
        finally:
            writer.close()
            try:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1.0):
                        await writer.wait_closed()
            finally:
                # an HTTPS close waits for the receiver's close_notify (asyncio: up to 30 s);
                # a receiver that never sends it does not keep the socket open that long
                writer.transport.abort()


def _status(line: bytes) -> int:
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise HttpError("no HTTP status line" if line else "the connection closed without an answer")
    return int(parts[1])


@dataclass
class NotifyStats:
    """What the notifier did, for the metrics (process-local counters)."""

    delivered: int = 0
    """Notifications a receiver accepted (2xx)."""
    failed: int = 0
    """Attempts that failed (each retry counts)."""
    given_up: int = 0
    """Notifications given up after max_age."""
    skipped: int = 0
    """Entries older than max_age when read (a server that was down): acknowledged, not sent."""
    claimed: int = 0
    """Entries taken over from a silent notifier."""
    acked: int = 0
    """Entries acknowledged (done with: delivered, given up, skipped or gone)."""
    garbage: int = 0
    """Entries that could not be read (not UTF-8, or no event could be made of them): skipped
    and acknowledged."""
    errors: int = 0
    """Errors the notifier did not expect (a bug, a reply it could not read): logged with their
    traceback once per kind, counted here; it went on."""
    unstated: int = 0
    """Registry names passed over because the fleet has no state (no stream, no group made)."""
    _tick: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def bump(self, name: str, n: int = 1) -> None:
        setattr(self, name, getattr(self, name) + n)
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    def changed(self) -> asyncio.Event:
        """An event set at the next change of a counter."""
        return self._tick

    async def wait_for(self, predicate: Callable[[NotifyStats], bool]) -> None:
        """Return once ``predicate(self)`` holds (checked at every change)."""
        while not predicate(self):
            await self._tick.wait()


@dataclass
class Delivery:
    """One event's body on its way to one receiver."""

    event_id: str
    event: str
    """The event's name (for log lines)."""
    body: bytes
    born: float
    """When the event happened (epoch seconds): max_age counts from it."""
    done: Callable[[], None]
    """Called once the receiver accepted it or gave it up (not when the notifier stops)."""
    webhook_id: str = ""
    """The ``webhook-id`` (unique across fleets and streams; default: ``event_id``)."""


class Receiver:
    """One webhook URL: its deliveries in order, each retried until accepted or too old."""

    def __init__(self, url: str, settings: NotifySettings, stats: NotifyStats) -> None:
        self.url = url
        self.label = receiver_label(url)
        self.settings = settings
        self.stats = stats
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._key = None if settings.secret is None else signing_key(settings.secret)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"fleetgate-webhook-{self.label}")

    async def stop(self) -> None:
        """Stop delivering; what was not delivered stays unacknowledged in Redis."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            await cancel_bounded(task)  # a cancellation of stop() itself goes through

    def put(self, delivery: Delivery) -> None:
        self._queue.put_nowait(delivery)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def _run(self) -> None:
        while True:
            delivery = await self._queue.get()
            try:
                await self.deliver(delivery)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours: this delivery is lost, the next ones are not
                self.stats.bump("given_up")
                log.exception("webhook %s: %s event %s could not be delivered",
                              self.label, delivery.event, delivery.event_id)
            delivery.done()

    def headers(self, body: bytes, delivery: Delivery, now: float | None = None) -> dict[str, str]:
        """The headers of one attempt at ``now`` (default: the current time)."""
        webhook_id = delivery.webhook_id or delivery.event_id
        timestamp = int(time.time() if now is None else now)
        headers = {"X-Fleetgate-Event": delivery.event, "X-Fleetgate-Delivery": delivery.event_id,
                   WEBHOOK_ID: webhook_id, WEBHOOK_TIMESTAMP: str(timestamp)}
        if self.settings.secret is not None and self._key is not None:
            headers[WEBHOOK_SIGNATURE] = sign_standard(self._key, webhook_id, timestamp, body)
            headers[SIGNATURE_HEADER] = sign(self.settings.secret, body)
        return headers

    async def deliver(self, delivery: Delivery) -> bool:
        """Try until accepted (True) or ``max_age`` after the event (False, logged)."""
        s = self.settings
        attempt = 0
        while True:
            attempt += 1
            headers = self.headers(delivery.body, delivery)  # the attempt's own timestamp
            try:
                status = await post(self.url, delivery.body, headers, s.timeout)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                error = f"no answer within {s.timeout:g} s"
            except (OSError, HttpError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= status < 300:
                    self.stats.bump("delivered")
                    if attempt > 1:
                        log.info("webhook %s: %s event %s delivered at attempt %d",
                                 self.label, delivery.event, delivery.event_id, attempt)
                    return True
                error = f"HTTP {status}"
            self.stats.bump("failed")
            delay = min(s.backoff_max, s.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            age = time.time() - delivery.born
            if age + delay > s.max_age:
                self.stats.bump("given_up")
                log.warning(
                    "webhook %s: gave up on %s event %s after %d attempts (%.0f s after the "
                    "event, max age %.0f s); last error: %s",
                    self.label, delivery.event, delivery.event_id, attempt, age, s.max_age, error,
                    extra={"receiver": self.label, "event": delivery.event,
                           "event_id": delivery.event_id, "attempts": attempt},
                )
                return False
            log.warning(
                "webhook %s: %s event %s failed (attempt %d: %s); retrying in %.1f s",
                self.label, delivery.event, delivery.event_id, attempt, error, delay,
                extra={"receiver": self.label, "event": delivery.event,
                       "event_id": delivery.event_id, "attempts": attempt},
            )
            await asyncio.sleep(delay)


__all__ = [
    "SIGNATURE_HEADER", "WEBHOOK_ID", "WEBHOOK_SIGNATURE", "WEBHOOK_TIMESTAMP", "Delivery",
    "HttpError", "NotifyStats", "Receiver", "post", "sign", "sign_standard", "signing_key",
]
