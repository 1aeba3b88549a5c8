"""Recurring maintenance windows: a cron expression, a duration and an IANA time zone.

One module evaluates them for both sides: the replica (which starts and ends a schedule's
hold on its own clock, with no coordinator running) and the coordinator (``schedule list``,
``status``, the watcher's audit, the dashboard). ``cronsim`` reads the cron expression,
``zoneinfo`` (with the ``tzdata`` package where the system has no zone database) the zone.

An *occurrence* starts at a time the cron expression names in the schedule's zone and lasts
``duration_s`` seconds of real (elapsed) time. Daylight saving, as Debian's cron and
``cronsim`` do it, for an expression with a fixed minute and hour (``30 2 * * *``):

* a start inside the hour skipped in spring (02:30 on the last Sunday of March in
  Europe/Berlin) does not exist: the occurrence starts at the first minute that does, 03:00
  CEST (01:00 UTC), and still lasts ``duration_s``;
* a start inside the hour repeated in autumn (02:30 on the last Sunday of October) is the
  first of the two 02:30s (CEST, 00:30 UTC): one occurrence, not two;
* an expression whose minute or hour is ``*`` or a step (``*/15 * * * *``) counts real time,
  so it fires in both repeated hours and not in the skipped one.

A window whose occurrence would overlap (or touch) the next one is refused when added
(``check_no_overlap``): occurrences are checked over ``OVERLAP_HORIZON`` (about a year, so both
daylight-saving changes are in it), around each of the zone's changes in that time too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Final

from replica.errors import ContractError

# cronsim and zoneinfo load on first use: a fleet without schedules never needs them
# (``fleetgate status`` starts without them)
if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

MAX_CRON_LEN: Final = 120
"""The longest cron expression accepted."""
MAX_DURATION_S: Final = 7 * 86400.0
"""The longest occurrence (a week, like every other duration of fleetgate)."""
OVERLAP_HORIZON: Final = timedelta(days=400)
"""How far ahead ``check_no_overlap`` looks (both daylight-saving changes of a year)."""
MAX_CHECKED: Final = 10_000
"""The most occurrences ``check_no_overlap`` walks in a row (then it checks around the zone's
changes only: an every-minute window keeps its spacing but there)."""
_MAX_STEPS: Final = 100_000
"""The most cron matches any one walk takes (skipped dates included): a bound, never reached
by a schedule that occurs."""


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One window of a schedule: ``start`` and ``end`` are aware UTC times."""

    start: datetime
    end: datetime
    local_start: datetime
    """``start`` in the schedule's zone."""

    def active(self, now: datetime) -> bool:
        return self.start <= now < self.end


def validate_cron(expr: object) -> str:
    """``expr`` if it is a cron expression cronsim reads, else ``ContractError``: five fields,
    or six with a leading field of seconds (``*/10 * * * * *``: cronsim's form, for windows
    shorter than a minute apart; such an expression counts real time, with no daylight-saving
    fix-up)."""
    if not isinstance(expr, str) or not expr.strip() or len(expr) > MAX_CRON_LEN:
        raise ContractError(f"invalid cron expression {str(expr)[:60]!r}")
    text = " ".join(expr.split())
    if len(text.split()) not in (5, 6):
        raise ContractError(f"invalid cron expression {text[:60]!r}: it needs 5 fields "
                            "(minute hour day-of-month month day-of-week)")
    from cronsim import CronSim, CronSimError

    try:
        CronSim(text, datetime(2026, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise ContractError(f"invalid cron expression {text[:60]!r}: {exc}") from None
    return text


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def zone(name: object) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``, ``UTC``), else ``ContractError``."""
    if not isinstance(name, str) or not name or len(name) > 64 or name.startswith("/") \
            or ".." in name:
        raise ContractError(f"unknown time zone {str(name)[:60]!r}")
    from zoneinfo import ZoneInfoNotFoundError

    try:
        return _zone(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ContractError(f"unknown time zone {name[:60]!r}: use an IANA name such as "
                            "Europe/Berlin or UTC") from None


def validate_duration(seconds: object) -> float:
    """A duration in seconds, at least 1 and at most ``MAX_DURATION_S``."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not 1 <= seconds <= MAX_DURATION_S:
        raise ContractError(f"a window's duration must be 1 s to {MAX_DURATION_S / 86400:g} "
                            f"days, not {seconds!r}")
    return float(seconds)


def cron_starts(cron: str, tz: ZoneInfo, after: datetime) -> Iterator[Occurrence]:
    """Every start the cron expression names in ``tz`` strictly after ``after`` (aware), as
    occurrences of zero length (the caller sets ``end``). Bounded by ``_MAX_STEPS``."""
    from cronsim import CronSim

    sim = CronSim(cron, after.astimezone(tz))
    for _ in range(_MAX_STEPS):
        try:
            local = next(sim)
        except StopIteration:
            return
        start = local.astimezone(UTC)
        yield Occurrence(start, start, local)


def iter_occurrences(
    cron: str, tz: ZoneInfo, duration_s: float, after: datetime, *,
    starting: datetime | None = None, until: datetime | None = None,
    skip: frozenset[date] = frozenset(),
) -> Iterator[Occurrence]:
    """The occurrences that end after ``after``, in order: those that start at or after
    ``starting`` and before ``until``, on no local date in ``skip``."""
    length = timedelta(seconds=duration_s)
    begin = after - length
    if starting is not None and starting - timedelta(seconds=1) > begin:
        begin = starting - timedelta(seconds=1)
    for occ in cron_starts(cron, tz, begin):
        if until is not None and occ.start >= until:
            return
        if starting is not None and occ.start < starting:
            continue
        if occ.local_start.date() in skip:
            continue
        end = occ.start + length
        if end <= after:
            continue
        yield Occurrence(occ.start, end, occ.local_start)


def zone_changes(tz: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """The times between ``start`` and ``end`` when ``tz``'s UTC offset changes (to the hour)."""
    out: list[datetime] = []
    t = start.replace(minute=0, second=0, microsecond=0)
    offset = t.astimezone(tz).utcoffset()
    while t < end:
        t += timedelta(hours=1)
        now_offset = t.astimezone(tz).utcoffset()
        if now_offset != offset:
            out.append(t)
            offset = now_offset
    return out


def check_no_overlap(cron: str, tz: ZoneInfo, duration_s: float, now: datetime) -> None:
    """Raise ``ContractError`` when an occurrence of the window would last into (or up to)
    the next one's start, within ``OVERLAP_HORIZON`` of ``now`` (daylight saving included: the
    night it is an hour shorter), or when the expression names no time in it."""
    length = timedelta(seconds=duration_s)
    horizon = now + OVERLAP_HORIZON

    def walk(start: datetime, end: datetime, limit: int) -> int:
        prev: Occurrence | None = None
        seen = 0
        for occ in cron_starts(cron, tz, start):
            if occ.start >= end or seen >= limit:
                break
            seen += 1
            if prev is not None and prev.start + length >= occ.start:
                raise ContractError(
                    f"a {_span(duration_s)} window overlaps the next occurrence: "
                    f"{prev.local_start.isoformat(timespec='minutes')} "
                    f"({prev.start.strftime('%Y-%m-%dT%H:%MZ')}) is followed by "
                    f"{occ.local_start.isoformat(timespec='minutes')} "
                    f"({occ.start.strftime('%Y-%m-%dT%H:%MZ')}), {_span((occ.start - prev.start).total_seconds())} "
                    "later: shorten the window or space the occurrences")
            prev = occ
        return seen

    if walk(now, horizon, MAX_CHECKED) == 0:
        raise ContractError(f"the cron expression {cron!r} names no time in the next "
                            f"{OVERLAP_HORIZON.days} days")
    for change in zone_changes(tz, now, horizon):
        walk(max(now, change - timedelta(days=2) - length), change + timedelta(days=2), 2000)


def _span(seconds: float) -> str:
    s = int(seconds)
    if s % 86400 == 0:
        return f"{s // 86400}d"
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


__all__ = [
    "MAX_CHECKED",
    "MAX_CRON_LEN",
    "MAX_DURATION_S",
    "OVERLAP_HORIZON",
    "Occurrence",
    "check_no_overlap",
    "cron_starts",
    "iter_occurrences",
    "validate_cron",
    "validate_duration",
    "zone",
    "zone_changes",
]
