"""A fleet's schedules (``Schedule``): recurring maintenance windows, each a hold named after it.

They live in the hash ``fleetgate:{NAME}:schedules`` (``Keys.schedules``): schedule name ->
JSON ``{"cron", "duration_s", "timezone", "reason", "by", "created_at", "starting", "until",
"skip", "ended_early", "canaries", "canary_for"}`` (times ISO 8601 UTC or null; ``skip`` a
list of local dates ``YYYY-MM-DD``; ``ended_early`` the start of the occurrence an operator ended
early, which is then over; ``canaries`` the sorted replica ids a canary resume released the
occurrence starting at ``canary_for`` on). Written by the coordinator only (``schedule_write.lua``); every replica reads the
hash at every poll, and at once when the control channel says ``{"fleet", "schedules"}``.

During each occurrence the schedule is a hold of the fleet (``schedule_holds``): the hold is
named after the schedule, its reason and ``by`` are the schedule's, it starts at the
occurrence's start and ends at its end (``starts_at``/``auto_resume_at``), so it is a pool hold
``fleet:NAME`` on every replica, in ``/pool``, the records and the metrics like any other. The
fleet is paused while any hold of the state or any schedule's occurrence is active
(``with_schedules``). A schedule and a hold of the state never share a name (the coordinator
refuses it); should they (a hand edit), the state's hold wins and the schedule is not merged.

A canary resume of an occurrence (``resume --hold NAME --canary N``) writes ``canaries`` and
``canary_for``: the occurrence's hold then has those ``canaries`` (``hold_applies`` releases
them), but only the occurrence that starts at ``canary_for``: the next one holds every replica
again. Both are read fail closed: anything but a list of replica ids, or a ``canary_for`` that
is not a time, is no canary (the hold stays on every replica) and never makes the schedule
unreadable; a replica of a release before them ignores both fields and stays held (the safe
side).

A fleet has at most ``MAX_SCHEDULES`` schedules, a cap of their own beside ``MAX_HOLDS``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, Final

from replica.contract.clock import format_time, parse_time
from replica.contract.holds import Hold, canaries_of, text_field, time_field, validate_hold
from replica.contract.names import MAX_TEXT_LEN, text
from replica.contract.recurrence import (
    Occurrence,
    iter_occurrences,
    validate_cron,
    validate_duration,
    zone,
)
from replica.contract.state import FleetState
from replica.errors import ContractError

MAX_SCHEDULES: Final = 20
"""The most schedules a fleet may have (their own cap: they do not count toward MAX_HOLDS)."""
MAX_SKIP: Final = 100
"""The most dates one schedule may skip."""
SCHEDULES_NOTICE: Final = "schedules"
"""The field of the control message that tells replicas the schedules changed."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring maintenance window of a fleet."""

    name: str
    cron: str
    duration_s: float
    timezone: str
    reason: str = ""
    by: str = ""
    created_at: datetime | None = None
    starting: datetime | None = None
    until: datetime | None = None
    skip: tuple[date, ...] = field(default=())
    ended_early: datetime | None = None
    """The start of the occurrence ended early (``resume --hold NAME``): over for good."""
    canaries: tuple[str, ...] = ()
    """The replica ids a canary resume released the occurrence ``canary_for`` on (sorted)."""
    canary_for: datetime | None = None
    """The start of the occurrence ``canaries`` apply to (no other occurrence has them)."""

    def __post_init__(self) -> None:
        validate_hold(self.name)
        validate_cron(self.cron)
        validate_duration(self.duration_s)
        zone(self.timezone)
        if len(self.skip) > MAX_SKIP:
            raise ContractError(f"schedule {self.name}: more than {MAX_SKIP} skipped dates")
        for name, value in (("reason", self.reason), ("by", self.by)):
            if len(value) > MAX_TEXT_LEN:
                raise ContractError(f"schedule {self.name}: {name} is too long")
        if self.starting is not None and self.until is not None and self.until <= self.starting:
            raise ContractError(f"schedule {self.name}: until must be after starting")

    def to_dict(self) -> dict[str, Any]:
        """The JSON value of the schedule in the hash (its name is the field)."""
        return {
            "cron": self.cron,
            "duration_s": int(self.duration_s) if self.duration_s == int(self.duration_s)
            else self.duration_s,
            "timezone": self.timezone,
            "reason": self.reason,
            "by": self.by,
            "created_at": format_time(self.created_at) or None,
            "starting": format_time(self.starting) or None,
            "until": format_time(self.until) or None,
            "skip": [d.isoformat() for d in self.skip],
            "ended_early": format_time(self.ended_early) or None,
            "canaries": list(self.canaries),
            "canary_for": format_time(self.canary_for) or None,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_dict(cls, name: str, data: Any) -> Schedule:
        """A schedule from its JSON value. Raises ``ContractError``."""
        if not isinstance(data, dict):
            raise ContractError(f"schedule {name[:64]!r}: not an object")
        skip_raw = data.get("skip") or []
        if not isinstance(skip_raw, list) or len(skip_raw) > MAX_SKIP:
            raise ContractError(f"schedule {name[:64]!r}: bad skip")
        duration = data.get("duration_s")
        if isinstance(duration, str):
            raise ContractError(f"schedule {name[:64]!r}: bad duration_s")
        owner = f"schedule {name[:64]!r}"  # its fields are read as a hold's (holds.text_field)
        return cls(
            name=name,
            cron=text_field(data, "cron", owner, None),
            duration_s=validate_duration(duration),
            timezone=text_field(data, "timezone", owner, None),
            reason=text_field(data, "reason", owner),
            by=text_field(data, "by", owner),
            created_at=time_field(data, "created_at", owner),
            starting=time_field(data, "starting", owner),
            until=time_field(data, "until", owner),
            skip=tuple(sorted({parse_date(d) for d in skip_raw})),
            ended_early=time_field(data, "ended_early", owner),
            canaries=canaries_of(data.get("canaries")),
            canary_for=_lenient_time(data.get("canary_for")),
        )

    @classmethod
    def from_json(cls, name: str, raw: str | bytes) -> Schedule:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise ContractError(f"schedule {name[:64]!r}: not JSON") from None
        return cls.from_dict(name, data)

    # ------------------------------------------------------------------ occurrences

    def iter_from(self, after: datetime) -> Iterable[Occurrence]:
        """The occurrences that end after ``after``, in order (ended-early ones included)."""
        return iter_occurrences(
            self.cron, zone(self.timezone), self.duration_s, after,
            starting=self.starting, until=self.until, skip=frozenset(self.skip),
        )

    def current_or_next(self, now: datetime) -> Occurrence | None:
        """The occurrence in force at ``now`` or, when none is, the next one (None: no more).
        An occurrence ended early is over."""
        for occ in self.iter_from(now):
            if self.ended_early is not None and occ.start == self.ended_early:
                continue
            return occ
        return None

    def canaries_for(self, occ: Occurrence) -> tuple[str, ...]:
        """The canaries of ``occ``: ``canaries`` when they are for it, else none."""
        if self.canaries and self.canary_for is not None and self.canary_for == occ.start:
            return self.canaries
        return ()

    def hold(self, occ: Occurrence) -> Hold:
        """The fleet hold this schedule is during ``occ`` (with its canaries, if a canary
        resume of that very occurrence released some)."""
        return Hold(self.name, self.reason, self.by, occ.start, occ.end, occ.end, occ.start,
                    canaries=self.canaries_for(occ))


def occurrences(schedule: Schedule, start: datetime, end: datetime) -> list[Occurrence]:
    """The occurrences of ``schedule`` that overlap ``[start, end)`` (times aware), in order: for
    a timeline. One ended early is listed as it was scheduled (``schedule.ended_early`` names
    it)."""
    out: list[Occurrence] = []
    for occ in schedule.iter_from(start):
        if occ.start >= end:
            break
        out.append(occ)
    return out


def next_occurrences(schedule: Schedule, now: datetime, count: int = 3) -> list[Occurrence]:
    """The occurrence in force at ``now`` (unless ended early) and the next ones: ``count``."""
    out: list[Occurrence] = []
    for occ in schedule.iter_from(now):
        if schedule.ended_early is not None and occ.start == schedule.ended_early:
            continue
        out.append(occ)
        if len(out) >= count:
            break
    return out


def schedules_notice(data: str | bytes, fleet: str) -> bool:
    """Whether a control message is the notice that ``fleet``'s schedules changed
    (``{"fleet": NAME, "schedules": TIME}``, published by ``schedule_write.lua``). A replica of
    an older release counts it as an invalid message and reads the schedules at its next poll
    (it has none to read: it ignores them)."""
    if len(data) > 512:
        return False
    try:
        decoded = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return (isinstance(decoded, dict) and decoded.get("fleet") == fleet
            and SCHEDULES_NOTICE in decoded and "paused" not in decoded)


def parse_date(value: object) -> date:
    """A ``YYYY-MM-DD`` date, else ``ContractError``."""
    try:
        if not isinstance(value, str) or len(value) != 10:
            raise ValueError
        return date.fromisoformat(value)
    except ValueError:
        raise ContractError(f"not a date (YYYY-MM-DD): {str(value)[:40]!r}") from None


@dataclass(frozen=True, slots=True)
class ScheduleSet:
    """A fleet's schedules as read from the hash: the readable ones, sorted by name, and the
    entries that could not be read (name -> why), which are skipped, never the others."""

    schedules: tuple[Schedule, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()

    def get(self, name: str) -> Schedule | None:
        return next((s for s in self.schedules if s.name == name), None)


def schedules_from_hash(raw: Mapping[Any, Any]) -> ScheduleSet:
    """The schedules in an HGETALL reply (str or bytes). An entry that cannot be read (not
    UTF-8, not JSON, a bad field, a bad name) is skipped and named in ``unreadable``."""
    good: list[Schedule] = []
    bad: list[tuple[str, str]] = []
    for k, v in raw.items():
        try:
            name = k.decode() if isinstance(k, bytes) else str(k)
        except UnicodeDecodeError:
            bad.append((text(k)[:64], "its name is not UTF-8"))
            continue
        try:
            validate_hold(name)
            value = v.decode() if isinstance(v, bytes) else str(v)
            good.append(Schedule.from_json(name, value))
        except (ContractError, UnicodeDecodeError) as exc:
            bad.append((name[:64], str(exc)[:160]))
    if len(good) > MAX_SCHEDULES:
        bad += [(s.name, f"past the cap of {MAX_SCHEDULES}") for s in good[MAX_SCHEDULES:]]
        good = good[:MAX_SCHEDULES]
    return ScheduleSet(tuple(sorted(good, key=lambda s: s.name)), tuple(sorted(bad)))


def schedule_holds(
    schedules: Iterable[Schedule], now: datetime, exclude: Iterable[str] = ()
) -> tuple[tuple[Hold, ...], datetime | None]:
    """One hold per schedule for its occurrence in force at ``now`` or its next one, and until
    when these holds are the ones to merge (the first of their ends; None: for ever)."""
    taken = set(exclude)
    holds: list[Hold] = []
    until: datetime | None = None
    for sch in schedules:
        if sch.name in taken:
            continue
        occ = sch.current_or_next(now)
        if occ is None:
            continue
        holds.append(sch.hold(occ))
        until = occ.end if until is None or occ.end < until else until
    return tuple(holds), until


def with_schedules(
    state: FleetState, schedules: Iterable[Schedule], now: datetime
) -> tuple[FleetState, datetime | None]:
    """``state`` with each schedule's current or next occurrence as a hold, and until when
    that is so (None: for ever). Unchanged (the same object) without schedules."""
    own = state.effective_holds()
    extra, until = schedule_holds(schedules, now, exclude=(h.name for h in own))
    if not extra:
        return state, until
    holds = tuple(sorted(own + extra, key=lambda h: h.name))
    return replace(state, holds=holds), until


def with_active_schedules(
    state: FleetState, schedules: Iterable[Schedule], now: datetime
) -> FleetState:
    """``state`` with the occurrences in force at ``now`` as holds (``status`` shows the fleet
    paused by them, as the replicas are); the same object when none is."""
    own = state.effective_holds()
    extra, _ = schedule_holds(schedules, now, exclude=(h.name for h in own))
    active = tuple(h for h in extra if h.active(now))
    if not active:
        return state
    return replace(state, holds=tuple(sorted(own + active, key=lambda h: h.name)))


def _lenient_time(value: Any) -> datetime | None:
    """``canary_for``: a time, or None for anything else (no canary: fail closed)."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        return parse_time(value)
    except ContractError:
        return None


__all__ = [
    "MAX_SCHEDULES",
    "MAX_SKIP",
    "SCHEDULES_NOTICE",
    "Schedule",
    "ScheduleSet",
    "next_occurrences",
    "occurrences",
    "parse_date",
    "schedule_holds",
    "schedules_from_hash",
    "schedules_notice",
    "with_active_schedules",
    "with_schedules",
]
