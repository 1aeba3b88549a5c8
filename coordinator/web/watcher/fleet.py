"""One fleet's watch: ``OverdueWatcher``, the checks ``FleetsWatcher`` runs for each fleet.

At each check of its fleet (``step()``) it:

* calls ``Fleet.restore_if_missing()`` every ``restore_interval`` (under the deployment's
  Redis ACL only the coordinator may write the state hash);
* while the pause is overdue, logs one structured WARNING per ``overdue_log_interval``
  (fleet, reason, by, age) and, given ``alerts`` (notifications on), raises the overdue event
  once per version into the fleet's events stream (``coordinator.notify.alerts``);
* audits the start and end of each maintenance window (``coordinator.notify.windows``).

A fleet whose state cannot be read (a hash edited into garbage, a key of the wrong type, a
``NOPERM``) raises ``Unreadable``: logged once, and once more when it reads well again. Redis
unreachable (``UNREACHABLE``) is raised as it is, for the caller to end its pass. Alone (one
fleet), ``start()`` runs the checks in a task of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.durations import format_age
from coordinator.fleet.fleet import Fleet
from coordinator.notify.alerts import Alerts
from coordinator.notify.windows import WindowAudit
from coordinator.render import is_overdue, pause_age_s
from coordinator.settings import CoordinatorSettings
from replica.contract import FleetState, format_time, now_utc
from replica.errors import ContractError
from replica.link.redisio import cancel_bounded

log = logging.getLogger(__name__)

UNREACHABLE: Final = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)
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
        except UNREACHABLE as exc:
            if not self._redis_down:
                self._redis_down = True
                log.warning("fleet %s: the watcher cannot reach Redis: %s", self.fleet.name, exc)
            return
        except Exception as exc:  # never the end of the watch: the next check tries again
            self.mark_unreadable(f"{type(exc).__name__}: {exc}")
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
        except UNREACHABLE:
            raise
        except (ContractError, RedisError) as exc:  # a bad hash, WRONGTYPE, NOPERM...
            self.mark_unreadable(f"{type(exc).__name__}: {exc}")
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

    def mark_unreadable(self, why: str) -> None:
        """The fleet's state could not be read: logged once, skipped until it can."""
        if self.unreadable is None:
            log.warning("fleet %s: the watcher cannot read its state, skipped until it can: %s",
                        self.fleet.name, why[:200])
        self.unreadable = why

    async def _windows(self, state: FleetState, now: datetime) -> None:
        """Audit the window edges that have passed (tried again at the next check)."""
        try:
            await self.windows.check(state, now)
            found = await self.fleet.schedules()
            if found.schedules:
                await self.windows.check_schedules(found.schedules, state.version, now)
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


__all__ = ["UNREACHABLE", "OverdueWatcher", "Unreadable"]
