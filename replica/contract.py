"""The Redis contract between the coordinator and the replicas: one module both sides import.

Every key of a fleet carries the hash tag ``{NAME}`` so the fleet lives in one Cluster slot::

    fleetgate:{NAME}:state          hash, the source of truth (see STATE_FIELDS)
    fleetgate:{NAME}:control        pub/sub: each change as the JSON of the state
    fleetgate:{NAME}:acks           pub/sub: replica acknowledgements (see Ack)
    fleetgate:{NAME}:replicas       sorted set: replica id -> last heartbeat (ms since epoch)
    fleetgate:{NAME}:replica:{ID}   hash per replica (see RECORD_FIELDS), expires unless renewed
    fleetgate:{NAME}:audit          stream of every pause, resume and restore (capped)
    fleetgate:{NAME}:work           stream of work items (field ``item``, JSON), group "fleetgate"
    fleetgate:{NAME}:dead           dead letters
    fleetgate:{NAME}:demo:done      demo bookkeeping
    fleetgate:{NAME}:demo:log       demo bookkeeping

Times are wall clock, ISO 8601 UTC with milliseconds (``2026-11-30T08:00:00.123Z``); in that
canonical form they sort as strings, which the Lua scripts rely on.

Values read from Redis may be ``bytes`` (a client without ``decode_responses``) or ``str``;
everything here accepts both.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Final

from replica.errors import ContractError, InvalidMessage

# ---------------------------------------------------------------------------- names

FLEET_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
"""A fleet name (the whole string must match)."""

REPLICA_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,252}")
"""A replica id (a pod name fits): no braces, no spaces, at most 253 characters."""

WORK_GROUP: Final = "fleetgate"
"""The consumer group of the work stream."""
ITEM_FIELD: Final = "item"
"""The field of a work stream entry that holds the item, as JSON."""

MAX_MESSAGE_BYTES: Final = 8192
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
STATE_FIELDS: Final = (
    S_PAUSED, S_REASON, S_BY, S_SINCE, S_VERSION, S_EXPECTED_UNTIL, S_AUTO_RESUME_AT,
    S_RESUME_STAGGER_S, S_CHANGED_AT,
)

# Fields of a replica record (``fleetgate:{NAME}:replica:{ID}``).
R_PAUSED: Final = "paused"
"""1 when the pool is held by anyone (see R_HOLDS), else 0."""
R_HOLDS: Final = "holds"
"""JSON object ``{source: reason}`` of the pool's holds."""
R_FLEET_HELD: Final = "fleet_held"
"""1 when the pool is held by the fleet (source ``fleet``)."""
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
R_HEARTBEAT_AT: Final = "heartbeat_at"
R_HEARTBEAT_INTERVAL: Final = "heartbeat_interval"
"""Seconds between heartbeats: a replica silent for STALE_HEARTBEATS of them is stale."""
R_POLL_INTERVAL: Final = "poll_interval"
R_HOST: Final = "host"
R_STARTED_AT: Final = "started_at"
R_PROCESSED: Final = "processed"
R_FAILED: Final = "failed"
RECORD_FIELDS: Final = (
    R_PAUSED, R_HOLDS, R_FLEET_HELD, R_APPLIED_VERSION, R_APPLIED_STATE, R_APPLIED_AT,
    R_RESUME_AT, R_IN_FLIGHT, R_QUEUED, R_QUIET, R_QUIET_AT, R_CONTROL, R_HEARTBEAT_AT,
    R_HEARTBEAT_INTERVAL, R_POLL_INTERVAL, R_HOST, R_STARTED_AT, R_PROCESSED, R_FAILED,
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


@dataclass(frozen=True, slots=True)
class Keys:
    """The Redis keys and channels of one fleet."""

    fleet: str

    def __post_init__(self) -> None:
        validate_fleet(self.fleet)

    @property
    def prefix(self) -> str:
        return f"fleetgate:{{{self.fleet}}}"

    @property
    def state(self) -> str:
        return f"{self.prefix}:state"

    @property
    def control(self) -> str:
        return f"{self.prefix}:control"

    @property
    def acks(self) -> str:
        return f"{self.prefix}:acks"

    @property
    def replicas(self) -> str:
        return f"{self.prefix}:replicas"

    def replica(self, replica_id: str) -> str:
        return f"{self.prefix}:replica:{validate_replica_id(replica_id)}"

    @property
    def audit(self) -> str:
        return f"{self.prefix}:audit"

    @property
    def work(self) -> str:
        return f"{self.prefix}:work"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"

    @property
    def demo_done(self) -> str:
        return f"{self.prefix}:demo:done"

    @property
    def demo_log(self) -> str:
        return f"{self.prefix}:demo:log"


# ---------------------------------------------------------------------------- time


def now_utc() -> datetime:
    """The wall clock, UTC."""
    return datetime.now(UTC)


_clock: tuple[int, str] = (-1, "")


def clock() -> tuple[datetime, str]:
    """The wall clock, UTC, and its ``format_time`` text.

    The text is remembered for the millisecond: at a fleet-wide change a process with many
    controllers stamps hundreds of records and acknowledgements within a few milliseconds."""
    global _clock
    t = time.time()
    ms = int(t * 1000)
    last = _clock
    if ms != last[0]:
        whole = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
        last = _clock = (ms, whole.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z")
    return datetime.fromtimestamp(t, UTC), last[1]


def format_time(dt: datetime | None) -> str:
    """ISO 8601 UTC with milliseconds (``2026-11-30T08:00:00.123Z``); ``""`` for None.

    A naive datetime is taken to be UTC.
    """
    if dt is None:
        return ""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    elif dt.utcoffset():
        dt = dt.astimezone(UTC)
    return dt.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_time(value: str | bytes | None) -> datetime | None:
    """Parse an ISO 8601 time (``Z`` or an offset; no zone means UTC); None for empty.

    Raises ``ContractError`` on anything else.
    """
    s = text(value).strip()
    if not s:
        return None
    try:
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise ContractError(f"not an ISO 8601 time: {s[:40]!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def _ms(dt: datetime) -> datetime:
    """Truncate to milliseconds (what survives a trip through the contract)."""
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


# ---------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class FleetState:
    """The pause state of a fleet: the content of ``fleetgate:{NAME}:state``.

    ``since`` is when the fleet entered its current condition (paused or running); a pause of a
    paused fleet keeps it. ``changed_at`` is when this version was written. ``version`` grows by
    one with every change; 0 means the fleet was never paused.
    """

    fleet: str
    paused: bool
    reason: str
    by: str
    since: datetime | None
    version: int
    expected_until: datetime | None = None
    auto_resume_at: datetime | None = None
    resume_stagger_s: float = 0.0
    changed_at: datetime | None = None

    @classmethod
    def initial(cls, fleet: str) -> FleetState:
        """The state of a fleet that has no state hash: running, version 0."""
        return cls(fleet=fleet, paused=False, reason="", by="", since=None, version=0)

    # -- derived

    def auto_resumed(self, now: datetime | None = None) -> bool:
        """True when this is a pause whose ``auto_resume_at`` has passed."""
        if not self.paused or self.auto_resume_at is None:
            return False
        return (now or now_utc()) >= self.auto_resume_at

    def effectively_paused(self, now: datetime | None = None) -> bool:
        """Paused, and not past its ``auto_resume_at``."""
        return self.paused and not self.auto_resumed(now)

    def resume_start(self) -> datetime | None:
        """When pools should start resuming (before any stagger offset): ``since`` of a running
        state, ``auto_resume_at`` of a pause that ends by itself, None for an open-ended pause."""
        if self.paused:
            return self.auto_resume_at
        return self.since

    def same_content(self, other: FleetState) -> bool:
        """Equal but for ``version`` and ``changed_at`` (a hash edited without a version bump)."""
        return (
            self.paused == other.paused
            and self.reason == other.reason
            and self.by == other.by
            and self.since == other.since
            and self.expected_until == other.expected_until
            and self.auto_resume_at == other.auto_resume_at
            and self.resume_stagger_s == other.resume_stagger_s
        )

    # -- conversions

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: times as ISO 8601 UTC with milliseconds (None when unset)."""
        return {
            "fleet": self.fleet,
            "paused": self.paused,
            "reason": self.reason,
            "by": self.by,
            "since": format_time(self.since) or None,
            "version": self.version,
            "expected_until": format_time(self.expected_until) or None,
            "auto_resume_at": format_time(self.auto_resume_at) or None,
            "resume_stagger_s": self.resume_stagger_s,
            "changed_at": format_time(self.changed_at) or None,
        }

    def to_json(self) -> str:
        """The control message for this state."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_hash(self) -> dict[str, str]:
        """The fields of the state hash."""
        stagger = self.resume_stagger_s
        return {
            S_PAUSED: "1" if self.paused else "0",
            S_REASON: self.reason,
            S_BY: self.by,
            S_SINCE: format_time(self.since),
            S_VERSION: str(self.version),
            S_EXPECTED_UNTIL: format_time(self.expected_until),
            S_AUTO_RESUME_AT: format_time(self.auto_resume_at),
            S_RESUME_STAGGER_S: str(int(stagger)) if stagger == int(stagger) else repr(stagger),
            S_CHANGED_AT: format_time(self.changed_at),
        }

    @classmethod
    def from_hash(cls, fleet: str, mapping: Mapping[Any, Any]) -> FleetState:
        """The state from an HGETALL reply (str or bytes). Lenient, since operators may write
        the hash by hand: a missing field takes its default, ``paused`` may be 1/0/true/false/
        yes/no/on/off. An empty mapping is the initial state. Raises ``InvalidMessage`` (kind
        ``bad_state``) for a value that cannot be read."""
        h = decode_hash(mapping)
        if not h:
            return cls.initial(fleet)
        try:
            paused_raw = h.get(S_PAUSED, "0").strip().lower()
            if paused_raw in _TRUTHY:
                paused = True
            elif paused_raw in _FALSY:
                paused = False
            else:
                raise ContractError(f"paused is {paused_raw[:20]!r}")
            version_raw = h.get(S_VERSION, "").strip() or "0"
            version = int(version_raw)
            if version < 0:
                raise ContractError(f"version is {version}")
            stagger = _stagger(float(h.get(S_RESUME_STAGGER_S, "").strip() or "0"))
            return cls(
                fleet=fleet,
                paused=paused,
                reason=h.get(S_REASON, "")[:MAX_TEXT_LEN],
                by=h.get(S_BY, "")[:MAX_TEXT_LEN],
                since=parse_time(h.get(S_SINCE)),
                version=version,
                expected_until=parse_time(h.get(S_EXPECTED_UNTIL)),
                auto_resume_at=parse_time(h.get(S_AUTO_RESUME_AT)),
                resume_stagger_s=stagger,
                changed_at=parse_time(h.get(S_CHANGED_AT)),
            )
        except (ContractError, ValueError) as exc:
            raise InvalidMessage("bad_state", f"{fleet}: {exc}") from None

    @classmethod
    def from_dict(cls, data: Any, fleet: str | None = None) -> FleetState:
        """The state from a decoded control message. Strict: raises ``InvalidMessage`` with kind
        ``not_object``, ``missing_field``, ``bad_field`` or ``unknown_fleet``."""
        if not isinstance(data, dict):
            raise InvalidMessage("not_object", f"a {type(data).__name__}, not an object")
        for name in ("fleet", "paused", "version"):
            if name not in data:
                raise InvalidMessage("missing_field", name)
        name = data["fleet"]
        if not isinstance(name, str) or FLEET_NAME_RE.fullmatch(name) is None:
            raise InvalidMessage("bad_field", "fleet")
        if fleet is not None and name != fleet:
            raise InvalidMessage("unknown_fleet", f"{name[:64]!r} is not {fleet!r}")
        paused = data["paused"]
        if not isinstance(paused, bool):
            raise InvalidMessage("bad_field", "paused")
        version = data["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise InvalidMessage("bad_field", "version")
        stagger = data.get("resume_stagger_s", 0)
        if stagger is None:
            stagger = 0
        if not isinstance(stagger, int | float) or isinstance(stagger, bool):
            raise InvalidMessage("bad_field", "resume_stagger_s")
        try:
            stagger_s = _stagger(float(stagger))
        except ContractError:
            raise InvalidMessage("bad_field", "resume_stagger_s") from None
        return cls(
            fleet=name,
            paused=paused,
            reason=_text_field(data, "reason"),
            by=_text_field(data, "by"),
            since=_time_field(data, "since"),
            version=version,
            expected_until=_time_field(data, "expected_until"),
            auto_resume_at=_time_field(data, "auto_resume_at"),
            resume_stagger_s=stagger_s,
            changed_at=_time_field(data, "changed_at"),
        )

    @classmethod
    def from_json(cls, data: str | bytes, fleet: str | None = None) -> FleetState:
        """The state from a control message. ``fleet``, when given, is the only fleet accepted.

        Raises ``InvalidMessage`` (never anything else) with kind ``oversized``, ``not_json``,
        ``not_object``, ``missing_field``, ``bad_field`` or ``unknown_fleet``.
        """
        if not isinstance(data, str | bytes):
            raise InvalidMessage("not_json", f"a {type(data).__name__}")
        if len(data) > MAX_MESSAGE_BYTES:
            raise InvalidMessage("oversized", f"{len(data)} bytes")
        try:
            decoded = json.loads(data)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise InvalidMessage("not_json", str(exc)[:80]) from None
        return cls.from_dict(decoded, fleet)


def _stagger(value: float) -> float:
    if not math.isfinite(value) or value < 0 or value > MAX_STAGGER_S:
        raise ContractError(f"resume_stagger_s must be 0..{MAX_STAGGER_S:g}, not {value!r}")
    return value


def _text_field(data: dict[str, Any], name: str) -> str:
    value = data.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT_LEN:
        raise InvalidMessage("bad_field", name)
    return value


def _time_field(data: dict[str, Any], name: str) -> datetime | None:
    value = data.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise InvalidMessage("bad_field", name)
    try:
        return parse_time(value)
    except ContractError:
        raise InvalidMessage("bad_field", name) from None


def check_text(name: str, value: str) -> str:
    """Validate a ``reason`` or ``by`` given by an operator (raises ``ContractError``)."""
    if not isinstance(value, str):
        raise ContractError(f"{name} must be a string")
    if len(value) > MAX_TEXT_LEN:
        raise ContractError(f"{name} is longer than {MAX_TEXT_LEN} characters")
    return value


# ---------------------------------------------------------------------------- acks


@dataclass(frozen=True, slots=True)
class Ack:
    """A replica's acknowledgement, published on ``fleetgate:{NAME}:acks`` as JSON.

    Sent when the replica applies a version (``applied``), when its pool turns quiet under a
    fleet pause (``quiet``) and when a staggered or automatic resume takes effect (``resumed``).
    The replica writes its record before it publishes, so a reader that subscribes and then
    reads the records misses nothing.
    """

    replica: str
    version: int
    event: str
    fleet_held: bool
    """The pool is held by the fleet (source ``fleet``)."""
    quiet: bool
    """The pool is paused and nothing is in flight."""
    in_flight: int
    at: datetime
    resume_at: datetime | None = None
    """A resume is pending on this replica (stagger or auto-resume) at this time."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "replica": self.replica,
                "version": self.version,
                "event": self.event,
                "fleet_held": self.fleet_held,
                "quiet": self.quiet,
                "in_flight": self.in_flight,
                "at": format_time(self.at),
                "resume_at": format_time(self.resume_at) or None,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> Ack:
        """Raises ``InvalidMessage`` (never anything else) on a message that is not an ack."""
        if not isinstance(data, str | bytes):
            raise InvalidMessage("not_json", f"a {type(data).__name__}")
        if len(data) > MAX_MESSAGE_BYTES:
            raise InvalidMessage("oversized", f"{len(data)} bytes")
        try:
            d = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise InvalidMessage("not_json", str(exc)[:80]) from None
        if not isinstance(d, dict):
            raise InvalidMessage("not_object", type(d).__name__)
        try:
            replica = d["replica"]
            version = d["version"]
            event = d["event"]
            in_flight = d.get("in_flight", 0)
            if not isinstance(replica, str) or REPLICA_ID_RE.fullmatch(replica) is None:
                raise InvalidMessage("bad_field", "replica")
            if not isinstance(version, int) or isinstance(version, bool) or version < 0:
                raise InvalidMessage("bad_field", "version")
            if event not in ACK_EVENTS:
                raise InvalidMessage("bad_field", "event")
            if not isinstance(in_flight, int) or isinstance(in_flight, bool):
                raise InvalidMessage("bad_field", "in_flight")
            at = _time_field(d, "at") or now_utc()
            return cls(
                replica=replica,
                version=version,
                event=event,
                fleet_held=bool(d.get("fleet_held", False)),
                quiet=bool(d.get("quiet", False)),
                in_flight=in_flight,
                at=at,
                resume_at=_time_field(d, "resume_at"),
            )
        except KeyError as exc:
            raise InvalidMessage("missing_field", str(exc)) from None


# ---------------------------------------------------------------------------- stagger


def stagger_offset(replica_id: str, window_s: float, peers: Sequence[str] | None = None) -> float:
    """How long after the resume this replica resumes, within a window of ``window_s`` seconds.

    With ``peers`` (the live replica ids, this one among them) the offsets are exactly even:
    the i-th id in sorted order waits ``i * window_s / len(peers)``. Without them (or when this
    id is not among them) the offset comes from a hash of the id, uniform over the window.
    """
    if window_s <= 0:
        return 0.0
    if peers:
        ordered = sorted(set(peers))
        if replica_id in ordered:
            return window_s * ordered.index(replica_id) / len(ordered)
    digest = hashlib.blake2b(replica_id.encode(), digest_size=8).digest()
    return window_s * int.from_bytes(digest, "big") / 2.0**64


# ---------------------------------------------------------------------------- scripts


def _script(name: str) -> str:
    return resources.files("replica").joinpath(name).read_text(encoding="utf-8")


SET_STATE_LUA: Final = _script("set_state.lua")
"""Pause or resume atomically: bump the version, write the hash, audit, publish."""
RESTORE_STATE_LUA: Final = _script("restore_state.lua")
"""Create the state hash from a replica's applied state if absent (the newest version wins;
a pause is never replaced by a running state)."""


def restore_args(state: FleetState, who: str, now: datetime | None = None) -> list[str]:
    """ARGV for RESTORE_STATE_LUA (KEYS: state, audit, control)."""
    args = [
        str(state.version),
        "1" if state.paused else "0",
        format_time(now or now_utc()),
        who,
        str(AUDIT_MAXLEN),
        state.to_json(),
    ]
    for k, v in state.to_hash().items():
        args += [k, v]
    return args


def timedelta_s(value: timedelta | float | None) -> float:
    """Seconds in a timedelta (or a number); 0.0 for None."""
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


__all__ = [
    "ACK_APPLIED",
    "ACK_EVENTS",
    "ACK_QUIET",
    "ACK_RESUMED",
    "AUDIT_FIELDS",
    "AUDIT_MAXLEN",
    "CONTROL_CONNECTED",
    "CONTROL_DISCONNECTED",
    "FLEET_NAME_RE",
    "ITEM_FIELD",
    "MAX_MESSAGE_BYTES",
    "MAX_STAGGER_S",
    "MAX_TEXT_LEN",
    "RECORD_FIELDS",
    "RECORD_TTL_HEARTBEATS",
    "REPLICA_ID_RE",
    "RESTORE_STATE_LUA",
    "SET_STATE_LUA",
    "STALE_HEARTBEATS",
    "STATE_FIELDS",
    "WORK_GROUP",
    "Ack",
    "FleetState",
    "Keys",
    "check_text",
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
    "validate_replica_id",
]
