"""The Redis contract between the coordinator and the replicas: the leaf both sides import.

Every key of a fleet carries the hash tag ``{NAME}`` so the fleet lives in one Cluster slot::

    fleetgate:{NAME}:state          hash, the source of truth (see STATE_FIELDS)
    fleetgate:{NAME}:control        pub/sub: each change as the JSON of the state
    fleetgate:{NAME}:acks           pub/sub: replica acknowledgements (see Ack)
    fleetgate:{NAME}:replicas       sorted set: replica id -> last heartbeat (ms since epoch)
    fleetgate:{NAME}:replica:{ID}   hash per replica (see RECORD_FIELDS), expires unless renewed
    fleetgate:{NAME}:audit          stream of every pause, resume and restore (capped)
    fleetgate:{NAME}:events         stream of alerts: overdue pauses, waits with stragglers
    fleetgate:{NAME}:alerted        hash: alert kind -> state version it was raised for
    fleetgate:{NAME}:schedules      hash: schedule name -> JSON of a recurring window (schedules)
    fleetgate:{NAME}:work           stream of work items (field ``item``, JSON), group "fleetgate"
    fleetgate:{NAME}:dead           dead letters
    fleetgate:{NAME}:limits         hash: the backlog limit producers obey (absent: none)
    fleetgate:{NAME}:runs           hash: work entry id -> handler runs started (gone at its XACK)
    fleetgate:{NAME}:demo:done      demo bookkeeping
    fleetgate:{NAME}:demo:log       demo bookkeeping

Times are wall clock, ISO 8601 UTC with milliseconds (``2026-11-30T08:00:00.123Z``); in that
canonical form they sort as strings, which the Lua scripts rely on.

Values read from Redis may be ``bytes`` (a client without ``decode_responses``) or ``str``;
everything here accepts both.

The package loads neither redis nor pydantic. Its modules, one concept each: ``names`` (ids and
field names), ``keys`` (``Keys``), ``clock`` (times), ``state`` (``FleetState``), ``holds`` (``Hold``: a fleet's named pauses), ``acks``
(``Ack``), ``reasons`` (what an operator may write: ``check_reason``, ``check_by``),
``scripts`` (the Lua scripts beside them).
"""

from __future__ import annotations

from replica.contract.acks import (
    Ack,
)
from replica.contract.clock import (
    clock,
    format_time,
    now_utc,
    parse_time,
    timedelta_s,
)
from replica.contract.holds import (
    ACTIVE,
    DEFAULT_HOLD,
    ENDED,
    MAX_HOLDS,
    SCHEDULED,
    Hold,
    Holds,
    validate_hold,
)
from replica.contract.keys import (
    Keys,
)
from replica.contract.names import (
    A_ACTION,
    A_AT,
    A_BY,
    A_HOLD,
    A_REASON,
    A_VERSION,
    ACK_APPLIED,
    ACK_EVENTS,
    ACK_QUIET,
    ACK_RESUMED,
    AUDIT_FIELDS,
    AUDIT_MAXLEN,
    CONTROL_CONNECTED,
    CONTROL_DISCONNECTED,
    FLEET_NAME_RE,
    ITEM_FIELD,
    MAX_MESSAGE_BYTES,
    MAX_STAGGER_S,
    MAX_TEXT_LEN,
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
    REPLICA_ID_RE,
    S_AUTO_RESUME_AT,
    S_BY,
    S_CHANGED_AT,
    S_EXPECTED_UNTIL,
    S_HOLDS,
    S_HOLDS_VERSION,
    S_PAUSED,
    S_REASON,
    S_RESUME_STAGGER_S,
    S_SCHEDULES_VERSION,
    S_SINCE,
    S_VERSION,
    SCHEDULES_RECHECK_POLLS,
    STALE_HEARTBEATS,
    STATE_FIELDS,
    WORK_GROUP,
    decode_hash,
    text,
    validate_fleet,
    validate_replica_id,
)
from replica.contract.reasons import (
    MAX_BY,
    MAX_REASON,
    check_by,
    check_optional_reason,
    check_reason,
)
from replica.contract.scripts import (
    RESTORE_STATE_LUA,
    SET_STATE_LUA,
    restore_args,
)
from replica.contract.state import (
    FleetState,
    stagger_offset,
)

__all__ = [
    "ACK_APPLIED",
    "ACK_EVENTS",
    "ACK_QUIET",
    "ACK_RESUMED",
    "ACTIVE",
    "AUDIT_FIELDS",
    "AUDIT_MAXLEN",
    "A_ACTION",
    "A_AT",
    "A_BY",
    "A_HOLD",
    "A_REASON",
    "A_VERSION",
    "CONTROL_CONNECTED",
    "CONTROL_DISCONNECTED",
    "DEFAULT_HOLD",
    "ENDED",
    "FLEET_NAME_RE",
    "ITEM_FIELD",
    "MAX_BY",
    "MAX_HOLDS",
    "MAX_MESSAGE_BYTES",
    "MAX_REASON",
    "MAX_STAGGER_S",
    "MAX_TEXT_LEN",
    "RECORD_FIELDS",
    "RECORD_TTL_HEARTBEATS",
    "REPLICA_ID_RE",
    "RESTORE_STATE_LUA",
    "R_APPLIED_AT",
    "R_APPLIED_STATE",
    "R_APPLIED_VERSION",
    "R_CONTROL",
    "R_CONTROL_ERROR",
    "R_FAILED",
    "R_FLEET_HELD",
    "R_HEARTBEAT_AT",
    "R_HEARTBEAT_INTERVAL",
    "R_HOLDS",
    "R_HOST",
    "R_IN_FLIGHT",
    "R_LABELS",
    "R_PAUSED",
    "R_POLL_INTERVAL",
    "R_PROCESSED",
    "R_QUEUED",
    "R_QUIET",
    "R_QUIET_AT",
    "R_RESUME_AT",
    "R_STARTED_AT",
    "SCHEDULED",
    "SCHEDULES_RECHECK_POLLS",
    "SET_STATE_LUA",
    "STALE_HEARTBEATS",
    "STATE_FIELDS",
    "S_AUTO_RESUME_AT",
    "S_BY",
    "S_CHANGED_AT",
    "S_EXPECTED_UNTIL",
    "S_HOLDS",
    "S_HOLDS_VERSION",
    "S_PAUSED",
    "S_REASON",
    "S_RESUME_STAGGER_S",
    "S_SCHEDULES_VERSION",
    "S_SINCE",
    "S_VERSION",
    "WORK_GROUP",
    "Ack",
    "FleetState",
    "Hold",
    "Holds",
    "Keys",
    "check_by",
    "check_optional_reason",
    "check_reason",
    "clock",
    "decode_hash",
    "format_time",
    "now_utc",
    "parse_time",
    "restore_args",
    "stagger_offset",
    "text",
    "timedelta_s",
    "validate_fleet",
    "validate_hold",
    "validate_replica_id",
]
