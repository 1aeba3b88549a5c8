"""The registry of fleets: the sorted set ``fleetgate:fleets`` (``replica.contract.keys.FLEETS_KEY``)
of every fleet name on a Redis, scored by its last activity (ms since the epoch).

It is written by each change (``touch``, after the change's script: the key has no hash tag,
so on a cluster it lives in a slot of its own and never goes in a script with a fleet's keys),
and by each replica at its start and now and then with its heartbeat
(``replica.control.record``). ``list_fleets`` reads it: no ``SCAN``, no ``KEYS``.

Replicas may write the registry (the replica ACL lets them ``ZADD`` it), so a reader trusts no
member: one that is not a fleet name is skipped and counted (``Registry.unreadable``). A fleet
stays listed after its last replica left (a paused fleet with no replica is still paused);
``forget`` takes one out by hand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from coordinator.fleet.calls import again
from replica.contract import FLEET_NAME_RE, text, validate_fleet
from replica.contract.keys import FLEETS_KEY
from replica.control.redisio import uncancelled

log = logging.getLogger(__name__)

MAX_FLEETS: Final = 10_000
"""The most fleets a read returns (newest activity first): a registry filled with garbage
cannot make a reader read without end."""
TOUCH_TIMEOUT_S: Final = 1.0
"""How long ``touch`` may take: it follows a change that is made, and must not hold it up."""


@dataclass(frozen=True, slots=True)
class Registry:
    """What the registry holds: fleet names with their last activity (ms since the epoch),
    newest first, and how many members were not fleet names (skipped)."""

    fleets: dict[str, float]
    unreadable: int = 0

    @property
    def names(self) -> list[str]:
        return list(self.fleets)


async def touch(redis: Redis, fleet: str, at_ms: float | None = None) -> bool:
    """Note activity of ``fleet`` now (or at ``at_ms``): ``ZADD fleetgate:fleets``.

    Never raises a Redis error (it is bookkeeping beside a change that already happened):
    returns False when the write failed or took over ``TOUCH_TIMEOUT_S``, and logs why once
    per kind of error."""
    validate_fleet(fleet)
    score = int(time.time() * 1000) if at_ms is None else int(at_ms)
    try:
        async with asyncio.timeout(TOUCH_TIMEOUT_S):
            await uncancelled(redis.zadd(FLEETS_KEY, {fleet: score}))
    except (RedisError, OSError, TimeoutError) as exc:
        _once(f"could not note fleet {fleet} in {FLEETS_KEY}: {type(exc).__name__}: {exc}",
              type(exc).__name__)
        return False
    return True


async def read_registry(redis: Redis, limit: int = MAX_FLEETS) -> Registry:
    """The registry, newest activity first (at most ``limit`` members read). Raises redis-py's
    errors when Redis cannot be reached."""
    raw = await again(lambda: redis.zrange(FLEETS_KEY, 0, limit - 1, desc=True, withscores=True))
    fleets: dict[str, float] = {}
    unreadable = 0
    for entry in raw:
        member, score = entry[0], entry[1]
        name = text(member)
        if FLEET_NAME_RE.fullmatch(name) is None:
            unreadable += 1
            continue
        fleets[name] = float(score)
    if unreadable:
        _once(f"{FLEETS_KEY}: skipped {unreadable} member(s) that are not fleet names",
              f"unreadable-{unreadable}")
    return Registry(fleets, unreadable)


async def list_fleets(redis: Redis) -> list[str]:
    """Every fleet name in the registry, newest activity first (members that are not fleet
    names skipped). Raises redis-py's errors when Redis cannot be reached."""
    return (await read_registry(redis)).names


async def forget(redis: Redis, fleet: str) -> bool:
    """Take ``fleet`` out of the registry (its keys are left alone); True if it was there.
    A replica or a change of that fleet puts it back."""
    validate_fleet(fleet)
    return bool(await uncancelled(redis.zrem(FLEETS_KEY, fleet)))


_logged: set[str] = set()


def _once(message: str, kind: str) -> None:
    if kind not in _logged:
        _logged.add(kind)
        log.warning("%s", message)


__all__ = ["FLEETS_KEY", "MAX_FLEETS", "Registry", "forget", "list_fleets", "read_registry", "touch"]
