"""Fleet holds (``Hold``): the named pauses a fleet is paused by, and when each is in force.

A fleet is paused while any of its holds is active. A hold is *scheduled* before its
``starts_at``, *active* from then (or from the start when it has none) until its
``auto_resume_at`` (or until it is released), and *ended* after that. Every replica works this
out on its own clock from the state it applied, so a maintenance window starts and ends with
no coordinator running.

In the state hash the holds are the field ``holds``: a JSON object keyed by hold name, each
value ``{"reason", "by", "since", "expected_until", "auto_resume_at", "starts_at"}`` (times ISO
8601 UTC or null), and optionally ``"select"`` (a label selector, ``replica.contract.selectors``:
the hold holds only the replicas whose labels match) and ``"canaries"`` (replica ids the hold is
released on while a canary resume runs). ``hold_applies`` is the one rule of whom a hold holds:
a replica of the previous release ignores both fields, and so holds (the safe side); a
``select`` that cannot be read holds every replica (fail closed). The field is trusted only when ``holds_version`` equals ``version`` (the
set-state script writes both); a hash written by an older release or by hand has no trusted
holds, and its ``paused`` flag rules as before.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from replica.contract.clock import format_time, parse_time
from replica.contract.names import FLEET_NAME_RE, MAX_TEXT_LEN, REPLICA_ID_RE
from replica.contract.selectors import MAX_SELECTOR_LEN, Selector, parse_selector
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


class NoCanaryConflict(HoldConflict):
    """A canary ``promote`` or ``rollback`` of a hold no canary resume runs on (it has no
    ``canaries``). Kind ``no_canary``; nothing changed."""

    def __init__(self, fleet: str, holds: tuple[str, ...], hold: str) -> None:
        ContractError.__init__(
            self,
            f"hold {hold!r} of fleet {fleet} has no canary resume running: start one with "
            "resume --hold NAME --canary N, or release the hold with resume --hold NAME",
        )
        self.kind = "no_canary"
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
    select: str | None = None
    """The label selector of the replicas it holds (None: every replica). Kept as written in
    the state, unread: ``hold_applies`` reads it (and holds when it cannot)."""
    canaries: tuple[str, ...] = ()
    """The replica ids a canary resume released it on (sorted)."""

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
            "select": self.select,
            "canaries": list(self.canaries),
        }

    @classmethod
    def from_dict(cls, name: str, data: Any) -> Hold:
        """A hold from its JSON value. Raises ``ContractError``."""
        validate_hold(name)
        if not isinstance(data, dict):
            raise ContractError(f"hold {name}: not an object")
        owner = f"hold {name}"
        return cls(
            name=name,
            reason=text_field(data, "reason", owner),
            by=text_field(data, "by", owner),
            since=time_field(data, "since", owner),
            expected_until=time_field(data, "expected_until", owner),
            auto_resume_at=time_field(data, "auto_resume_at", owner),
            starts_at=time_field(data, "starts_at", owner),
            select=_select(data.get("select")),
            canaries=canaries_of(data.get("canaries")),
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


UNREADABLE_SELECT: Final = "<unreadable>"
"""What ``select`` reads as when the state holds something other than text there (a hand
edit): no selector parses from it, so the hold holds every replica."""


def _select(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_SELECTOR_LEN:
        return UNREADABLE_SELECT
    return value


def canaries_of(value: Any) -> tuple[str, ...]:
    """Replica ids, sorted; anything else (a hand edit) is no canary: the hold stays on every
    replica (fail closed). An empty list may come back from Lua's cjson as ``{}``."""
    if not isinstance(value, list) or len(value) > 10_000:
        return ()
    if not all(isinstance(v, str) and REPLICA_ID_RE.fullmatch(v) for v in value):
        return ()
    return tuple(sorted(set(value)))


@functools.lru_cache(maxsize=256)
def read_select(text: str) -> Selector | str:
    """The selector of a hold's ``select``, or why it cannot be read (a str)."""
    try:
        return parse_selector(text)
    except ContractError as exc:
        return str(exc)


def hold_applies(hold: Hold, labels: Mapping[str, str], replica_id: str) -> bool:
    """Whether ``hold`` holds the replica ``replica_id`` with ``labels``: not when it is one of
    the hold's canaries, else when the hold has no selector, or its selector matches, or its
    selector cannot be read (fail closed)."""
    if replica_id in hold.canaries:
        return False
    if hold.select is None:
        return True
    selector = read_select(hold.select)
    return selector.matches(labels) if isinstance(selector, Selector) else True


def select_error(hold: Hold) -> str | None:
    """Why the hold's ``select`` cannot be read, or None (none, or it reads)."""
    if hold.select is None:
        return None
    selector = read_select(hold.select)
    return selector if isinstance(selector, str) else None


def holds_field_error(exc: ContractError) -> InvalidMessage:
    return InvalidMessage("bad_field", f"holds: {str(exc)[:120]}")


def text_field(data: Mapping[str, Any], key: str, owner: str, default: str | None = "") -> str:
    """The text ``key`` of a hold's or a schedule's JSON object (``owner``: ``hold NAME``, for
    the error): ``default`` when it is missing or null (None: required), else a string of at
    most ``MAX_TEXT_LEN``. Raises ``ContractError``."""
    value = data.get(key, default)
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or len(value) > MAX_TEXT_LEN:
        raise ContractError(f"{owner}: bad {key}")
    return value


def time_field(data: Mapping[str, Any], key: str, owner: str) -> datetime | None:
    """The time ``key`` of a hold's or a schedule's JSON object: None when missing, null or
    empty, else an ISO 8601 time. Raises ``ContractError`` (``owner``: as ``text_field``)."""
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise ContractError(f"{owner}: bad {key}")
    return parse_time(value)


__all__ = [
    "ACTIVE",
    "DEFAULT_HOLD",
    "ENDED",
    "MAX_HOLDS",
    "SCHEDULED",
    "UNREADABLE_SELECT",
    "ActiveHoldConflict",
    "Hold",
    "Holds",
    "NoCanaryConflict",
    "active_holds",
    "canaries_of",
    "hold_applies",
    "holds_field_error",
    "holds_from_json",
    "holds_from_object",
    "holds_to_dict",
    "holds_to_json",
    "next_transition",
    "read_select",
    "running_since",
    "select_error",
    "text_field",
    "time_field",
    "validate_hold",
]
