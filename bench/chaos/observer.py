"""The observer: what Redis shows of the fleet, written to the history as it happens.

* a subscription per channel (connection name ``chaos-observer``, spared by the pub/sub
  kills; sharded on a cluster) to the acknowledgements (``ack``) and the control channel (``change`` via ``control``: a version
  seen for the first time; the raw messages are kept for the garbage fault to replay);
* a poll every ``POLL_S``, in one pipeline: the state hash (``change`` via ``state``), every
  replica record (``record``, when it changed), the audit stream (``audit``) and the
  dead-letter stream (``dead``).

Redis going away only makes it retry (its cursors stay: entry ids after a restart are newer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any, Final, cast

from redis.exceptions import RedisError

from bench.chaos.history import HistoryWriter
from coordinator.fleet.models import ReplicaInfo
from replica.contract import Ack, FleetState, Keys
from replica.demo import item_id
from replica.errors import ContractError
from replica.link.connect import connect
from replica.link.subscription import Subscription

log = logging.getLogger(__name__)

OBSERVER_NAME: Final = "chaos-observer"
POLL_S: Final = 0.1
KEEP_MESSAGES: Final = 30


def epoch(dt: datetime | None) -> float | None:
    return None if dt is None else dt.timestamp()


def change_fields(state: FleetState) -> dict[str, Any]:
    return {"version": state.version, "paused": state.paused,
            "changed_at": epoch(state.changed_at or state.since),
            "auto_resume_at": epoch(state.auto_resume_at), "stagger": state.resume_stagger_s,
            "holds": holds_fields(state)}


def holds_fields(state: FleetState) -> list[list[Any]] | None:
    """The state's holds as ``[name, starts_at, auto_resume_at]`` (epochs), None without."""
    if state.holds is None:
        return None
    return [[h.name, epoch(h.starts_at), epoch(h.auto_resume_at)] for h in state.holds]


class Observer:
    """Watches the fleet ``keys`` on ``url`` for the replicas ``replica_ids``."""

    def __init__(self, url: str, keys: Keys, replica_ids: list[str],
                 history: HistoryWriter) -> None:
        self.keys = keys
        self.replica_ids = replica_ids
        self.history = history
        self.redis = connect(
            url, decode_responses=True, client_name=OBSERVER_NAME, socket_timeout=3.0,
            socket_connect_timeout=2.0,
        )
        # The channel carries the garbage fault's bytes too: undecoded, each message on its own.
        self.raw = connect(
            url, decode_responses=False, client_name=OBSERVER_NAME, socket_timeout=3.0,
            socket_connect_timeout=2.0,
        )
        self.seen_versions: set[tuple[int, float | None]] = set()
        self.messages: deque[str] = deque(maxlen=KEEP_MESSAGES)
        self.records: dict[str, tuple[Any, ...]] = {}
        self.state: FleetState | None = None
        self.cursors: dict[Any, Any] = {keys.audit: "0-0", keys.dead: "0-0"}
        self.read_ids: dict[str, set[str]] = {keys.audit: set(), keys.dead: set()}
        """The entries of each stream written to the history (``resync`` adds the others)."""
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> Observer:
        self._tasks = [asyncio.create_task(self._listen(self.keys.acks), name="chaos-observer-acks"),
                       asyncio.create_task(self._listen(self.keys.control),
                                           name="chaos-observer-control"),
                       asyncio.create_task(self._poll(), name="chaos-observer-poll")]
        return self

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for client in (self.redis, self.raw):
            with contextlib.suppress(Exception):
                await client.aclose()

    # ------------------------------------------------------------------ changes

    def _change(self, state: FleetState, via: str, t: float | None = None) -> None:
        fields = change_fields(state)
        key = (state.version, fields["changed_at"])
        if key in self.seen_versions:
            return
        self.seen_versions.add(key)
        self.history.write("change", t=t, via=via, **fields)

    # ------------------------------------------------------------------ pub/sub

    async def _listen(self, channel: str) -> None:
        """One subscription per channel (``SSUBSCRIBE`` on a cluster), opened again whenever
        it is lost."""
        while True:
            sub = Subscription(self.raw, channel)
            try:
                await sub.open()
                while True:
                    reply = await sub.read(1.0)
                    if isinstance(reply, BaseException):
                        raise reply
                    if isinstance(reply, list) and len(reply) >= 3 and reply[0] == b"message":
                        self._on_message({"channel": reply[1], "data": reply[2]})
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                log.debug("observer subscription lost: %r", exc)
            except Exception:  # whatever a message does, the observer listens on
                log.exception("observer subscription failed")
            finally:
                with contextlib.suppress(Exception):
                    await sub.close()
            await asyncio.sleep(0.05)

    def _on_message(self, message: dict[str, Any]) -> None:
        t = time.time()
        raw_channel, raw = message.get("channel"), message.get("data")
        if not isinstance(raw_channel, bytes) or not isinstance(raw, bytes):
            return
        try:
            channel, data = raw_channel.decode(), raw.decode()
        except UnicodeDecodeError:
            return  # the garbage fault's
        if channel == self.keys.acks:
            try:
                ack = Ack.from_json(data)
            except ContractError:
                return
            self.history.write("ack", t=t, replica=ack.replica, version=ack.version,
                               event=ack.event, at=epoch(ack.at), fleet_held=ack.fleet_held,
                               quiet=ack.quiet, in_flight=ack.in_flight)
        elif channel == self.keys.control:
            try:
                state = FleetState.from_json(data, self.keys.fleet)
            except ContractError:
                return  # the garbage fault's own messages
            self.messages.append(data)
            self._change(state, "control", t)

    # ------------------------------------------------------------------ polling

    async def _poll(self) -> None:
        while True:
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                log.debug("observer poll failed: %r", exc)
                await asyncio.sleep(0.2)
            await asyncio.sleep(POLL_S)

    async def poll_once(self) -> None:
        keys = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.state)
        pipe.xread(self.cursors, count=1000)
        for r in self.replica_ids:
            pipe.hgetall(keys.replica(r))
        replies = await pipe.execute()
        t = time.time()
        raw_state, streams, records = replies[0], replies[1], replies[2:]
        if raw_state:
            with contextlib.suppress(ContractError):
                self.state = FleetState.from_hash(keys.fleet, raw_state)
                self._change(self.state, "state", t)
        for stream, entries in streams or []:
            for entry_id, fields in entries:
                self.cursors[stream] = entry_id
                self._entry(stream, entry_id, fields)
        now = datetime.fromtimestamp(t, UTC)
        for r, raw in zip(self.replica_ids, records, strict=True):
            info = ReplicaInfo.from_record(keys.fleet, r, raw, None, now)
            self._record(info)

    def _entry(self, stream: str, entry_id: str, fields: dict[str, str]) -> None:
        if entry_id in self.read_ids.setdefault(stream, set()):
            return
        self.read_ids[stream].add(entry_id)
        if stream == self.keys.audit:
            self._audit(fields)
        else:
            self._dead(fields)

    async def resync(self) -> int:
        """Read the audit and dead-letter streams whole and write what the history lacks; the
        count written. The polls read each from a cursor, the last entry id seen: after a
        failover, the entries the new primary took while the observer still read the old one
        (a ``SENTINEL FAILOVER`` leaves both taking writes for seconds) have lower ids than
        that cursor, and were never read (a run's dead letters seemed lost)."""
        written = 0
        for stream in (self.keys.audit, self.keys.dead):
            start = "-"
            while True:
                entries = cast("list[tuple[str, dict[str, str]]]", await self.redis.xrange(
                    stream, start, "+", count=1000))
                for entry_id, fields in entries:
                    written += entry_id not in self.read_ids.setdefault(stream, set())
                    self._entry(stream, entry_id, fields)
                if len(entries) < 1000:
                    break
                start = f"({entries[-1][0]}"
        return written

    def _audit(self, fields: dict[str, str]) -> None:
        try:
            version = int(fields.get("version", "-1"))
        except ValueError:
            version = -1
        at: float | None = None
        with contextlib.suppress(ValueError):
            at = datetime.fromisoformat(fields.get("at", "").replace("Z", "+00:00")).timestamp()
        self.history.write("audit", action=fields.get("action"), version=version,
                           at=at, by=fields.get("by"),
                           reason=fields.get("reason"))

    def _dead(self, fields: dict[str, str]) -> None:
        raw = fields.get("item")
        try:
            ident = item_id(json.loads(raw)) if raw is not None else None
        except ValueError:
            ident = None
        self.history.write("dead", item=ident, error=fields.get("error", ""),
                           runs=fields.get("runs"), replica=fields.get("replica"),
                           entry=fields.get("entry"))

    def _record(self, info: ReplicaInfo) -> None:
        if info.heartbeat_at is None:
            return
        key = (info.applied_version, epoch(info.applied_at), epoch(info.heartbeat_at),
               info.fleet_held, info.quiet, info.in_flight, info.control)
        if self.records.get(info.id) == key:
            return
        self.records[info.id] = key
        self.history.write("record", replica=info.id, applied_version=info.applied_version,
                           applied_at=key[1], heartbeat_at=key[2], fleet_held=info.fleet_held,
                           quiet=info.quiet, in_flight=info.in_flight, control=info.control)

    # ------------------------------------------------------------------ snapshots

    async def snapshot(self) -> dict[str, Any]:
        """The state hash and every record, read now (for ``settled``)."""
        keys = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.state)
        for r in self.replica_ids:
            pipe.hgetall(keys.replica(r))
        replies = await pipe.execute()
        now = datetime.now(UTC)
        state = FleetState.from_hash(keys.fleet, replies[0]) if replies[0] else None
        infos = [ReplicaInfo.from_record(keys.fleet, r, raw, None, now)
                 for r, raw in zip(self.replica_ids, replies[1:], strict=True)]
        return {
            "state": None if state is None else {
                **change_fields(state), "effectively_paused": state.effectively_paused(now)},
            "replicas": [{"id": i.id, "applied_version": i.applied_version,
                          "fleet_held": i.fleet_held, "stale": i.stale, "control": i.control,
                          "in_flight": i.in_flight} for i in infos],
        }


__all__ = ["OBSERVER_NAME", "Observer", "change_fields", "epoch"]
