"""ReplicaRecord: what a replica writes about itself, its record and its acknowledgements.

The record is the hash ``fleetgate:{NAME}:replica:{ID}`` (fields in ``replica.contract``),
written in full at a heartbeat and in part at a change, where it goes out with an
acknowledgement on ``fleetgate:{NAME}:acks``. At a fleet-wide change every replica writes at
once, so the change's commands are RESP built by hand from parts encoded in advance: the
constant ones once per process, the applied version's once per apply, the rest per write.
``ReplicaRecord.fields(full=False)`` and ``change_wire()`` write the same fields
(``CHANGE_FIELDS``), and a test holds them to it.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, Protocol

from replica.contract import (
    ACK_APPLIED,
    ACK_QUIET,
    ACK_RESUMED,
    CONTROL_CONNECTED,
    CONTROL_DISCONNECTED,
    R_APPLIED_AT,
    R_APPLIED_STATE,
    R_APPLIED_VERSION,
    R_CONTROL,
    R_CONTROL_ERROR,
    R_FAILED,
    R_FLEET_HELD,
    R_HEARTBEAT_AT,
    R_HEARTBEAT_INTERVAL,
    R_HOLDS,
    R_HOST,
    R_IN_FLIGHT,
    R_LABELS,
    R_PAUSED,
    R_POLL_INTERVAL,
    R_PROCESSED,
    R_QUEUED,
    R_QUIET,
    R_QUIET_AT,
    R_RESUME_AT,
    R_STARTED_AT,
    RECORD_FIELDS,
    RECORD_TTL_HEARTBEATS,
    Keys,
    clock,
    format_time,
    now_utc,
)
from replica.link.redisio import SKIP, pack, pack_arg
from replica.pool.holds import is_fleet_source
from replica.pool.pool import PausablePool

log = logging.getLogger(__name__)

"""The record field saying what broke while a fault holds the pool (``replica.control.faults``),
empty otherwise; written with every record write but a change's fast path."""

REGISTRY_EVERY_S: Final = 300.0
"""How often a replica notes its fleet in the registry of fleets (``FLEETS_KEY``): at its first
heartbeat, then with a heartbeat at most this often (about 0.003 commands a second)."""


class RecordSource(Protocol):
    """What the record reads from its controller at each write."""

    @property
    def fleet_held(self) -> bool: ...

    @property
    def resume_at(self) -> datetime | None: ...

    @property
    def subscribed(self) -> bool: ...


@functools.lru_cache(maxsize=64)
def _holds_json(holds: tuple[tuple[str, str], ...]) -> str:
    return json.dumps(dict(holds), sort_keys=True)


def _bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%b\r\n" % (len(value), value)


@functools.lru_cache(maxsize=256)
def _bulk_text(value: str) -> bytes:
    """A bulk string of text that many controllers of a process write alike (the state's
    JSON, a millisecond's timestamp, the holds)."""
    return _bulk(value.encode())


_SMALL_INTS: Final = tuple(_bulk(b"%d" % n) for n in range(256))


def _bulk_int(n: int) -> bytes:
    return _SMALL_INTS[n] if 0 <= n < 256 else _bulk(b"%d" % n)


CHANGE_FIELDS: Final = (
    R_PAUSED, R_HOLDS, R_FLEET_HELD, R_APPLIED_VERSION, R_APPLIED_STATE, R_APPLIED_AT,
    R_RESUME_AT, R_IN_FLIGHT, R_QUEUED, R_QUIET, R_QUIET_AT, R_CONTROL, R_HEARTBEAT_AT,
)
"""The record fields a change writes, in the order ``change_wire`` writes them."""
(_F_PAUSED, _F_HOLDS, _F_FLEET_HELD, _F_APPLIED_VERSION, _F_APPLIED_STATE, _F_APPLIED_AT,
 _F_RESUME_AT, _F_IN_FLIGHT, _F_QUEUED, _F_QUIET, _F_QUIET_AT, _F_CONTROL,
 _F_HEARTBEAT_AT) = (pack_arg(f) for f in CHANGE_FIELDS)
_ONE: Final = _bulk(b"1")
_ZERO: Final = _bulk(b"0")
_EMPTY: Final = _bulk(b"")
_NO_HOLDS: Final = _bulk(b"{}")
_CONNECTED: Final = _bulk(CONTROL_CONNECTED.encode())
_DISCONNECTED: Final = _bulk(CONTROL_DISCONNECTED.encode())


def _ack_event(events: set[str]) -> str:
    """The one event an ack names when several happened since the last: applied first."""
    if ACK_APPLIED in events:
        return ACK_APPLIED
    return ACK_RESUMED if ACK_RESUMED in events else ACK_QUIET


class ReplicaRecord:
    """One replica's record and acknowledgements, for ``FleetController``."""

    def __init__(
        self,
        pool: PausablePool,
        source: RecordSource,
        keys: Keys,
        replica_id: str,
        *,
        heartbeat_interval: float,
        poll_interval: float,
        host: str,
        extra_fields: Callable[[], Mapping[str, Any]] | None = None,
        sharded: bool = False,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self._pool = pool
        self._source = source
        self._keys = keys
        self._replica_id = replica_id
        self.key = keys.replica(replica_id)
        self._heartbeat_interval = heartbeat_interval
        self._extra_fields = extra_fields
        self.started_at = now_utc()
        self._static = {
            R_HEARTBEAT_INTERVAL: f"{heartbeat_interval:g}",
            R_POLL_INTERVAL: f"{poll_interval:g}",
            R_HOST: host,
            R_STARTED_AT: format_time(self.started_at),
            R_LABELS: json.dumps(dict(labels or {}), sort_keys=True, separators=(",", ":")),
        }
        self.applied_version = 0
        self._applied_json = ""
        self._applied_at = ""
        self._quiet_at = ""
        self._wire_applied = b""
        self._wire_quiet_at = _EMPTY
        self.set_applied(0, "", "")
        self._wire_hset_head = (
            SKIP + b"*%d\r\n" % (2 + 2 * len(CHANGE_FIELDS)) + pack_arg("HSET")
            + pack_arg(self.key)
        )
        self._ttl_ms = int(heartbeat_interval * RECORD_TTL_HEARTBEATS * 1000)
        self._wire_pexpire = SKIP + pack(("PEXPIRE", self.key, self._ttl_ms))
        self.publish = "SPUBLISH" if sharded else "PUBLISH"
        """How the acks go out: SPUBLISH on a cluster (``replica.link.connect.sharded``)."""
        self._wire_publish_head = SKIP + b"*3\r\n" + pack_arg(self.publish) + pack_arg(keys.acks)
        self._registry_next: float | None = None
        self.control_error = ""
        """What broke while a fault holds the pool (``R_CONTROL_ERROR``), or empty."""

    def set_applied(self, version: int, state_json: str, at_text: str) -> None:
        """A version was applied (its state as JSON, when, as text)."""
        self.applied_version = version
        self._applied_json = state_json
        self._applied_at = at_text
        self._wire_applied = b"".join((
            _F_APPLIED_VERSION, _bulk_int(version),
            _F_APPLIED_STATE, _bulk_text(state_json),
            _F_APPLIED_AT, _bulk_text(at_text),
        ))

    def set_quiet_at(self, text: str) -> None:
        """When the pool turned quiet under the fleet's pause (``""``: it is not)."""
        self._quiet_at = text
        self._wire_quiet_at = _bulk_text(text)

    def fields(self, full: bool = True) -> dict[str, str]:
        """The record's fields: all of them (a heartbeat), or only those a change touches
        (``CHANGE_FIELDS``)."""
        pool = self._pool
        source = self._source
        holds = pool.holds
        fields: dict[str, str] = {}
        if full and self._extra_fields is not None:
            try:
                for k, v in self._extra_fields().items():
                    if k not in RECORD_FIELDS:
                        fields[str(k)] = str(v)
            except Exception:
                log.exception("replica %s: extra_fields failed", self._replica_id)
        fields[R_PAUSED] = "1" if holds else "0"
        fields[R_HOLDS] = _holds_json(tuple(sorted(holds.items()))) if holds else "{}"
        fields[R_FLEET_HELD] = "1" if any(is_fleet_source(s) for s in holds) else "0"
        fields[R_APPLIED_VERSION] = str(self.applied_version)
        fields[R_APPLIED_STATE] = self._applied_json
        fields[R_APPLIED_AT] = self._applied_at
        fields[R_RESUME_AT] = format_time(source.resume_at)
        fields[R_IN_FLIGHT] = str(pool.in_flight)
        fields[R_QUEUED] = str(pool.queued)
        fields[R_QUIET] = "1" if holds and not pool.in_flight else "0"
        fields[R_QUIET_AT] = self._quiet_at
        fields[R_CONTROL] = CONTROL_CONNECTED if source.subscribed else CONTROL_DISCONNECTED
        fields[R_HEARTBEAT_AT] = clock()[1]
        if full:  # a change's fast write leaves it as the last heartbeat wrote it
            fields[R_CONTROL_ERROR] = self.control_error
            stats = pool.stats()
            fields.update(self._static)
            fields[R_PROCESSED] = str(stats.processed)
            fields[R_FAILED] = str(stats.failed)
        return fields

    def commands(self, full: bool = True) -> list[tuple[Any, ...]]:
        """A write of the record (``fields(full)``), its expiry and the heartbeat score."""
        flat: list[str] = []
        for k, v in self.fields(full).items():
            flat += (k, v)
        return [
            ("HSET", self.key, *flat),
            ("PEXPIRE", self.key, self._ttl_ms),
            ("ZADD", self._keys.replicas, int(time.time() * 1000), self._replica_id),
        ]

    def fault_commands(self) -> list[tuple[Any, ...]]:
        """What a heartbeat writes when ``commands()`` failed: what broke and the heartbeat,
        so the replica stays listed and says why."""
        return [
            ("HSET", self.key, R_CONTROL_ERROR, self.control_error, R_HEARTBEAT_AT, clock()[1]),
            ("PEXPIRE", self.key, self._ttl_ms),
            ("ZADD", self._keys.replicas, int(time.time() * 1000), self._replica_id),
        ]

    def registry_due(self) -> bool:
        """Whether to note this replica's fleet in the registry of fleets now (the first
        heartbeat, then every ``REGISTRY_EVERY_S``); True advances the next time."""
        now = time.monotonic()
        if self._registry_next is not None and now < self._registry_next:
            return False
        self._registry_next = now + REGISTRY_EVERY_S
        return True

    def registry_unsent(self) -> None:
        """The registry write failed on the way: due again at the next heartbeat."""
        self._registry_next = None

    def remove_commands(self) -> list[tuple[Any, ...]]:
        """What a clean stop sends: the record and the heartbeat score go."""
        return [("DEL", self.key), ("ZREM", self._keys.replicas, self._replica_id)]

    def ack_json(self, events: set[str], now: str) -> str:
        """The ack's JSON, formatted by hand (ids are validated, the rest are numbers, booleans
        and canonical times): the same text ``Ack.to_json()`` gives, at a fraction of the
        cost, since every replica sends one at once."""
        pool = self._pool
        source = self._source
        held = "true" if source.fleet_held else "false"
        quiet = "true" if pool.quiet else "false"
        resume = source.resume_at
        resume_at = f'"{format_time(resume)}"' if resume is not None else "null"
        return (
            f'{{"replica":"{self._replica_id}","version":{self.applied_version},'
            f'"event":"{_ack_event(events)}","fleet_held":{held},"quiet":{quiet},'
            f'"in_flight":{pool.in_flight},"at":"{now}","resume_at":{resume_at}}}'
        )

    def change_wire(self, events: set[str]) -> bytes:
        """RESP for what a change writes, each command behind CLIENT REPLY SKIP: HSET of
        ``CHANGE_FIELDS``, PEXPIRE, PUBLISH of the ack."""
        pool = self._pool
        source = self._source
        holds = pool.holds
        in_flight = pool.in_flight
        now = clock()[1]
        resume = source.resume_at
        ack = self.ack_json(events, now).encode()
        return b"".join((
            self._wire_hset_head,
            _F_PAUSED, _ONE if holds else _ZERO,
            _F_HOLDS, _bulk_text(_holds_json(tuple(sorted(holds.items())))) if holds
            else _NO_HOLDS,
            _F_FLEET_HELD, _ONE if source.fleet_held else _ZERO,
            self._wire_applied,
            _F_RESUME_AT, _bulk(format_time(resume).encode()) if resume is not None else _EMPTY,
            _F_IN_FLIGHT, _bulk_int(in_flight),
            _F_QUEUED, _bulk_int(pool.queued),
            _F_QUIET, _ONE if holds and not in_flight else _ZERO,
            _F_QUIET_AT, self._wire_quiet_at,
            _F_CONTROL, _CONNECTED if source.subscribed else _DISCONNECTED,
            _F_HEARTBEAT_AT, _bulk_text(now),
            self._wire_pexpire,
            self._wire_publish_head, _bulk(ack),
        ))


__all__ = ["CHANGE_FIELDS", "R_CONTROL_ERROR", "RecordSource", "ReplicaRecord"]
