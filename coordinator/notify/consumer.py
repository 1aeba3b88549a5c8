"""Reading the audit and events streams through a consumer group: ``Notifier``.

Every ``fleetgate serve`` of a fleet joins one consumer group (``fleetgate-notify``) on both
streams, as a consumer of its own name. Redis hands each entry to one of them, so two servers
announce an event once, not twice; an entry a CLI wrote while no server ran waits in the stream
for the next server (when the group is created, it starts ``max_age`` in the past).

An entry is acknowledged (XACK) once every receiver accepted it or gave it up, never before: a
server that dies with entries in hand leaves them pending, and another server claims them
(XAUTOCLAIM) once they sat ``claim_idle`` unrenewed. A server renews the entries it holds
(XCLAIM ... JUSTID to itself, which resets their idle time) every third of ``claim_idle``, so an
entry that is still being retried is not taken over. An entry older than ``max_age`` when read
(the servers were down longer than that) is acknowledged without being sent, and counted.

Nothing here is awaited by a change: the notifier runs in tasks of its own, so a receiver that
is down or hangs never slows a pause.

With ``follow_registry`` (``fleetgate serve``), the notifier also follows every fleet of the
registry (``coordinator.notify.follow``): the same group on each fleet's two streams, created
when the fleet is first seen, read without blocking every ``settings.block`` seconds, a few
fleets at a time. The default fleet's streams are read with a blocking read, as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from coordinator.notify.events import Event, entry_ms
from coordinator.notify.follow import Follower, stream_entries
from coordinator.notify.settings import NotifySettings
from coordinator.notify.slack import slack_body
from coordinator.notify.webhook import Delivery, NotifyStats, Receiver
from replica.contract import Keys, text
from replica.control.redisio import uncancelled

log = logging.getLogger(__name__)

_Key = tuple[str, str]
"""(stream, entry id)."""

_RETRY_MAX_S = 5.0
"""The longest pause between two tries of a Redis call that failed."""


def default_consumer() -> str:
    """A consumer name of this process's own: host, pid and a random tag."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def encode(event: Event, fmt: str) -> bytes:
    """The exact body bytes of a notification (what the signature covers)."""
    body = slack_body(event) if fmt == "slack" else event.body()
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class Notifier:
    """Announces a fleet's audit and events entries to every receiver, until stopped.

    ``redis`` may be shared with the rest of the process (a blocking read holds one connection
    of its pool for ``settings.block`` seconds at a time)."""

    def __init__(
        self,
        redis: Redis,
        fleet: str,
        settings: NotifySettings,
        *,
        consumer: str | None = None,
        follow_registry: bool = False,
    ) -> None:
        self.redis = redis
        self.keys = Keys(fleet)
        self.fleet = self.keys.fleet
        self.settings = settings
        self.consumer = consumer or default_consumer()
        self.stats = NotifyStats()
        self.receivers = [Receiver(url, settings, self.stats) for url in settings.urls]
        self._own = (self.keys.audit, self.keys.events)
        self._sources: dict[str, tuple[str, str]] = {
            self.keys.audit: (self.fleet, "audit"), self.keys.events: (self.fleet, "events"),
        }
        """stream -> (its fleet, audit or events): the default fleet's and each followed one's."""
        self.follower = Follower(self) if follow_registry else None
        """Follows the other fleets of the registry (None: the default fleet only)."""
        self._held: dict[_Key, int] = {}
        """Entries in hand -> receivers still at them (0: waiting for their XACK)."""
        self._to_ack: set[_Key] = set()
        self._ack_wanted = asyncio.Event()
        self._room = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._redis_down = False

    @property
    def held(self) -> int:
        """Entries in hand: being delivered, retried, or waiting for their XACK."""
        return len(self._held)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Notifier:
        """Join the group (creating it when absent) and start reading. Idempotent. Redis
        being down is no error: the reader keeps trying."""
        if self._tasks:
            return self
        for receiver in self.receivers:
            receiver.start()
        name = f"fleetgate-notify-{self.fleet}"
        self._tasks = [
            asyncio.create_task(self._read_loop(), name=f"{name}-read"),
            asyncio.create_task(self._claim_loop(), name=f"{name}-claim"),
            asyncio.create_task(self._ack_loop(), name=f"{name}-ack"),
        ]
        if self.follower is not None:
            self._tasks.append(asyncio.create_task(self.follower.run(), name=f"{name}-follow"))
        log.info("fleet %s: notifying %d receiver(s) of its events as %s (format %s)",
                 self.fleet, len(self.receivers), self.consumer, self.settings.format)
        if self.settings.secret is None:
            log.warning("fleet %s: notifications go out unsigned: set FLEETGATE_WEBHOOK_SECRET "
                        "so that receivers can tell them from forgeries", self.fleet)
        return self

    async def stop(self) -> None:
        """Stop reading and delivering; acknowledge what was delivered (for at most a second
        or so). What is still undelivered stays pending in Redis, for another server to claim.
        Idempotent."""
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        read, claim, ack, *follow = tasks
        for task in (read, claim, *follow):
            task.cancel()
        for receiver in self.receivers:
            await receiver.stop()
        await asyncio.gather(read, claim, *follow, return_exceptions=True)
        ack.cancel()
        await asyncio.gather(ack, return_exceptions=True)
        if self._to_ack:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._ack_now()

    async def __aenter__(self) -> Notifier:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ reading

    def follow(self, fleets: Iterable[str]) -> tuple[int, int]:
        """Read the streams of ``fleets`` too (besides the default fleet's), and no longer those
        of a fleet followed before and not listed now; (added, dropped)."""
        wanted = {Keys(name).audit: name for name in fleets if name != self.fleet}
        wanted |= {Keys(name).events: name for name in wanted.values()}
        dropped = [s for s in self._sources if s not in self._own and s not in wanted]
        for stream in dropped:
            del self._sources[stream]
        added = 0
        for stream, name in wanted.items():
            if stream not in self._sources:
                self._sources[stream] = (name, "audit" if stream == Keys(name).audit else "events")
                added += 1
        return added // 2, len(dropped) // 2

    @property
    def full(self) -> bool:
        """As many entries in hand as ``max_in_flight``: read no more for now."""
        return len(self._held) >= self.settings.max_in_flight

    async def ensure_groups(self, streams: Iterable[str] | None = None) -> None:
        """Create the group on the streams (MKSTREAM; default: the default fleet's two),
        starting ``max_age`` ago; a group that exists is left as it is."""
        start = f"{int((time.time() - self.settings.max_age) * 1000)}-0"
        for stream in self._own if streams is None else streams:
            try:
                await uncancelled(self.redis.xgroup_create(
                    stream, self.settings.group, id=start, mkstream=True
                ))
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _read_loop(self) -> None:
        failures = 0
        groups = False
        while True:
            if len(self._held) >= self.settings.max_in_flight:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                if not groups:
                    await self.ensure_groups()
                    groups = True
                reply = await uncancelled(self.redis.xreadgroup(
                    self.settings.group, self.consumer, dict.fromkeys(self._own, ">"),
                    count=self.settings.batch, block=int(self.settings.block * 1000),
                ))
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:
                if "NOGROUP" in str(exc):  # the stream or the group is gone (Redis emptied)
                    groups = False
                    continue
                failures += 1
                await self._redis_failed(exc, failures)
                continue
            except (RedisError, OSError) as exc:
                failures += 1
                await self._redis_failed(exc, failures)
                continue
            failures = 0
            self._redis_back()
            skipped = 0
            for stream, entry_id, fields in stream_entries(reply):
                skipped += not self.accept(stream, entry_id, fields)
            if skipped:
                log.info("fleet %s: %d event(s) older than FLEETGATE_WEBHOOK_MAX_AGE (%.0f s) "
                         "acknowledged without notifying", self.fleet, skipped,
                         self.settings.max_age)

    def accept(self, stream: str, entry_id: str, fields: dict[Any, Any]) -> bool:
        """Take an entry in hand: send it to every receiver, or acknowledge it at once when it
        is gone (trimmed), too old, or there is no receiver. False when skipped as too old."""
        key = (stream, entry_id)
        if key in self._held:
            return True
        born_ms = entry_ms(entry_id)
        born = time.time() if born_ms is None else born_ms / 1000
        if not fields or not self.receivers:
            self._release(key)
            return True
        if time.time() - born > self.settings.max_age:
            self.stats.bump("skipped")
            self._release(key)
            return False
        fleet, source = self._sources.get(stream, (self.fleet, stream))
        event = Event.from_entry(fleet, source, entry_id, fields)
        body = encode(event, self.settings.format)
        self._held[key] = len(self.receivers)
        for receiver in self.receivers:
            receiver.put(Delivery(entry_id, event.event, body, born, partial(self._done, key)))
        return True

    def _done(self, key: _Key) -> None:
        left = self._held.get(key)
        if left is None:
            return
        if left <= 1:
            self._release(key)
        else:
            self._held[key] = left - 1

    def _release(self, key: _Key) -> None:
        """Every receiver is done with it: acknowledge it."""
        self._held[key] = 0
        self._to_ack.add(key)
        self._ack_wanted.set()

    # ------------------------------------------------------------------ acknowledging

    async def _ack_loop(self) -> None:
        while True:
            await self._ack_wanted.wait()
            self._ack_wanted.clear()
            while self._to_ack:
                await self._until_done(self._ack_now)

    async def _ack_now(self) -> None:
        batch = list(self._to_ack)
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in batch:
            by_stream.setdefault(stream, []).append(entry_id)
        for stream, ids in by_stream.items():
            await uncancelled(self.redis.xack(stream, self.settings.group, *ids))
            for entry_id in ids:
                self._to_ack.discard((stream, entry_id))
                self._held.pop((stream, entry_id), None)
            self.stats.bump("acked", len(ids))
        self._room.set()

    # ------------------------------------------------------------------ claiming

    async def _claim_loop(self) -> None:
        while True:
            await self._until_done(self.sweep)
            await asyncio.sleep(self.settings.claim_idle / 3)

    async def sweep(self) -> None:
        """Renew the entries in hand; take over those a silent notifier left ``claim_idle``."""
        group = self.settings.group
        held: dict[str, list[str]] = {}
        for s, entry_id in self._held:
            held.setdefault(s, []).append(entry_id)
        for stream in list(self._sources):
            mine = held.get(stream, [])
            for i in range(0, len(mine), 100):
                await uncancelled(self.redis.xclaim(
                    stream, group, self.consumer, 0, list[Any](mine[i:i + 100]), justid=True
                ))
            start = "0-0"
            for _ in range(100):  # bounded: at most 100 pages of `batch` entries per sweep
                if len(self._held) >= self.settings.max_in_flight:
                    break
                try:
                    reply = await uncancelled(self.redis.xautoclaim(
                        stream, group, self.consumer, int(self.settings.claim_idle * 1000),
                        start, count=self.settings.batch,
                    ))
                except ResponseError as exc:
                    if "NOGROUP" in str(exc):
                        break
                    raise
                start = text(reply[0])
                for entry_id, fields in reply[1]:
                    if entry_id is None:
                        continue
                    eid = text(entry_id)
                    if (stream, eid) not in self._held:
                        self.stats.bump("claimed")
                        log.info("fleet %s: took over event %s of a silent notifier",
                                 self.fleet, eid)
                    self.accept(stream, eid, dict(fields or {}))
                if start in ("0-0", "0"):
                    break

    # ------------------------------------------------------------------ Redis down

    async def _until_done(self, call: Callable[[], Awaitable[None]]) -> None:
        """``call()`` again after each Redis failure (backing off), until it succeeds."""
        failures = 0
        while True:
            try:
                await call()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                failures += 1
                await self._redis_failed(exc, failures)
                continue
            return

    async def _redis_failed(self, exc: BaseException, failures: int) -> None:
        if not self._redis_down:
            self._redis_down = True
            log.warning("fleet %s: the notifier cannot reach Redis: %s", self.fleet, exc)
        await asyncio.sleep(min(_RETRY_MAX_S, 0.1 * 2 ** min(failures, 10)))

    def _redis_back(self) -> None:
        if self._redis_down:
            self._redis_down = False
            log.info("fleet %s: the notifier reaches Redis again", self.fleet)


__all__ = ["Notifier", "default_consumer", "encode", "stream_entries"]
