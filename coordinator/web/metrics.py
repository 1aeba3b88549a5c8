"""Forgotten pauses: the fleet's metrics, read from Redis at scrape time, and the overdue watcher.

Metrics (every fleet of the registry ``fleetgate:fleets`` and the default one, at most
``MAX_LISTED``; every series carries ``fleet``)::

    fleetgate_fleet_paused{fleet,reason}        1 while the fleet is paused (reason "" when not)
    fleetgate_fleet_pause_age_seconds{fleet}    how long the current pause has lasted (0 running)
    fleetgate_fleet_pause_overdue{fleet}        1 past expected_until, or past FLEETGATE_MAX_PAUSE
                                                when the pause was given no window
    fleetgate_fleet_replicas{fleet,state}       replicas by state: running, paused, quiet, stale
    fleetgate_fleet_unacknowledged{fleet}       live replicas behind the fleet's current version
    fleetgate_fleet_state_version{fleet}        the state's version
    fleetgate_fleet_in_flight{fleet}            items in flight on live replicas
    fleetgate_fleet_queued{fleet}               items queued on live replicas
    fleetgate_fleet_replicas_unreadable{fleet}  entries of the replicas set (or their records)
                                                that cannot be read: skipped by every reader
    fleetgate_webhook_deliveries_total{fleet}   notifications a receiver accepted (this process)
    fleetgate_webhook_failures_total{fleet}     failed attempts to deliver one (each retry counts)
    fleetgate_webhook_given_up_total{fleet}     notifications given up after FLEETGATE_WEBHOOK_MAX_AGE
    fleetgate_webhook_skipped_total{fleet}      events already too old when read, not sent
    fleetgate_webhook_pending{fleet}            events in hand: being delivered or retried

``render_fleets`` reads each fleet through the coordinator's snapshot cache
(``coordinator.fleet.snapshots``: the records at most once per ``FLEETGATE_REFRESH_INTERVAL``
however many scrapes, dashboards and API clients ask, and again at once after a change) and
fills a fresh ``CollectorRegistry``. The webhook counters are the notifier's, which runs
for the default fleet. ``OverdueWatcher`` runs in ``fleetgate serve``:
while the pause is overdue it logs one structured WARNING per ``overdue_log_interval`` (fleet,
reason, by, age), and every ``restore_interval`` it calls ``Fleet.restore_if_missing()`` (under
the deployment's Redis ACL only the coordinator may write the state hash). Given ``alerts``
(when notifications are on), it also raises each overdue pause once into the events stream,
for the notifier to announce.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import datetime

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from redis.exceptions import RedisError

from coordinator.durations import format_age
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.snapshots import Snapshots
from coordinator.fleet.summary import FleetSummary
from coordinator.notify.alerts import Alerts
from coordinator.notify.consumer import Notifier
from coordinator.notify.windows import WindowAudit
from coordinator.render import REPLICA_STATES, is_overdue, pause_age_s
from coordinator.settings import CoordinatorSettings
from replica.contract import FleetState, format_time, now_utc
from replica.control.redisio import cancel_bounded

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def render_metrics(fleet: Fleet, max_pause: float, notifier: Notifier | None = None) -> bytes:
    """One fleet's metrics in the Prometheus text format, read now (reads Redis; raises
    ``RedisError``), with the notifier's counters when it runs."""
    return await render_fleets(Snapshots(0.0), [fleet], max_pause, notifier, fleet.name)


async def render_fleets(
    snapshots: Snapshots,
    fleets: Iterable[Fleet],
    max_pause: float,
    notifier: Notifier | None = None,
    notifier_fleet: str | None = None,
) -> bytes:
    """The metrics of ``fleets``, each series labelled with its fleet (read through
    ``snapshots``; raises ``RedisError``), with the notifier's counters, labelled
    ``notifier_fleet``, when it runs."""
    registry = CollectorRegistry(auto_describe=False)
    gauges = _Gauges(registry)
    now = now_utc()
    for fleet in fleets:
        gauges.add(await snapshots.summary(fleet, max_pause, now))
    if notifier is not None and notifier_fleet is not None:
        registry.register(_NotifierCollector(notifier_fleet, notifier))
    return generate_latest(registry)


class _Gauges:
    """The coordinator's gauges, one series per fleet (and state or reason)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, ["fleet", *labels], registry=registry)

        self.paused = gauge(
            "fleetgate_fleet_paused", "1 while the fleet is paused, with the reason", "reason"
        )
        self.age = gauge(
            "fleetgate_fleet_pause_age_seconds", "How long the current pause has lasted (0 running)"
        )
        self.overdue = gauge(
            "fleetgate_fleet_pause_overdue",
            "1 when the pause outlived expected_until, or FLEETGATE_MAX_PAUSE without a window",
        )
        self.replicas = gauge(
            "fleetgate_fleet_replicas", "Replicas by state (running, paused, quiet, stale)", "state"
        )
        self.unacked = gauge(
            "fleetgate_fleet_unacknowledged", "Live replicas behind the fleet's current version"
        )
        self.version = gauge(
            "fleetgate_fleet_state_version", "The version of the fleet's pause state"
        )
        self.in_flight = gauge("fleetgate_fleet_in_flight", "Items in flight on live replicas")
        self.queued = gauge("fleetgate_fleet_queued", "Items queued on live replicas")
        self.unreadable = gauge(
            "fleetgate_fleet_replicas_unreadable",
            "Entries of the replicas set (or their records) that cannot be read, skipped",
        )

    def add(self, fs: FleetSummary) -> None:
        state, s = fs.state, fs.counts()
        name = state.fleet
        effectively = bool(s["effectively_paused"])
        self.paused.labels(name, state.reason if effectively else "").set(1 if effectively else 0)
        self.age.labels(name).set(s["pause_age_s"] or 0.0)
        self.overdue.labels(name).set(1 if s["overdue"] else 0)
        for st in REPLICA_STATES:
            self.replicas.labels(name, st).set(s[st])
        self.unacked.labels(name).set(s["unacknowledged"])
        self.version.labels(name).set(state.version)
        self.in_flight.labels(name).set(s["in_flight"])
        self.queued.labels(name).set(s["queued"])
        self.unreadable.labels(name).set(s["unreadable"])


class _NotifierCollector:
    """The notifier's process-local counters (no ``_created`` series: they start with the
    process)."""

    def __init__(self, fleet: str, notifier: Notifier) -> None:
        self.fleet = fleet
        self.notifier = notifier

    def collect(self) -> list[Metric]:
        st = self.notifier.stats
        out: list[Metric] = []
        for metric, value, doc in (
            ("deliveries", st.delivered, "Notifications a receiver accepted (2xx)"),
            ("failures", st.failed, "Failed attempts to deliver a notification (each retry counts)"),
            ("given_up", st.given_up, "Notifications given up after FLEETGATE_WEBHOOK_MAX_AGE"),
            ("skipped", st.skipped, "Events older than FLEETGATE_WEBHOOK_MAX_AGE when read, not sent"),
        ):
            family = CounterMetricFamily(f"fleetgate_webhook_{metric}", doc, labels=["fleet"])
            family.add_metric([self.fleet], value)
            out.append(family)
        pending = GaugeMetricFamily(
            "fleetgate_webhook_pending", "Events in hand: being delivered or retried",
            labels=["fleet"],
        )
        pending.add_metric([self.fleet], self.notifier.held)
        out.append(pending)
        return out


class OverdueWatcher:
    """Logs overdue pauses, restores a state hash Redis lost and audits the start and end of
    each maintenance window (``coordinator.notify.windows``), until stopped."""

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
        """One pass: restore the state if it is due and missing, then log if overdue."""
        try:
            if time.monotonic() >= self._next_restore:
                self._next_restore = time.monotonic() + self.restore_interval
                if await self.fleet.restore_if_missing():
                    self.restores += 1
                    log.warning("fleet %s: the state hash was missing and was restored", self.fleet.name)
            state = await self.fleet.state()
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError) as exc:
            if not self._redis_down:
                self._redis_down = True
                log.warning("fleet %s: the watcher cannot reach Redis: %s", self.fleet.name, exc)
            return
        if self._redis_down:
            self._redis_down = False
            log.info("fleet %s: the watcher reaches Redis again", self.fleet.name)
        now = now_utc()
        self.observe(state, now)
        await self._windows(state, now)
        if self.alerts is not None and self._alerted_version != state.version and \
                is_overdue(state, now, self.max_pause):
            await self._alert(self.alerts, state, now)

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


__all__ = ["CONTENT_TYPE", "OverdueWatcher", "render_fleets", "render_metrics"]
