"""What ``Fleet.wait`` knows about each replica, from records and acknowledgements.

``_View`` holds one replica's progress towards a version (applied, quiet, when, and why not);
it is fed by the replica's record (read in batches) and by acknowledgements on
``fleetgate:{NAME}:acks``, and gives its line of the wait's report (``result``). ``_fast_ack`` reads an acknowledgement without building an ``Ack``
object, because at a fleet-wide change the coordinator parses one per replica.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from coordinator.fleet.models import (
    WHY_IN_FLIGHT,
    WHY_RESUME_PENDING,
    WHY_STALE_VERSION,
    WHY_UNREACHABLE,
    ReplicaResult,
)
from replica.contract import (
    CONTROL_CONNECTED,
    MAX_MESSAGE_BYTES,
    R_APPLIED_AT,
    R_APPLIED_VERSION,
    R_CONTROL,
    R_FLEET_HELD,
    R_HEARTBEAT_AT,
    R_HEARTBEAT_INTERVAL,
    R_IN_FLIGHT,
    R_QUIET,
    R_QUIET_AT,
    R_RESUME_AT,
    RECORD_TTL_HEARTBEATS,
    REPLICA_ID_RE,
    STALE_HEARTBEATS,
    parse_time,
    text,
)
from replica.errors import ContractError

_WAIT_FIELDS: Final = (
    R_APPLIED_VERSION, R_FLEET_HELD, R_QUIET, R_IN_FLIGHT, R_APPLIED_AT, R_QUIET_AT,
    R_CONTROL, R_HEARTBEAT_AT, R_HEARTBEAT_INTERVAL, R_RESUME_AT,
)
"""The record fields ``wait`` reads (``_View.from_record``)."""


class _View:
    """What ``wait`` knows of one replica.

    ``recorded``: its record was read in this wait (it was waited for on its record: a
    straggler, or the first read of a wait that subscribed for itself). ``confirmed``: nothing
    an acknowledgement said has changed it since its record was last read. A recorded view that
    is not confirmed needs its record read again before the wait trusts it (``needs_check``).
    ``suspect``: its record contradicted its acknowledgements (another replica of the same
    Redis user may have forged them): for the rest of the wait only its record counts.
    ``present``: the record existed when last read (a view whose last read found none has not
    got anywhere, whatever acknowledgements said). ``judged``: ``wait`` has decided from a
    record read whether the replica was live at the change. ``beat``, ``heard_ack`` and
    ``score`` (ms) are the last times it was heard, from its record, its acknowledgements and
    the ``replicas`` set."""

    __slots__ = (
        "alive", "applied_at", "applied_version", "beat", "confirmed", "control", "fleet_held",
        "heard_ack", "id", "in_flight", "interval", "judged", "present", "quiet", "quiet_at",
        "recorded", "resume_at", "score", "suspect",
    )

    def __init__(self, replica_id: str) -> None:
        self.id = replica_id
        self.alive = False
        self.applied_version = 0
        self.fleet_held = False
        self.quiet = False
        self.in_flight: int | None = None  # never heard
        self.applied_at: Any = None  # datetime (record) or ISO text (ack): see _dt
        self.quiet_at: Any = None
        self.resume_at: Any = None
        self.control = "unknown"
        self.recorded = False
        self.confirmed = False
        self.suspect = False
        self.present = False
        self.judged = False
        self.beat: datetime | None = None
        self.interval = 10.0
        self.heard_ack: Any = None
        self.score: float | None = None

    @property
    def needs_check(self) -> bool:
        """Its record was read, and an acknowledgement changed it since."""
        return self.recorded and not self.confirmed

    def reached(self, version: int, pause: bool) -> bool:
        if self.applied_version < version or (self.recorded and not self.present):
            return False
        if pause:
            return self.fleet_held and self.quiet
        return not self.fleet_held

    def live_at_change(self, at: float, now: float, floor: float) -> bool:
        """Whether this replica, whose record was just read for the first time, was live at
        the change (``at``, epoch seconds): heard within ``STALE_HEARTBEATS`` of its heartbeat
        intervals before it (at least ``floor`` seconds; a replica that joined since was heard
        after it). A record already gone is judged by the score: a record expires
        ``RECORD_TTL_HEARTBEATS`` intervals after the last heartbeat, which bounds the interval
        of a replica silent since its score, and so how long before the change it could have
        been heard and still be live then."""
        if self.present:
            return self.heard_within(at, floor)
        if self.score is None:
            return False  # known from an acknowledgement only, and no record
        heard = self.score / 1000.0
        longest = (now - heard) / RECORD_TTL_HEARTBEATS  # its interval, at most
        return at - heard <= max(STALE_HEARTBEATS * longest, floor)

    def heard_within(self, t: float, floor: float) -> bool:
        """Its record's heartbeat at ``t`` (epoch seconds) was at most ``STALE_HEARTBEATS``
        of its intervals old, and at least ``floor`` seconds counts."""
        beat = self.beat
        return self.present and beat is not None and \
            t - beat.timestamp() <= max(STALE_HEARTBEATS * self.interval, floor)

    def last_heard(self, times: _Times) -> datetime | None:
        """The latest of its record's heartbeat, its acknowledgements and its score."""
        heard = [t for t in (self.beat, times(self.heard_ack)) if t is not None]
        if self.score is not None:
            heard.append(datetime.fromtimestamp(self.score / 1000.0, UTC))
        return max(heard, default=None)

    def result(self, reached: bool, times: _Times, version: int, pause: bool) -> ReplicaResult:
        """Its line of the wait's report for ``version`` (``pause``: the change was a pause):
        when it applied the change (and turned quiet), or why it did not get there."""
        why: str | None = None
        if not reached:
            behind = self.applied_version < version
            if not self.alive or (behind and self.control != CONTROL_CONNECTED):
                why = WHY_UNREACHABLE
            elif behind:
                why = WHY_STALE_VERSION
            elif pause:
                why = WHY_IN_FLIGHT
            else:
                why = WHY_RESUME_PENDING
        applied = self.applied_version >= version
        applied_at = times(self.applied_at) if applied else None
        quiet_at = times(self.quiet_at) if pause and self.quiet else None
        return ReplicaResult(
            id=self.id,
            reached=reached,
            applied_version=self.applied_version,
            acked_at=applied_at,
            quiet_at=quiet_at,
            applied_after_s=times.after(applied_at),
            quiet_after_s=times.after(quiet_at),
            in_flight=self.in_flight,
            why=why,
            last_heard=None if reached else self.last_heard(times),
        )

    def from_record(self, values: Sequence[Any] | None, now: float) -> None:
        """The record's word, which is final: a record read after an acknowledgement arrived
        holds at least what the acknowledgement said (replicas write the record, then publish),
        so where the two differ the acknowledgement was not the replica's. ``values`` are the
        ``_WAIT_FIELDS`` (None or empty: the record is gone or is not a hash)."""
        self.recorded = self.confirmed = True
        v: dict[str, str | None] = dict.fromkeys(_WAIT_FIELDS)
        if values:
            v.update(zip(_WAIT_FIELDS, (text(x) if x is not None else None for x in values),
                         strict=False))
        if v[R_APPLIED_VERSION] is None and v[R_HEARTBEAT_AT] is None:
            self.alive = self.present = False  # the record expired, or the replica left
            self.control = "unknown"
            return
        self.present = True
        try:
            interval = float(v[R_HEARTBEAT_INTERVAL] or 10.0)
            beat = parse_time(v[R_HEARTBEAT_AT])
            version = int(v[R_APPLIED_VERSION] or 0)
            in_flight = int(v[R_IN_FLIGHT] or 0)
        except (ValueError, ContractError):
            self.alive = False
            return
        if beat is not None:
            self.beat = beat
        self.interval = interval
        self.alive = beat is not None and now - beat.timestamp() <= STALE_HEARTBEATS * interval
        if version != self.applied_version:
            self.applied_at = None
        self.applied_version = version
        self.fleet_held = v[R_FLEET_HELD] == "1"
        self.quiet = v[R_QUIET] == "1"
        self.in_flight = in_flight
        self.applied_at = _dt(v[R_APPLIED_AT]) or self.applied_at
        self.quiet_at = _dt(v[R_QUIET_AT]) if self.quiet else None
        self.resume_at = _dt(v[R_RESUME_AT])
        self.control = v[R_CONTROL] or "unknown"

    def from_ack(self, ack: _AckFields) -> None:
        _replica, version, fleet_held, quiet, in_flight, at, resume_at = ack
        self.alive = True
        self.control = CONTROL_CONNECTED
        self.heard_ack = at
        if version < self.applied_version:
            return
        self.confirmed = False
        if version > self.applied_version or self.applied_at is None:
            self.applied_at = at
        self.applied_version = version
        self.fleet_held = fleet_held
        self.quiet = quiet
        self.in_flight = in_flight
        self.resume_at = resume_at
        if quiet and self.quiet_at is None:
            self.quiet_at = at


_AckFields = tuple[str, int, bool, bool, int, Any, Any]
"""replica, version, fleet_held, quiet, in_flight, at, resume_at (times as sent: text)."""


_CANONICAL_ACK: Final = re.compile(
    rb'\{"replica":"([A-Za-z0-9][A-Za-z0-9_.:@-]{0,252})","version":(0|[1-9][0-9]{0,17}),'
    rb'"event":"[a-z]{1,16}","fleet_held":(true|false),"quiet":(true|false),'
    rb'"in_flight":(0|[1-9][0-9]{0,17}),"at":"([0-9T:.Z+-]{1,40})",'
    rb'"resume_at":(?:null|"([0-9T:.Z+-]{1,40})")\}'
)
"""An acknowledgement exactly as replicas write it (``ReplicaRecord.ack_json``, the same
text as ``Ack.to_json()``): read without a JSON parser. Anything else goes through one."""


def _fast_ack(data: Any) -> _AckFields | None:
    """An ack's fields, checked but with its times left as text (parsed only for the report):
    the coordinator reads one ack per replica at every change. None for anything invalid."""
    if type(data) is bytes:
        m = _CANONICAL_ACK.fullmatch(data)
        if m is not None:
            replica, version, held, quiet, in_flight, at, resume_at = m.groups()
            return (replica.decode(), int(version), held == b"true", quiet == b"true",
                    int(in_flight), at.decode(),
                    resume_at.decode() if resume_at is not None else None)
    return _json_ack(data)


def _json_ack(data: Any) -> _AckFields | None:
    """``_fast_ack`` for any JSON form of an ack."""
    if not isinstance(data, bytes | str) or len(data) > MAX_MESSAGE_BYTES:
        return None
    try:
        d = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if type(d) is not dict:
        return None
    replica = d.get("replica")
    version = d.get("version")
    in_flight = d.get("in_flight", 0)
    if type(replica) is not str or type(version) is not int or type(in_flight) is not int:
        return None
    if REPLICA_ID_RE.fullmatch(replica) is None or version < 0:
        return None
    at = d.get("at")
    resume_at = d.get("resume_at")
    return (replica, version, d.get("fleet_held") is True, d.get("quiet") is True, in_flight,
            at if type(at) is str else None, resume_at if type(resume_at) is str else None)


def _dt(value: Any) -> datetime | None:
    """A time from a record (datetime) or an ack (text, checked here)."""
    if value is None or isinstance(value, datetime):
        return value
    try:
        return parse_time(value)
    except ContractError:
        return None


class _Times:
    """``_dt`` with a memory, for one report: at a fleet-wide change most replicas send the
    same few millisecond timestamps, and parsing each again is most of a report's cost."""

    __slots__ = ("_after", "_changed", "_seen")

    def __init__(self, changed: datetime | None) -> None:
        self._changed = changed
        self._seen: dict[Any, datetime | None] = {}
        self._after: dict[datetime, float] = {}

    def after(self, t: datetime | None) -> float | None:
        """Seconds from the change to ``t`` (None when either is unknown)."""
        changed = self._changed
        if t is None or changed is None:
            return None
        try:
            return self._after[t]
        except KeyError:
            seconds = self._after[t] = round(max(0.0, (t - changed).total_seconds()), 6)
            return seconds

    def __call__(self, value: Any) -> datetime | None:
        if value is None or isinstance(value, datetime):
            return value
        try:
            return self._seen[value]
        except KeyError:
            parsed = self._seen[value] = _dt(value)
            return parsed
