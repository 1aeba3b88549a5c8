"""What the coordinator reads back from Redis: replicas, wait reports and audit events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from coordinator.fleet.backlog import Backlog
from replica.contract import (
    CONTROL_CONNECTED,
    DEFAULT_HOLD,
    R_APPLIED_AT,
    R_APPLIED_STATE,
    R_APPLIED_VERSION,
    R_CONTROL,
    R_CONTROL_ERROR,
    R_FAILED,
    R_FLEET_HELD,
    R_HEARTBEAT_AT,
    R_HEARTBEAT_INTERVAL,
    R_HOLDS,
    R_HOST,
    R_IN_FLIGHT,
    R_LABELS,
    R_PAUSED,
    R_POLL_INTERVAL,
    R_PROCESSED,
    R_QUEUED,
    R_QUIET,
    R_QUIET_AT,
    R_RESUME_AT,
    R_STARTED_AT,
    RECORD_FIELDS,
    STALE_HEARTBEATS,
    FleetState,
    decode_hash,
    format_time,
    parse_time,
)
from replica.contract.schedules import ScheduleSet
from replica.contract.selectors import check_labels
from replica.errors import ContractError

WHY_UNREACHABLE: Final = "unreachable"
"""No record, a heartbeat too old, or the replica reports its control channel down: a replica
frozen, cut off or killed since the change. Its items may still be running."""
WHY_IN_FLIGHT: Final = "still in flight"
"""Applied the pause, but items are still running."""
WHY_STALE_VERSION: Final = "stale version"
"""Alive, but has not applied the version (yet)."""
WHY_RESUME_PENDING: Final = "resume pending"
"""Applied a staggered resume whose offset has not come yet."""
GONE: Final = "gone"
"""Why a replica is excused from a wait: it left (a clean stop removed its record and its
member of the ``replicas`` set). The only excuse there is."""

DEFAULT_HEARTBEAT_INTERVAL: Final = 10.0


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def _float(value: str | None, default: float) -> float:
    try:
        return float(value) if value else default
    except ValueError:
        return default


def _time(value: str | None) -> datetime | None:
    try:
        return parse_time(value)
    except ContractError:
        return None


def record_labels(raw: str | None) -> dict[str, str]:
    """The ``labels`` field of a record: a JSON object of labels, else none (skipped)."""
    try:
        return check_labels(json.loads(raw or "{}"))
    except (ValueError, RecursionError, AttributeError, ContractError):
        return {}


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One replica as its record and its heartbeat score describe it."""

    id: str
    paused: bool
    holds: dict[str, str]
    applied_version: int
    in_flight: int
    queued: int
    quiet: bool
    control: str
    heartbeat_at: datetime | None
    host: str
    started_at: datetime | None
    processed: int
    failed: int
    applied_at: datetime | None
    quiet_at: datetime | None
    stale: bool
    """The heartbeat is older than 2.5 heartbeat intervals, or the record expired."""
    fleet_held: bool = False
    resume_at: datetime | None = None
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    poll_interval: float | None = None
    applied_state: FleetState | None = None
    control_error: str = ""
    """What broke in the replica's controller while a loop's fault holds its pool, or empty."""
    extra: dict[str, str] = field(default_factory=dict)
    """Fields of the record beyond the contract's (the replica service adds its own)."""
    labels: dict[str, str] = field(default_factory=dict)
    """The replica's labels (``FLEETGATE_LABELS``): what a hold's ``select`` matches. A record
    whose labels cannot be read (an older release, garbage) has none."""

    @classmethod
    def from_record(
        cls,
        fleet: str,
        replica_id: str,
        raw: Mapping[Any, Any] | None,
        heartbeat_ms: float | None,
        now: datetime,
    ) -> ReplicaInfo:
        """Build from an HGETALL reply (``None`` or empty when the record expired) and the
        replica's score in the ``replicas`` sorted set."""
        h = decode_hash(raw or {})
        interval = _float(h.get(R_HEARTBEAT_INTERVAL), DEFAULT_HEARTBEAT_INTERVAL)
        heartbeat_at = _time(h.get(R_HEARTBEAT_AT))
        last = heartbeat_at.timestamp() if heartbeat_at is not None else None
        if heartbeat_ms is not None:
            last = max(last or 0.0, heartbeat_ms / 1000.0)
        stale = not h or last is None or now.timestamp() - last > STALE_HEARTBEATS * interval
        try:
            holds_raw = json.loads(h.get(R_HOLDS) or "{}")
            holds = {str(k): str(v) for k, v in holds_raw.items()} if isinstance(holds_raw, dict) else {}
        except (ValueError, RecursionError):
            holds = {}
        applied_state: FleetState | None = None
        if h.get(R_APPLIED_STATE):
            try:
                applied_state = FleetState.from_json(h[R_APPLIED_STATE], fleet)
            except ContractError:
                applied_state = None
        return cls(
            id=replica_id,
            paused=h.get(R_PAUSED) == "1",
            holds=holds,
            applied_version=_int(h.get(R_APPLIED_VERSION)),
            in_flight=_int(h.get(R_IN_FLIGHT)),
            queued=_int(h.get(R_QUEUED)),
            quiet=h.get(R_QUIET) == "1",
            control=h.get(R_CONTROL, "unknown") if h else "unknown",
            heartbeat_at=heartbeat_at,
            host=h.get(R_HOST, ""),
            started_at=_time(h.get(R_STARTED_AT)),
            processed=_int(h.get(R_PROCESSED)),
            failed=_int(h.get(R_FAILED)),
            applied_at=_time(h.get(R_APPLIED_AT)),
            quiet_at=_time(h.get(R_QUIET_AT)),
            stale=stale,
            fleet_held=h.get(R_FLEET_HELD) == "1",
            resume_at=_time(h.get(R_RESUME_AT)),
            heartbeat_interval=interval,
            poll_interval=_float(h.get(R_POLL_INTERVAL), 0.0) or None,
            applied_state=applied_state,
            control_error=h.get(R_CONTROL_ERROR, ""),
            extra={k: v for k, v in h.items() if k not in RECORD_FIELDS},
            labels=record_labels(h.get(R_LABELS)),
        )

    @property
    def fleet_holds(self) -> list[str]:
        """The fleet holds that hold this replica, by its record (source ``fleet`` is the hold
        ``default``, ``fleet:NAME`` the hold NAME)."""
        out = []
        for source in self.holds:
            if source == "fleet":
                out.append(DEFAULT_HOLD)
            elif source.startswith("fleet:"):
                out.append(source[6:])
        return out

    @property
    def reachable(self) -> bool:
        return not self.stale and self.control == CONTROL_CONNECTED

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "paused": self.paused,
            "holds": dict(self.holds),
            "fleet_held": self.fleet_held,
            "applied_version": self.applied_version,
            "in_flight": self.in_flight,
            "queued": self.queued,
            "quiet": self.quiet,
            "control": self.control,
            "heartbeat_at": format_time(self.heartbeat_at) or None,
            "heartbeat_interval": self.heartbeat_interval,
            "poll_interval": self.poll_interval,
            "host": self.host,
            "started_at": format_time(self.started_at) or None,
            "processed": self.processed,
            "failed": self.failed,
            "applied_at": format_time(self.applied_at) or None,
            "quiet_at": format_time(self.quiet_at) or None,
            "resume_at": format_time(self.resume_at) or None,
            "stale": self.stale,
            "applied_state": self.applied_state.to_dict() if self.applied_state else None,
            "control_error": self.control_error or None,
            "extra": dict(self.extra),
            "labels": dict(self.labels),
        }


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """The state and every replica, read together (``Fleet.status()``)."""

    state: FleetState
    replicas: list[ReplicaInfo]
    unreadable: int = 0
    """Entries skipped because they cannot be read: members of the ``replicas`` set that are
    not replica ids (or whose score is not a number), record keys that are not hashes."""
    backlog: Backlog | None = None
    """The fleet's work stream (``coordinator.fleet.backlog``), when read with the status
    (the snapshot cache, ``fleetgate status``, ``fleetgate fleets``); None: not read."""
    schedules: ScheduleSet | None = None
    """The fleet's recurring windows (``replica.contract.schedules``), when read with the
    status (``fleetgate status``); None: not read."""


@dataclass(slots=True)
class ReplicaResult:
    """How far one replica got in a ``Fleet.wait``.

    Not frozen, unlike the other models: ``wait`` builds one per replica after the last
    acknowledgement, and a frozen dataclass's constructor doubles that cost."""

    id: str
    reached: bool
    applied_version: int
    acked_at: datetime | None
    """When the replica applied the version (its clock), if it did."""
    quiet_at: datetime | None
    """For a pause: when the replica turned quiet (its clock), if it did."""
    applied_after_s: float | None
    """Seconds from the change to the replica applying it."""
    quiet_after_s: float | None
    """Seconds from the change to the replica turning quiet (pause only)."""
    in_flight: int | None
    """Items in flight when it was last heard (None: never heard in this wait, its record was
    gone when first read)."""
    why: str | None
    """None when reached, else "unreachable", "still in flight", "stale version" or
    "resume pending"."""
    last_heard: datetime | None = None
    """For a replica that did not get there: when it was last heard (its heartbeat, or its
    latest acknowledgement; its clock). None for one that got there."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "reached": self.reached,
            "applied_version": self.applied_version,
            "acked_at": format_time(self.acked_at) or None,
            "quiet_at": format_time(self.quiet_at) or None,
            "applied_after_s": self.applied_after_s,
            "quiet_after_s": self.quiet_after_s,
            "in_flight": self.in_flight,
            "why": self.why,
            "last_heard": format_time(self.last_heard) or None,
        }


@dataclass(frozen=True, slots=True)
class Excused:
    """A replica live at the change that ``wait`` no longer waits for, and why (``GONE``)."""

    id: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class WaitReport:
    """The outcome of ``Fleet.wait(version)``: did every replica live at the change get there?

    ``ok`` only when each of them did, or left (``excused``, reason ``gone``): a replica that
    went silent (frozen, cut off, killed) is a straggler, ``unreachable``, never dropped."""

    version: int
    ok: bool
    action: str
    """"pause" (applied and quiet) or "resume" (applied and no longer held by the fleet)."""
    elapsed_s: float
    replicas: list[ReplicaResult]
    """Every replica waited for (live at the change, or joined since), sorted by id."""
    excused: list[Excused] = field(default_factory=list)
    """The replicas live at the change that left during the wait, sorted by id."""
    redis_lost_at: datetime | None = None
    """When Redis lost its data (the state hash's ``restored_at``) if that was within the live
    window before the change: replicas it forgot may not have registered again, so ``ok`` is
    false even when every replica listed got there."""

    @property
    def stragglers(self) -> list[ReplicaResult]:
        """The replicas that did not get there, with why."""
        return [r for r in self.replicas if not r.reached]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "ok": self.ok,
            "action": self.action,
            "elapsed_s": self.elapsed_s,
            "replicas": [r.to_dict() for r in self.replicas],
            # ids, as before: each one's why, last_heard and in_flight are in its replicas entry
            "stragglers": [r.id for r in self.stragglers],
            "excused": [e.to_dict() for e in self.excused],
            "redis_lost_at": format_time(self.redis_lost_at) or None,
        }


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One entry of the audit stream."""

    id: str
    action: str
    """"pause", "resume", "restore", a hold change ("hold_added", "hold_updated",
    "hold_released", "hold_scheduled", "hold_cancelled") or a window's edge ("window_started",
    "window_ended")."""
    reason: str
    by: str
    version: int
    at: datetime | None
    hold: str = ""
    """The hold it changed (several comma-separated for a resume of all); "" before holds."""
    starts_at: datetime | None = None
    """A scheduled hold's start."""
    auto_resume_at: datetime | None = None
    """When the hold ends by itself."""

    @classmethod
    def from_entry(cls, entry_id: Any, fields: Mapping[Any, Any]) -> AuditEvent:
        h = decode_hash(fields)
        return cls(
            id=entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id),
            action=h.get("action", ""),
            reason=h.get("reason", ""),
            by=h.get("by", ""),
            version=_int(h.get("version")),
            at=_time(h.get("at")),
            hold=h.get("hold", ""),
            starts_at=_time(h.get("starts_at")),
            auto_resume_at=_time(h.get("auto_resume_at")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action,
            "reason": self.reason,
            "by": self.by,
            "version": self.version,
            "at": format_time(self.at) or None,
            "hold": self.hold or None,
            "starts_at": format_time(self.starts_at) or None,
            "auto_resume_at": format_time(self.auto_resume_at) or None,
        }


__all__ = [
    "GONE",
    "WHY_IN_FLIGHT",
    "WHY_RESUME_PENDING",
    "WHY_STALE_VERSION",
    "WHY_UNREACHABLE",
    "AuditEvent",
    "Excused",
    "FleetStatus",
    "ReplicaInfo",
    "ReplicaResult",
    "WaitReport",
]
