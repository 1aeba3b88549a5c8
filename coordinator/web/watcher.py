"""What ``fleetgate serve`` watches in the background, for every fleet: ``FleetsWatcher``.

For each fleet of the registry (``fleetgate:fleets``, at most ``MAX_LISTED``, the most
recently active) and the default one, an ``OverdueWatcher`` keeps what it saw of that fleet:

* while the pause is overdue it logs one structured WARNING per ``overdue_log_interval``
  (fleet, reason, by, age) and, given ``alerts`` (notifications on), raises the overdue event
  once per version into the fleet's events stream (``coordinator.notify.alerts``);
* every ``restore_interval`` it calls ``Fleet.restore_if_missing()`` (under the deployment's
  Redis ACL only the coordinator may write the state hash);
* it audits the start and end of each maintenance window (``coordinator.notify.windows``).

``FleetsWatcher`` is one task: every tick (the shortest of those intervals, at most 5 s) it
checks the fleets, at most ``FLEET_READS`` at once (``coordinator.fleet.overview.read_each``),
and reads the registry again every ``registry_interval`` (no ``SCAN``, no ``KEYS``). Each
fleet's check stands alone: a fleet whose state cannot be read (a hash edited into garbage, a
key of the wrong type) is logged once, skipped, and logged again when it reads well; the others
go on. Redis unreachable ends the pass (one line, and one when it answers again). Any other
exception of a pass (a bug, a reply it did not expect) is logged once per kind with its
traceback, counted (``failures``, ``fleetgate_watcher_failures_total``) and the next pass runs:
the watcher never dies. At each read of the registry it also prunes ``fleetgate:fleets``
(``coordinator.fleet.registry.prune``: members that are not fleet names, and the oldest past its
bound), counted in ``registry_dropped``, and notes in ``fleetgate:fleets:changed`` each fleet it
found with a state that key lacks (a state written before it existed), so that no flood of names
hides it. Two servers
raise each alert and write each window edge once (the scripts on the fleet's ``alerted`` hash).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.durations import format_age
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import FLEET_READS, MAX_LISTED, read_each
from coordinator.fleet.registry import Registry, note_states, prune, read_registry
from coordinator.notify.alerts import Alerts
from coordinator.notify.windows import WindowAudit
from coordinator.render import is_overdue, pause_age_s
from coordinator.settings import CoordinatorSettings
from replica.contract import FleetState, format_time, now_utc
from replica.control.redisio import cancel_bounded
from replica.errors import ContractError

log = logging.getLogger(__name__)

REGISTRY_INTERVAL: Final = 10.0
"""Seconds between two reads of the registry by the watcher (a new fleet is watched within)."""
_UNREACHABLE: Final = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)
"""Redis gone: the pass ends. Any other ``RedisError`` (``WRONGTYPE``, ``NOPERM``) is the
fleet's own trouble."""


class Unreadable(Exception):
    """A fleet's check failed for a reason of that fleet's (its state cannot be read)."""


class OverdueWatcher:
    """One fleet's watch: logs its overdue pauses, restores its state hash when Redis lost it
    and audits its maintenance windows. ``start()`` runs it alone in a task (one fleet);
    ``FleetsWatcher`` calls ``step()`` of one per fleet instead."""

    def __init__(
        self, fleet: Fleet, settings: CoordinatorSettings, alerts: Alerts | None = None
    ) -> None:
        self.fleet = fleet
        self.alerts = alerts
        self.windows = WindowAudit(fleet.redis, fleet.name)
        """Writes each maintenance window's start and end into the audit trail, once."""
        self._alerted_version: int | None = None
        self.max_pause = settings.max_pause
        self.log_interval = settings.overdue_log_interval
        self.restore_interval = settings.restore_interval
        self.tick = min(self.log_interval, self.restore_interval, 5.0)
        self._task: asyncio.Task[None] | None = None
        self._last_logged: float | None = None
        self._overdue_version: int | None = None
        self._next_restore = 0.0
        self._redis_down = False
        self.unreadable: str | None = None
        """Why the fleet's state could not be read at the last check (None: it could)."""
        self.version = 0
        """The state's version at the last check that read it (0: no state)."""
        self.warnings = 0
        """Overdue WARNING lines logged so far."""
        self.restores = 0
        """State hashes restored so far."""

    async def start(self) -> OverdueWatcher:
        """Run a first check, then keep watching in a task. Idempotent."""
        if self._task is None:
            await self.check()
            self._task = asyncio.create_task(self._loop(), name=f"fleetgate-watcher-{self.fleet.name}")
        return self

    async def stop(self) -> None:
        """Idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            await cancel_bounded(task)  # a cancellation of stop() itself goes through

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            await self.check()

    async def check(self) -> None:
        """One pass; Redis unreachable or the state unreadable is logged (once), not raised."""
        try:
            await self.step()
        except asyncio.CancelledError:
            raise
        except Unreadable:
            return
        except _UNREACHABLE as exc:
            if not self._redis_down:
                self._redis_down = True
                log.warning("fleet %s: the watcher cannot reach Redis: %s", self.fleet.name, exc)
            return
        except Exception as exc:  # never the end of the watch: the next check tries again
            self._unreadable(f"{type(exc).__name__}: {exc}")
            return
        if self._redis_down:
            self._redis_down = False
            log.info("fleet %s: the watcher reaches Redis again", self.fleet.name)

    async def step(self) -> None:
        """One pass: restore the state if it is due and missing, log if overdue, raise the
        overdue alert, audit the window edges passed. Raises ``Unreadable`` (logged once) when
        the fleet's state cannot be read, and Redis's errors when Redis cannot be reached."""
        try:
            if time.monotonic() >= self._next_restore:
                self._next_restore = time.monotonic() + self.restore_interval
                if await self.fleet.restore_if_missing():
                    self.restores += 1
                    log.warning("fleet %s: the state hash was missing and was restored", self.fleet.name)
            state = await self.fleet.state()
            self.version = state.version
        except _UNREACHABLE:
            raise
        except (ContractError, RedisError) as exc:  # a bad hash, WRONGTYPE, NOPERM...
            self._unreadable(f"{type(exc).__name__}: {exc}")
            raise Unreadable(self.fleet.name) from exc
        if self.unreadable is not None:
            self.unreadable = None
            log.info("fleet %s: the watcher reads its state again", self.fleet.name)
        now = now_utc()
        self.observe(state, now)
        await self._windows(state, now)
        if self.alerts is not None and self._alerted_version != state.version and \
                is_overdue(state, now, self.max_pause):
            await self._alert(self.alerts, state, now)

    def _unreadable(self, why: str) -> None:
        if self.unreadable is None:
            log.warning("fleet %s: the watcher cannot read its state, skipped until it can: %s",
                        self.fleet.name, why[:200])
        self.unreadable = why

    async def _windows(self, state: FleetState, now: datetime) -> None:
        """Audit the window edges that have passed (tried again at the next check)."""
        try:
            await self.windows.check(state, now)
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError) as exc:
            log.warning("fleet %s: a window's start or end could not be audited: %s",
                        state.fleet, exc)

    async def _alert(self, alerts: Alerts, state: FleetState, now: datetime) -> None:
        """Raise the overdue alert of this version (once per fleet: see ``Alerts``)."""
        try:
            if await alerts.overdue(state, now, pause_age_s(state, now) or 0.0, self.max_pause):
                log.info("fleet %s: overdue pause (version %d) raised for notification",
                         state.fleet, state.version)
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError) as exc:  # tried again at the next check
            log.warning("fleet %s: the overdue alert could not be raised: %s", state.fleet, exc)
            return
        self._alerted_version = state.version

    def observe(self, state: FleetState, now: datetime) -> None:
        """Log the state if it is overdue and the last line is ``log_interval`` old."""
        if not is_overdue(state, now, self.max_pause):
            if self._overdue_version is not None:
                log.info(
                    "fleet %s: pause no longer overdue (version %d, paused=%s)",
                    state.fleet, state.version, state.effectively_paused(now),
                )
                self._overdue_version = None
                self._last_logged = None
            return
        mono = time.monotonic()
        if self._last_logged is not None and mono - self._last_logged < self.log_interval:
            return
        self._last_logged = mono
        self._overdue_version = state.version
        self.warnings += 1
        age = pause_age_s(state, now) or 0.0
        limit = (
            f"expected_until={format_time(state.expected_until)}"
            if state.expected_until is not None
            else f"max_pause={format_age(self.max_pause)}"
        )
        log.warning(
            "fleet pause overdue: fleet=%s reason=%r by=%s age=%s age_s=%d since=%s %s",
            state.fleet, state.reason, state.by, format_age(age), int(age),
            format_time(state.since), limit,
            extra={
                "fleet": state.fleet,
                "reason": state.reason,
                "by": state.by,
                "age_s": round(age, 3),
                "since": format_time(state.since),
                "expected_until": format_time(state.expected_until) or None,
                "event": "pause_overdue",
            },
        )


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
        except _UNREACHABLE:
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
            except _UNREACHABLE:
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
            except _UNREACHABLE as exc:
                down.append(exc)
            except Exception as exc:  # one fleet's trouble never stops the others
                watcher._unreadable(f"{type(exc).__name__}: {exc}")

        await read_each(list(self.watchers.values()), one, self.concurrency)
        if down:
            raise down[0]


__all__ = ["REGISTRY_INTERVAL", "FleetsWatcher", "OverdueWatcher", "Unreadable"]
