"""coordinator.Fleet: the operator's side of the control plane, as a library.

    fleet = Fleet(redis, "orders")
    state = await fleet.pause("db maintenance", by="alice", expected_for=timedelta(minutes=30))
    report = await fleet.wait(state.version, timeout=60.0)
    state = await fleet.resume(by="alice", stagger=timedelta(seconds=30))

A change is one script (``replica/set_state.lua``): bump the version, write the state hash,
append to the audit stream, publish on the control channel. ``wait`` subscribes to the
replicas' acknowledgements before it reads their records (so nothing falls between the two),
then resolves from the acknowledgements as they come, with a slow poll of the records as a
fallback. No method does a round trip per replica.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from coordinator.fleet.acks import _WAIT_FIELDS, _fast_ack, _Times, _View
from coordinator.fleet.models import (
    WHY_IN_FLIGHT,
    WHY_RESUME_PENDING,
    WHY_STALE_VERSION,
    WHY_UNREACHABLE,
    AuditEvent,
    ReplicaInfo,
    ReplicaResult,
    WaitReport,
)
from replica.contract import (
    AUDIT_MAXLEN,
    CONTROL_CONNECTED,
    ITEM_FIELD,
    MAX_STAGGER_S,
    R_APPLIED_STATE,
    RESTORE_STATE_LUA,
    SET_STATE_LUA,
    STALE_HEARTBEATS,
    FleetState,
    Keys,
    check_text,
    format_time,
    now_utc,
    restore_args,
    text,
    timedelta_s,
    validate_fleet,
)
from replica.control.redisio import uncancelled
from replica.control.subscription import Subscription
from replica.errors import ContractError, InvalidMessage

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_RECORDS_LUA: Final = """
-- fleetgate: read many replica records in one command (KEYS: the record keys, one slot).
-- With ARGV: HMGET of those fields per record; without: HGETALL per record.
local out = {}
for i, key in ipairs(KEYS) do
  if #ARGV > 0 then
    out[i] = redis.call('HMGET', key, unpack(ARGV))
  else
    out[i] = redis.call('HGETALL', key)
  end
end
return out
"""

_BATCH: Final = 500
"""Records read per script call (bounded so one call never blocks Redis long)."""
LIVE_HEARTBEAT_S: Final = 10.0
"""Before its record is read, a replica counts as live when its heartbeat score is within
2.5 times this (the default heartbeat interval)."""
PRUNE_AFTER: Final = timedelta(hours=1)
"""A replica id silent this long leaves the ``replicas`` set at the next change."""


async def _next_message(sub: Subscription, timeout: float) -> Mapping[str, Any] | None:
    """The next pub/sub message as ``{"type": ..., "data": ...}``, or None after ``timeout``
    (0: only what was already read). Error replies raise."""
    reply = sub.buffered() if timeout <= 0 else await sub.read(timeout)
    if reply is None:
        return None
    if isinstance(reply, BaseException):
        raise reply
    if not isinstance(reply, list) or len(reply) < 3:
        return {"type": "other"}
    return {"type": text(reply[0]), "data": reply[2]}


async def _again(call: Callable[[], Awaitable[T]]) -> T:
    """Run a Redis call, once more after a ConnectionError: a client keeps connections that
    died with a Redis restart, and redis-py (8.1) does not always retry on them. Used for
    reads and for the state-change scripts, where a second run is harmless (a pause bumps the
    version once more; a resume of a running fleet is a no-op; a restore is idempotent)."""
    try:
        return await uncancelled(call())
    except RedisConnectionError:
        return await uncancelled(call())


async def _bounded_close(sub: Subscription) -> None:
    await sub.close()


@dataclass(frozen=True, slots=True)
class _Snapshot:
    state: FleetState
    members: dict[str, float]


class Fleet:
    """One fleet's control plane, seen from the operator's side.

    ``redis`` is a ``redis.asyncio.Redis`` client with or without ``decode_responses``.
    ``wait_poll_interval`` is how often ``wait`` re-reads the records of the replicas it has
    not heard from (the fallback to acknowledgements).
    """

    def __init__(self, redis: Redis, name: str, *, wait_poll_interval: float = 0.5) -> None:
        self._redis = redis
        self._name = validate_fleet(name)
        self._keys = Keys(name)
        self.wait_poll_interval = wait_poll_interval
        self._set_state = redis.register_script(SET_STATE_LUA)
        self._restore = redis.register_script(RESTORE_STATE_LUA)
        self._read_records = redis.register_script(READ_RECORDS_LUA)
        self._listener: Any = None
        self._listening_since: datetime | None = None
        self._last_change: tuple[FleetState, dict[str, float], float] | None = None

    # ------------------------------------------------------------------ listening

    async def listen(self) -> Fleet:
        """Keep a subscription to the acknowledgements open (until ``aclose()``), so ``wait``
        needs no subscribe round trip and reads no record for an ack it could have missed:
        for a coordinator that pauses and waits often (the API, the bench). Idempotent."""
        if self._listener is not None:
            return self
        sub = await self._subscribe_acks(time.monotonic() + 10.0)
        if sub is None:
            raise TimeoutError("could not subscribe to the acknowledgements")
        self._listener = sub
        self._listening_since = now_utc()
        return self

    async def aclose(self) -> None:
        """Close the subscription ``listen()`` opened (if any)."""
        pubsub, self._listener = self._listener, None
        self._listening_since = None
        if pubsub is not None:
            await _bounded_close(pubsub)

    async def __aenter__(self) -> Fleet:
        return await self.listen()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def name(self) -> str:
        return self._name

    @property
    def keys(self) -> Keys:
        return self._keys

    @property
    def redis(self) -> Redis:
        """The client this fleet talks through."""
        return self._redis

    def __repr__(self) -> str:
        return f"Fleet({self._name!r})"

    # ------------------------------------------------------------------ changes

    async def pause(
        self,
        reason: str,
        by: str,
        expected_for: timedelta | float | None = None,
        auto_resume_after: timedelta | float | None = None,
        *,
        resume_stagger: timedelta | float | None = None,
    ) -> FleetState:
        """Pause the fleet. Pausing a paused fleet keeps its ``since`` and updates the reason
        (and the times). ``expected_for`` only informs (alerts, dashboards);
        ``auto_resume_after`` ends the pause on every replica's own clock, with no coordinator
        running, spread over ``resume_stagger`` when given. Durations are timedeltas or seconds."""
        check_text("reason", reason)
        check_text("by", by)
        if not reason.strip():
            raise ContractError("a pause needs a reason")
        if not by.strip():
            raise ContractError("say who pauses (by=)")
        now = now_utc()
        expected = _positive("expected_for", expected_for)
        auto = _positive("auto_resume_after", auto_resume_after)
        return await self._change(
            "pause", reason, by, now,
            expected_until=now + expected if expected is not None else None,
            auto_resume_at=now + auto if auto is not None else None,
            stagger=resume_stagger,
        )

    async def resume(
        self, by: str, stagger: timedelta | float | None = None, *, reason: str = ""
    ) -> FleetState:
        """Resume the fleet; with ``stagger``, each replica waits an offset derived from its id,
        spread evenly over that window. ``reason`` (optional) goes to the audit trail; the
        state of a running fleet has none. Resuming a running fleet changes nothing and
        returns the state."""
        check_text("by", by)
        check_text("reason", reason)
        if not by.strip():
            raise ContractError("say who resumes (by=)")
        return await self._change("resume", reason.strip(), by, now_utc(), stagger=stagger)

    async def _change(
        self,
        action: str,
        reason: str,
        by: str,
        now: datetime,
        expected_until: datetime | None = None,
        auto_resume_at: datetime | None = None,
        stagger: timedelta | float | None = None,
    ) -> FleetState:
        window = timedelta_s(stagger)
        if not 0 <= window <= MAX_STAGGER_S:
            raise ContractError(f"stagger must be 0 to {MAX_STAGGER_S:g} seconds")
        keys = self._keys
        prune_before = int((now - PRUNE_AFTER).timestamp() * 1000)
        args: list[str] = [
            action, reason, by, format_time(now), format_time(expected_until),
            format_time(auto_resume_at), f"{window:g}", self._name, str(AUDIT_MAXLEN), "0",
            str(prune_before),
        ]
        script_keys = [keys.state, keys.audit, keys.control, keys.replicas]
        result = await _again(lambda: self._set_state(keys=script_keys, args=args))
        if text(result[0]) == "missing":
            # Redis forgot the hash, or the fleet was never paused: put back what the
            # replicas applied (if anything) before changing it, so versions never go back
            if await self.restore_if_missing():
                log.warning("fleet %s: the state hash was missing at %s: restored it from the "
                            "replica records first", self._name, action)
            args[9] = "1"
            result = await _again(lambda: self._set_state(keys=script_keys, args=args))
        status = text(result[0])
        fields = [text(x) for x in result[1]]
        state = FleetState.from_hash(self._name, dict(zip(fields[::2], fields[1::2], strict=True)))
        flat = result[2]
        members = {text(m): float(sc) for m, sc in zip(flat[::2], flat[1::2], strict=True)}
        # what wait(state.version) would read first: kept for a moment, saves a round trip
        self._last_change = (state, members, time.monotonic())
        if status == "ok":
            log.info("fleet %s: %s v%d by %s%s", self._name,
                     "paused" if state.paused else "resumed", state.version, by,
                     f" ({reason})" if reason else "")
        return state

    async def restore_if_missing(self) -> bool:
        """Put the state hash back from the replica records when Redis forgot it (or holds an
        older version than a replica applied): the newest applied version wins, and a pause is
        never replaced by a running state. The coordinator's side of what every replica tries
        on its own (replicas may lack the permission). True when it wrote the hash."""
        snapshot = await self._snapshot()
        ids = list(snapshot.members)
        newest: FleetState | None = None
        for values in await self._records(ids, (R_APPLIED_STATE,)):
            raw = values[0]
            if raw is None or raw == b"" or raw == "":
                continue
            try:
                applied = FleetState.from_json(text(raw), self._name)
            except InvalidMessage:
                continue
            if newest is None or applied.version > newest.version:
                newest = applied
        if newest is None or newest.version == 0:
            return False
        if snapshot.state.version >= newest.version:
            return False
        keys = self._keys
        written = await _again(lambda: self._restore(
            keys=[keys.state, keys.audit, keys.control],
            args=restore_args(newest, "coordinator"),
        ))
        if int(written):
            log.warning("fleet %s: restored the state hash at v%d (%s) from the replica records",
                        self._name, newest.version, "paused" if newest.paused else "running")
            return True
        return False

    # ------------------------------------------------------------------ reading

    async def state(self) -> FleetState:
        """The fleet's state (the initial running state, version 0, when there is no hash).

        A pause past its ``auto_resume_at`` still reads ``paused`` here (replicas have resumed
        on their own clocks): see ``FleetState.effectively_paused()``."""
        raw = await _again(lambda: self._redis.hgetall(self._keys.state))
        return FleetState.from_hash(self._name, raw)

    async def replicas(self, include_stale: bool = True) -> list[ReplicaInfo]:
        """Every replica in the ``replicas`` set, sorted by id; a replica whose heartbeat is too
        old (or whose record expired) is marked ``stale``."""
        members = await self._members()
        ids = sorted(members)
        records = await self._records(ids, ())
        now = now_utc()
        out = []
        for replica_id, flat in zip(ids, records, strict=True):
            pairs = [text(x) for x in flat]
            raw = dict(zip(pairs[::2], pairs[1::2], strict=True))
            info = ReplicaInfo.from_record(self._name, replica_id, raw, members[replica_id], now)
            if include_stale or not info.stale:
                out.append(info)
        return out

    async def history(self, limit: int = 50) -> list[AuditEvent]:
        """The latest audit events, newest first."""
        entries: Any = await _again(
            lambda: self._redis.xrevrange(self._keys.audit, count=max(1, int(limit)))
        )
        return [AuditEvent.from_entry(entry_id, fields) for entry_id, fields in entries or []]

    async def enqueue(self, items: Iterable[Any]) -> list[str]:
        """Append each item (as JSON, field ``item``) to the work stream, pipelined; returns
        the entry ids."""
        pipe = self._redis.pipeline(transaction=False)
        count = 0
        for item in items:
            fields: dict[Any, Any] = {ITEM_FIELD: json.dumps(item)}
            pipe.xadd(self._keys.work, fields)
            count += 1
        if not count:
            return []
        return [text(x) for x in await uncancelled(pipe.execute())]

    async def _members(self) -> dict[str, float]:
        raw: Any = await _again(
            lambda: self._redis.zrange(self._keys.replicas, 0, -1, withscores=True)
        )
        return {text(member): float(score) for member, score in raw}

    async def _snapshot(self) -> _Snapshot:
        for attempt in range(2):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hgetall(self._keys.state)
            pipe.zrange(self._keys.replicas, 0, -1, withscores=True)
            try:
                raw_state, raw_members = await uncancelled(pipe.execute())
                break
            except RedisConnectionError:
                # redis-py retries single commands on a connection that died with a Redis
                # restart, not pipelines: this read is safe to send again
                if attempt:
                    raise
        return _Snapshot(
            state=FleetState.from_hash(self._name, raw_state),
            members={text(m): float(s) for m, s in raw_members},
        )

    async def _records(self, ids: Sequence[str], fields: Sequence[str]) -> list[list[Any]]:
        """The records of ``ids`` (HMGET of ``fields``, or HGETALL when empty), in order, in one
        script call per batch."""
        out: list[list[Any]] = []
        for i in range(0, len(ids), _BATCH):
            batch = ids[i:i + _BATCH]
            record_keys = [self._keys.replica(r) for r in batch]
            result = await _again(
                lambda: self._read_records(keys=record_keys, args=list(fields))  # noqa: B023
            )
            out.extend(list(x) for x in result)
        return out

    # ------------------------------------------------------------------ wait

    async def wait(self, version: int, timeout: float = 60.0) -> WaitReport:
        """Wait until every live replica applied ``version`` and, for a pause, is quiet (for a
        resume: no longer held by the fleet). Never raises on timeout: the report says who did
        not get there and why."""
        t0 = time.monotonic()
        deadline = t0 + max(0.0, timeout)
        views: dict[str, _View] = {}
        pause = True
        state: FleetState | None = None
        own: Subscription | None = None
        pubsub = self._listener
        try:
            if pubsub is None:
                # Subscribe first, then read: an ack published before the subscription is in
                # the record already (replicas write the record, then publish).
                own = pubsub = await self._subscribe_acks(deadline)
                listening = pubsub is not None
            else:
                listening = True
            last = self._last_change
            if last is not None and last[0].version == version and \
                    time.monotonic() - last[2] < 1.0:
                snapshot = _Snapshot(state=last[0], members=last[1])  # from pause()/resume()
            else:
                snapshot = await self._snapshot()
            state = snapshot.state
            pause = state.paused
            changed_at = state.changed_at or state.since
            since = self._listening_since
            if own is None and since is not None and changed_at is not None and \
                    changed_at >= since:
                # Listening since before the change: every ack for it comes on the channel,
                # so no record needs reading now (the fallback poll reads the silent ones).
                now_ms = time.time() * 1000
                for r, score in snapshot.members.items():
                    if now_ms - score <= STALE_HEARTBEATS * LIVE_HEARTBEAT_S * 1000:
                        view = views[r] = _View(r)
                        view.alive = True
            else:
                await self._refresh(views, list(snapshot.members))
            required = {r for r, v in views.items() if v.alive}
            pending = {r for r in required if not views[r].reached(version, pause)}
            next_fallback = time.monotonic() + self.wait_poll_interval
            while pending:
                now = time.monotonic()
                if now >= deadline:
                    break
                step = min(deadline, next_fallback) - now
                if listening and pubsub is not None:
                    try:
                        message = await _next_message(pubsub, step)
                        while message is not None:
                            self._on_ack(message, views, required, pending, version, pause)
                            if not pending:
                                break
                            message = await _next_message(pubsub, 0)
                    except (RedisError, OSError) as exc:
                        listening = False  # carry on with the records alone
                        if own is None:
                            self._listener = None  # a broken shared subscription: drop it
                            self._listening_since = None
                            own = pubsub
                        log.info("fleet %s: lost the acknowledgements channel (%r): polling the "
                                 "records", self._name, exc)
                else:
                    await asyncio.sleep(step)
                if pending and time.monotonic() >= next_fallback:
                    members = await self._members()
                    gone = [r for r in pending if r not in members]
                    for r in gone:  # stopped cleanly (left the set)
                        pending.discard(r)
                        required.discard(r)
                    new = [r for r in members if r not in views]
                    await self._refresh(views, [*pending, *new])
                    for r in [*pending, *new]:
                        if views[r].alive:
                            required.add(r)
                        else:  # the record expired or the heartbeat is too old: not live
                            required.discard(r)
                            pending.discard(r)
                    for r in [*pending, *new]:
                        if r in required and views[r].reached(version, pause):
                            pending.discard(r)
                        elif r in required:
                            pending.add(r)
                    next_fallback = time.monotonic() + self.wait_poll_interval
            if pending:
                # final word from the records, for an accurate why
                await self._refresh(views, list(pending))
                for r in list(pending):
                    if views[r].reached(version, pause):
                        pending.discard(r)
        finally:
            if own is not None:
                await _bounded_close(own)
        elapsed = time.monotonic() - t0
        changed = state.changed_at or state.since if state is not None else None
        times = _Times(changed)
        results = [
            self._result(views[r], version, pause, r not in pending, times)
            for r in sorted(required)
        ]
        report = WaitReport(
            version=version,
            ok=not pending,
            action="pause" if pause else "resume",
            elapsed_s=elapsed,
            replicas=results,
        )
        if pending:
            log.warning("fleet %s: %d of %d replicas did not reach v%d within %.1f s: %s",
                        self._name, len(pending), len(results), version, timeout,
                        ", ".join(f"{r.id} ({r.why})" for r in report.stragglers[:10]))
        return report

    async def _subscribe_acks(self, deadline: float) -> Subscription | None:
        """Subscribe to the acknowledgements and wait for the confirmation (two tries). None
        when it cannot: ``wait`` then polls the records alone."""
        for attempt in range(2):
            sub = Subscription(self._redis, self._keys.acks)
            try:
                await sub.open()
                while True:
                    left = deadline - time.monotonic()
                    reply = await sub.read(max(0.05, min(left, 5.0)))
                    if isinstance(reply, BaseException):
                        raise reply
                    if isinstance(reply, list) and reply and reply[0] == b"subscribe":
                        return sub
                    if reply is None and left <= 0:
                        await sub.close()
                        return None
            except (RedisError, OSError) as exc:
                log.info("fleet %s: cannot subscribe to the acknowledgements (%r)%s",
                         self._name, exc, ", retrying" if attempt == 0 else "")
                await sub.close()
            except BaseException:
                await sub.close()
                raise
        return None

    async def _refresh(self, views: dict[str, _View], ids: list[str]) -> None:
        records = await self._records(ids, _WAIT_FIELDS)
        now = time.time()
        for replica_id, values in zip(ids, records, strict=True):
            view = views.get(replica_id)
            if view is None:
                view = views[replica_id] = _View(replica_id)
            view.from_record(values, now)

    def _on_ack(
        self,
        message: Mapping[str, Any],
        views: dict[str, _View],
        required: set[str],
        pending: set[str],
        version: int,
        pause: bool,
    ) -> None:
        if message.get("type") != "message":
            return
        ack = _fast_ack(message.get("data"))
        if ack is None:
            return
        replica = ack[0]
        view = views.get(replica)
        if view is None:
            if ack[1] < version:
                return  # an old ack still in the channel, from a replica not in this wait
            view = views[replica] = _View(replica)
            required.add(replica)
            pending.add(replica)
        view.from_ack(ack)
        if replica in pending and view.reached(version, pause):
            pending.discard(replica)

    @staticmethod
    def _result(
        view: _View, version: int, pause: bool, reached: bool, times: _Times
    ) -> ReplicaResult:
        why: str | None = None
        if not reached:
            behind = view.applied_version < version
            if not view.alive or (behind and view.control != CONTROL_CONNECTED):
                why = WHY_UNREACHABLE
            elif behind:
                why = WHY_STALE_VERSION
            elif pause:
                why = WHY_IN_FLIGHT
            else:
                why = WHY_RESUME_PENDING
        applied = view.applied_version >= version
        applied_at = times(view.applied_at) if applied else None
        quiet_at = times(view.quiet_at) if pause and view.quiet else None
        return ReplicaResult(
            id=view.id,
            reached=reached,
            applied_version=view.applied_version,
            acked_at=applied_at,
            quiet_at=quiet_at,
            applied_after_s=times.after(applied_at),
            quiet_after_s=times.after(quiet_at),
            in_flight=view.in_flight,
            why=why,
        )


def _positive(name: str, value: timedelta | float | None) -> timedelta | None:
    if value is None:
        return None
    seconds = timedelta_s(value)
    if not seconds > 0:
        raise ContractError(f"{name} must be positive")
    return timedelta(seconds=seconds)


__all__ = ["Fleet"]
