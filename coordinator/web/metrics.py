"""Forgotten pauses: the fleet's metrics, read from Redis at scrape time, and the overdue watcher.

Metrics (every fleet of the registry ``fleetgate:fleets`` and the default one, at most
``MAX_LISTED``; every series carries ``fleet``)::

    fleetgate_fleet_paused{fleet,reason}        1 while the fleet is paused (reason "" when not)
    fleetgate_fleet_pause_age_seconds{fleet}    how long the current pause has lasted (0 running)
    fleetgate_fleet_pause_overdue{fleet}        1 past expected_until, or past FLEETGATE_MAX_PAUSE
                                                when the pause was given no window
    fleetgate_fleet_replicas{fleet,state}       replicas by state: running, paused, quiet, stale
    fleetgate_fleet_hold_replicas{fleet,hold}   live replicas each hold holds (their records)
    fleetgate_fleet_replica_held{fleet,hold,replica}
                                                1 for each live replica a hold for part of the
                                                fleet (a selector, canaries) holds (at most
                                                1,000 a fleet; a fleet-wide hold holds them all)
    fleetgate_fleet_unacknowledged{fleet}       live replicas behind the fleet's current version
    fleetgate_fleet_state_version{fleet}        the state's version
    fleetgate_fleet_in_flight{fleet}            items in flight on live replicas
    fleetgate_fleet_queued{fleet}               items queued on live replicas
    fleetgate_fleet_replicas_unreadable{fleet}  entries of the replicas set (or their records)
                                                that cannot be read: skipped by every reader
    fleetgate_fleet_backlog{fleet}              entries of the work stream not yet delivered to the
                                                group (XINFO GROUPS lag; absent when Redis
                                                cannot say: after some XDELs and trims, or
                                                before Redis 7; 0 without a work stream)
    fleetgate_fleet_pending{fleet}              entries delivered and not acknowledged yet
    fleetgate_fleet_oldest_waiting_seconds{fleet}
                                                age of the oldest entry not yet delivered (0
                                                when nothing waits; absent when unknown)
    fleetgate_fleet_dead_letters{fleet}         length of the dead-letter stream
                                                fleetgate:{NAME}:dead
    fleetgate_fleet_backlog_limit{fleet}        the fleet's backlog limit (max_backlog: the most
                                                entries not yet done, backlog + pending, that
                                                producers may leave); absent without a limit,
                                                or when it cannot be read
    fleetgate_fleet_read_error{fleet}           1 when the fleet could not be read at this
                                                scrape (a key of the wrong type, a state hash
                                                edited into garbage): its other series are
                                                absent; 0 for every fleet read
    fleetgate_registry_unreadable               members of fleetgate:fleets skipped at this
                                                scrape (not fleet names, not UTF-8, a score
                                                that is not a time)
    fleetgate_registry_dropped_total            members the watcher removed from
                                                fleetgate:fleets (invalid, or the oldest past
                                                its bound; this process)
    fleetgate_watcher_failures_total            unexpected errors of the watcher's passes
                                                (this process; logged with the traceback once)
    fleetgate_webhook_deliveries_total{fleet}   notifications a receiver accepted (this process)
    fleetgate_webhook_failures_total{fleet}     failed attempts to deliver one (each retry counts)
    fleetgate_webhook_given_up_total{fleet}     notifications given up after FLEETGATE_WEBHOOK_MAX_AGE
    fleetgate_webhook_skipped_total{fleet}      events already too old when read, not sent
    fleetgate_webhook_garbage_total{fleet}      stream entries that could not be read: skipped
    fleetgate_webhook_errors_total{fleet}       errors the notifier did not expect (it went on)
    fleetgate_webhook_unstated_total{fleet}     registry names passed over: no state, no stream
    fleetgate_webhook_pending{fleet}            events in hand: being delivered or retried

``render_fleets`` reads each fleet through the coordinator's snapshot cache
(``coordinator.fleet.snapshots``: the records at most once per ``FLEETGATE_REFRESH_INTERVAL``
however many scrapes, dashboards and API clients ask, and again at once after a change) and
fills a fresh ``CollectorRegistry``, reading ``FLEET_READS`` fleets at once; one fleet that cannot
be read is its ``fleetgate_fleet_read_error`` series, never a failed scrape (Redis unreachable
still is: 503). The webhook
counters are the notifier's (this process's, every fleet it follows), labelled with the
default fleet. The overdue watcher (``OverdueWatcher``, ``FleetsWatcher``) lives in
``coordinator.web.watcher``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from coordinator.fleet.fleet import Fleet
from coordinator.fleet.overview import FLEET_READS, FleetError, read_isolated
from coordinator.fleet.snapshots import Snapshots
from coordinator.fleet.summary import FleetSummary
from coordinator.notify.consumer import Notifier
from coordinator.render import REPLICA_STATES
from coordinator.web.watcher import (
    FleetsWatcher,
    OverdueWatcher,  # re-exported: callers knew it here
)
from replica.contract import now_utc

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
    *,
    registry_unreadable: int | None = None,
    watcher: FleetsWatcher | None = None,
) -> bytes:
    """The metrics of ``fleets``, each series labelled with its fleet (read through
    ``snapshots``; raises ``RedisError`` when Redis cannot be reached; a fleet that cannot be
    read is its ``fleetgate_fleet_read_error`` series), with the notifier's counters, labelled
    ``notifier_fleet``, when it runs, the registry members skipped (``registry_unreadable``)
    and the watcher's counters when given."""
    registry = CollectorRegistry(auto_describe=False)
    gauges = _Gauges(registry)
    now = now_utc()

    async def summary(fleet: Fleet) -> FleetSummary:
        return await snapshots.summary(fleet, max_pause, now)

    # a few fleets at once, each one alone
    for result in await read_isolated(list(fleets), summary, lambda f: f.name, FLEET_READS):
        if isinstance(result, FleetError):
            gauges.read_error.labels(result.fleet).set(1)
        else:
            gauges.add(result)
    if registry_unreadable is not None:
        Gauge("fleetgate_registry_unreadable",
              "Members of fleetgate:fleets skipped: not fleet names, not UTF-8, no time",
              registry=registry).set(registry_unreadable)
    if watcher is not None:
        registry.register(_WatcherCollector(watcher))
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
        self.hold_replicas = gauge(
            "fleetgate_fleet_hold_replicas", "Live replicas each fleet hold holds", "hold"
        )
        self.replica_held = gauge(
            "fleetgate_fleet_replica_held",
            "1 for each live replica a hold for part of the fleet holds", "hold", "replica",
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
        self.backlog = gauge(
            "fleetgate_fleet_backlog",
            "Entries of the work stream not yet delivered to the group (absent: unknown)",
        )
        self.pending = gauge(
            "fleetgate_fleet_pending", "Entries of the work stream delivered, not acknowledged"
        )
        self.oldest = gauge(
            "fleetgate_fleet_oldest_waiting_seconds",
            "Age of the oldest entry not yet delivered (0: none waits; absent: unknown)",
        )
        self.dead = gauge("fleetgate_fleet_dead_letters", "Length of the dead-letter stream")
        self.limit = gauge(
            "fleetgate_fleet_backlog_limit",
            "The backlog limit producers obey: most entries not yet done (absent: no limit)",
        )
        self.read_error = gauge(
            "fleetgate_fleet_read_error",
            "1 when the fleet could not be read (its other series are absent), else 0",
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
        held = {h.name: 0 for h in state.active_holds(fs.now)}  # one that holds none: 0
        for hold, n in {**held, **fs.figures.held}.items():
            self.hold_replicas.labels(name, hold).set(n)
        for hold, replica in fs.figures.held_ids:
            self.replica_held.labels(name, hold, replica).set(1)
        self.unacked.labels(name).set(s["unacknowledged"])
        self.version.labels(name).set(state.version)
        self.in_flight.labels(name).set(s["in_flight"])
        self.queued.labels(name).set(s["queued"])
        self.unreadable.labels(name).set(s["unreadable"])
        self.read_error.labels(name).set(0)
        for gauge, key in ((self.backlog, "backlog"), (self.pending, "pending"),
                           (self.oldest, "oldest_waiting_s"), (self.dead, "dead_letters")):
            if s[key] is not None:  # unknown: no series, never a wrong number
                gauge.labels(name).set(s[key])
        limit = s.get("backlog_limit")
        if limit and limit.get("max_backlog") is not None:  # none, or unreadable: no series
            self.limit.labels(name).set(limit["max_backlog"])


class _WatcherCollector:
    """The watcher's process-local counters."""

    def __init__(self, watcher: FleetsWatcher) -> None:
        self.watcher = watcher

    def collect(self) -> list[Metric]:
        dropped = CounterMetricFamily(
            "fleetgate_registry_dropped",
            "Members the watcher removed from fleetgate:fleets (invalid, or past its bound)",
            value=self.watcher.registry_dropped,
        )
        failures = CounterMetricFamily(
            "fleetgate_watcher_failures",
            "Unexpected errors of the watcher's passes (each logged once with its traceback)",
            value=self.watcher.failures,
        )
        return [dropped, failures]


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
            ("garbage", st.garbage, "Stream entries that could not be read (not UTF-8): skipped"),
            ("errors", st.errors, "Errors the notifier did not expect: logged, counted, gone on"),
            ("unstated", st.unstated, "Registry names passed over for having no state"),
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


__all__ = ["CONTENT_TYPE", "OverdueWatcher", "render_fleets", "render_metrics"]
