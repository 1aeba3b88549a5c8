"""A fleet's summary: figures that stay small however many replicas there are.

``summarize(status)`` counts a ``FleetStatus`` (live, stale, unacknowledged, quiet, in flight,
paused while the fleet runs, the slowest acknowledgements) and picks the replicas that need
attention, at most ``ATTENTION_CAP`` of them, the most urgent first. ``FleetSummary.to_dict()``
is the summary shape (``GET /api/fleets/{name}``, ``fleetgate status --json``); ``counts()``
is the ``summary`` object that the status shape (every replica) carries as well.

What the records say is counted once per snapshot (``RecordFigures``); what depends on the
clock alone (the pause's age, overdue) is worked out per call, so a cached snapshot answers
many requests at the cost of a few lines each. No Redis here: the reads are ``reads.py``'s, the
cache ``snapshots.py``'s, the paging ``pages.py``'s.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from coordinator.fleet.backlog import Backlog, figures_of, limit_of
from coordinator.fleet.models import FleetStatus, ReplicaInfo
from coordinator.fleet.schedule import state_dict
from replica.contract import CONTROL_CONNECTED, FleetState, format_time, now_utc
from replica.contract.holds import running_since

REPLICA_STATES: Final = ("running", "paused", "quiet", "stale")
DEFAULT_MAX_PAUSE_S: Final = 1800.0
ATTENTION_CAP: Final = 20
"""The most replicas a summary lists as needing attention (``attention_total`` counts all)."""
SLOWEST: Final = 5
"""How many of the slowest acknowledgements of the current version a summary names."""
DEFAULT_SLOW_ACK_S: Final = 1.0
"""An acknowledgement slower than this (``FLEETGATE_SLOW_ACK``) makes its replica need
attention: one poll interval by default, what a replica that missed the push takes; a healthy
fleet's spread is milliseconds. The slowest are named whatever their lag, flagged only past it."""

WHY_STALE: Final = "stale"
WHY_CONTROL_ERROR: Final = "control error"
WHY_CONTROL_DOWN: Final = "control down"
WHY_UNACKNOWLEDGED: Final = "unacknowledged"
WHY_NOT_QUIET: Final = "not quiet"
WHY_PAUSED_WHILE_RUNNING: Final = "paused while the fleet runs"
WHY_SOURCE_STOPPED: Final = "source stopped"
WHY_SLOW_ACK: Final = "slow acknowledgement"
WHYS: Final = (WHY_STALE, WHY_CONTROL_ERROR, WHY_CONTROL_DOWN, WHY_UNACKNOWLEDGED, WHY_NOT_QUIET,
               WHY_PAUSED_WHILE_RUNNING, WHY_SOURCE_STOPPED, WHY_SLOW_ACK)
"""Why a replica needs attention, the most urgent first (the order of ``attention``)."""
_RANK: Final = {why: i for i, why in enumerate(WHYS)}


# ---------------------------------------------------------------------------- figures


def replica_state(replica: ReplicaInfo) -> str:
    """``stale``, ``quiet``, ``paused`` or ``running``: one per replica, in that precedence."""
    if replica.stale:
        return "stale"
    if replica.quiet:
        return "quiet"
    if replica.paused:
        return "paused"
    return "running"


def pause_age_s(state: FleetState, now: datetime | None = None) -> float | None:
    """How long the fleet has been paused (None while it runs). With holds: since the state's
    ``since`` while the pause it was written with goes on, else (a window started by itself,
    a hold ended by itself) since the earliest ``since`` of the holds active now."""
    now = now or now_utc()
    if not state.effectively_paused(now):
        return None
    since = state.since
    if state.holds is not None and not (state.paused and running_since(state.holds, now) is None):
        starts = [h.since for h in state.active_holds(now) if h.since is not None]
        since = min(starts) if starts else since
    if since is None:
        return None
    return max(0.0, (now - since).total_seconds())


def is_overdue(
    state: FleetState, now: datetime | None = None, max_pause: float = DEFAULT_MAX_PAUSE_S
) -> bool:
    """A pause past its ``expected_until``, or past ``max_pause`` seconds without a window.
    With holds: a hold active now is past its own ``expected_until``, or one has no window
    and the pause (``pause_age_s``) is past ``max_pause``; a hold that ended by its
    ``auto_resume_at`` is no pause."""
    now = now or now_utc()
    age = pause_age_s(state, now)
    if age is None:
        return False
    if state.holds is not None:
        return any(
            now > h.expected_until if h.expected_until is not None else age > max_pause
            for h in state.active_holds(now)
        )
    if state.expected_until is not None:
        return now > state.expected_until
    return age > max_pause


def unacknowledged(state: FleetState, replicas: Iterable[ReplicaInfo]) -> list[ReplicaInfo]:
    """Live replicas that have not applied the fleet's current version."""
    return [r for r in replicas if not r.stale and r.applied_version < state.version]


def ack_lag_s(
    replica: ReplicaInfo, state: FleetState, now: datetime | None = None
) -> tuple[float | None, bool]:
    """``(seconds, acknowledged)``: how long the replica took to apply the current version, or
    how long it has been behind it (None when the times are unknown)."""
    changed = state.changed_at
    if replica.applied_version >= state.version:
        if changed is None or replica.applied_at is None:
            return None, True
        return max(0.0, (replica.applied_at - changed).total_seconds()), True
    if changed is None:
        return None, False
    return max(0.0, ((now or now_utc()) - changed).total_seconds()), False


def source_stopped(replica: ReplicaInfo) -> bool:
    """The replica service reports (record field ``source``) that its work source stopped."""
    return replica.extra.get("source", "").startswith("stopped")


def control_error(replica: ReplicaInfo) -> str:
    """What broke in the replica's controller (record field ``control_error``: a loop failing
    on an error it did not expect, the pool held meanwhile), or empty."""
    return replica.control_error


def whys(replica: ReplicaInfo, state: FleetState, paused: bool) -> list[str]:
    """Why ``replica`` needs attention (empty: it does not), but for a slow acknowledgement,
    which only the whole fleet can tell; ``paused`` is whether the fleet is paused now."""
    if replica.stale:
        return [WHY_STALE]
    out = []
    if control_error(replica):
        out.append(WHY_CONTROL_ERROR)
    if replica.control != CONTROL_CONNECTED:
        out.append(WHY_CONTROL_DOWN)
    if replica.applied_version < state.version:
        out.append(WHY_UNACKNOWLEDGED)
    elif paused and not replica.quiet:
        out.append(WHY_NOT_QUIET)
    if not paused and replica.paused:
        out.append(WHY_PAUSED_WHILE_RUNNING)
    if source_stopped(replica):
        out.append(WHY_SOURCE_STOPPED)
    return out


# ---------------------------------------------------------------------------- the summary


@dataclass(frozen=True, slots=True)
class Attention:
    """A replica that needs attention: its record, why, and its acknowledgement's lag."""

    replica: ReplicaInfo
    why: tuple[str, ...]
    ack_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.replica.to_dict(), "why": list(self.why), "ack_s": _round(self.ack_s)}


@dataclass(frozen=True, slots=True)
class RecordFigures:
    """What the records of one snapshot say, counted once (``summarize`` reuses it)."""

    replicas: int
    states: dict[str, int]
    live: int
    unacknowledged: int
    in_flight: int
    queued: int
    unreadable: int
    reasons: dict[str, int]
    """How many replicas need attention for each reason (``WHYS``)."""
    attention: list[Attention]
    """The first ``ATTENTION_CAP`` replicas that need attention, the most urgent first, then
    those with the slowest acknowledgements."""
    attention_total: int
    """How many replicas have a problem (every reason but a slow acknowledgement)."""
    slowest_acks: list[tuple[str, float]]
    """``(id, seconds)`` of the slowest acknowledgements of the current version, slowest
    first (at most ``SLOWEST``)."""
    backlog: Backlog | None = None
    """The fleet's work stream as the snapshot read it (None: not read)."""
    held: dict[str, int] = field(default_factory=dict)
    """How many live replicas each fleet hold holds, by their records."""
    held_ids: list[tuple[str, str]] = field(default_factory=list)
    """``(hold, replica id)`` for each live replica a hold for part of the fleet (a selector,
    canaries) holds: at most ``HELD_IDS_CAP``."""


HELD_IDS_CAP: Final = 1000
"""The most ``(hold, replica)`` pairs a summary keeps for the metrics of holds for part of a
fleet (``fleetgate_fleet_replica_held``)."""


def count(
    status: FleetStatus,
    now: datetime | None = None,
    cap: int = ATTENTION_CAP,
    slow_ack_s: float = DEFAULT_SLOW_ACK_S,
) -> RecordFigures:
    """Count the records of ``status`` (one pass, and a heap for the slowest); a replica whose
    acknowledgement took ``slow_ack_s`` or longer needs attention."""
    now = now or now_utc()
    state = status.state
    paused = state.effectively_paused(now)
    changed = state.changed_at
    states = dict.fromkeys(REPLICA_STATES, 0)
    reasons = dict.fromkeys(WHYS, 0)
    live = behind = in_flight = queued = 0
    flagged: list[tuple[int, str, ReplicaInfo, list[str]]] = []
    lags: list[tuple[float, str]] = []
    partial = {h.name for h in state.holds or () if h.select is not None or h.canaries}
    held: dict[str, int] = {}
    held_ids: list[tuple[str, str]] = []
    for r in status.replicas:
        states[replica_state(r)] += 1
        if not r.stale:
            for name in r.fleet_holds:
                held[name] = held.get(name, 0) + 1
                if name in partial and len(held_ids) < HELD_IDS_CAP:
                    held_ids.append((name, r.id))
            live += 1
            in_flight += r.in_flight
            queued += r.queued
            if r.applied_version < state.version:
                behind += 1
            elif changed is not None and r.applied_at is not None and state.version:
                lags.append((max(0.0, (r.applied_at - changed).total_seconds()), r.id))
        # a hold for part of the fleet: whether it should hold this one is its own question
        why = whys(r, state, paused if not partial else
                   state.for_replica(r.labels, r.id).effectively_paused(now))
        if why:
            for w in why:
                reasons[w] += 1
            flagged.append((_RANK[why[0]], r.id, r, why))
    slowest = heapq.nlargest(SLOWEST, lags)
    problems = len(flagged)
    flagged_ids = {f[1] for f in flagged}
    slow = {rid for lag, rid in slowest if lag >= slow_ack_s}  # slow against a bound, not a rank
    for rid in sorted(slow):
        reasons[WHY_SLOW_ACK] += 1
        if rid not in flagged_ids:
            flagged.append((_RANK[WHY_SLOW_ACK], rid, _by_id(status.replicas, rid), []))
    picked = heapq.nsmallest(cap, flagged, key=lambda f: (f[0], f[1]))
    attention = [
        Attention(r, tuple(why + ([WHY_SLOW_ACK] if r.id in slow else [])),
                  ack_lag_s(r, state, now)[0] if not r.stale else None)
        for _rank, _id, r, why in picked
    ]
    return RecordFigures(
        replicas=len(status.replicas), states=states, live=live, unacknowledged=behind,
        in_flight=in_flight, queued=queued, unreadable=status.unreadable, reasons=reasons,
        attention=attention, attention_total=problems,
        slowest_acks=[(rid, lag) for lag, rid in slowest], backlog=status.backlog,
        held=held, held_ids=held_ids,
    )


def _by_id(replicas: Sequence[ReplicaInfo], replica_id: str) -> ReplicaInfo:
    """The replica of ``replica_id`` (the list is sorted by id)."""
    lo, hi = 0, len(replicas)
    while lo < hi:
        mid = (lo + hi) // 2
        if replicas[mid].id < replica_id:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(replicas) and replicas[lo].id == replica_id:
        return replicas[lo]
    return next(r for r in replicas if r.id == replica_id)  # not sorted: a library caller's list


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """The summary of a fleet at ``now``: its state, the figures of its records, and the
    replicas that need attention."""

    state: FleetState
    figures: RecordFigures
    now: datetime
    max_pause: float = DEFAULT_MAX_PAUSE_S
    read_at: datetime | None = None
    """When the records were read (a cached snapshot is up to the refresh interval old)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, Any]:
        """The ``summary`` object (the status shape's too): the counts, then the pause."""
        f, state, now = self.figures, self.state, self.now
        return {
            "replicas": f.replicas,
            **f.states,
            "live": f.live,
            "unacknowledged": f.unacknowledged,
            "in_flight": f.in_flight,
            "queued": f.queued,
            "unreadable": f.unreadable,
            "effectively_paused": state.effectively_paused(now),
            "pause_age_s": _round(pause_age_s(state, now)),
            "overdue": is_overdue(state, now, self.max_pause),
            "now": format_time(now),
            "paused_while_running": f.reasons[WHY_PAUSED_WHILE_RUNNING],
            "not_quiet": f.reasons[WHY_NOT_QUIET],
            "control_down": f.reasons[WHY_CONTROL_DOWN],
            "source_stopped": f.reasons[WHY_SOURCE_STOPPED],
            "slowest_acks": [{"id": rid, "ack_s": _round(s)} for rid, s in f.slowest_acks],
            "read_at": format_time(self.read_at) or None,
            **figures_of(f.backlog, now),
            "backlog_limit": limit_of(f.backlog),
        }

    def to_dict(self) -> dict[str, Any]:
        """The summary shape: ``{"fleet", "state", "summary", "attention", "attention_total"}``."""
        state = state_dict(self.state, self.now)
        for name, hold in state["holds"].items():  # how many live replicas each holds
            hold["holding"] = self.figures.held.get(name, 0)
        return {
            "fleet": self.state.fleet,
            "state": state,
            "summary": self.counts(),
            "attention": [a.to_dict() for a in self.figures.attention],
            "attention_total": self.figures.attention_total,
            **self.extra,
        }


def summarize(
    status: FleetStatus,
    now: datetime | None = None,
    max_pause: float = DEFAULT_MAX_PAUSE_S,
    *,
    figures: RecordFigures | None = None,
    read_at: datetime | None = None,
    slow_ack_s: float = DEFAULT_SLOW_ACK_S,
) -> FleetSummary:
    """The summary of ``status`` at ``now``; ``figures`` of the same status when already
    counted (a cached snapshot's)."""
    now = now or now_utc()
    figures = figures or count(status, now, slow_ack_s=slow_ack_s)
    return FleetSummary(status.state, figures, now, max_pause, read_at)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


__all__ = [
    "ATTENTION_CAP", "DEFAULT_MAX_PAUSE_S", "DEFAULT_SLOW_ACK_S", "REPLICA_STATES", "SLOWEST", "WHYS",
    "WHY_CONTROL_ERROR", "Attention", "FleetSummary", "RecordFigures", "ack_lag_s",
    "control_error", "count", "is_overdue", "pause_age_s", "replica_state", "source_stopped",
    "summarize", "unacknowledged", "whys",
]
