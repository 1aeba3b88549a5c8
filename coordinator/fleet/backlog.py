"""A fleet's backlog: what waits in its work stream, read once per snapshot (``read_backlog``).

The work stream is ``fleetgate:{NAME}:work``, consumed by the group ``fleetgate``
(``replica.contract.WORK_GROUP``); dead letters go to ``fleetgate:{NAME}:dead``. The figures:

``backlog``
    Entries not yet delivered to the group: ``XINFO GROUPS`` ``lag`` (Redis/Valkey 7 and
    later). Before the group exists (no replica started yet), every entry of the stream
    (``XLEN``): the replicas create the group from the stream's first entry. ``None``
    (unknown) when Redis cannot say: ``lag`` is nil after an ``XDEL`` or a trim it cannot
    account for, and absent before Redis 7. A stream with nothing after the group's
    last-delivered-id has a backlog of 0 even then. Never an estimate.
``pending``
    Entries delivered to a consumer and not acknowledged yet (the group's ``pending``): being
    worked on, or held by a replica that died until another one claims them.
``dead_letters``
    The length of the dead-letter stream (entries that exhausted their retries).
``oldest_waiting_at``
    The time in the id of the oldest entry not yet delivered (the first entry after the group's
    last-delivered-id; the stream's first entry before the group exists): when the oldest work
    that no replica has started was added. ``oldest_waiting_s`` is its age (0 when nothing
    waits; ``None`` when unknown). Pending entries are not "waiting": a replica has them.

A fleet with no work stream (its replicas take work from elsewhere, or nothing was enqueued
yet) has a backlog, pending and oldest age of 0, and ``stream`` false. A work key that is not a
stream makes every figure ``None`` and says why in ``error``, without failing the fleet's read:
its pause state is still shown.

The fleet's backlog limit (``fleetgate:{NAME}:limits``, ``coordinator.fleet.limits``) is read
in the same round trip, as ``limit``: none, the limit, or why it cannot be read. What the limit
counts is the work not yet done, ``backlog + pending`` (``not_done``).

Cost: one round trip of four O(1) commands (``XLEN`` of both streams, ``XINFO GROUPS``, the
limits' ``HGETALL``), and a second one (``XRANGE ... COUNT 1``) only when entries wait. Library
code: no logging setup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from redis.asyncio import Redis
from redis.client import NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from coordinator.fleet.limits import NO_LIMIT, LimitReading, reading_of
from replica.contract import WORK_GROUP, Keys, format_time, now_utc
from replica.link.redisio import uncancelled

MAX_ERROR: Final = 200


@dataclass(frozen=True, slots=True)
class Backlog:
    """The work stream of one fleet, as one read saw it (see the module's doc)."""

    backlog: int | None
    pending: int | None
    dead_letters: int | None
    oldest_waiting_at: datetime | None
    """The oldest undelivered entry's id time (None: nothing waits, or unknown)."""
    length: int | None = None
    """``XLEN`` of the work stream (delivered entries stay in it until trimmed)."""
    stream: bool = False
    """Whether the work stream exists."""
    group: bool = False
    """Whether the consumer group exists."""
    error: str = ""
    """Why the figures are unknown (a work key of the wrong type), or empty."""
    limit: LimitReading = NO_LIMIT
    """The fleet's backlog limit, read with the figures."""

    @property
    def not_done(self) -> int | None:
        """What the backlog limit counts: entries not yet delivered plus pending ones (None:
        unknown)."""
        if self.backlog is None or self.pending is None:
            return None
        return self.backlog + self.pending

    def oldest_waiting_s(self, now: datetime | None = None) -> float | None:
        """The age of the oldest entry not yet delivered: 0 when nothing waits, None when
        unknown."""
        if self.oldest_waiting_at is not None:
            return max(0.0, ((now or now_utc()) - self.oldest_waiting_at).total_seconds())
        if self.backlog == 0:
            return 0.0
        return None

    def figures(self, now: datetime | None = None) -> dict[str, Any]:
        """The four figures of the summary shape: ``backlog``, ``pending``, ``dead_letters``,
        ``oldest_waiting_s`` (None: unknown)."""
        age = self.oldest_waiting_s(now)
        return {
            "backlog": self.backlog,
            "pending": self.pending,
            "dead_letters": self.dead_letters,
            "oldest_waiting_s": None if age is None else round(age, 3),
        }

    def to_dict(self, now: datetime | None = None) -> dict[str, Any]:
        """The figures, with what they were read from."""
        return {
            **self.figures(now),
            "oldest_waiting_at": format_time(self.oldest_waiting_at) or None,
            "length": self.length,
            "stream": self.stream,
            "group": self.group,
            "error": self.error or None,
        }


UNREAD: Final = Backlog(None, None, None, None)
"""The figures of a status read without its backlog (a library caller's): all unknown."""
NUMBERS: Final = ("backlog", "pending", "dead_letters", "oldest_waiting_s")


def figures_of(backlog: Backlog | None, now: datetime | None = None) -> dict[str, Any]:
    """``Backlog.figures`` (all None when the backlog was not read)."""
    return (backlog or UNREAD).figures(now)


def limit_of(backlog: Backlog | None) -> dict[str, Any] | None:
    """The ``backlog_limit`` of the summary shape: null without a limit (or when the backlog
    was not read), else ``{"max_backlog", "when_full", "by", "at", "error"}``."""
    return None if backlog is None else backlog.limit.to_dict()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(_text(value))
    except ValueError:
        return None


def _group(groups: Any) -> Mapping[str, Any] | None:
    """Our group's entry of an ``XINFO GROUPS`` reply (a list of dicts in redis-py, or of
    flat lists when parsed by hand)."""
    for entry in groups if isinstance(groups, Sequence) else ():
        if isinstance(entry, Mapping):
            fields = {_text(k): v for k, v in entry.items()}
        elif isinstance(entry, Sequence):
            fields = {_text(entry[i]): entry[i + 1] for i in range(0, len(entry) - 1, 2)}
        else:
            continue
        if _text(fields.get("name", "")) == WORK_GROUP:
            return fields
    return None


def id_time(entry_id: Any) -> datetime | None:
    """The time in a stream entry id (``<ms>-<seq>``)."""
    ms = _int(_text(entry_id).partition("-")[0])
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _after(last_id: str) -> str:
    """The XRANGE start just past ``last_id`` (exclusive; ``0-0``: from the start)."""
    return "-" if last_id in ("", "0", "0-0") else f"({last_id}"


async def read_backlog(redis: Redis, keys: Keys) -> Backlog:
    """Read the backlog of the fleet of ``keys`` (see the module's doc). Raises redis-py's
    errors when Redis cannot be reached."""
    for attempt in range(2):  # read only: safe to resend once on a dropped connection
        pipe = redis.pipeline(transaction=False)
        pipe.xlen(keys.work)
        pipe.xinfo_groups(keys.work)
        pipe.xlen(keys.dead)
        pipe.execute_command("HGETALL", keys.limits, **{NEVER_DECODE: True})  # may be garbage
        try:
            length, groups, dead, limits = await uncancelled(pipe.execute(raise_on_error=False))
            break
        except RedisConnectionError:
            if attempt:
                raise
    for reply in (length, groups, dead, limits):
        if isinstance(reply, Exception) and not isinstance(reply, ResponseError):
            raise reply  # Redis gone (or worse): not the backlog's to hide
    dead_letters = None if isinstance(dead, Exception) else _int(dead)  # a dead key not a stream
    limit = reading_of(limits)
    if length == 0 and isinstance(groups, ResponseError) and "no such key" in str(groups).lower():
        return Backlog(0, 0, dead_letters, None, length=0, limit=limit)  # no work stream
    for reply in (length, groups):
        if isinstance(reply, Exception):  # the work key is not a stream
            return Backlog(None, None, dead_letters, None, stream=True, limit=limit,
                           error=" ".join(f"{type(reply).__name__}: {reply}".split())[:MAX_ERROR])
    size = _int(length) or 0
    group = _group(groups)
    if group is None:  # no replica created the group yet: the whole stream waits
        backlog: int | None = size
        pending: int | None = 0
        start = "-"
    else:
        backlog = _int(group.get("lag"))
        pending = _int(group.get("pending"))
        start = _after(_text(group.get("last-delivered-id", "0-0")))
    oldest: datetime | None = None
    if size and backlog != 0:
        first = await uncancelled(redis.xrange(keys.work, min=start, max="+", count=1))
        if first:
            oldest = id_time(first[0][0])
        else:
            backlog = 0  # nothing after the last delivered entry: known, whatever lag says
    elif not size:
        backlog = 0
    return Backlog(backlog, pending, dead_letters, oldest, length=size, stream=True,
                   group=group is not None, limit=limit)


__all__ = ["NUMBERS", "UNREAD", "Backlog", "figures_of", "id_time", "limit_of", "read_backlog"]
