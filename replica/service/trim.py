"""Trimming the work stream of acknowledged entries (``Trimmer``).

The stream is trimmed by id, never by length: ``XTRIM <stream> MINID <id>`` where ``<id>`` is the
oldest entry some consumer group still needs. For each group of the stream (``XINFO GROUPS``)
that is the older of its oldest pending entry (``XPENDING``: read, not acknowledged) and the
first entry after its last delivered id (not read yet); the stream keeps everything from the
oldest of those on. So a trim drops only entries every group has read and acknowledged, never an
unread or a pending one. A length cap (``MAXLEN``) could drop unread work, so none is used.

The groups are read before their pending entries: an entry read in between is newer than the
last delivered id read first, so it is kept either way. A stream without any group is not
trimmed (nobody consumes it yet).

Each replica trims after its lease round when it acknowledged something since its last trim. A
replica that may not ``XTRIM`` (an ACL without it) logs it once and stops trying.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, ResponseError

from replica.link.connect import pool_for
from replica.link.redisio import as_mapping, drop, uncancelled
from replica.service.entry import text

log = logging.getLogger(__name__)


def id_key(entry_id: str) -> tuple[int, int]:
    """A stream id as a sortable pair (``"1700000000000-3"`` -> ``(1700000000000, 3)``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def next_id(entry_id: str) -> str:
    """The smallest id after ``entry_id``."""
    ms, seq = id_key(entry_id)
    return f"{ms}-{seq + 1}"


def trim_point(groups: Iterable[tuple[str, str | None]]) -> str | None:
    """The oldest id to keep, given each group's (last delivered id, oldest pending id or
    None); None when there is no group."""
    needed = [
        min((next_id(last), pending), key=id_key) if pending else next_id(last)
        for last, pending in groups
    ]
    return min(needed, key=id_key) if needed else None


def _field(row: Mapping[Any, Any], name: str) -> Any:
    return row.get(name, row.get(name.encode()))


class Trimmer:
    """Trims one work stream of what every consumer group has acknowledged."""

    def __init__(self, redis: aioredis.Redis, stream: str, counts: Counter[str]) -> None:
        self._redis = redis
        self.stream = stream
        self._counts = counts
        self.enabled = True

    async def trim(self) -> int:
        """Trim once; how many entries went."""
        if not self.enabled:
            return 0
        try:
            return await self._trim()
        except ResponseError as exc:
            if not isinstance(exc, NoPermissionError) and not str(exc).startswith("NOPERM"):
                raise
            self.enabled = False
            log.warning("this replica may not trim %s (%s): acknowledged entries stay",
                        self.stream, exc)
            return 0

    async def _trim(self) -> int:
        # One connection for the reads and the XTRIM, so both meet the same server: across a
        # failover, a point read on the old primary (where an acknowledgement the failover
        # lost had landed) and trimmed on the new one (where that entry is still pending)
        # deleted the pending entry, and the next claim sweep dropped it as deleted: an item
        # lost (a 60 s Sentinel chaos run, seed 492458128). A connection that breaks between
        # the two fails the trim, which the next round tries again.
        pool = pool_for(self._redis, self.stream)
        conn = await uncancelled(pool.get_connection())  # type: ignore[no-untyped-call]
        try:
            removed = await self._trim_on(conn)
        except BaseException:
            await drop(conn)
            raise
        finally:
            await pool.release(conn)
        self._counts["trimmed"] += removed
        return removed

    async def _trim_on(self, conn: Any) -> int:
        raw = await _call(conn, "XINFO", "GROUPS", self.stream, first=True)
        groups = [as_mapping(g) for g in raw or []]
        if not groups:
            return 0
        rows = [(text(_field(g, "name")), text(_field(g, "last-delivered-id")),
                 int(_field(g, "pending") or 0)) for g in groups]
        oldest: dict[str, str | None] = {}
        for name, _, pending in rows:
            if pending:
                summary = await _call(conn, "XPENDING", self.stream, name)
                low = summary[1] if isinstance(summary, list | tuple) and len(summary) > 1 \
                    else None
                oldest[name] = text(low) if low else None
        point = trim_point((last, oldest.get(name)) for name, last, _ in rows)
        if point is None:
            return 0
        removed = int(await _call(conn, "XTRIM", self.stream, "MINID", point))
        if removed:
            log.debug("trimmed %d acknowledged entries from %s (kept from %s on)",
                      removed, self.stream, point)
        return removed


async def _call(conn: Any, *args: Any, first: bool = False) -> Any:
    """One command on ``conn`` and its reply; an error reply raised. Past the ``first``, a
    connection that was dropped meanwhile is not reconnected (redis-py would, to whatever
    server is the primary now): the trim fails instead."""
    if not first and not conn.is_connected:
        raise RedisConnectionError("the connection dropped between the trim's reads and its "
                                   "XTRIM (a failover?): not trimmed this round")
    await uncancelled(conn.send_command(*args))
    reply = await uncancelled(conn.read_response())
    if isinstance(reply, ResponseError):
        raise reply
    return reply


__all__ = ["Trimmer", "id_key", "next_id", "trim_point"]
