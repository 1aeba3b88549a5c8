"""Prometheus metrics of one replica (the guide's Diagnostic Hook).

Every replica app has its own ``CollectorRegistry`` (tests build many apps in one process).
Gauges are computed at scrape time by a collector that reads the pool, the source and the
controller, so the hot path updates nothing; only the propagation histogram is observed, once
per fleet state applied.

Names are the contract (alert rules and dashboards use them):

=====================================  =========================================================
``fleetgate_pool_paused{reason}``      1 while the hold of that source is on, else 0; one series
                                       per source (fleet, operator, breaker, control-plane,
                                       drain, and any other source that holds the pool); a
                                       fleet hold NAME other than ``default`` is the source
                                       ``fleet:NAME``, kept at 0 once released (the last
                                       ``MAX_HOLDS`` such names seen)
``fleetgate_pool_pause_seconds``       how long the current pause has lasted (0 while running)
``fleetgate_pool_queued``              items waiting in this replica's queue
``fleetgate_pool_queue_capacity``      the queue's bound (0: unbounded)
``fleetgate_pool_in_flight``           items in a handler
``fleetgate_pool_workers``             worker count
``fleetgate_items_total{outcome}``     done, failed, timed_out, dead_lettered, malformed (entries
                                       dead-lettered unread: not UTF-8, not JSON, no ``item``)
``fleetgate_control_connected``        1 while subscribed to the fleet's control channel
``fleetgate_control_fault``            1 while a loop of the controller fails on an error it did
                                       not expect (the pool is held by ``control-plane``; the
                                       record's ``control_error`` and ``/readyz`` say what)
``fleetgate_fleet_version``            the fleet state version applied here
``fleetgate_hold_select_unreadable_total``  states applied with a hold whose ``select`` could not
                                       be read: that hold holds this replica (fail closed)
``fleetgate_propagation_seconds``      histogram: from a state's change to applied here
``fleetgate_source_held``              items in this replica's hands (queued, running, retrying)
``fleetgate_source_awaiting_retry``    of those, the ones out of the pool until their retry
``fleetgate_source_reading``           1 while the work source reads (0: it stopped on its own)
``fleetgate_source_redis_errors_total``  Redis commands of the source that failed
=====================================  =========================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from replica.contract import MAX_HOLDS
from replica.pool.holds import FLEET_SOURCE, is_fleet_source
from replica.pool.pool import PausablePool
from replica.service.source import SourceStats

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
KNOWN_SOURCES: Final = ("fleet", "operator", "breaker", "control-plane", "drain")
"""Hold sources always exported (0 while off). A fleet hold's ``fleet:NAME`` is exported from
when it first holds the pool; its names are bounded (the hold-name rule, ``MAX_HOLDS``)."""
OUTCOMES: Final = ("done", "failed", "timed_out", "dead_lettered", "malformed")
PROPAGATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ControlView(Protocol):
    """What the metrics and the HTTP side read from the controller."""

    @property
    def connected(self) -> bool: ...

    @property
    def applied_version(self) -> int: ...


class SourceView(Protocol):
    def stats(self) -> SourceStats: ...


class _ReplicaCollector(Collector):
    def __init__(
        self, pool: PausablePool, control: ControlView | None, source: SourceView | None
    ) -> None:
        self._pool = pool
        self._control = control
        self._source = source
        self._fleet_seen: dict[str, None] = {}
        """``fleet:NAME`` sources seen holding the pool, oldest first (at most MAX_HOLDS)."""

    def _sources(self, holds: Any) -> list[str]:
        seen = self._fleet_seen
        for source in holds:
            if source != FLEET_SOURCE and is_fleet_source(source):
                seen.pop(source, None)
                seen[source] = None
        for source in list(seen)[: max(0, len(seen) - MAX_HOLDS)]:
            del seen[source]
        return [*KNOWN_SOURCES, *sorted((set(holds) | set(seen)) - set(KNOWN_SOURCES))]

    def collect(self) -> Iterator[Metric]:
        pool = self._pool
        stats = pool.stats()
        holds = stats.holds
        paused = GaugeMetricFamily(
            "fleetgate_pool_paused", "1 while the pool is held by this source (reason).",
            labels=["reason"],
        )
        for source in self._sources(holds):
            paused.add_metric([source], 1.0 if source in holds else 0.0)
        yield paused
        yield _gauge("fleetgate_pool_pause_seconds", "Seconds the current pause has lasted.",
                     stats.pause_seconds)
        yield _gauge("fleetgate_pool_queued", "Items waiting in the pool's queue.", stats.queued)
        yield _gauge("fleetgate_pool_queue_capacity", "The queue's bound (0: unbounded).",
                     stats.maxsize)
        yield _gauge("fleetgate_pool_in_flight", "Items in a handler.", stats.in_flight)
        yield _gauge("fleetgate_pool_workers", "Workers of the pool.", stats.workers)

        items = CounterMetricFamily(
            "fleetgate_items", "Items by outcome.", labels=["outcome"]
        )
        counts: dict[str, float]
        if self._source is not None:
            s = self._source.stats()
            counts = {"done": s.done, "failed": s.failed, "timed_out": s.timed_out,
                      "dead_lettered": s.dead_lettered, "malformed": s.malformed}
            yield _gauge("fleetgate_source_held",
                         "Items in this replica's hands (queued, running, awaiting retry).",
                         s.held)
            yield _gauge("fleetgate_source_awaiting_retry",
                         "Items out of the pool until their retry (backing off, or due).",
                         s.awaiting_retry)
            yield _gauge("fleetgate_source_reading",
                         "1 while the work source reads; 0 once it stopped on its own.",
                         0.0 if s.stopped is not None else 1.0)
            yield CounterMetricFamily(
                "fleetgate_source_redis_errors", "Redis commands of the source that failed.",
                value=s.redis_errors,
            )
        else:
            counts = {"done": stats.processed, "failed": stats.failed,
                      "timed_out": stats.timed_out, "dead_lettered": 0, "malformed": 0}
        for outcome in OUTCOMES:
            items.add_metric([outcome], float(counts[outcome]))
        yield items

        if self._control is not None:
            yield _gauge("fleetgate_control_connected",
                         "1 while subscribed to the fleet's control channel.",
                         1.0 if self._control.connected else 0.0)
            yield _gauge("fleetgate_control_fault",
                         "1 while a loop of the controller fails on an error it did not expect "
                         "(the pool is held).",
                         1.0 if getattr(self._control, "control_error", None) else 0.0)
            yield _gauge("fleetgate_fleet_version", "The fleet state version applied here.",
                         self._control.applied_version)
            yield CounterMetricFamily(
                "fleetgate_hold_select_unreadable",
                "States applied with a hold whose select could not be read (held: fail closed).",
                value=float(getattr(self._control, "select_unreadable", 0)),
            )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value))


class ReplicaMetrics:
    """The registry of one replica: the scrape-time collector plus the propagation histogram."""

    def __init__(
        self,
        pool: PausablePool,
        *,
        control: ControlView | None = None,
        source: SourceView | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_ReplicaCollector(pool, control, source))
        self.propagation = Histogram(
            "fleetgate_propagation_seconds",
            "Seconds from a fleet state's change to this replica applying it.",
            buckets=PROPAGATION_BUCKETS,
            registry=self.registry,
        )

    def observe_propagation(self, state: Any, seconds: float | None) -> None:
        """A controller state listener: ``controller.add_listener(metrics.observe_propagation)``."""
        if seconds is not None and seconds >= 0:
            self.propagation.observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "ControlView", "ReplicaMetrics", "SourceView"]
