"""Every fleet on a Redis at once: ``read_overview`` lists the fleets of the registry
(``coordinator.fleet.registry``) and reads each one's status, a few at a time.

Each fleet is read as ``fleetgate status`` reads it (``Fleet.status()``: the state hash, the
``replicas`` set and the records in bounded batches), or through ``read`` when the caller has a
cheaper one (a snapshot cache). At most ``concurrency`` fleets are read at once, so a Redis with
hundreds of fleets sees a steady trickle, not a burst; the reads share the caller's client.

One fleet never blinds the others (``read_isolated``): a fleet whose read fails for a reason of
its own (a key of the wrong type, a state hash edited into garbage, bytes that are not UTF-8, a
bug) is a ``FleetError`` (its name and what is wrong), logged once per fleet and reason, and
every view shows it as a row of its own. Redis unreachable fails the whole overview, and the
reads still under way are cancelled with it: no read outlives the call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final, TypeVar

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.fleet.backlog import read_backlog
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import FleetStatus
from coordinator.fleet.registry import read_registry
from replica.contract import now_utc
from replica.contract.schedules import ScheduleSet, with_active_schedules
from replica.errors import ContractError

log = logging.getLogger(__name__)

MAX_LISTED: Final = 1000
"""The most fleets an overview reads (newest activity first): each one is a read of its state
and its records."""
FLEET_READS: Final = 8
"""How many fleets an overview reads at once."""

StatusReader = Callable[[Fleet], Awaitable[FleetStatus]]
_T = TypeVar("_T")
_R = TypeVar("_R")

UNREACHABLE: Final = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)
"""Redis gone: the whole read fails. Any other exception of one fleet's read is that fleet's."""
MAX_ERROR: Final = 200
"""The most characters of a ``FleetError``'s text."""


@dataclass(frozen=True, slots=True)
class FleetError:
    """A fleet that could not be read, and why (one line, at most ``MAX_ERROR`` characters)."""

    fleet: str
    error: str

    @classmethod
    def of(cls, fleet: str, exc: BaseException) -> FleetError:
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:MAX_ERROR]
        return cls(fleet, why.encode("utf-8", "replace").decode("utf-8"))


_noted: dict[str, str] = {}


def fleet_error(fleet: str, exc: BaseException) -> FleetError:
    """``FleetError.of``, logged once per fleet and reason (with the traceback when it is not
    a Redis or contract error: a bug)."""
    error = FleetError.of(fleet, exc)
    if _noted.get(fleet) != error.error:
        if len(_noted) > 10_000:
            _noted.clear()
        _noted[fleet] = error.error
        log.warning("fleet %s cannot be read, shown as such: %s", fleet, error.error,
                    exc_info=not isinstance(exc, (RedisError, ContractError)))
    return error


async def read_isolated(
    items: Sequence[_T], call: Callable[[_T], Awaitable[_R]], name: Callable[[_T], str],
    concurrency: int = FLEET_READS,
) -> list[_R | FleetError]:
    """``read_each`` where one item's failure is its ``FleetError`` (``name(item)`` names its
    fleet), not everyone's; Redis unreachable (``UNREACHABLE``) still fails the whole read."""

    async def one(item: _T) -> _R | FleetError:
        try:
            return await call(item)
        except asyncio.CancelledError:
            raise
        except UNREACHABLE:
            raise
        except Exception as exc:  # one fleet's trouble never blinds the others
            return fleet_error(name(item), exc)

    return await read_each(items, one, concurrency)


@dataclass(frozen=True, slots=True)
class Overview:
    """The fleets of the registry (newest activity first), each one's status, and what the
    registry said besides: each fleet's last activity (ms since the epoch), whether there were
    more than ``MAX_LISTED`` and how many members were not fleet names."""

    statuses: list[FleetStatus]
    activity_ms: dict[str, float] = field(default_factory=dict)
    truncated: bool = False
    unreadable: int = 0
    now: datetime = field(default_factory=now_utc)
    errors: list[FleetError] = field(default_factory=list)
    """The fleets that could not be read (each shown as a row that says why)."""


async def _status(fleet: Fleet) -> FleetStatus:
    return await fleet.status()


async def status_with_backlog(fleet: Fleet) -> FleetStatus:
    """``Fleet.status()`` with the fleet's backlog (``backlog.read_backlog``), as ``fleetgate
    status`` and ``fleetgate fleets`` show it."""
    status = await fleet.status()
    schedules = await read_schedules(fleet)
    # an occurrence in force is a hold of the fleet, as on every replica
    state = with_active_schedules(status.state, schedules.schedules, now_utc())
    return replace(status, state=state, schedules=schedules,
                   backlog=await read_backlog(fleet.redis, fleet.keys))


async def read_schedules(fleet: Fleet) -> ScheduleSet:
    """The fleet's schedules; a key that cannot be read is one unreadable entry (``*``),
    never the status's error."""
    try:
        return await fleet.schedules()
    except ResponseError as exc:
        return ScheduleSet((), (("*", f"the schedules key cannot be read: {exc}"),))


async def read_statuses(
    fleets: Sequence[Fleet], read: StatusReader = _status, concurrency: int = FLEET_READS
) -> list[FleetStatus]:
    """``read(fleet)`` of each fleet, in order, at most ``concurrency`` at once. The first
    failure is raised and cancels the others."""
    return await read_each(fleets, read, concurrency)


async def read_each(
    items: Sequence[_T], call: Callable[[_T], Awaitable[_R]], concurrency: int = FLEET_READS
) -> list[_R]:
    """``call(item)`` of each item, results in order, by at most ``concurrency`` tasks (each
    takes the next item when done with one; none outlives the call). The first failure is
    raised and cancels the others."""
    results: dict[int, _R] = {}
    todo = iter(enumerate(items))

    async def worker() -> None:
        for i, item in todo:
            results[i] = await call(item)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(max(1, concurrency), len(items))):
                group.create_task(worker(), name="fleetgate-read")
    except BaseExceptionGroup as failed:  # the first failure as itself (a RedisError: 503)
        raise failed.exceptions[0] from None
    return [results[i] for i in range(len(items))]


async def read_overview(
    redis: Redis,
    *,
    fleet: Callable[[str], Fleet] | None = None,
    read: StatusReader | None = None,
    limit: int = MAX_LISTED,
    concurrency: int = FLEET_READS,
) -> Overview:
    """The registry's fleets (at most ``limit``, newest activity first) and each one's status.
    ``fleet(name)`` makes the ``Fleet`` of a name (default: ``Fleet(redis, name)``), ``read``
    reads one (default: ``status_with_backlog``, as ``fleetgate fleets`` shows it). A fleet
    that cannot be read is in ``errors``. Raises redis-py's errors when Redis cannot be
    reached."""
    registry = await read_registry(redis, limit + 1)
    names = registry.names[:limit]
    make = fleet if fleet is not None else (lambda name: Fleet(redis, name))
    results = await read_isolated([make(n) for n in names], read or status_with_backlog,
                                  lambda f: f.name, concurrency)
    statuses = [r for r in results if isinstance(r, FleetStatus)]
    errors = [r for r in results if isinstance(r, FleetError)]
    return Overview(statuses, registry.fleets, len(registry.names) > limit, registry.unreadable,
                    errors=errors)


__all__ = ["FLEET_READS", "MAX_LISTED", "UNREACHABLE", "FleetError", "Overview", "StatusReader",
           "fleet_error", "read_each", "read_isolated", "read_overview", "read_statuses",
           "status_with_backlog"]
