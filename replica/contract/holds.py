"""Fleet holds (``Hold``): the named pauses a fleet is paused by, and when each is in force.

A fleet is paused while any of its holds is active. A hold is *scheduled* before its
``starts_at``, *active* from then (or from the start when it has none) until its
``auto_resume_at`` (or until it is released), and *ended* after that. Every replica works this
out on its own clock from the state it applied, so a maintenance window starts and ends with
no coordinator running.

In the state hash the holds are the field ``holds``: a JSON object keyed by hold name, each
value ``{"reason", "by", "since", "expected_until", "auto_resume_at", "starts_at"}`` (times ISO
8601 UTC or null). The field is trusted only when ``holds_version`` equals ``version`` (the
set-state script writes both); a hash written by an older release or by hand has no trusted
holds, and its ``paused`` flag rules as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from replica.contract.clock import format_time, parse_time
from replica.contract.names import FLEET_NAME_RE, MAX_TEXT_LEN
from replica.errors import ContractError, HoldConflict, InvalidMessage

DEFAULT_HOLD: Final = "default"
"""The hold a pause without a hold name adds (and a legacy pause reads as)."""
MAX_HOLDS: Final = 20
"""The most holds a fleet may have at once (active and scheduled)."""

SCHEDULED: Final = "scheduled"
ACTIVE: Final = "active"
ENDED: Final = "ended"


class ActiveHoldConflict(HoldConflict):
    """A pause with a later start (``--at``) of a hold that is active now, not asked to
    reschedule it: it would end the hold now (and, when it is the last active one, resume the
    fleet). Kind ``active``; nothing changed."""

    def __init__(self, fleet: str, holds: tuple[str, ...], hold: str) -> None:
        ContractError.__init__(
            self,
            f"hold {hold!r} of fleet {fleet} is active now: scheduling it for later would end "
            "it now (and with it the pause, if no other hold is active): release it first, or "
            "pass --reschedule to end it now and start it again then",
        )
        self.kind = "active"
        self.fleet = fleet
        self.holds = holds
        self.hold = hold


def validate_hold(name: object) -> str:
    """Return ``name`` if it is a valid hold name (the rules of a fleet name), else raise
    ``ContractError``."""
    if not isinstance(name, str) or FLEET_NAME_RE.fullmatch(name) is None:
        raise ContractError(
            f"invalid hold name {str(name)[:80]!r}: it must match [a-z0-9][a-z0-9_.-]{{0,62}}"
        )
    return name


@dataclass(frozen=True, slots=True)
class Hold:
    """One named pause of a fleet."""

    name: str
    reason: str
    by: str
    since: datetime | None
    """When it became active (``starts_at`` for a scheduled hold)."""
    expected_until: datetime | None = None
    auto_resume_at: datetime | None = None
    starts_at: datetime | None = None

    def status(self, now: datetime) -> str:
        """``scheduled``, ``active`` or ``ended`` at ``now``."""
        if self.starts_at is not None and now < self.starts_at:
            return SCHEDULED
        if self.auto_resume_at is not None and now >= self.auto_resume_at:
            return ENDED
        return ACTIVE

    def active(self, now: datetime) -> bool:
        return self.status(now) == ACTIVE

    def to_dict(self) -> dict[str, Any]:
        """The JSON value of this hold in the ``holds`` object (its name is the key)."""
        return {
            "reason": self.reason,
            "by": self.by,
            "since": format_time(self.since) or None,
            "expected_until": format_time(self.expected_until) or None,
            "auto_resume_at": format_time(self.auto_resume_at) or None,
            "starts_at": format_time(self.starts_at) or None,
        }

    @classmethod
    def from_dict(cls, name: str, data: Any) -> Hold:
        """A hold from its JSON value. Raises ``ContractError``."""
        validate_hold(name)
        if not isinstance(data, dict):
            raise ContractError(f"hold {name}: not an object")
        return cls(
            name=name,
            reason=_text(data, "reason", name),
            by=_text(data, "by", name),
            since=_time(data, "since", name),
            expected_until=_time(data, "expected_until", name),
            auto_resume_at=_time(data, "auto_resume_at", name),
            starts_at=_time(data, "starts_at", name),
        )


Holds = tuple[Hold, ...]
"""A fleet's holds, sorted by name."""


def holds_to_dict(holds: Iterable[Hold]) -> dict[str, dict[str, Any]]:
    """The ``holds`` object: name -> value."""
    return {h.name: h.to_dict() for h in sorted(holds, key=lambda h: h.name)}


def holds_to_json(holds: Iterable[Hold]) -> str:
    return json.dumps(holds_to_dict(holds), separators=(",", ":"))


def holds_from_object(data: Any) -> Holds:
    """Holds from the decoded ``holds`` object. Raises ``ContractError``."""
    if not isinstance(data, dict):
        raise ContractError("holds is not an object")
    if len(data) > MAX_HOLDS:
        raise ContractError(f"holds has {len(data)} entries, more than {MAX_HOLDS}")
    return tuple(sorted((Hold.from_dict(k, v) for k, v in data.items()), key=lambda h: h.name))


def holds_from_json(raw: str) -> Holds:
    """Holds from the hash field. Raises ``ContractError``."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ContractError("holds is not JSON") from None
    return holds_from_object(data)


def active_holds(holds: Iterable[Hold], now: datetime) -> Holds:
    return tuple(h for h in holds if h.active(now))


def next_transition(holds: Iterable[Hold], now: datetime) -> datetime | None:
    """The first time after ``now`` when a hold starts or ends (None when none will)."""
    times = [
        t for h in holds for t in (h.starts_at, h.auto_resume_at) if t is not None and t > now
    ]
    return min(times) if times else None


def running_since(holds: Iterable[Hold], now: datetime) -> datetime | None:
    """When the last hold that ended by itself (before ``now``) ended, or None."""
    ends = [
        h.auto_resume_at for h in holds
        if h.auto_resume_at is not None and h.auto_resume_at <= now
        and (h.starts_at is None or h.starts_at <= h.auto_resume_at)
    ]
    return max(ends) if ends else None


def holds_field_error(exc: ContractError) -> InvalidMessage:
    return InvalidMessage("bad_field", f"holds: {str(exc)[:120]}")


def _text(data: Mapping[str, Any], field: str, name: str) -> str:
    value = data.get(field, "")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT_LEN:
        raise ContractError(f"hold {name}: bad {field}")
    return value


def _time(data: Mapping[str, Any], field: str, name: str) -> datetime | None:
    value = data.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise ContractError(f"hold {name}: bad {field}")
    return parse_time(value)


__all__ = [
    "ACTIVE",
    "DEFAULT_HOLD",
    "ENDED",
    "MAX_HOLDS",
    "SCHEDULED",
    "ActiveHoldConflict",
    "Hold",
    "Holds",
    "active_holds",
    "holds_field_error",
    "holds_from_json",
    "holds_from_object",
    "holds_to_dict",
    "holds_to_json",
    "next_transition",
    "running_since",
    "validate_hold",
]
