"""The notifier on every fleet of the registry: ``Follower``.

``fleetgate serve`` announces the events of every fleet on its Redis, not only the default
one's. The ``Notifier`` reads the default fleet's audit and events streams with a blocking
``XREADGROUP`` per receiver; a ``Follower`` beside it

* reads the registry (``fleetgate:fleets``, at most ``MAX_LISTED`` fleets, the most recently
  active; no ``SCAN``, no ``KEYS``) every ``registry_interval`` and has the notifier follow
  those fleets' streams (``Notifier.follow``), dropping those no longer listed;
* every ``settings.block`` seconds reads each followed fleet's two streams with one
  ``XREADGROUP`` per receiver without ``BLOCK`` (a fleet's streams share a slot, so this works
  on a cluster too), ``FLEET_READS`` fleets at a time, and hands what it got to that receiver's
  lane (``Lane.take``), which delivers, acknowledges and claims it as it does the default
  fleet's entries; a receiver with ``max_in_flight`` entries in hand is not read for, the
  others are;
* creates the receivers' groups on a fleet's streams the first time it reads them (``XGROUP
  CREATE ... MKSTREAM``, starting ``max_age`` ago), and again when Redis lost them
  (``NOGROUP``), but only for a fleet that has a state (``EXISTS`` of its state hash): a name
  in the registry that no change ever made (a replica may add any) gets no stream and no
  group, and is looked at again next round (counted: ``unstated``).

Cost: one cheap ``XREADGROUP`` per followed fleet and receiver per ``block`` seconds (1,000
fleets at 2 s: 500 commands a second per receiver). A fleet whose streams cannot be read (a
key of the wrong type) is logged once and skipped; Redis unreachable ends the round (logged
once, tried again after a backoff). An error nobody expected (a bug, bytes that are not text)
is logged once with its traceback, counted (``errors``), and the fleet (or the round) skipped:
following goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Final, Protocol

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.fleet.overview import FLEET_READS, MAX_LISTED, read_each
from coordinator.fleet.registry import read_registry
from coordinator.notify.lane import Lane
from coordinator.notify.settings import NotifySettings
from coordinator.notify.streams import Reach, backoff, read_group
from coordinator.notify.webhook import NotifyStats
from replica.contract import Keys
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

REGISTRY_INTERVAL: Final = 10.0
"""Seconds between two reads of the registry (a new fleet is followed within)."""
_UNREACHABLE: Final = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


class Followed(Protocol):
    """What a ``Follower`` needs of its notifier (``coordinator.notify.consumer.Notifier``)."""

    redis: Redis
    fleet: str
    settings: NotifySettings
    consumer: str
    stats: NotifyStats
    reach: Reach
    lanes: list[Lane]

    @property
    def full(self) -> bool: ...

    def follow(self, fleets: Iterable[str]) -> tuple[int, int]: ...


class Follower:
    """Has ``notifier`` follow every fleet of the registry (see the module's doc)."""

    def __init__(
        self,
        notifier: Followed,
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
        """Fleets whose streams have the groups (created by this process, or found)."""
        self._unreadable: set[str] = set()
        self._next_registry = 0.0
        self._down = False
        self.rounds = 0
        """Rounds over the followed fleets completed (for tests)."""

    async def run(self) -> None:
        """Follow until cancelled: whatever goes wrong, logged and counted, never the end."""
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
                await asyncio.sleep(backoff(failures))
                continue
            except Exception as exc:  # a bug: logged once with its traceback, counted, again
                failures += 1
                self._unexpected("round", exc)
                await asyncio.sleep(backoff(failures))
                continue
            failures = 0
            if self._down:
                self._down = False
                log.info("the notifier reads the other fleets' events again (%d fleets)",
                         len(self.fleets))
            await asyncio.sleep(self.notifier.settings.block)

    def _unexpected(self, what: str, exc: BaseException) -> None:
        self.notifier.stats.bump("errors")
        self.notifier.reach.unexpected(f"follower ({what})", exc)

    async def refresh(self) -> None:
        """Read the registry and follow what it lists. Raises redis-py's errors when Redis
        cannot be reached; a registry that cannot be read otherwise keeps the fleets followed
        (logged once, counted)."""
        notifier = self.notifier
        self._next_registry = time.monotonic() + self.registry_interval
        try:
            registry = await read_registry(notifier.redis, self.limit + 1)
        except (RedisError, OSError, TimeoutError):
            self._next_registry = 0.0
            raise
        except Exception as exc:  # e.g. a member that is not text: keep what is followed
            self._unexpected("registry", exc)
            return
        names = [n for n in registry.names[:self.limit] if n != notifier.fleet]
        added, dropped = notifier.follow(names)
        self.fleets = names
        self._grouped &= set(names)
        if added or dropped:
            log.info("fleet %s: the notifier follows %d other fleet(s) (%d new, %d no "
                     "longer listed)", notifier.fleet, len(names), added, dropped)

    async def round(self) -> None:
        """Read the registry when due, then each followed fleet's new entries once. Raises
        redis-py's errors when Redis cannot be reached."""
        notifier = self.notifier
        if time.monotonic() >= self._next_registry:
            await self.refresh()
        down: list[BaseException] = []

        async def one(name: str) -> None:
            if down or notifier.full:
                return
            try:
                await self.read(name)
            except asyncio.CancelledError:
                raise
            except _UNREACHABLE as exc:
                down.append(exc)
            except RedisError as exc:  # this fleet's trouble only
                if name not in self._unreadable:
                    self._unreadable.add(name)
                    log.warning("fleet %s: its events cannot be read, skipped until they can: "
                                "%s", name, exc)
            except Exception as exc:  # a bug: this fleet only, logged once, counted
                self._unexpected(f"fleet {name}", exc)

        await read_each(self.fleets, one, self.concurrency)
        if down:
            raise down[0]
        self.rounds += 1

    async def read(self, name: str) -> int:
        """Hand ``name``'s new entries to each receiver's lane (creating the groups first when
        this process has not seen them, if the fleet has a state); how many were read."""
        notifier = self.notifier
        keys = Keys(name)
        streams = (keys.audit, keys.events)
        if name not in self._grouped:
            if not await uncancelled(notifier.redis.exists(keys.state)):
                notifier.stats.bump("unstated")
                return 0
            for lane in notifier.lanes:
                await lane.ensure_groups(streams)
            self._grouped.add(name)
        read = 0
        for lane in notifier.lanes:
            if lane.full:
                continue
            try:
                reply = await read_group(notifier.redis, lane.group, notifier.consumer, streams,
                                         notifier.settings.batch)
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self._grouped.discard(name)  # the stream or a group is gone: again next round
                continue
            read += lane.take(reply)
        if name in self._unreadable:
            self._unreadable.discard(name)
            log.info("fleet %s: its events can be read again", name)
        return read


__all__ = ["REGISTRY_INTERVAL", "Followed", "Follower"]
