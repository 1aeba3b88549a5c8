"""A fleet's holds on a timeline (``read_timeline``): the last hours from its audit trail, the
next days of planned windows, and now.

The read is bounded whatever the trail holds: one ``XREVRANGE`` of the audit stream from now
back to the left edge with a ``COUNT`` of ``cap`` (``truncated`` when that many came: the
trail is complete only from the oldest entry read, ``audit_from``), and one ``HGETALL`` of the
state, and the fleet's schedules (their occurrences: ``coordinator.fleet.occurrences``). The
entries are read as bytes: a field that is not UTF-8, an entry with no time or an
unknown action, a schedule that cannot be read is skipped and counted (``skipped``), never an
error. A state that cannot be
read is the fleet's error (``coordinator.fleet.overview.read_isolated`` shows it as such).
The spans are rebuilt by ``coordinator.fleet.spans``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from redis.asyncio import Redis
from redis.client import NEVER_DECODE

from coordinator.fleet.calls import again
from coordinator.fleet.models import AuditEvent
from coordinator.fleet.occurrences import read_schedules, schedule_spans, without_schedule_holds
from coordinator.fleet.spans import ENTRY_FIELDS, Entry, Span, clip, rebuild
from replica.contract import FleetState, Keys, format_time, parse_time
from replica.errors import ContractError

MAX_ENTRIES: Final = 1000
"""The most audit entries one fleet's timeline reads."""
MAX_HOURS: Final = 168
MAX_DAYS: Final = 31


@dataclass(frozen=True, slots=True)
class Timeline:
    fleet: str
    now: datetime
    left: datetime
    right: datetime
    spans: list[Span]
    skipped: int
    truncated: bool
    audit_from: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet, "now": format_time(self.now), "start": format_time(self.left),
            "end": format_time(self.right), "audit_from": format_time(self.audit_from),
            "spans": [s.to_dict(self.now) for s in self.spans],
            "skipped": self.skipped, "truncated": self.truncated,
        }


def _pairs(fields: Any) -> Any:
    if isinstance(fields, Mapping):
        return fields.items()
    return zip(fields[::2], fields[1::2], strict=False)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except ContractError:
        return None


def parse_entry(raw: Any) -> Entry | None:
    """One ``XREVRANGE`` item (bytes) as an ``Entry``; None when it cannot be read (not a
    pair, bytes that are not UTF-8). Built here rather than by ``AuditEvent.from_entry``: a
    timeline reads thousands at a time."""
    try:
        entry_id, fields = raw
        h = {_str(k): _str(v) for k, v in _pairs(fields)}
    except (TypeError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    version = h.get("version", "")
    version = version if version.isdigit() and len(version) < 19 else "0"
    event = AuditEvent(
        id=_str(entry_id), action=h.get("action", ""), reason=h.get("reason", ""),
        by=h.get("by", ""), version=int(version), at=_time(h.get("at")), hold=h.get("hold", ""),
        starts_at=_time(h.get("starts_at")), auto_resume_at=_time(h.get("auto_resume_at")),
    )
    return Entry(event, {k: h[k] for k in ENTRY_FIELDS if h.get(k)})


async def read_entries(
    redis: Redis, keys: Keys, since: datetime, cap: int
) -> tuple[list[Entry | None], bool]:
    """The audit entries since ``since`` (by their stream ids), at most ``cap``, oldest first
    (None for one that cannot be read), and whether ``cap`` of them came (more may be older)."""
    low = f"{int(since.timestamp() * 1000)}-0"
    raw: Any = await again(lambda: redis.execute_command(  # type: ignore[no-untyped-call]
        "XREVRANGE", keys.audit, "+", low, "COUNT", cap, **{NEVER_DECODE: True}))
    items = list(raw or [])
    return [parse_entry(item) for item in reversed(items)], len(items) >= cap


async def read_state(redis: Redis, keys: Keys, fleet: str) -> FleetState:
    raw = await again(lambda: redis.execute_command(  # type: ignore[no-untyped-call]
        "HGETALL", keys.state, **{NEVER_DECODE: True}))
    return FleetState.from_hash(fleet, raw)


async def read_timeline(
    redis: Redis, fleet: str, now: datetime, hours: float, days: float,
    cap: int = MAX_ENTRIES, planned: list[Span] | None = None,
) -> Timeline:
    """The fleet's holds from ``hours`` before ``now`` to ``days`` after it. ``planned``:
    spans computed elsewhere (schedule occurrences), added as they are. Raises what Redis
    raises, and ``InvalidMessage`` for a state that cannot be read."""
    keys = Keys(fleet)
    left = now - timedelta(hours=hours)
    right = now + timedelta(days=days)
    state = await read_state(redis, keys, fleet)
    schedules = await read_schedules(redis, keys)
    raw, truncated = await read_entries(redis, keys, left, max(1, cap))
    entries = [e for e in raw if e is not None]
    audit_from = left
    if truncated and entries and entries[0].event.at is not None:
        audit_from = max(left, entries[0].event.at)
    rebuilt = rebuild(entries, state, now)
    spans = without_schedule_holds(rebuilt.spans, schedules)
    spans += schedule_spans(schedules, entries, left, right, now)
    spans = clip(spans + list(planned or []), left, right, now)
    spans.sort(key=lambda s: (s.start is not None, s.start or now, s.hold))
    skipped = rebuilt.skipped + raw.count(None) + len(schedules.unreadable)
    return Timeline(fleet, now, left, right, spans, skipped, truncated, audit_from)


__all__ = ["MAX_DAYS", "MAX_ENTRIES", "MAX_HOURS", "Timeline", "parse_entry", "read_entries",
           "read_state", "read_timeline"]
