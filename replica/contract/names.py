"""Names of the Redis contract: fleet and replica ids, the fields of the state hash, of a
replica record and of an audit entry, and the ack events."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from replica.errors import ContractError

FLEET_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
"""A fleet name (the whole string must match)."""

REPLICA_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,252}")
"""A replica id (a pod name fits): no braces, no spaces, at most 253 characters."""

WORK_GROUP: Final = "fleetgate"
"""The consumer group of the work stream."""
ITEM_FIELD: Final = "item"
"""The field of a work stream entry that holds the item, as JSON."""

MAX_MESSAGE_BYTES: Final = 65536
"""A control message longer than this is ignored (kind ``oversized``)."""
MAX_TEXT_LEN: Final = 1000
"""The longest ``reason`` or ``by`` (characters)."""
MAX_STAGGER_S: Final = 3600.0
"""The longest resume stagger window (seconds)."""
AUDIT_MAXLEN: Final = 10_000
"""The audit stream is capped (approximately) at this many entries."""

# Fields of the state hash.
S_PAUSED: Final = "paused"
S_REASON: Final = "reason"
S_BY: Final = "by"
S_SINCE: Final = "since"
S_VERSION: Final = "version"
S_EXPECTED_UNTIL: Final = "expected_until"
S_AUTO_RESUME_AT: Final = "auto_resume_at"
S_RESUME_STAGGER_S: Final = "resume_stagger_s"
S_CHANGED_AT: Final = "changed_at"
S_HOLDS: Final = "holds"
"""JSON object of the fleet's holds keyed by name (see ``replica.contract.holds``)."""
S_HOLDS_VERSION: Final = "holds_version"
"""The version the ``holds`` field was written at: holds are trusted only when it equals
``version`` (a hash written by an older release or by hand keeps ``paused`` in charge)."""
S_SCHEDULES_VERSION: Final = "schedules_version"
"""Changes whenever the schedules hash is written (``schedule_write.lua`` sets it to the
audit entry's id, creating the state hash for a fleet never changed; a change keeps it or puts
``0``, a restore puts its time): a poll reads the schedules hash only when this field differs
from the one read with them last (absent being a value too), or ``SCHEDULES_RECHECK_POLLS``
polls went by, so following a fleet costs one read a poll."""
SCHEDULES_RECHECK_POLLS: Final = 60
"""A poll reads the schedules hash at least this often even when ``schedules_version`` says
nothing changed (a hand edit of the hash writes no marker)."""
STATE_FIELDS: Final = (
    S_PAUSED, S_REASON, S_BY, S_SINCE, S_VERSION, S_EXPECTED_UNTIL, S_AUTO_RESUME_AT,
    S_RESUME_STAGGER_S, S_CHANGED_AT, S_HOLDS, S_HOLDS_VERSION,
)
S_RESTORED_AT: Final = "restored_at"
"""When the hash was last put back after Redis lost it (ISO; written by the restore script,
kept by every change). Not part of ``FleetState`` (not in STATE_FIELDS, never in a control
message): ``wait`` reads it to tell that Redis may have forgotten replicas."""

# Fields of a replica record (``fleetgate:{NAME}:replica:{ID}``).
R_PAUSED: Final = "paused"
"""1 when the pool is held by anyone (see R_HOLDS), else 0."""
R_HOLDS: Final = "holds"
"""JSON object ``{source: reason}`` of the pool's holds."""
R_FLEET_HELD: Final = "fleet_held"
"""1 when the pool is held by the fleet (source ``fleet`` or ``fleet:NAME``: a fleet hold)."""
R_APPLIED_VERSION: Final = "applied_version"
R_APPLIED_STATE: Final = "applied_state"
"""The JSON of the fleet state last applied (what a restore rebuilds the state hash from)."""
R_APPLIED_AT: Final = "applied_at"
R_RESUME_AT: Final = "resume_at"
"""When a staggered or automatic resume is due on this replica (ISO), or empty."""
R_IN_FLIGHT: Final = "in_flight"
R_QUEUED: Final = "queued"
R_QUIET: Final = "quiet"
"""1 when paused and nothing in flight."""
R_QUIET_AT: Final = "quiet_at"
R_CONTROL: Final = "control"
"""``connected`` or ``disconnected`` (the control channel)."""
R_CONTROL_ERROR: Final = "control_error"
"""What broke while a controller loop's fault holds the pool (empty otherwise)."""
R_HEARTBEAT_AT: Final = "heartbeat_at"
R_HEARTBEAT_INTERVAL: Final = "heartbeat_interval"
"""Seconds between heartbeats: a replica silent for STALE_HEARTBEATS of them is stale."""
R_POLL_INTERVAL: Final = "poll_interval"
R_HOST: Final = "host"
R_STARTED_AT: Final = "started_at"
R_LABELS: Final = "labels"
"""JSON object ``{key: value}`` of the replica's labels (``FLEETGATE_LABELS``; ``{}``: none),
what a hold's ``select`` is matched against."""
R_PROCESSED: Final = "processed"
R_FAILED: Final = "failed"
RECORD_FIELDS: Final = (
    R_PAUSED, R_HOLDS, R_FLEET_HELD, R_APPLIED_VERSION, R_APPLIED_STATE, R_APPLIED_AT,
    R_RESUME_AT, R_IN_FLIGHT, R_QUEUED, R_QUIET, R_QUIET_AT, R_CONTROL, R_CONTROL_ERROR,
    R_HEARTBEAT_AT,
    R_HEARTBEAT_INTERVAL, R_POLL_INTERVAL, R_HOST, R_STARTED_AT, R_PROCESSED, R_FAILED,
    R_LABELS,
)
CONTROL_CONNECTED: Final = "connected"
CONTROL_DISCONNECTED: Final = "disconnected"

STALE_HEARTBEATS: Final = 2.5
"""A replica whose last heartbeat is older than this many heartbeat intervals is stale."""
RECORD_TTL_HEARTBEATS: Final = 3
"""A replica record expires this many heartbeat intervals after its last write."""

# Fields of an audit stream entry.
A_ACTION: Final = "action"
A_REASON: Final = "reason"
A_BY: Final = "by"
A_VERSION: Final = "version"
A_AT: Final = "at"
A_HOLD: Final = "hold"
"""The fleet hold a change was about (absent on entries of older releases)."""
AUDIT_FIELDS: Final = (A_ACTION, A_REASON, A_BY, A_VERSION, A_AT)

# Ack events.
ACK_APPLIED: Final = "applied"
"""The replica applied a version (for a staggered resume: it will resume at ``resume_at``)."""
ACK_QUIET: Final = "quiet"
"""Held by the fleet and nothing in flight any more."""
ACK_RESUMED: Final = "resumed"
"""A staggered or automatic resume took effect."""
ACK_EVENTS: Final = frozenset({ACK_APPLIED, ACK_QUIET, ACK_RESUMED})

_TRUTHY: Final = frozenset({"1", "true", "yes", "on"})
_FALSY: Final = frozenset({"0", "false", "no", "off", ""})


def validate_fleet(name: str) -> str:
    """Return ``name`` if it is a valid fleet name, else raise ``ContractError``."""
    if not isinstance(name, str) or FLEET_NAME_RE.fullmatch(name) is None:
        raise ContractError(
            f"invalid fleet name {name!r}: it must match [a-z0-9][a-z0-9_.-]{{0,62}}"
        )
    return name


def validate_replica_id(replica_id: str) -> str:
    """Return ``replica_id`` if it is a valid replica id, else raise ``ContractError``."""
    if not isinstance(replica_id, str) or REPLICA_ID_RE.fullmatch(replica_id) is None:
        raise ContractError(
            f"invalid replica id {replica_id!r}: letters, digits and _ . : @ - only, "
            "starting with a letter or digit, at most 253 characters"
        )
    return replica_id


def text(value: Any) -> str:
    """A value read from Redis as ``str`` (whether the client decodes responses or not)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is None:
        return ""
    return str(value)


def decode_hash(mapping: Mapping[Any, Any]) -> dict[str, str]:
    """An HGETALL reply as ``{str: str}``."""
    return {text(k): text(v) for k, v in mapping.items()}
