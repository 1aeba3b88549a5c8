"""Durations as operators type them ("30m", "90s", "2h", "1d", "1h30m", "45") and as we show them.

``parse_duration`` turns text into seconds within bounds (1 s to 7 days unless told otherwise)
and raises ``InvalidDuration`` (a ``ValueError``) with a message fit for one line on stderr or a
422 detail. ``format_age`` prints seconds back the way the CLI and the dashboard show ages:
``4m12s``, ``2h03m``, ``1d02h``.
"""

from __future__ import annotations

import math
import re
from typing import Final

from replica.errors import InvalidDuration

MIN_DURATION_S: Final = 1.0
"""The shortest window or timeout an operator may give."""
MAX_DURATION_S: Final = 604800.0
"""The longest: 7 days."""

UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE: Final = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
_MAX_TEXT: Final = 64


def parse_duration(
    value: str | float | int,
    *,
    name: str = "duration",
    minimum: float = MIN_DURATION_S,
    maximum: float = MAX_DURATION_S,
) -> float:
    """Seconds in ``value``: a number of seconds, or text like ``90s``, ``30m``, ``2h``, ``1d``,
    ``1h30m`` (units ms, s, m, h, d, w; no unit means seconds).

    Raises ``InvalidDuration`` when the text cannot be read or the result is outside
    ``minimum``..``maximum`` seconds.
    """
    if isinstance(value, bool):
        raise InvalidDuration(f"{name} must be a duration like 90s, 30m, 2h or 1d")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value, name)
    else:
        raise InvalidDuration(f"{name} must be a duration like 90s, 30m, 2h or 1d")
    if not math.isfinite(seconds):
        raise InvalidDuration(f"{name} must be a finite duration")
    if seconds < minimum or seconds > maximum:
        raise InvalidDuration(
            f"{name} must be between {format_age(minimum)} and {format_age(maximum)}, "
            f"not {format_age(seconds) if seconds >= 0 else repr(value)}"
        )
    return seconds


def _parse_text(value: str, name: str) -> float:
    text = value.strip().lower().replace(" ", "")
    if not text or len(text) > _MAX_TEXT:
        raise InvalidDuration(f"{name} must be a duration like 90s, 30m, 2h or 1d, not {value[:_MAX_TEXT]!r}")
    try:
        return float(text) if text[-1].isdigit() or text[-1] == "." else _sum_parts(text)
    except ValueError:
        raise InvalidDuration(
            f"{name} must be a duration like 90s, 30m, 2h or 1d, not {value[:_MAX_TEXT]!r}"
        ) from None


def _sum_parts(text: str) -> float:
    if _WHOLE.fullmatch(text) is None:
        raise ValueError(text)
    return sum(float(number) * UNITS[unit] for number, unit in _PART.findall(text))


def format_age(seconds: float | None) -> str:
    """``4m12s``, ``2h03m``, ``1d02h``, ``12s``, ``0s`` (``-`` for None or a negative age).

    Two units at most, the larger first; seconds are truncated, never rounded up.
    """
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    if 0 < seconds < 1:
        return f"{seconds:.1f}s"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{s:02d}s"
    return f"{s}s"


__all__ = ["MAX_DURATION_S", "MIN_DURATION_S", "InvalidDuration", "format_age", "parse_duration"]
