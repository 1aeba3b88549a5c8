"""Time in the contract: ISO 8601 UTC with milliseconds, which sorts as a string."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from replica.contract.names import text
from replica.errors import ContractError


def now_utc() -> datetime:
    """The wall clock, UTC."""
    return datetime.now(UTC)


_clock: tuple[int, str] = (-1, "")


def clock() -> tuple[datetime, str]:
    """The wall clock, UTC, and its ``format_time`` text.

    The text is remembered for the millisecond: at a fleet-wide change a process with many
    controllers stamps hundreds of records and acknowledgements within a few milliseconds."""
    global _clock
    t = time.time()
    ms = int(t * 1000)
    last = _clock
    if ms != last[0]:
        whole = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
        last = _clock = (ms, whole.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z")
    return datetime.fromtimestamp(t, UTC), last[1]


def format_time(dt: datetime | None) -> str:
    """ISO 8601 UTC with milliseconds (``2026-11-30T08:00:00.123Z``); ``""`` for None.

    A naive datetime is taken to be UTC.
    """
    if dt is None:
        return ""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    elif dt.utcoffset():
        dt = dt.astimezone(UTC)
    return dt.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_time(value: str | bytes | None) -> datetime | None:
    """Parse an ISO 8601 time (``Z`` or an offset; no zone means UTC); None for empty.

    Raises ``ContractError`` on anything else.
    """
    s = text(value).strip()
    if not s:
        return None
    try:
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise ContractError(f"not an ISO 8601 time: {s[:40]!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def _ms(dt: datetime) -> datetime:
    """Truncate to milliseconds (what survives a trip through the contract)."""
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


def timedelta_s(value: timedelta | float | None) -> float:
    """Seconds in a timedelta (or a number); 0.0 for None."""
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The line format of both sides' plain logs (fleetgate-replica, fleetgate serve)."""


class LogFormatter(logging.Formatter):
    """Log lines stamped as the contract stamps time, ISO 8601 UTC with milliseconds
    (``2026-12-01T19:47:33.808Z``), the same on every replica and coordinator, so their logs
    interleave by sorting. The entry points install it; the library configures no logging."""

    def __init__(self, fmt: str = LOG_FORMAT) -> None:
        super().__init__(fmt)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return format_time(datetime.fromtimestamp(record.created, UTC))
