"""Named pause holds: the pool is paused while any source holds it.

Modelled on kopf's ``aiotoggles``: each source (``operator``, ``fleet``, ``breaker``,
``control-plane``...) holds or releases its own toggle; the pool is paused while any toggle is
on, and waiters can await either direction (``wait_for(False)`` waits until nothing holds it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

OPERATOR_SOURCE: Final = "operator"
"""The hold an operator puts on one replica (its admin endpoint)."""
FLEET_SOURCE: Final = "fleet"
"""The fleet's pause (``FleetController``): its hold ``default``, or a state without holds."""
FLEET_SOURCE_PREFIX: Final = "fleet:"
"""Any other fleet hold NAME holds the pool as ``fleet:NAME`` (``fleet_source``)."""
_DEFAULT_FLEET_HOLD: Final = "default"  # replica.contract.DEFAULT_HOLD (same rank: no import)
CONTROL_PLANE_SOURCE: Final = "control-plane"
"""Held until the controller's first successful read of the fleet's state ("syncing"), and,
with ``FLEETGATE_CONTROL_LOSS=hold``, while it has not read the state for too long."""
BREAKER_SOURCE: Final = "breaker"
"""A dependency's circuit breaker is open (``follow_breaker``)."""


def fleet_source(hold: str) -> str:
    """The pool source of the fleet hold named ``hold``: ``fleet`` for ``default`` (so the
    alert rules and dashboards of a single fleet pause stay), else ``fleet:NAME``."""
    return FLEET_SOURCE if hold == _DEFAULT_FLEET_HOLD else FLEET_SOURCE_PREFIX + hold


def is_fleet_source(source: str) -> bool:
    """Whether ``source`` is a hold of the fleet (``fleet`` or ``fleet:NAME``)."""
    return source == FLEET_SOURCE or source.startswith(FLEET_SOURCE_PREFIX)


class Holds:
    """A set of named holds with reasons, awaitable both ways."""

    def __init__(self) -> None:
        self._holds: dict[str, str] = {}
        self._waiters: list[tuple[bool, asyncio.Future[None]]] = []
        self.since_monotonic: float | None = None
        self.since: datetime | None = None

    def __bool__(self) -> bool:
        return bool(self._holds)

    def __contains__(self, source: object) -> bool:
        return source in self._holds

    @property
    def items(self) -> Mapping[str, str]:
        """A copy of ``{source: reason}``."""
        return dict(self._holds)

    def names(self) -> str:
        """The holding sources, comma-separated, for log lines."""
        return ", ".join(sorted(self._holds)) or "nobody"

    def hold(self, source: str, reason: str) -> bool:
        """Turn ``source``'s hold on (or update its reason). True when the pool was not held."""
        was_held = bool(self._holds)
        self._holds[source] = reason
        if not was_held:
            self.since_monotonic = time.monotonic()
            self.since = datetime.now(UTC)
        self._notify()
        return not was_held

    def release(self, source: str) -> bool:
        """Turn ``source``'s hold off. True when that left the pool with no hold at all."""
        if self._holds.pop(source, None) is None:
            return False
        if self._holds:
            return False
        self.since_monotonic = None
        self.since = None
        self._notify()
        return True

    async def wait_for(self, held: bool) -> None:
        """Wait until the pool is held (``True``) or free (``False``)."""
        if bool(self._holds) is held:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (held, fut)
        self._waiters.append(entry)
        try:
            await fut
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def _notify(self) -> None:
        if not self._waiters:
            return
        now_held = bool(self._holds)
        for held, fut in self._waiters:
            if held is now_held and not fut.done():
                fut.set_result(None)
