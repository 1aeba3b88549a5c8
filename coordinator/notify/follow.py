"""The notifier on every fleet of the registry: ``Follower``.

``fleetgate serve`` announces the events of every fleet on its Redis, not only the default
one's. The ``Notifier`` reads the default fleet's audit and events streams with a blocking
``XREADGROUP``; a ``Follower`` beside it

* reads the registry (``fleetgate:fleets``, at most ``MAX_LISTED`` fleets, the most recently
  active; no ``SCAN``, no ``KEYS``) every ``registry_interval`` and has the notifier follow
  those fleets' streams (``Notifier.follow``), dropping those no longer listed;
* every ``settings.block`` seconds reads each followed fleet's two streams with one
  ``XREADGROUP`` without ``BLOCK`` (one command per fleet: a fleet's streams share a slot, so
  this works on a cluster too), ``FLEET_READS`` fleets at a time, and hands what it got to the
  notifier (``Notifier.accept``), which delivers, acknowledges and claims it as it does the
  default fleet's entries;
* creates the consumer group on a fleet's streams the first time it reads them (``XGROUP
  CREATE ... MKSTREAM``, starting ``max_age`` ago), and again when Redis lost it (``NOGROUP``).

Cost: one cheap ``XREADGROUP`` per followed fleet per ``block`` seconds (1,000 fleets at 2 s:
500 commands a second). A fleet whose streams cannot be read (a key of the wrong type) is logged
once and skipped; Redis unreachable ends the round (logged once, tried again after a backoff).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.fleet.overview import FLEET_READS, MAX_LISTED, read_each
from coordinator.fleet.registry import read_registry
from replica.contract import Keys, text
from replica.control.redisio import uncancelled

if TYPE_CHECKING:
    from coordinator.notify.consumer import Notifier

log = logging.getLogger(__name__)

REGISTRY_INTERVAL: Final = 10.0
"""Seconds between two reads of the registry (a new fleet is followed within)."""
_UNREACHABLE: Final = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


def stream_entries(reply: Any) -> Iterator[tuple[str, str, dict[Any, Any]]]:
    """(stream, entry id, fields) of an XREADGROUP reply, RESP2 or RESP3 (redis-py shapes)."""
    pairs = reply.items() if isinstance(reply, dict) else (reply or [])
    for stream, entries in pairs:
        if entries and isinstance(entries[0], list):  # RESP3: one list in a list
            entries = [e for part in entries for e in part]
        for entry_id, fields in entries or []:
            if entry_id is not None:
                yield text(stream), text(entry_id), dict(fields or {})


class Follower:
    """Has ``notifier`` follow every fleet of the registry (see the module's doc)."""

    def __init__(
        self,
        notifier: Notifier,
        *,
        registry_interval: float = REGISTRY_INTERVAL,
        limit: int = MAX_LISTED,
        concurrency: int = FLEET_READS,
    ) -> None:
        self.notifier = notifier
        self.registry_interval = registry_interval
        self.limit = limit
        self.concurrency = concurrency
        self.fleets: list[str] = []
        """The fleets followed besides the notifier's own, newest activity first."""
        self._grouped: set[str] = set()
        """Fleets whose streams have the group (created by this process, or found)."""
        self._unreadable: set[str] = set()
        self._next_registry = 0.0
        self._down = False
        self.rounds = 0
        """Rounds over the followed fleets completed (for tests)."""

    async def run(self) -> None:
        """Follow until cancelled."""
        failures = 0
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as exc:
                failures += 1
                if not self._down:
                    self._down = True
                    log.warning("the notifier cannot read the other fleets' events: %s", exc)
                await asyncio.sleep(min(5.0, 0.1 * 2 ** min(failures, 10)))
                continue
            failures = 0
            if self._down:
                self._down = False
                log.info("the notifier reads the other fleets' events again (%d fleets)",
                         len(self.fleets))
            await asyncio.sleep(self.notifier.settings.block)

    async def round(self) -> None:
        """Read the registry when due, then each followed fleet's new entries once. Raises
        redis-py's errors when Redis cannot be reached."""
        notifier = self.notifier
        if time.monotonic() >= self._next_registry:
            registry = await read_registry(notifier.redis, self.limit + 1)
            names = [n for n in registry.names[:self.limit] if n != notifier.fleet]
            self._next_registry = time.monotonic() + self.registry_interval
            added, dropped = notifier.follow(names)
            self.fleets = names
            self._grouped &= set(names)
            if added or dropped:
                log.info("fleet %s: the notifier follows %d other fleet(s) (%d new, %d no "
                         "longer listed)", notifier.fleet, len(names), added, dropped)
        down: list[BaseException] = []

        async def one(name: str) -> None:
            if down or notifier.full:
                return
            try:
                await self.read(name)
            except _UNREACHABLE as exc:
                down.append(exc)
            except RedisError as exc:  # this fleet's trouble only
                if name not in self._unreadable:
                    self._unreadable.add(name)
                    log.warning("fleet %s: its events cannot be read, skipped until they can: "
                                "%s", name, exc)

        await read_each(self.fleets, one, self.concurrency)
        if down:
            raise down[0]
        self.rounds += 1

    async def read(self, name: str) -> int:
        """Hand ``name``'s new entries to the notifier (creating the group first when this
        process has not seen it); how many were read."""
        notifier = self.notifier
        keys = Keys(name)
        streams = (keys.audit, keys.events)
        if name not in self._grouped:
            await notifier.ensure_groups(streams)
            self._grouped.add(name)
        try:
            reply = await uncancelled(notifier.redis.xreadgroup(
                notifier.settings.group, notifier.consumer, dict.fromkeys(streams, ">"),
                count=notifier.settings.batch,
            ))
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._grouped.discard(name)  # the stream or the group is gone: again next round
            return 0
        if name in self._unreadable:
            self._unreadable.discard(name)
            log.info("fleet %s: its events can be read again", name)
        read = skipped = 0
        for stream, entry_id, fields in stream_entries(reply):
            read += 1
            skipped += not notifier.accept(stream, entry_id, fields)
        if skipped:
            log.info("fleet %s: %d event(s) older than FLEETGATE_WEBHOOK_MAX_AGE acknowledged "
                     "without notifying", name, skipped)
        return read


__all__ = ["REGISTRY_INTERVAL", "Follower", "stream_entries"]
