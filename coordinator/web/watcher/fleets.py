"""The loop over every fleet that ``fleetgate serve`` watches in the background: ``FleetsWatcher``.

It watches the default fleet and every fleet of the registry (``fleetgate:fleets``, at most
``MAX_LISTED``, the most recently active), each with an ``OverdueWatcher``
(``coordinator.web.watcher.fleet``: overdue pauses, lost state hashes, window edges).

``FleetsWatcher`` is one task: every tick (the shortest of the per-fleet intervals, at most
5 s) it checks the fleets, at most ``FLEET_READS`` at once
(``coordinator.fleet.overview.read_each``), and reads the registry again every
``registry_interval`` (no ``SCAN``, no ``KEYS``). Each fleet's check stands alone: a fleet
whose state cannot be read is logged once, skipped, and logged again when it reads well; the
others go on. Redis unreachable ends the pass (one line, and one when it answers again). Any
other exception of a pass (a bug, a reply it did not expect) is logged once per kind with its
traceback, counted (``failures``, ``fleetgate_watcher_failures_total``) and the next pass
runs: the watcher never dies. At each read of the registry it also prunes ``fleetgate:fleets``
(``coordinator.fleet.registry.prune``: members that are not fleet names, and the oldest past
its bound), counted in ``registry_dropped``, and notes in ``fleetgate:fleets:changed`` each
fleet it found with a state that key lacks (a state written before it existed), so that no
flood of names hides it. Two servers raise each alert and write each window edge once (the
scripts on the fleet's ``alerted`` hash).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from redis.exceptions import RedisError

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import FLEET_READS, MAX_LISTED, read_each
from coordinator.fleet.registry import Registry, note_states, prune, read_registry
from coordinator.notify.alerts import Alerts
from coordinator.settings import CoordinatorSettings
from coordinator.web.watcher.fleet import UNREACHABLE, OverdueWatcher, Unreadable
from replica.link.redisio import cancel_bounded

log = logging.getLogger(__name__)

REGISTRY_INTERVAL: Final = 10.0
"""Seconds between two reads of the registry by the watcher (a new fleet is watched within)."""


class FleetsWatcher:
    """Watches the default fleet and every fleet of the registry (see the module's doc), in
    one task, until stopped. ``fleet(name)`` makes the ``Fleet`` of a name (the API's
    ``FleetCache.get``); ``notify`` raises overdue alerts for the notifier."""

    def __init__(
        self,
        default: Fleet,
        settings: CoordinatorSettings,
        fleet: Callable[[str], Fleet],
        *,
        notify: bool = False,
        registry_interval: float = REGISTRY_INTERVAL,
        limit: int = MAX_LISTED,
        concurrency: int = FLEET_READS,
    ) -> None:
        self.default = default
        self.settings = settings
        self._make = fleet
        self.notify = notify
        self.registry_interval = registry_interval
        self.limit = limit
        self.concurrency = concurrency
        self.watchers: dict[str, OverdueWatcher] = {}
        """One per fleet watched, the default fleet's first."""
        self._watch(default)
        self.tick = self.watchers[default.name].tick
        self._listed: list[str] = []
        self._changed: set[str] | None = None
        """The fleets of ``fleetgate:fleets:changed`` at the last registry read (None: not read)."""
        self._next_registry = 0.0
        self._task: asyncio.Task[None] | None = None
        self._redis_down = False
        self.passes = 0
        """Passes over the fleets completed (for tests)."""
        self.failures = 0
        """Passes ended by an exception the watcher did not expect (each kind logged once)."""
        self.registry_dropped = 0
        """Members removed from ``fleetgate:fleets`` by ``prune`` (invalid, or past its bound)."""
        self._failed: set[str] = set()

    @property
    def warnings(self) -> int:
        """Overdue WARNING lines logged so far, every fleet's."""
        return sum(w.warnings for w in self.watchers.values())

    @property
    def restores(self) -> int:
        """State hashes restored so far, every fleet's."""
        return sum(w.restores for w in self.watchers.values())

    async def start(self) -> FleetsWatcher:
        """Run a first pass, then keep watching in a task. Idempotent."""
        if self._task is None:
            await self.check()
            self._task = asyncio.create_task(self._loop(), name="fleetgate-watcher")
        return self

    async def stop(self) -> None:
        """Idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            await cancel_bounded(task)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            await self.check()

    def _watch(self, fleet: Fleet) -> OverdueWatcher:
        watcher = self.watchers.get(fleet.name)
        if watcher is None:
            alerts = Alerts(fleet.redis, fleet.name) if self.notify else None
            watcher = self.watchers[fleet.name] = OverdueWatcher(fleet, self.settings, alerts)
        return watcher

    async def check(self) -> None:
        """One pass over the fleets (the registry read again when due). Never raises but a
        cancellation: a Redis error is logged once, any other exception logged once per kind
        with its traceback and counted (``failures``), and the next pass tries again."""
        try:
            if time.monotonic() >= self._next_registry:
                registry = await read_registry(self.default.redis, self.limit)
                self._listed = registry.names[:self.limit]
                self._changed = set(registry.changed)
                self._next_registry = time.monotonic() + self.registry_interval
                self._follow(self._listed)
                await self._prune(registry)
            await self._pass()
            await self._note_states()
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError, TimeoutError) as exc:
            if not self._redis_down:
                self._redis_down = True
                log.warning("the watcher cannot reach Redis: %s", exc)
            return
        except Exception as exc:  # a bug or a reply not expected: never the end of the watch
            self.failures += 1
            kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
            if kind not in self._failed:
                self._failed.add(kind)
                log.exception("the watcher's pass failed (it goes on; logged once per kind)")
            else:
                log.debug("the watcher's pass failed again: %s", exc)
            return
        if self._redis_down:
            self._redis_down = False
            log.info("the watcher reaches Redis again (%d fleets)", len(self.watchers))
        self.passes += 1

    async def _prune(self, registry: Registry) -> None:
        """Bound ``fleetgate:fleets`` (``registry.prune``); a failure is logged, not raised."""
        try:
            self.registry_dropped += await prune(self.default.redis, registry)
        except asyncio.CancelledError:
            raise
        except UNREACHABLE:
            raise
        except RedisError as exc:  # NOPERM under an older ACL: listing still works
            log.debug("the registry could not be pruned: %s", exc)

    async def _note_states(self) -> None:
        """Note the fleets seen with a state that ``fleetgate:fleets:changed`` lacks (a state
        written before that key existed): they are never crowded out of the listings."""
        if self._changed is None:
            return
        missing = [name for name, w in self.watchers.items()
                   if w.version > 0 and w.unreadable is None and name not in self._changed]
        if missing:
            try:
                noted = await note_states(self.default.redis, missing)
            except UNREACHABLE:
                raise
            except RedisError as exc:  # NOPERM under an older ACL: tried at the next read
                log.debug("fleets with a state could not be noted: %s", exc)
                return
            self._changed.update(missing)
            if noted:
                log.info("noted %d fleet(s) with a state in the registry of changed fleets",
                         noted)

    def _follow(self, names: list[str]) -> None:
        """Watch the fleets listed (and the default one); forget the others."""
        wanted = {self.default.name, *names}
        gone = [name for name in self.watchers if name not in wanted]
        for name in gone:
            del self.watchers[name]
        added = 0
        for name in names:
            if name not in self.watchers:
                self._watch(self._make(name))
                added += 1
        if added or gone:
            log.info("the watcher watches %d fleet(s) (%d new, %d no longer listed)",
                     len(self.watchers), added, len(gone))

    async def _pass(self) -> None:
        """Every fleet's step, ``concurrency`` at once; the first fleet that finds Redis gone
        ends the pass (the others still to start are skipped)."""
        down: list[BaseException] = []

        async def one(watcher: OverdueWatcher) -> None:
            if down:
                return
            try:
                await watcher.step()
            except Unreadable:
                pass
            except UNREACHABLE as exc:
                down.append(exc)
            except Exception as exc:  # one fleet's trouble never stops the others
                watcher.mark_unreadable(f"{type(exc).__name__}: {exc}")

        await read_each(list(self.watchers.values()), one, self.concurrency)
        if down:
            raise down[0]


__all__ = ["REGISTRY_INTERVAL", "FleetsWatcher"]
