"""One receiver's way through the streams: ``Lane``.

Each receiver has a consumer group of its own on every stream the notifier reads,
``fleetgate-notify:<id>`` (``id``: the first 12 hex digits of the SHA-256 of its URL; the URL,
whose path may be a chat webhook's secret, is not in Redis), and every ``fleetgate serve`` reads
it as a consumer of its own name. So each receiver has its own progress, kept by Redis: a
receiver that is down holds back its own entries and nobody else's, and two servers still
announce each event once per receiver.

A lane holds at most ``max_in_flight`` entries in hand (delivering, retrying, or waiting for
their ``XACK``), and reads no more until some are done: a receiver that stays down costs its own
backlog (up to ``max_in_flight`` entries in memory, the rest waiting in Redis, unread by its
group) and no other receiver's. An entry is acknowledged in the receiver's group once the
receiver accepted it or gave it up. An entry older than ``max_age`` when the lane reads it is
acknowledged without being sent, and counted (``skipped``): the age is that receiver's, so a
receiver that came back within ``max_age`` catches up with everything.

A server that dies with entries in hand leaves them pending in the receiver's group; another
server claims them (``XAUTOCLAIM``) once they sat ``claim_idle`` unrenewed, and each server
renews the entries it holds (``XCLAIM ... JUSTID``) every third of ``claim_idle``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from coordinator.notify.events import Event, entry_ms
from coordinator.notify.settings import NotifySettings
from coordinator.notify.slack import chat_body
from coordinator.notify.streams import Reach, autoclaim, decode_fields, read_group, stream_entries
from coordinator.notify.webhook import Delivery, NotifyStats, Receiver
from replica.contract import text
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

_Key = tuple[str, str]
"""(stream, entry id)."""


def group_for(base: str, url: str) -> str:
    """The consumer group of the receiver at ``url``: ``<base>:<12 hex digits>``."""
    return f"{base}:{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def _id(entry_id: str) -> tuple[int, int] | None:
    """A stream entry id as (ms, seq), or None."""
    ms, _, seq = entry_id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return None


def encode(event: Event, fmt: str) -> bytes:
    """The exact body bytes of a notification (what the signature covers)."""
    body = chat_body(event, fmt) if fmt != "json" else event.body()
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class Lane:
    """One receiver's group on the streams: reading, acknowledging and claiming its entries."""

    def __init__(
        self,
        redis: Redis,
        receiver: Receiver,
        settings: NotifySettings,
        consumer: str,
        sources: Mapping[str, tuple[str, str]],
        stats: NotifyStats,
        reach: Reach,
    ) -> None:
        self.redis = redis
        self.receiver = receiver
        self.settings = settings
        self.consumer = consumer
        self.group = group_for(settings.group, receiver.url)
        self.sources = sources
        """stream -> (its fleet, audit or events): shared with the notifier."""
        self.stats = stats
        self.reach = reach
        self._held: dict[_Key, bool] = {}
        """Entries in hand -> done (True: waiting for their XACK)."""
        self._to_ack: set[_Key] = set()
        self._ack_wanted = asyncio.Event()
        self._room = asyncio.Event()

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def full(self) -> bool:
        """As many entries in hand as ``max_in_flight``: read no more for now."""
        return len(self._held) >= self.settings.max_in_flight

    async def ensure_groups(self, streams: Iterable[str], mkstream: bool = True) -> None:
        """Create this receiver's group on ``streams``, starting ``max_age`` ago; a group that
        exists is left as it is."""
        for stream in streams:
            start = await self._start(stream)
            try:
                await uncancelled(self.redis.xgroup_create(
                    stream, self.group, id=start, mkstream=mkstream
                ))
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _start(self, stream: str) -> str:
        """Where a new group starts reading: ``max_age`` ago; or, on a stream that the one
        group of the previous release (``fleetgate-notify``, every receiver together) read,
        where that group stood (just before its oldest pending entry), if later: an upgrade
        announces nothing twice, and what was in flight is still sent."""
        floor = (int((time.time() - self.settings.max_age) * 1000), 0)
        try:
            groups = await uncancelled(self.redis.xinfo_groups(stream))
        except ResponseError:  # no stream yet
            groups = []
        for group in groups:
            if text(group.get("name")) != self.settings.group:
                continue
            at = _id(text(group.get("last-delivered-id")))
            if group.get("pending"):
                oldest = (await uncancelled(self.redis.xpending(stream, self.settings.group)))
                first = _id(text(oldest.get("min")))
                if first is not None and first > (0, 0):
                    ms, seq = first
                    at = (ms, seq - 1) if seq else (ms - 1, 2**64 - 1)
            if at is not None and at > floor:
                floor = at
        return f"{floor[0]}-{floor[1]}"

    # ------------------------------------------------------------------ reading

    async def read_loop(self, streams: tuple[str, ...]) -> None:
        """Read ``streams`` (one slot) with a blocking read until cancelled."""
        failures = 0
        groups = False
        while True:
            if self.full:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                if not groups:
                    await self.ensure_groups(streams)
                    groups = True
                reply = await read_group(self.redis, self.group, self.consumer, streams,
                                         self.settings.batch, self.settings.block)
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:
                if "NOGROUP" in str(exc):  # the stream or the group is gone (Redis emptied)
                    groups = False
                    continue
                failures += 1
                await self.reach.failed(exc, failures)
                continue
            except (RedisError, OSError) as exc:
                failures += 1
                await self.reach.failed(exc, failures)
                continue
            except Exception as exc:  # a bug: logged once, counted, tried again
                failures += 1
                self._unexpected("read", exc)
                await asyncio.sleep(1.0)
                continue
            failures = 0
            self.reach.back()
            self.take(reply)

    def take(self, reply: Any) -> int:
        """Accept the entries of an XREADGROUP reply; how many were read."""
        read = skipped = 0
        for stream, entry_id, fields in stream_entries(reply):
            read += 1
            skipped += not self.accept(stream, entry_id, fields)
        if skipped:
            log.info("webhook %s: %d event(s) older than FLEETGATE_WEBHOOK_MAX_AGE (%.0f s) "
                     "acknowledged without notifying", self.receiver.label, skipped,
                     self.settings.max_age)
        return read

    def accept(self, stream: str, entry_id: str, raw: Any) -> bool:
        """Take an entry in hand: send it to the receiver, or acknowledge it at once when it is
        gone (trimmed), garbage, or too old. False when skipped as too old."""
        key = (stream, entry_id)
        if key in self._held:
            return True
        fields = decode_fields(raw)
        if fields is None:
            self._garbage(key, "its fields are not UTF-8")
            return True
        if not fields:
            self._release(key)
            return True
        born_ms = entry_ms(entry_id)
        born = time.time() if born_ms is None else born_ms / 1000
        if time.time() - born > self.settings.max_age:
            self.stats.bump("skipped")
            self._release(key)
            return False
        fleet, source = self.sources.get(stream, ("?", stream))
        try:
            event = Event.from_entry(fleet, source, entry_id, fields)
            body = encode(event, self.settings.format)
        except Exception as exc:  # a bug, or an entry no sentence fits: this entry only
            self._unexpected("encode", exc)
            self._garbage(key, f"{type(exc).__name__}: {exc}")
            return True
        self._held[key] = False
        self.receiver.put(Delivery(entry_id, event.event, body, born, partial(self._release, key),
                                   webhook_id=f"{fleet}:{source}:{entry_id}"))
        return True

    def _garbage(self, key: _Key, why: str) -> None:
        self.stats.bump("garbage")
        log.warning("webhook %s: entry %s of %s skipped and acknowledged: %s",
                    self.receiver.label, key[1], key[0], why)
        self._release(key)

    def _unexpected(self, what: str, exc: BaseException) -> None:
        self.stats.bump("errors")
        self.reach.unexpected(f"{what} ({self.receiver.label})", exc)

    def _release(self, key: _Key) -> None:
        """The receiver is done with it: acknowledge it."""
        self._held[key] = True
        self._to_ack.add(key)
        self._ack_wanted.set()

    # ------------------------------------------------------------------ acknowledging

    async def ack_loop(self) -> None:
        while True:
            await self._ack_wanted.wait()
            self._ack_wanted.clear()
            while self._to_ack:
                await self._until_done(self.ack_now, "acknowledge")

    async def ack_now(self) -> None:
        batch = list(self._to_ack)
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in batch:
            by_stream.setdefault(stream, []).append(entry_id)
        for stream, ids in by_stream.items():
            await uncancelled(self.redis.xack(stream, self.group, *ids))
            for entry_id in ids:
                self._to_ack.discard((stream, entry_id))
                self._held.pop((stream, entry_id), None)
            self.stats.bump("acked", len(ids))
        self._room.set()

    async def final_ack(self) -> None:
        """At stop: acknowledge what is done, for at most 2 s."""
        if self._to_ack:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self.ack_now()

    # ------------------------------------------------------------------ claiming

    async def claim_loop(self) -> None:
        while True:
            await self._until_done(self.sweep, "claim")
            await asyncio.sleep(self.settings.claim_idle / 3)

    async def sweep(self) -> None:
        """Renew the entries in hand; take over those a silent notifier left ``claim_idle``."""
        held: dict[str, list[str]] = {}
        for s, entry_id in self._held:
            held.setdefault(s, []).append(entry_id)
        for stream in list(self.sources):
            mine = held.get(stream, [])
            for i in range(0, len(mine), 100):
                await uncancelled(self.redis.xclaim(
                    stream, self.group, self.consumer, 0, list[Any](mine[i:i + 100]),
                    justid=True,
                ))
            start = "0-0"
            for _ in range(100):  # bounded: at most 100 pages of `batch` entries per sweep
                if self.full:
                    break
                try:
                    start, entries = await autoclaim(
                        self.redis, stream, self.group, self.consumer, self.settings.claim_idle,
                        start, self.settings.batch,
                    )
                except ResponseError as exc:
                    if "NOGROUP" in str(exc):
                        break
                    raise
                for eid, fields in entries:
                    if (stream, eid) not in self._held:
                        self.stats.bump("claimed")
                        log.info("webhook %s: took over event %s of a silent notifier",
                                 self.receiver.label, eid)
                    self.accept(stream, eid, fields)
                if start in ("0-0", "0"):
                    break

    async def _until_done(self, call: Callable[[], Awaitable[None]], what: str) -> None:
        """``call()`` again after each failure (backing off), until it succeeds."""
        failures = 0
        while True:
            try:
                await call()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                failures += 1
                await self.reach.failed(exc, failures)
                continue
            except Exception as exc:  # a bug: logged once, counted, tried again
                failures += 1
                self._unexpected(what, exc)
                await asyncio.sleep(1.0)
                continue
            return


__all__ = ["Lane", "encode", "group_for"]
