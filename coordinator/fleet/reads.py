"""What ``Fleet`` reads: the state, the ``replicas`` set, the replica records, the audit trail.

Every replica may write to the ``replicas`` set and the records (the replica ACL allows it), so
readers trust neither: a member that is not a replica id (``ZADD ... 'bad id'``), a score that
is not a number, a record key that is not a hash, a record that cannot be parsed is skipped and
counted (``FleetStatus.unreadable``), logged once per change of the count. One bad member never
blinds ``status``, the API, the metrics or ``wait``. The keys replicas write (the ``replicas``
set, the records) are read as bytes, whatever the client decodes: a member or a field that is
not UTF-8 is one unreadable entry, never an error of the whole read.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from redis.asyncio import Redis
from redis.client import NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from coordinator.fleet.calls import again
from coordinator.fleet.models import AuditEvent, FleetStatus, ReplicaInfo
from replica.contract import REPLICA_ID_RE, FleetState, Keys, now_utc, parse_time, text
from replica.contract.names import S_RESTORED_AT
from replica.errors import ContractError
from replica.link.redisio import uncancelled

log = logging.getLogger(__name__)

READ_RECORDS_LUA: Final = """
-- fleetgate: read many replica records in one command (KEYS: the record keys, one slot).
-- With ARGV: HMGET of those fields per record; without: HGETALL per record. A key that is
-- not a hash reads as false (nil), so that one bad key does not fail the whole read.
local out = {}
for i, key in ipairs(KEYS) do
  local r
  if #ARGV > 0 then
    r = redis.pcall('HMGET', key, unpack(ARGV))
  else
    r = redis.pcall('HGETALL', key)
  end
  if type(r) == 'table' and r.err then r = false end
  out[i] = r
end
return out
"""

BATCH: Final = 500
"""The most records one command reads: ``READ_RECORDS_LUA`` runs at most this many HGETALLs
(or HMGETs), about a millisecond of Redis at 500 records, so one read of a big fleet never
holds Redis up for long; other clients' commands run between two batches."""


@dataclass(frozen=True, slots=True)
class Members:
    """The ``replicas`` set: the replica ids that parse, with their heartbeat scores (ms), and
    how many members did not parse."""

    scores: dict[str, float]
    unreadable: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state and the ``replicas`` set, read together, and when the state hash was last
    put back after Redis lost it (its ``restored_at``, not part of the state)."""

    state: FleetState
    members: Members
    restored_at: datetime | None = None


def restored_at(raw: Mapping[Any, Any]) -> datetime | None:
    """The ``restored_at`` of a state hash (HGETALL reply, or a decoded one), or None."""
    value = raw.get(S_RESTORED_AT)
    if value is None:
        value = raw.get(S_RESTORED_AT.encode())
    try:
        return parse_time(text(value)) if value else None
    except ContractError:
        return None  # not a time: no stamp (readers trust no field of Redis blindly)


_ALL_IDS: Final = re.compile(rf"(?:{REPLICA_ID_RE.pattern}\n)*")
"""Every id valid, checked in one pass over them joined by newlines (with as many newlines as
ids: none is inside one)."""


def parse_members(pairs: Iterable[tuple[Any, Any]]) -> Members:
    """``(member, score)`` pairs as ``Members``: ids that are not replica ids, and scores that
    are not finite numbers, are counted, not kept."""
    pairs = list(pairs)
    try:
        ids = [m if type(m) is str else text(m) for m, _ in pairs]
        values = [float(score) for _, score in pairs]
        joined = "\n".join(ids) + "\n" if ids else ""
        if joined.count("\n") == len(ids) and _ALL_IDS.fullmatch(joined) and \
                math.isfinite(math.fsum(values)):
            return Members(dict(zip(ids, values, strict=True)))  # the usual case, at a change
    except (TypeError, ValueError, OverflowError):
        pass
    scores: dict[str, float] = {}
    bad = 0
    for member, score in pairs:
        replica_id = text(member)
        try:
            value = float(score)
        except (TypeError, ValueError):
            value = math.nan
        if REPLICA_ID_RE.fullmatch(replica_id) is None or not math.isfinite(value):
            bad += 1
            continue
        scores[replica_id] = value
    return Members(scores, bad)


def flat_reply(raw: Any) -> list[Any]:
    """A ``ZRANGE ... WITHSCORES`` reply as a flat list (RESP3 answers pairs)."""
    items = list(raw or [])
    if items and isinstance(items[0], (list, tuple)):
        return [x for pair in items for x in pair[:2]]
    return items


def parse_flat_members(flat: Sequence[Any]) -> Members:
    """``parse_members`` of a flat ``[member, score, ...]`` reply (a script's ZRANGE)."""
    return parse_members(zip(flat[::2], flat[1::2], strict=False))


class Reads:
    """The reads of one fleet (``Fleet`` delegates to it)."""

    def __init__(self, redis: Redis, name: str, keys: Keys, *, batch: int = BATCH) -> None:
        self._redis = redis
        self.batch = max(1, int(batch))
        """Records per command (``BATCH``)."""
        self._name = name
        self._keys = keys
        self._read_records = redis.register_script(READ_RECORDS_LUA)
        self._record_prefix = f"{keys.prefix}:replica:"
        self._unreadable_logged = 0

    def record_key(self, replica_id: str) -> str:
        """The record key of an id already checked (``parse_members``, an ack's pattern)."""
        return self._record_prefix + replica_id

    def noted(self, unreadable: int) -> int:
        """Log a count of unreadable entries when it changes; returns it."""
        if unreadable != self._unreadable_logged:
            if unreadable:
                log.warning("fleet %s: %d entr%s of the replicas set or their records cannot "
                            "be read (not a replica id, not a hash): skipped", self._name,
                            unreadable, "y" if unreadable == 1 else "ies")
            else:
                log.info("fleet %s: every replica entry reads again", self._name)
            self._unreadable_logged = unreadable
        return unreadable

    async def state(self) -> FleetState:
        raw = await again(lambda: self._redis.execute_command(  # type: ignore[no-untyped-call]
            "HGETALL", self._keys.state, **{NEVER_DECODE: True}))
        return FleetState.from_hash(self._name, raw)

    async def members(self) -> Members:
        raw: Any = await again(lambda: self._redis.execute_command(  # type: ignore[no-untyped-call]
            "ZRANGE", self._keys.replicas, 0, -1, "WITHSCORES", **{NEVER_DECODE: True}))
        return parse_flat_members(flat_reply(raw))

    async def snapshot(self) -> Snapshot:
        """The state and the members in one round trip."""
        for attempt in range(2):
            pipe = self._redis.pipeline(transaction=False)
            # undecoded, as the members: bytes that are not UTF-8 in a hash edited by hand read
            # as replacement characters (the replicas hold on them), never fail the read
            pipe.execute_command("HGETALL", self._keys.state, **{NEVER_DECODE: True})
            pipe.execute_command(
                "ZRANGE", self._keys.replicas, 0, -1, "WITHSCORES", **{NEVER_DECODE: True})
            try:
                raw_state, raw_members = await uncancelled(pipe.execute())
                break
            except RedisConnectionError:
                # redis-py retries single commands on a connection that died with a Redis
                # restart, not pipelines: this read is safe to send again
                if attempt:
                    raise
        return Snapshot(FleetState.from_hash(self._name, raw_state),
                        parse_flat_members(flat_reply(raw_members)), restored_at(raw_state or {}))

    async def records(self, ids: Sequence[str], fields: Sequence[str]) -> list[list[Any] | None]:
        """The records of ``ids`` (checked ids: HMGET of ``fields``, or HGETALL when empty), in
        order, in one script call per ``batch`` records; None for a key that is not a hash.
        The values are bytes (never decoded by the client: a replica may write any bytes)."""
        out: list[list[Any] | None] = []
        batch = self.batch
        for i in range(0, len(ids), batch):
            record_keys = [self.record_key(r) for r in ids[i:i + batch]]
            result = await again(
                lambda: self._records_raw(record_keys, list(fields))  # noqa: B023
            )
            out.extend(None if x is None else list(x) for x in result)
        return out

    async def _records_raw(self, record_keys: list[str], fields: list[str]) -> Any:
        """``READ_RECORDS_LUA`` over ``record_keys``, its reply never decoded (loaded first
        when Redis does not have it)."""
        script = self._read_records
        call = ("EVALSHA", script.sha, len(record_keys), *record_keys, *fields)
        try:
            return await uncancelled(self._redis.execute_command(  # type: ignore[no-untyped-call]
                *call, **{NEVER_DECODE: True}))
        except NoScriptError:
            await uncancelled(self._redis.script_load(READ_RECORDS_LUA))
            return await uncancelled(self._redis.execute_command(  # type: ignore[no-untyped-call]
                *call, **{NEVER_DECODE: True}))

    async def infos(
        self, members: Members, include_stale: bool = True
    ) -> tuple[list[ReplicaInfo], int]:
        """The replicas of ``members``, sorted by id, and how many entries were unreadable
        (the members that did not parse and the records that do not)."""
        ids = sorted(members.scores)
        records = await self.records(ids, ())
        now = now_utc()
        out = []
        bad = members.unreadable
        for replica_id, flat in zip(ids, records, strict=True):
            if flat is None:
                bad += 1
                continue
            try:  # a field or value that is not UTF-8: the record cannot be read
                pairs = [x.decode("utf-8") if isinstance(x, bytes) else text(x) for x in flat]
            except UnicodeDecodeError:
                bad += 1
                continue
            raw = dict(zip(pairs[::2], pairs[1::2], strict=False))
            try:
                info = ReplicaInfo.from_record(
                    self._name, replica_id, raw, members.scores[replica_id], now
                )
            except (ValueError, RecursionError):  # lenient already: belt and braces
                bad += 1
                continue
            if include_stale or not info.stale:
                out.append(info)
        return out, self.noted(bad)

    async def status(self, include_stale: bool = True) -> FleetStatus:
        snapshot = await self.snapshot()
        replicas, unreadable = await self.infos(snapshot.members, include_stale)
        return FleetStatus(state=snapshot.state, replicas=replicas, unreadable=unreadable)

    async def history(self, limit: int) -> list[AuditEvent]:
        entries: Any = await again(
            lambda: self._redis.xrevrange(self._keys.audit, count=max(1, int(limit)))
        )
        return [AuditEvent.from_entry(entry_id, fields) for entry_id, fields in entries or []]
