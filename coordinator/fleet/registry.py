"""The registry of fleets: two sorted sets of fleet names, scored by activity (ms since the
epoch).

* ``fleetgate:fleets`` (``replica.contract.keys.FLEETS_KEY``): every fleet name announced, by
  each replica at its start and now and then with its heartbeat (``replica.control``), and by
  each change. The replica ACL lets any replica ``ZADD`` any member there.
* ``fleetgate:fleets:changed`` (``FLEETS_CHANGED_KEY``): every fleet a coordinator changed
  (``touch``, after the change's script). Replicas cannot write it, so it holds fleets that
  have a state, whatever replicas announce.

Neither key has a hash tag: on a cluster each lives in a slot of its own and never goes in a
script with a fleet's keys. ``read_registry`` reads both (no ``SCAN``, no ``KEYS``) and lists
the changed fleets first: 1,001 names a replica announces at the current time never crowd out
a paused fleet. It trusts no member of ``fleetgate:fleets``: the replies are read as bytes, and
a member that is not UTF-8, not a fleet name, or whose score is not a time (``+inf``) is skipped
and counted (``Registry.unreadable``). ``prune`` (the watcher of ``fleetgate serve``) removes
those members and the oldest names past ``MAX_FLEETS``, and says how many it dropped: the
registry's size stays bounded. A fleet stays listed after its last replica left (a paused
fleet with no replica is still paused); ``forget`` takes one out by hand.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from redis.asyncio import Redis
from redis.client import NEVER_DECODE
from redis.exceptions import RedisError

from coordinator.fleet.calls import again
from replica.contract import FLEET_NAME_RE, Keys, validate_fleet
from replica.contract.keys import FLEETS_CHANGED_KEY, FLEETS_KEY
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

MAX_FLEETS: Final = 10_000
"""The most fleets a read returns of each key (newest activity first), and the most members
``prune`` leaves in ``fleetgate:fleets``: a registry filled with garbage cannot make a reader
read without end, nor grow without end."""
MAX_SCORE_MS: Final = 253_402_300_799_999
"""The last millisecond of the year 9999: a score past it (or below 0, or not finite) is not
a time, and its member is skipped."""
TOUCH_TIMEOUT_S: Final = 1.0
"""How long ``touch`` may take: it follows a change that is made, and must not hold it up."""
PRUNE_BATCH: Final = 1000
"""The most members one ``prune`` removes (the rest at the next one)."""


@dataclass(frozen=True, slots=True)
class Registry:
    """What the registry holds: fleet names with their last activity (ms since the epoch), the
    fleets a coordinator changed first (newest first), then the names only replicas announced
    (newest first); how many members were skipped (not UTF-8, not a fleet name, a score that is
    not a time), and those members as Redis holds them (for ``prune``)."""

    fleets: dict[str, float]
    unreadable: int = 0
    changed: frozenset[str] = frozenset()
    """The fleets a coordinator changed (``fleetgate:fleets:changed``)."""
    invalid: tuple[bytes, ...] = field(default=(), repr=False)

    @property
    def names(self) -> list[str]:
        return list(self.fleets)


async def touch(redis: Redis, fleet: str, at_ms: float | None = None) -> bool:
    """The coordinator's note of a change of ``fleet`` now (or at ``at_ms``): ``ZADD`` to
    ``fleetgate:fleets`` and to ``fleetgate:fleets:changed`` (which replicas cannot write, so
    the fleet is never crowded out of the listings). Call it only after a change that wrote
    the fleet's state.

    Never raises a Redis error (it is bookkeeping beside a change that already happened):
    returns False when a write failed or took over ``TOUCH_TIMEOUT_S``, and logs why once per
    kind of error."""
    validate_fleet(fleet)
    score = int(time.time() * 1000) if at_ms is None else int(at_ms)
    try:
        async with asyncio.timeout(TOUCH_TIMEOUT_S):
            # two calls: the keys have no hash tag, so each may live on another cluster node
            await uncancelled(redis.zadd(FLEETS_CHANGED_KEY, {fleet: score}))
            await uncancelled(redis.zadd(FLEETS_KEY, {fleet: score}))
    except (RedisError, OSError, TimeoutError) as exc:
        _once(f"could not note fleet {fleet} in the registry: {type(exc).__name__}: {exc}",
              type(exc).__name__)
        return False
    return True


note_change = touch
"""The coordinator's registry write after a change (``touch``), by a clearer name."""


async def note_states(redis: Redis, fleets: Sequence[str]) -> int:
    """Add ``fleets`` (seen with a state) to ``fleetgate:fleets:changed`` where missing, scored
    now (``ZADD NX``: a change's time is kept); returns how many were added. For states written
    before that key existed (the watcher calls it). Raises redis-py's errors."""
    names = [validate_fleet(f) for f in fleets]
    if not names:
        return 0
    score = int(time.time() * 1000)
    added: Any = await uncancelled(
        redis.zadd(FLEETS_CHANGED_KEY, dict.fromkeys(names, score), nx=True))
    return int(added)


def _pairs(raw: Any) -> list[tuple[Any, Any]]:
    """A ``ZRANGE ... WITHSCORES`` reply as ``(member, score)`` pairs: flat (RESP2) or
    nested (RESP3)."""
    items = list(raw or [])
    if items and isinstance(items[0], (list, tuple)):
        return [(x[0], x[1]) for x in items]
    return list(zip(items[::2], items[1::2], strict=False))


def _name(member: Any) -> str | None:
    """A member as a fleet name, or None when it is not one (not UTF-8, not a name)."""
    try:
        name = member.decode("utf-8") if isinstance(member, bytes) else str(member)
    except UnicodeDecodeError:
        return None
    return name if FLEET_NAME_RE.fullmatch(name) is not None else None


def _score(value: Any) -> float | None:
    """A score as ms since the epoch, or None when it is not a time."""
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None
    return score if math.isfinite(score) and 0 <= score <= MAX_SCORE_MS else None


async def _newest(redis: Redis, key: str, limit: int) -> list[tuple[Any, Any]]:
    """The ``limit`` newest members of ``key`` with their scores, as bytes."""
    raw = await again(lambda: redis.execute_command(  # type: ignore[no-untyped-call]
        "ZRANGE", key, 0, max(1, limit) - 1, "REV", "WITHSCORES", **{NEVER_DECODE: True}))
    return _pairs(raw)


async def read_registry(redis: Redis, limit: int = MAX_FLEETS) -> Registry:
    """The registry: the fleets a coordinator changed (at most ``MAX_FLEETS``), then the
    ``limit`` newest names of ``fleetgate:fleets`` not among them; each fleet's activity is
    the newest of its two scores. Raises redis-py's errors when Redis cannot be reached."""
    changed_raw = await _newest(redis, FLEETS_CHANGED_KEY, MAX_FLEETS)
    announced_raw = await _newest(redis, FLEETS_KEY, limit)
    changed: dict[str, float] = {}
    for member, value in changed_raw:  # written by coordinators; still read with care
        name, score = _name(member), _score(value)
        if name is not None:
            changed[name] = score if score is not None else 0.0
    announced: dict[str, float] = {}
    invalid: list[bytes] = []
    for member, value in announced_raw:
        name, score = _name(member), _score(value)
        if name is None or score is None:
            invalid.append(member if isinstance(member, bytes) else str(member).encode())
            continue
        announced[name] = score
    for name, score in announced.items():
        if name in changed and score > changed[name]:
            changed[name] = score
    fleets = dict(sorted(changed.items(), key=lambda kv: -kv[1]))
    for name, score in announced.items():
        fleets.setdefault(name, score)
    if invalid:
        _once(f"{FLEETS_KEY}: skipped {len(invalid)} member(s) that are not fleet names or "
              "whose score is not a time", f"unreadable-{len(invalid)}")
    return Registry(fleets, len(invalid), frozenset(changed), tuple(invalid))


async def list_fleets(redis: Redis) -> list[str]:
    """Every fleet name in the registry, the changed ones first (members that are not fleet
    names skipped). Raises redis-py's errors when Redis cannot be reached."""
    return (await read_registry(redis)).names


async def fleets_with_state(
    redis: Redis, names: Iterable[str] | None = None, concurrency: int = 8
) -> list[str]:
    """The fleets among ``names`` (default: the registry's) whose state hash exists, in their
    order: what may have audit and events streams. A name only replicas announced, with no
    state, is left out (the notifier creates no stream or group for it). Raises redis-py's
    errors when Redis cannot be reached."""
    wanted = (await read_registry(redis)).names if names is None else list(names)
    found: dict[int, bool] = {}
    todo = iter(enumerate(wanted))

    async def worker() -> None:
        for i, name in todo:
            key = Keys(name).state
            found[i] = bool(await again(lambda: redis.exists(key)))  # noqa: B023

    async with asyncio.TaskGroup() as group:
        for _ in range(min(max(1, concurrency), len(wanted))):
            group.create_task(worker(), name="fleetgate-registry-state")
    return [name for i, name in enumerate(wanted) if found.get(i)]


async def prune(redis: Redis, registry: Registry | None = None) -> int:
    """Remove from ``fleetgate:fleets`` its invalid members (those ``registry`` skipped; read
    now when not given) and the oldest members past ``MAX_FLEETS`` (at most ``PRUNE_BATCH``
    each call); returns how many were removed. The coordinator's work (its ACL may ``ZREM``):
    the registry replicas write stays bounded. Raises redis-py's errors."""
    if registry is None:
        registry = await read_registry(redis)
    drop: list[Any] = list(registry.invalid[:PRUNE_BATCH])
    size = int(await again(lambda: redis.zcard(FLEETS_KEY))) - len(drop)
    if size > MAX_FLEETS and len(drop) < PRUNE_BATCH:
        extra = min(size - MAX_FLEETS, PRUNE_BATCH - len(drop))
        oldest: Sequence[Any] = await again(lambda: redis.execute_command(  # type: ignore[no-untyped-call]
            "ZRANGE", FLEETS_KEY, 0, extra - 1, **{NEVER_DECODE: True}))
        drop.extend(oldest)
    if not drop:
        return 0
    removed = int(await uncancelled(redis.zrem(FLEETS_KEY, *drop)))
    if removed:
        log.warning("%s: removed %d member(s): not fleet names, scores that are not times, or "
                    "the oldest past %d", FLEETS_KEY, removed, MAX_FLEETS)
    return removed


async def forget(redis: Redis, fleet: str) -> bool:
    """Take ``fleet`` out of the registry (its keys are left alone); True if it was there.
    A replica or a change of that fleet puts it back."""
    validate_fleet(fleet)
    changed = await uncancelled(redis.zrem(FLEETS_CHANGED_KEY, fleet))
    announced = await uncancelled(redis.zrem(FLEETS_KEY, fleet))
    return bool(changed or announced)


_logged: set[str] = set()


def _once(message: str, kind: str) -> None:
    if kind not in _logged:
        _logged.add(kind)
        log.warning("%s", message)


__all__ = [
    "FLEETS_CHANGED_KEY", "FLEETS_KEY", "MAX_FLEETS", "Registry", "fleets_with_state", "forget",
    "list_fleets", "note_change", "note_states", "prune", "read_registry", "touch",
]
