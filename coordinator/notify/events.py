"""A stream entry as a notification: ``Event``, its JSON body and its sentence (``text``).

Two streams feed the notifier. The audit stream (``fleetgate:{F}:audit``) holds every change
(``pause``, ``resume``, ``restore``, and whatever action a later release audits, such as a
hold's or a maintenance window's); the events stream (``fleetgate:{F}:events``) holds what the
coordinator observed (``overdue``: a forgotten pause; ``wait``: a wait that ended with
stragglers). Every entry becomes an event whatever its action: the known fields (``action``,
``hold``, ``reason``, ``by``, ``version``, ``at``) are the event's own, the others go to
``details``. An action this module has no sentence for still gets one
("fleet orders: hold added by alice ...").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from coordinator.durations import format_age
from replica.contract import (
    A_ACTION,
    A_AT,
    A_BY,
    A_REASON,
    A_VERSION,
    DEFAULT_HOLD,
    format_time,
    text,
)

HOLD: Final = "hold"
"""The field naming the fleet hold an entry is about (absent: the fleet as a whole)."""

# Actions of the events stream, and their fields beside the audit ones.
OVERDUE: Final = "overdue"
"""A pause outlived its expected window (or FLEETGATE_MAX_PAUSE): ``since``, ``age_s``,
``expected_until`` (empty without a window), ``max_pause_s``."""
WAIT: Final = "wait"
"""A wait ended with stragglers: ``wait_action`` (pause or resume), ``elapsed_s``,
``replicas`` (how many it waited for), ``stragglers`` (JSON ``[{"id", "why"}]``)."""

_OWN: Final = frozenset({A_ACTION, A_REASON, A_BY, A_VERSION, A_AT, HOLD})
_NUMBERS: Final = frozenset({"age_s", "elapsed_s", "max_pause_s", "replicas"})
_JSON: Final = frozenset({"stragglers"})

# sentences for actions a later release may audit (hold and window changes); any other
# action reads as its words ("window_started" -> "window started")
_HOLD_VERBS: Final = {
    "hold_added": "hold {hold} added",
    "hold_updated": "hold {hold} updated",
    "hold_released": "hold {hold} released",
    "hold_scheduled": "hold {hold} scheduled",
    "hold_cancelled": "scheduled hold {hold} cancelled",
    "window_scheduled": "maintenance window {hold} scheduled",
    "window_started": "maintenance window {hold} started",
    "window_ended": "maintenance window {hold} ended",
    "schedule_added": "recurring window {hold} added",
    "schedule_updated": "recurring window {hold} changed",
    "schedule_removed": "recurring window {hold} removed",
    "schedule_started": "recurring window {hold} started",
    "schedule_ended": "recurring window {hold} ended",
    "schedule_ended_early": "recurring window {hold} ended early (the schedule stays)",
    "canary_started": "canary resume of hold {hold} started: released on {canaries}",
    "canary_promoted": "canary resume of hold {hold} promoted: hold released",
    "canary_rolled_back": "canary resume of hold {hold} rolled back: the hold is back on "
                          "every replica",
}


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the audit or events stream, as the receivers get it."""

    id: str
    """The stream entry id (unique within its stream; receivers may deduplicate on it)."""
    source: str
    """``audit`` or ``events``: the stream it came from."""
    event: str
    """The entry's ``action``."""
    fleet: str
    hold: str | None
    reason: str
    by: str
    version: int
    at: str | None
    """ISO 8601 UTC, as the entry has it (or the entry id's time when it has none)."""
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_entry(
        cls, fleet: str, source: str, entry_id: Any, fields: Mapping[Any, Any]
    ) -> Event:
        h = {text(k): text(v) for k, v in fields.items()}
        eid = text(entry_id)
        details: dict[str, Any] = {}
        for key, value in h.items():
            if key not in _OWN:
                details[key] = _detail(key, value)
        try:
            version = int(h.get(A_VERSION) or 0)
        except ValueError:
            version = 0
        return cls(
            id=eid,
            source=source,
            event=h.get(A_ACTION) or "unknown",
            fleet=fleet,
            hold=h.get(HOLD) or None,
            reason=h.get(A_REASON, ""),
            by=h.get(A_BY, ""),
            version=version,
            at=h.get(A_AT) or _id_time(eid),
            details=details,
        )

    @property
    def text(self) -> str:
        """One sentence a person reads in a chat channel."""
        return describe(self)

    def body(self) -> dict[str, Any]:
        """The JSON body of a ``json`` notification."""
        return {
            "event": self.event,
            "fleet": self.fleet,
            "hold": self.hold,
            "reason": self.reason,
            "by": self.by,
            "version": self.version,
            "at": self.at,
            "text": self.text,
            "id": self.id,
            "source": self.source,
            "details": self.details,
        }


def describe(e: Event) -> str:
    """The sentence of an event."""
    who = f" by {e.by}" if e.by else ""
    hold = f" (hold {e.hold})" if e.hold and e.hold != DEFAULT_HOLD else ""
    why = f": {e.reason}" if e.reason else ""
    version = f" (version {e.version})" if e.version else ""
    if e.event == "pause":
        return f"Fleet {e.fleet} paused{who}{hold}{why}{version}."
    if e.event == "resume":
        return f"Fleet {e.fleet} resumed{who}{hold}{why}{version}."
    if e.event == "restore":
        return (f"Fleet {e.fleet}: its state was lost in Redis and restored from the replicas"
                f"{who}{why}{version}.")
    if e.event == OVERDUE:
        return _overdue(e)
    if e.event == WAIT:
        return _wait(e)
    early = "_early" if e.details.get("early") == "1" else ""  # a schedule_ended
    template = _HOLD_VERBS.get(e.event.replace("-", "_") + early) or _HOLD_VERBS.get(
        e.event.replace("-", "_"))
    if template is not None and e.hold:
        canaries = e.details.get("canaries") or "?"
        return (f"Fleet {e.fleet}: {template.format(hold=e.hold, canaries=canaries)}{who}{why}"
                f"{version}.")
    words = e.event.replace("_", " ").replace("-", " ")
    return f"Fleet {e.fleet}: {words}{who}{hold}{why}{version}."


def _overdue(e: Event) -> str:
    age = e.details.get("age_s")
    since = e.details.get("since") or "?"
    lasted = f" for {format_age(float(age))}" if isinstance(age, int | float) else ""
    until = e.details.get("expected_until")
    limit = (f"it was expected to end at {until}" if until
             else "it was given no window and passed FLEETGATE_MAX_PAUSE")
    paused_by = f", paused by {e.by}" if e.by else ""
    hold = f" (hold {e.hold})" if e.hold and e.hold != DEFAULT_HOLD else ""
    return (f"Fleet {e.fleet} has been paused{lasted}{hold} (since {since}{paused_by}: "
            f"{e.reason or 'no reason'}); {limit}. Forgotten?")


def _wait(e: Event) -> str:
    stragglers = e.details.get("stragglers")
    listed = stragglers if isinstance(stragglers, list) else []
    names = ", ".join(
        f"{s.get('id', '?')} ({s.get('why') or 'unknown'})" for s in listed if isinstance(s, dict)
    )
    total = e.details.get("replicas")
    of = f" of {int(total)}" if isinstance(total, int | float) else ""
    action = e.details.get("wait_action") or "pause"
    goal = "get quiet" if action == "pause" else "resume"
    elapsed = e.details.get("elapsed_s")
    within = f" within {elapsed:g} s" if isinstance(elapsed, int | float) else ""
    return (f"Fleet {e.fleet}: {len(listed)}{of} replicas did not {goal}{within} after the "
            f"{action} at version {e.version}: {names or 'none named'}.")


def _detail(key: str, value: str) -> Any:
    if key in _NUMBERS:
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and key == "replicas" else number
    if key in _JSON:
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _id_time(entry_id: str) -> str | None:
    try:
        ms = int(entry_id.split("-", 1)[0])
    except ValueError:
        return None
    return format_time(datetime.fromtimestamp(ms / 1000, UTC))


def entry_ms(entry_id: Any) -> int | None:
    """The time (ms since the epoch, Redis's clock) in a stream entry id."""
    try:
        return int(text(entry_id).split("-", 1)[0])
    except ValueError:
        return None


__all__ = ["HOLD", "OVERDUE", "WAIT", "Event", "describe", "entry_ms"]
