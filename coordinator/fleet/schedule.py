"""When holds are in force: ``parse_at`` reads ``--at`` (the CLI) and ``at`` (the API), the
start of a scheduled hold; ``holds_dict``/``state_dict`` show each hold with its ``status``.

``at`` is an ISO 8601 time (``2026-12-01T02:00Z``, an offset, or no zone for UTC) or a duration
from now (``2h``, ``90m``, ``1d``: the units of ``coordinator.durations``). It must be in the
future: a duration at most ``MAX_DURATION_S`` (a week), like every other duration; a time at
most ``MAX_AHEAD`` (a year) ahead.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from coordinator.durations import InvalidDuration, parse_duration
from replica.contract import FleetState, format_time, parse_time
from replica.errors import ContractError

MAX_AHEAD: Final = timedelta(days=366)
"""The furthest ahead a hold may be scheduled at an ISO 8601 time."""


class InvalidAt(ValueError):
    """An ``at`` that is neither a future ISO 8601 time nor a duration from now."""


def parse_at(value: str, now: datetime, name: str = "--at") -> datetime:
    """The start time ``value`` names, as seen at ``now`` (aware, UTC). Raises ``InvalidAt``
    (one line) when it cannot be read, is not in the future, or is too far ahead."""
    text = value.strip()
    unreadable = (f"{name} must be an ISO 8601 time (2026-12-01T02:00Z) or a duration from now "
                  f"(2h), not {text[:40]!r}")
    if not text or not text[0].isdigit() or len(text) > 64:
        raise InvalidAt(unreadable)
    if "-" not in text and ":" not in text:  # a duration from now
        try:
            return now + timedelta(seconds=parse_duration(text, name=name))
        except InvalidDuration as exc:
            raise InvalidAt(str(exc)) from None
    try:
        at = parse_time(text)
    except ContractError:
        raise InvalidAt(unreadable) from None
    if at is None:
        raise InvalidAt(unreadable)
    if at <= now:
        raise InvalidAt(f"{name} {format_time(at)} is in the past (now {format_time(now)})")
    if at - now > MAX_AHEAD:
        raise InvalidAt(f"{name} {format_time(at)} is more than a year ahead")
    return at


def holds_dict(state: FleetState, now: datetime) -> dict[str, dict[str, Any]]:
    """``state.holds`` of every JSON shape: name -> the hold's fields and its ``status`` at
    ``now`` (``scheduled``, ``active`` or ``ended``). A state of an older release shows its
    pause as the one hold ``default`` (``FleetState.effective_holds``)."""
    return {
        h.name: {**h.to_dict(), "status": h.status(now)}
        for h in sorted(state.effective_holds(), key=lambda h: h.name)
    }


def state_dict(state: FleetState, now: datetime) -> dict[str, Any]:
    """``FleetState.to_dict()`` with ``holds`` as ``holds_dict``."""
    data = state.to_dict()
    data["holds"] = holds_dict(state, now)
    return data


__all__ = ["MAX_AHEAD", "InvalidAt", "holds_dict", "parse_at", "state_dict"]
