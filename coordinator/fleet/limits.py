"""A fleet's backlog limit, set, cleared and read by the operator (``Fleet.set_limit``,
``Fleet.clear_limit``, ``Fleet.limit``).

The limit is the hash ``fleetgate:{NAME}:limits`` (``replica.contract.limits``: what it counts,
and why an unreadable one refuses every batch); producers obey it in the script that adds their
batch (``coordinator.fleet.producer``). Setting or clearing it is one script
(``replica/contract/set_limits.lua``) that also appends to the fleet's audit stream
(``limit_set``, ``limit_cleared``, with ``by`` and ``at``), sent as a change is
(``coordinator.fleet.calls.ChangeScript``: a lost answer is ``OutcomeUnknown``). A clear of a
fleet without a limit writes nothing.

``LimitReading`` is what a read found: the limit, none, or why the hash cannot be obeyed.
``fleetgate status``, ``GET /api/fleets/{name}`` and ``/metrics`` show it from the backlog's
read (``coordinator.fleet.backlog``: the same round trip).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis
from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from coordinator.fleet.calls import ChangeScript, again
from replica.contract import (
    AUDIT_MAXLEN,
    Keys,
    check_by,
    format_time,
    now_utc,
    parse_time,
    text,
)
from replica.contract.limits import (
    REJECT,
    BacklogLimit,
    UnreadableLimit,
    check_max_backlog,
    check_when_full,
)
from replica.contract.scripts import SET_LIMITS_LUA

log = logging.getLogger(__name__)

MAX_ERROR: Final = 200


@dataclass(frozen=True, slots=True)
class LimitReading:
    """A fleet's limit as read: ``limit`` (None: no limit, or unreadable) and ``error`` (why
    the hash cannot be obeyed; empty when it can, or when there is none)."""

    limit: BacklogLimit | None = None
    error: str = ""

    @property
    def unreadable(self) -> bool:
        return bool(self.error)

    def to_dict(self) -> dict[str, Any] | None:
        """``None`` without a limit; else ``{"max_backlog", "when_full", "by", "at", "error"}``
        (every field but ``error`` null when it cannot be read)."""
        if self.limit is None and not self.error:
            return None
        if self.limit is None:
            return {"max_backlog": None, "when_full": None, "by": None, "at": None,
                    "error": self.error}
        return {**self.limit.to_dict(), "error": None}

    def text(self) -> str:
        """``limit 5000 (when full: reject)``, ``limit unreadable: ...``, or empty."""
        if self.error:
            return f"limit unreadable: {self.error}"
        if self.limit is None:
            return ""
        return f"limit {self.limit.max_backlog} (when full: {self.limit.when_full})"


NO_LIMIT: Final = LimitReading()


def reading_of(raw: Any) -> LimitReading:
    """What an ``HGETALL`` of the limits key answered (a mapping, or the error of a key that
    is not a hash) means."""
    if isinstance(raw, ResponseError):
        return LimitReading(error=_short(f"the limits key is not a hash ({raw})"))
    if not raw:
        return NO_LIMIT
    if not isinstance(raw, Mapping):
        return LimitReading(error="the limits key cannot be read")
    try:
        return LimitReading(BacklogLimit.from_hash(raw))
    except UnreadableLimit as exc:
        return LimitReading(error=_short(str(exc)))


def _short(message: str) -> str:
    return " ".join(message.split())[:MAX_ERROR]


@dataclass(frozen=True, slots=True)
class LimitChange:
    """What a set or clear did: the limit now (None: cleared) and before it (``before``:
    ``NO_LIMIT`` when there was none)."""

    fleet: str
    limit: BacklogLimit | None
    before: LimitReading
    changed: bool = True
    """False for a clear of a fleet without a limit (nothing written)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet,
            "limit": None if self.limit is None else {**self.limit.to_dict(), "error": None},
            "previous": self.before.to_dict(),
            "changed": self.changed,
        }


class Limits:
    """The backlog limit of one fleet (``Fleet`` delegates to it)."""

    def __init__(self, redis: Redis, name: str, keys: Keys) -> None:
        self._redis = redis
        self._name = name
        self._keys = keys
        self._script = ChangeScript(redis, SET_LIMITS_LUA)

    async def read(self) -> LimitReading:
        keys = self._keys
        pipe = self._redis.pipeline(transaction=False)
        pipe.execute_command("HGETALL", keys.limits, **{NEVER_DECODE: True})  # may be garbage
        replies = await again(lambda: pipe.execute(raise_on_error=False))
        return reading_of(replies[0])

    async def set(self, max_backlog: int, when_full: str = REJECT, *, by: str) -> LimitChange:
        max_backlog = check_max_backlog(max_backlog)
        when_full = check_when_full(when_full)
        by = check_by(by)
        at = format_time(now_utc())
        reply = await self._call("set", str(max_backlog), when_full, by, at)
        limit = BacklogLimit(max_backlog, when_full, by, parse_time(at))  # as stored: ms
        before = _before(reply)
        log.info("fleet %s: backlog limit set by %s: max_backlog %d, when full: %s", self._name,
                 by, max_backlog, when_full)
        return LimitChange(self._name, limit, before)

    async def clear(self, *, by: str) -> LimitChange:
        by = check_by(by)
        reply = await self._call("clear", "", "", by, format_time(now_utc()))
        if text(reply[0]) == "noop":
            return LimitChange(self._name, None, NO_LIMIT, changed=False)
        log.info("fleet %s: backlog limit cleared by %s", self._name, by)
        return LimitChange(self._name, None, _before(reply))

    async def _call(self, action: str, number: str, when: str, by: str, at: str) -> Any:
        keys = self._keys
        return await self._script(
            [keys.limits, keys.audit, keys.state],
            [action, number, when, by, at, str(AUDIT_MAXLEN)],
            f"backlog limit {action} of fleet {self._name}",
        )


def _before(reply: Any) -> LimitReading:
    kind = text(reply[2]) if len(reply) > 2 else "hash"
    if kind not in ("none", "hash"):
        return LimitReading(error=f"the limits key was a {kind[:20]}, not a hash")
    flat = [text(x) for x in reply[1]] if len(reply) > 1 else []
    raw = dict(zip(flat[::2], flat[1::2], strict=False))
    return reading_of(raw)


__all__ = ["NO_LIMIT", "LimitChange", "LimitReading", "Limits", "reading_of"]
